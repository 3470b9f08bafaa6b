"""What fills the host gaps of a trace window: launch, sync and copy wait, other API, host compute.

A host gap is the GPU idle inside the window (window − GPU busy, `perflib.attribution.summary`). Each
of its instants is charged to the host API calls in flight then, on the threads that launch the
window's kernels (DESIGN.md): *sync and copy wait* where a synchronising call or a device-to-host copy
is in flight (`apicalls.SYNC`), else *launch* where a launch call is, else *other API* where any other
call is, else *host compute* (no API call in flight: the server's own scheduling, sampling, output
processing). With B the GPU busy union and S, L, O the unions of the three kinds of call, all clipped
to the window (docs/reference/FORMATS.md §5.4):

    sync         = |gap ∩ S|                 = |S ∪ B| − |B|
    launch       = |gap ∩ (S ∪ L)| − sync    = |S ∪ L ∪ B| − |B| − sync
    other_api    = |gap ∩ (S ∪ L ∪ O)| − sync − launch
    host_compute = gap − sync − launch − other_api

so the four add up to the gap exactly, in ns, over the window and over each step (`perflib.intervals`).

The threads are those of the calls whose correlation id a dispatch in the window carries (the calls that
launched its kernels and copies); where no dispatch correlates with a call, those whose launch calls
overlap the window. A call whose own copy runs device to host (its dispatch named `Memcpy DtoH`,
`Memcpy Device-to-Host`, `MEMORY_COPY_DEVICE_TO_HOST`, ...) is a copy wait whatever its name: an async
copy to pageable memory blocks the host, and the step cannot go on before its result is back. A trace
without API calls, or none on those threads, is "not measured" with why (`HostGaps.note`), never zeros.

A CPU backend has no device API to record, and needs none (`HostGaps.basis` says what the split was
measured from; docs/reference/FORMATS.md §5.4):

- *CPU operators* (a PyTorch trace without GPU work, `perflib.traces.kineto_cpu`): the host and the model's
  operators share the CPU, one after the other, so the time between the model's operators is host
  compute, all of it; sync, launch and other API are 0, measured: the CPU runs the model's operators
  itself, with no kernel to launch and no device to wait for. API records, where such a trace has them,
  are used as for a GPU.
- *CPU samples* (`perf` samples, `perflib.attribution.samples`): the decode threads' samples that are not
  the model's arithmetic split the rest of the window: sync = the samples in thread synchronisation
  (barrier spinning, futex waits), host compute = the host samples; launch and other API 0, as above.
  Each is window × its samples / the decode threads' samples: a sampled estimate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from perflib.attribution import apicalls
from perflib.attribution.codes import kernel_codes, kind_codes
from perflib.attribution.samples import SampleSplit
from perflib.attribution.summary import WORK_CPU_OPS, WORK_SAMPLES, work_of
from perflib.attribution.windows import TraceLike, Window, dispatches_of, trace_span
from perflib.intervals import covered_before, union_intervals

PARTS = ("sync", "launch", "other_api", "host_compute")
"""The four parts of a host gap, in the order an instant is charged to them."""
PARTS_NS = tuple(f"{part}_ns" for part in PARTS)
DECODE_ROW_COLUMNS = ("decode_steps", "decode_window_ms", "decode_gap_ms", *(f"decode_{p}_ms" for p in PARTS))
"""`HostGaps.row`'s columns of the decode steps' periods (None where no step has a phase): their count, summed
period and host gap, and each part of that gap. What a decode-step split reads (`perflib.verdicts.gapsplit`):
a decode-step figure never averages prefill steps in."""
ROW_COLUMNS = ("window_ms", "gap_ms", "steps", *(f"{p}_ms" for p in PARTS), *(f"{p}_gap_share" for p in PARTS),
               *(f"{p}_ms_per_step" for p in PARTS), "sync_calls", "launch_calls", "other_calls", "api_threads",
               "threads_by", "note", "basis", *DECODE_ROW_COLUMNS)
"""The columns of `HostGaps.row`, in order: a run's row of the derived `host_gaps` table."""
LABELS = {"sync": "sync and copy wait", "launch": "launch", "other_api": "other API", "host_compute": "host compute"}

NO_API = "the capture holds no host API records"
"""Why a window's split is not measured, where its trace holds no API calls; `SOURCE_HINTS` says more."""
SOURCE_HINTS = {
    "cupti-text": "CUPTI runtime and driver records off: PERFLIB_CUPTI_KINDS without runtime,driver",
    "rocprofv3-csv": "rocprofv3 run without --hip-runtime-trace (or --hip-trace, --hsa-trace; or one file of its "
                     "output read alone: read the output directory)",
    "rocprofv3-json": "rocprofv3 run without --hip-runtime-trace (or --hip-trace, --hsa-trace)",
    "rocpd": "rocprofv3 run without --hip-runtime-trace (or --hip-trace, --hsa-trace)",
    "kineto": "no cuda_runtime or cuda_driver events in the PyTorch profiler trace",
    "nsys-sqlite": "no CUDA API table: nsys profile without --trace=cuda",
    "rocprof-legacy": "legacy rocprof results.csv holds no API records",
    "rocprof-legacy-db": "legacy rocprof results.db without its HIP table: rocprof run without --hip-trace",
}
"""Why a capture of each format holds no API calls, said after `NO_API`."""
DEFAULT_HINT = "CUPTI runtime/driver off, or a format without API"
_NS_PER_MS = 1e6
API_RECORDS = "host API records"
"""`HostGaps.basis` of a split from API calls; a CPU backend's is its work (`WORK_CPU_OPS`, `WORK_SAMPLES`)."""
NO_LAUNCH = "no kernel launches on a CPU backend: the CPU runs the model's operators itself"
"""Why launch (and other API, sync and copy wait of a device) is 0, measured, on a CPU backend."""
BASIS_TEXT = {
    API_RECORDS: "from the host API records of the threads that launch the kernels: sync and copy wait where a "
                 "synchronising call or a device-to-host copy is in flight, else launch where a kernel or graph "
                 "launch call is, else other API where any other call is, else host compute (no API call in "
                 "flight: the server's scheduling, sampling, output processing)",
    WORK_CPU_OPS: "from the model's CPU operators (the backend is the CPU, and there is no device API): the time "
                  "between the model's operators is host compute (scheduling, input preparation, sampling, output "
                  f"processing); sync and copy wait, launch and other API are 0, {NO_LAUNCH}, with no device to "
                  "wait for",
    WORK_SAMPLES: "from perf's samples of the decode threads (the backend is the CPU): sync is their samples in "
                  "thread synchronisation (barrier spinning, futex waits), host compute their samples in neither "
                  f"the model's arithmetic nor sync; launch and other API are 0, {NO_LAUNCH}; each is window x "
                  "its samples / the decode threads' samples, a sampled estimate",
}
"""What a split measured from each basis is, said once for the page and `perflib trace summary`."""


def no_api_note(trace: TraceLike) -> str:
    """Why a trace holds no host API calls: what its read said (a cut made before perflib kept them, none
    in the cut's window), else the capture holds none, with what its format needs to hold them."""
    meta = getattr(trace, "meta", None) or {}
    said = str(meta.get("api_note") or "")
    if said:
        return said
    return f"{NO_API}: {SOURCE_HINTS.get(str(getattr(trace, 'source', '')), DEFAULT_HINT)}"


@dataclass(frozen=True)
class HostGaps:
    """A window's host gap split into its four parts (ns), over the window and per step, or why not."""

    window: Window
    gap_ns: int
    sync_ns: int | None = None
    launch_ns: int | None = None
    other_api_ns: int | None = None
    host_compute_ns: int | None = None
    calls: dict[str, int] = field(default_factory=dict)
    """API calls on the launching threads overlapping the window, by category (`sync`, `launch`, `other`)."""
    threads: int = 0
    threads_by: str = ""
    """How the launching threads were found: `correlation` or `launch calls in the window`."""
    note: str = ""
    """Why the split is not measured ('' where it is)."""
    steps: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["step", "gap_ns", *PARTS_NS]))
    """Per step of the window's step table: `step, start_ns, end_ns, gap_ns` and the four parts in ns."""
    periods: dict[str, int | None] | None = None
    """Over the periods given (the decode steps'): `steps`, `window_ns`, `gap_ns` and each part's ns (None
    where not measured); None where none were given (no step has a phase)."""
    basis: str = API_RECORDS
    """What the split was measured from: `host API records`, or on a CPU backend `CPU operators` (the gaps
    between the model's operators are host compute) or `CPU samples` (sampled estimates)."""

    @property
    def measured(self) -> bool:
        return not self.note

    def part_ns(self, part: str) -> int | None:
        return getattr(self, f"{part}_ns")

    def row(self, window_ms: float | None = None, steps: int | None = None) -> dict[str, Any]:
        """The run's row of the derived `host_gaps` table: ms over the window, each part's share of the gap
        (`<part>_gap_share`), ms per step (window figure / steps), the calls and `note`."""
        window_ms = (self.window.end_ns - self.window.start_ns) / _NS_PER_MS if window_ms is None else window_ms
        out: dict[str, Any] = {"window_ms": window_ms, "gap_ms": self.gap_ns / _NS_PER_MS, "steps": steps}
        for part in PARTS:
            ns = self.part_ns(part)
            out[f"{part}_ms"] = None if ns is None else ns / _NS_PER_MS
            out[f"{part}_gap_share"] = None if ns is None or self.gap_ns <= 0 else ns / self.gap_ns
            out[f"{part}_ms_per_step"] = None if ns is None or not steps else ns / _NS_PER_MS / steps
        for category in apicalls.CATEGORIES:
            out[f"{category}_calls"] = self.calls.get(category, 0) if self.measured else None
        out.update(api_threads=self.threads if self.measured else None, threads_by=self.threads_by, note=self.note,
                   basis=self.basis if self.measured else "")
        over = self.periods or {}  # NaN, not None, where not measured: the column reads back from CSV as written
        out["decode_steps"] = float(over["steps"]) if "steps" in over else float("nan")
        for key in ("window", "gap", *PARTS):
            ns = over.get(f"{key}_ns")
            out[f"decode_{key}_ms"] = float("nan") if ns is None or not over.get("steps") else ns / _NS_PER_MS
        return {k: out[k] for k in ROW_COLUMNS}

    def with_steps(self, step_table: pd.DataFrame) -> pd.DataFrame:
        """The step table `host_gaps` was given, with each part of each step's host gap in ms (`<part>_ms`;
        NaN where not measured)."""
        if len(step_table) != len(self.steps):
            raise ValueError(f"a step table of {len(step_table)} rows for a split of {len(self.steps)} steps")
        return step_table.assign(**{f"{part}_ms": self.steps[f"{part}_ns"].to_numpy(dtype=np.float64) / _NS_PER_MS
                                    for part in PARTS})

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the ms of each part, its share of the gap, the calls, the threads and `note`."""
        row = self.row()
        return {k: row[k] for k in ("gap_ms", *(f"{p}_ms" for p in PARTS), *(f"{p}_gap_share" for p in PARTS),
                                    *(f"{c}_calls" for c in apicalls.CATEGORIES), "api_threads", "threads_by",
                                    "note", "basis")}


def _clipped(start: np.ndarray, end: np.ndarray, w0: int, w1: int) -> tuple[np.ndarray, np.ndarray]:
    """The intervals overlapping [w0, w1), clipped to it."""
    inside = (end > w0) & (start < w1)
    return np.maximum(start[inside], w0), np.minimum(end[inside], w1)


def _api_categories(api: pd.DataFrame, dispatches: pd.DataFrame) -> np.ndarray:
    """Per API row, its index into `apicalls.CATEGORIES`: by name, and `SYNC` for a call whose own
    dispatch is a device-to-host copy (matched on the correlation id)."""
    codes, names = kernel_codes(api["name"])
    categories = apicalls.category_codes(names)[codes] if len(names) else np.zeros(len(api), dtype=np.int8)
    kinds, _ = kind_codes(dispatches)
    copies = dispatches[kinds == 1]
    if len(copies):
        copy_codes, copy_names = kernel_codes(copies["kernel"])
        to_host = apicalls.is_device_to_host(copy_names)[copy_codes]
        ids = copies["correlation_id"].to_numpy(dtype=np.int64)[to_host]
        ids = ids[ids >= 0]
        if ids.size:
            waits = np.isin(api["correlation_id"].to_numpy(dtype=np.int64), ids)
            categories = np.where(waits, apicalls.CATEGORIES.index(apicalls.SYNC), categories).astype(np.int8)
    return categories


def _thread_keys(api: pd.DataFrame) -> np.ndarray:
    """One int64 per row naming its (pid, tid) pair: the pairs' index among the distinct ones."""
    pairs = np.stack([api["pid"].to_numpy(dtype=np.int64), api["tid"].to_numpy(dtype=np.int64)], axis=1)
    if not len(pairs):
        return np.zeros(0, dtype=np.int64)
    _, inverse = np.unique(pairs, axis=0, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64)


def _launch_threads(api: pd.DataFrame, in_window: pd.DataFrame, categories: np.ndarray, threads: np.ndarray,
                    w0: int, w1: int) -> tuple[np.ndarray, str]:
    """The thread keys that launched the window's dispatches (by correlation id), else those with launch
    calls overlapping the window; and how they were found."""
    ids = in_window["correlation_id"].to_numpy(dtype=np.int64)
    ids = np.unique(ids[ids >= 0])
    corr = api["correlation_id"].to_numpy(dtype=np.int64)
    if ids.size:
        hit = np.isin(corr, ids) & (corr >= 0)
        if hit.any():
            return np.unique(threads[hit]), "correlation"
    start, end = api["start_ns"].to_numpy(dtype=np.int64), api["end_ns"].to_numpy(dtype=np.int64)
    launches = (categories == apicalls.CATEGORIES.index(apicalls.LAUNCH)) & (end > w0) & (start < w1)
    return np.unique(threads[launches]), "launch calls in the window"


def _step_bounds(steps: pd.DataFrame | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if steps is None or not len(steps):
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    return (steps["step"].to_numpy(dtype=np.int64), steps["start_ns"].to_numpy(dtype=np.int64),
            steps["end_ns"].to_numpy(dtype=np.int64))


def _coverage(starts: np.ndarray, ends: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Covered ns of the union of the intervals before each bound (`intervals.covered_before`)."""
    gs, ge, _ = union_intervals(starts, ends)
    return covered_before(gs, ge, bounds)


def _over(covered: np.ndarray, n_steps: int, n_periods: int) -> np.ndarray:
    """Covered ns from its values at the bounds `[w0, w1, step starts, step ends, period starts, period
    ends]`: [the window, each step, the periods summed]."""
    base = 2 + 2 * n_steps
    return np.concatenate(([covered[1] - covered[0]], covered[2 + n_steps:base] - covered[2:2 + n_steps],
                           [(covered[base + n_periods:] - covered[base:base + n_periods]).sum()]))


def _periods_split(n: int, length: np.ndarray, gap: np.ndarray, parts: dict[str, np.ndarray] | None
                   ) -> dict[str, int | None]:
    """`HostGaps.periods` from the last entry of each [window, each step, the periods] array."""
    out: dict[str, int | None] = {"steps": n, "window_ns": int(length[-1]), "gap_ns": int(gap[-1])}
    out.update({f"{p}_ns": None if parts is None else int(parts[p][-1]) for p in PARTS})
    return out


def sampled_host_gaps(window: Window, split: SampleSplit) -> HostGaps:
    """The host gap of a sampled window (`perflib.attribution.samples`) split by its decode threads'
    samples: sync = window × sync samples / samples, host compute = the rest of the gap (window × host
    samples / samples), launch and other API 0 (module docstring). No step boundaries: a profile marks
    none, so there is no per-step table."""
    w = int(window.end_ns) - int(window.start_ns)
    if not split.samples:
        return HostGaps(window, w, note="no sample on the decode threads in the window", basis=WORK_SAMPLES)
    gap = w - round(w * split.compute / split.samples)
    sync = min(gap, round(w * split.sync / split.samples))
    return HostGaps(window, gap, sync_ns=sync, launch_ns=0, other_api_ns=0, host_compute_ns=gap - sync,
                    calls=dict.fromkeys(apicalls.CATEGORIES, 0), basis=WORK_SAMPLES)


def host_gaps(trace: TraceLike, window: Window | None = None, steps: pd.DataFrame | None = None,
              periods: tuple[np.ndarray, np.ndarray] | None = None, sampling: SampleSplit | None = None) -> HostGaps:
    """Split the host gap of `window` (default: the trace span) into sync and copy wait, launch, other API
    and host compute, over the window, over each row of `steps` (a step table: `step, start_ns, end_ns`, as
    `summarize` gives it) and summed over `periods` (starts, ends: the decode steps' periods,
    `TraceSummary.decode_periods`; sorted, none overlapping, inside the window); `note` says why not where
    the trace has no API calls to tell. On a CPU backend (module docstring): a trace of CPU operators
    without API calls is all host compute; a sampled window is split by `sampling`, its samples
    (`TraceSummary.sampling`; required for a sampling profile)."""
    dispatches = dispatches_of(trace)
    window = window or trace_span(dispatches)
    if sampling is not None:
        return sampled_host_gaps(window, sampling)
    if work_of(dispatches) == WORK_SAMPLES:
        return HostGaps(window, int(window.end_ns) - int(window.start_ns), basis=WORK_SAMPLES,
                        note="a sampling profile's split needs its samples' roles (`TraceSummary.sampling`)")
    w0, w1 = int(window.start_ns), int(window.end_ns)
    number, step_start, step_end = _step_bounds(steps)
    p_start, p_end = (np.asarray(periods[0], dtype=np.int64), np.asarray(periods[1], dtype=np.int64)) if periods \
        is not None else (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    counts = (number.size, p_start.size)
    bounds = np.concatenate(([w0, w1], step_start, step_end, p_start, p_end)).astype(np.int64)
    ds, de = _clipped(dispatches["start_ns"].to_numpy(dtype=np.int64), dispatches["end_ns"].to_numpy(dtype=np.int64),
                      w0, w1)
    spans = _over(_coverage(ds, de, bounds), *counts)
    length = np.concatenate(([w1 - w0], step_end - step_start, [(p_end - p_start).sum()]))
    gap = length - spans  # [window, each step, the periods]
    frame = pd.DataFrame({"step": number, "start_ns": step_start, "end_ns": step_end, "gap_ns": gap[1:-1]})
    unmeasured = frame.assign(**{column: np.nan for column in PARTS_NS})
    over = None if periods is None else _periods_split(p_start.size, length, gap, None)
    api = getattr(trace, "api", None)
    if (api is None or not len(api)) and work_of(dispatches) == WORK_CPU_OPS:  # all of it host compute
        zero = np.zeros_like(gap)
        parts = {"sync": zero, "launch": zero, "other_api": zero, "host_compute": gap}
        for part in PARTS:
            frame[f"{part}_ns"] = parts[part][1:-1].astype(np.int64)
        over = None if periods is None else _periods_split(p_start.size, length, gap, parts)
        return HostGaps(window, int(gap[0]), **{f"{p}_ns": int(parts[p][0]) for p in PARTS},
                        calls=dict.fromkeys(apicalls.CATEGORIES, 0), steps=frame, periods=over, basis=WORK_CPU_OPS)
    if api is None or not len(api):
        return HostGaps(window, int(gap[0]), note=no_api_note(trace), steps=unmeasured, periods=over)
    categories = _api_categories(api, dispatches)
    threads = _thread_keys(api)
    inside = (dispatches["end_ns"].to_numpy(dtype=np.int64) > w0) & (dispatches["start_ns"].to_numpy(dtype=np.int64) < w1)
    mine, how = _launch_threads(api, dispatches[inside], categories, threads, w0, w1)
    if not mine.size:
        return HostGaps(window, int(gap[0]), steps=unmeasured, periods=over, note=(
            f"no host API call of the threads that launched the window's kernels: of the capture's {len(api):,} "
            "API calls none carries a correlation id of the window's dispatches, and none is a launch in the window"))
    on = np.isin(threads, mine)
    s, e = api["start_ns"].to_numpy(dtype=np.int64)[on], api["end_ns"].to_numpy(dtype=np.int64)[on]
    cat = categories[on]
    overlapping = (e > w0) & (s < w1)
    calls = {c: int(np.count_nonzero(overlapping & (cat == i))) for i, c in enumerate(apicalls.CATEGORIES)}
    covered = []  # gap ns with a call of the first k categories in flight, k = 1, 2, 3: [window, each step]
    for k in range(1, len(apicalls.CATEGORIES) + 1):
        cs, ce = _clipped(s[cat < k], e[cat < k], w0, w1)
        with_busy = _over(_coverage(np.concatenate((cs, ds)), np.concatenate((ce, de)), bounds), *counts)
        covered.append(with_busy - spans)
    parts = {"sync": covered[0], "launch": covered[1] - covered[0], "other_api": covered[2] - covered[1],
             "host_compute": gap - covered[2]}
    for part in PARTS:
        frame[f"{part}_ns"] = parts[part][1:-1].astype(np.int64)
    over = None if periods is None else _periods_split(p_start.size, length, gap, parts)
    return HostGaps(window, int(gap[0]), **{f"{p}_ns": int(parts[p][0]) for p in PARTS}, calls=calls,
                    threads=int(mine.size), threads_by=how, steps=frame, periods=over)
