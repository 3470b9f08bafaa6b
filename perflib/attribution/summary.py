"""Attribute one trace window to GPU work and host gaps: busy union, gap sizes, steps, kernels, classes.

Definitions (docs/reference/FORMATS.md §5): GPU busy = `|U|` of kernel, memcpy and memset dispatches
clipped to the window; host gap = window − busy. Each idle stretch is charged to the dispatch that
ends it (the trailing one to `tail`). Per-step figures follow docs/reference/SERVERS.md §5.2: window
figure / steps; where the steps are the ranges a named pattern matched (`--steps REGEX`,
`profiler.step_marker`), other steps may lie between them, so the per-step figures (busy, gap,
dispatches, kernel ms per step) are taken inside the matched steps' spans only. Where the engine names
its steps' phases, the figures are also given per phase (`perflib.attribution.phases`). Everything here
is a pure function over the canonical dispatch table (docs/SCHEMA.md §1), in int64 ns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from perflib import classes as class_mod
from perflib.attribution import phases as phase_mod
from perflib.attribution import samples as sampled
from perflib.attribution.codes import kernel_codes, kind_codes
from perflib.attribution.steps import StepCount, StepSplit, find_steps
from perflib.attribution.windows import TraceLike, Window, dispatches_of, empty_window_error, trace_span
from perflib.classes import ClassTable
from perflib.intervals import union_intervals

GAP_BUCKETS: tuple[tuple[str, int, int | None], ...] = (
    ("<10us", 0, 10_000),
    ("10-50us", 10_000, 50_000),
    ("50-200us", 50_000, 200_000),
    ("0.2-1ms", 200_000, 1_000_000),
    ("1-5ms", 1_000_000, 5_000_000),
    (">=5ms", 5_000_000, None),
)
"""Gap-size buckets `[low, high)` in ns, as in lablup/mlxcel `scripts/rocm_decode_gaps.py`."""

_NS_PER_MS = 1e6
DECODE_KERNEL_COLUMNS = ["decode_time_ms", "decode_count", "decode_ms_per_step"]
"""`classes` and `kernels` columns of the decode phase (docs/SCHEMA.md §4), NaN where no step has a phase:
the kernel time inside the decode steps' periods, the dispatches starting in them, and that time per
decode step (NaN where there is no decode step)."""

WORK_GPU, WORK_CPU_OPS, WORK_SAMPLES = "GPU kernels", "CPU operators", "CPU samples"
"""What a summary's busy time is (`TraceSummary.work`)."""


WORK_WORDS: dict[str, dict[str, str]] = {
    WORK_GPU: {"busy": "GPU busy", "gap": "host gap", "unit": "kernel", "units": "dispatches"},
    WORK_CPU_OPS: {"busy": "CPU busy (model operators)", "gap": "host time", "unit": "operator", "units": "operators"},
    WORK_SAMPLES: {"busy": "compute", "gap": "sync + host", "unit": "function", "units": "samples"},
}
"""How each kind of work is said: its busy time, the rest of the window, one item, the items."""


def work_of(dispatches: pd.DataFrame) -> str:
    """`CPU samples` for a sampling profile, `CPU operators` where every row is a CPU operator (kind
    `cpu_op`), else `GPU kernels`."""
    if sampled.is_sampled(dispatches):
        return WORK_SAMPLES
    if len(dispatches) and "kind" in dispatches and bool((dispatches["kind"].astype(str) == "cpu_op").all()):
        return WORK_CPU_OPS
    return WORK_GPU


def _clip(dispatches: pd.DataFrame, window: Window) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows overlapping the window (zero-length ones inside it), their starts and ends clipped to it."""
    s = dispatches["start_ns"].to_numpy(dtype=np.int64)
    e = dispatches["end_ns"].to_numpy(dtype=np.int64)
    w0, w1 = int(window.start_ns), int(window.end_ns)
    inside = (e > w0) & (s < w1)
    inside |= (s == e) & (s >= w0) & (s < w1)
    rows = np.flatnonzero(inside)
    if rows.size == s.size:
        return rows, np.maximum(s, w0), np.minimum(e, w1)
    return rows, np.maximum(s[rows], w0), np.minimum(e[rows], w1)


def busy_ns(dispatches: pd.DataFrame, window: Window | None = None) -> int:
    """GPU busy ns: `|U|` of all dispatches (kernels, copies, fills) clipped to the window."""
    window = window or trace_span(dispatches)
    _, s, e = _clip(dispatches, window)
    gs, ge, _ = union_intervals(s, e)
    return int((ge - gs).sum())


def _busy_before(gs: np.ndarray, ge: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Busy ns in `(-inf, t)` for each t, from union groups sorted by start."""
    cum = np.concatenate(([0], np.cumsum(ge - gs)))
    k = np.searchsorted(gs, t, side="right")  # groups starting at or before t
    prev = np.maximum(k - 1, 0)
    partial = np.clip(np.minimum(t, ge[prev] if ge.size else t) - (gs[prev] if gs.size else t), 0, None)
    return np.where(k > 0, cum[prev] + partial, 0)


@dataclass(frozen=True)
class TraceSummary:
    """What one window of a trace spent on GPU work and host gaps, by size, step, kernel and class."""

    window: Window
    dispatches: int
    window_ms: float
    busy_ms: float
    gap_ms: float
    busy_share: float | None
    gap_buckets: pd.DataFrame  # bucket, gap_ms, count
    largest_gaps: pd.DataFrame  # offset_ms, gap_ms, kernel (the dispatch that ends the gap, or "tail")
    steps: int | None
    step_method: str | None
    busy_ms_per_step: float | None
    gap_ms_per_step: float | None
    dispatches_per_step: float | None
    step_table: pd.DataFrame  # step, start_ns, end_ns, busy_ms, gap_ms, dispatches
    classes: pd.DataFrame  # kernel_class, time_ms, count, ms_per_step, share, DECODE_KERNEL_COLUMNS
    kernels: pd.DataFrame  # kernel, kernel_class, time_ms, count, ms_per_step, share, ... (all kernels)
    class_table: str = "none"
    top: int = 10
    meta: dict[str, Any] = field(default_factory=dict)
    steps_guessed: bool = False
    """The step count is the dispatch rhythm's guess (`perflib.attribution.rhythm`), not marked or counted."""
    phases: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=phase_mod.PHASE_COLUMNS))
    """Per phase the engine names (`perflib.attribution.phases.PHASE_COLUMNS`); empty where it names none."""
    phase_note: str = ""
    """'no decode step in this capture: 8 prefill steps' where the steps have phases and none decodes."""
    steps_named: bool = False
    """The steps are the ranges a named pattern matched: per-step figures inside their spans only."""
    steps_ms: float | None = None
    """The steps' own time the per-step figures are over: their spans' sum where `steps_named`, else None
    (the window)."""

    def decode_periods(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The decode steps' periods `[start, end)` in ns (each from the previous step's end, or its own
        span where a named pattern gave the steps: `perflib.attribution.phases.periods`), what the
        decode-phase figures are over; None where no step has a phase."""
        table = self.step_table
        if not len(table) or not any(table["phase"].to_numpy(dtype=object)):
            return None
        lo = phase_mod.periods(table["start_ns"].to_numpy(np.int64), table["end_ns"].to_numpy(np.int64),
                               self.steps_named)
        mine = table["phase"].to_numpy(dtype=object) == phase_mod.DECODE
        return lo[mine], table["end_ns"].to_numpy(np.int64)[mine]

    def decode_columns(self) -> dict[str, Any]:
        """The decode-phase columns of `trace_runs` (`perflib.attribution.phases.DECODE_COLUMNS`)."""
        return phase_mod.decode_columns(self.phases)
    sampling: sampled.SampleSplit | None = None
    """A sampling profile's split of the window (`perflib.attribution.samples`): its figures are sampled
    estimates; None for a trace of intervals."""
    work: str = WORK_GPU
    """What the busy time is: `GPU kernels`, `CPU operators` (a trace without GPU work whose model
    operators stand for the device's) or `CPU samples` (a sampling profile)."""

    @property
    def extras(self) -> dict[str, Any]:
        """The trace_runs columns beyond the schema's: what the work is and, for samples, their split."""
        out: dict[str, Any] = {"work": self.work}
        if self.sampling is not None:
            s = self.sampling
            out.update(samples=s.samples, compute_samples=s.compute, sync_samples=s.sync, host_samples=s.host,
                       decode_threads=s.threads, sample_hz=s.sample_hz, sample_event=s.event)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: scalars, gap buckets, top-N gaps and kernels, all classes; NaN becomes null."""
        return {
            "window": {"start_ns": int(self.window.start_ns), "end_ns": int(self.window.end_ns), "label": self.window.label},
            "dispatches": int(self.dispatches),
            "window_ms": _num(self.window_ms),
            "busy_ms": _num(self.busy_ms),
            "gap_ms": _num(self.gap_ms),
            "busy_share": _num(self.busy_share),
            "gap_buckets": _records(self.gap_buckets),
            "largest_gaps": _records(self.largest_gaps),
            "steps": self.steps,
            "step_method": self.step_method,
            "steps_guessed": self.steps_guessed,
            "busy_ms_per_step": _num(self.busy_ms_per_step),
            "gap_ms_per_step": _num(self.gap_ms_per_step),
            "dispatches_per_step": _num(self.dispatches_per_step),
            "class_table": self.class_table,
            "classes": _records(self.classes),
            "kernels": _records(self.kernels.head(self.top)),
            "kernels_total": int(len(self.kernels)),
            "straddling_start": self.meta.get("straddling_start"),
            "steps_named": self.steps_named,
            "steps_ms": _num(self.steps_ms),
            "phases": _records(self.phases),
            "phase_note": self.phase_note or None,
            "decode": {k: (v if isinstance(v, str) or v is None else _num(v))
                       for k, v in self.decode_columns().items() if k != "phase_note"},
            **self.extras,
        }


def _num(x: Any) -> float | int | None:
    if x is None:
        return None
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return int(x)
    x = float(x)
    return None if np.isnan(x) else x


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for row in frame.itertuples(index=False):
        out.append({k: (_num(v) if isinstance(v, (int, float, np.integer, np.floating)) else v) for k, v in zip(frame.columns, row, strict=True)})
    return out


def gap_buckets(gaps_ns: np.ndarray) -> pd.DataFrame:
    """Gap ms and count per size bucket (`<10us` … `>=5ms`); every bucket listed, empty ones with 0 gaps."""
    gaps_ns = np.asarray(gaps_ns, dtype=np.int64)
    rows = []
    for name, lo, hi in GAP_BUCKETS:
        sel = (gaps_ns >= lo) if hi is None else (gaps_ns >= lo) & (gaps_ns < hi)
        rows.append({"bucket": name, "gap_ms": float(gaps_ns[sel].sum()) / _NS_PER_MS, "count": int(sel.sum())})
    return pd.DataFrame(rows)


_STEP_COLUMNS = ["step", "start_ns", "end_ns", "busy_ms", "gap_ms", "dispatches", "phase"]


def _largest_gaps(
    offset_ns: np.ndarray, gap_len: np.ndarray, ender: np.ndarray, codes: np.ndarray, names: list[str], top: int
) -> pd.DataFrame:
    """The `top` longest gaps: offset from the window start, length, and the dispatch that ends each
    (FORMATS.md §5.3: an idle stretch is charged to the dispatch that ends it; the trailing one to `tail`)."""
    has_gap = np.flatnonzero(gap_len > 0)
    pick = has_gap[np.argsort(-gap_len[has_gap], kind="stable")[: max(int(top), 0)]]
    return pd.DataFrame(
        {
            "offset_ms": offset_ns[pick] / _NS_PER_MS,
            "gap_ms": gap_len[pick] / _NS_PER_MS,
            "kernel": [names[codes[ender[i]]] if ender[i] >= 0 else "tail" for i in pick],
        }
    )


def _phases(split: StepSplit) -> np.ndarray:
    """Each step's phase from its range name (`perflib.attribution.phases`), '' where none is named."""
    if split.names is None:
        return np.full(split.starts.size, phase_mod.UNKNOWN, dtype=object)
    return phase_mod.phases_of(split.names)


def _step_table(split: StepSplit | None, gs: np.ndarray, ge: np.ndarray, s: np.ndarray) -> pd.DataFrame:
    """One row per step with boundaries: busy (union inside the step), gap, dispatches starting in it,
    and the phase its range names ('' where none)."""
    if split is None or split.count is not None:
        return pd.DataFrame(columns=_STEP_COLUMNS)
    busy = _busy_before(gs, ge, split.ends) - _busy_before(gs, ge, split.starts)
    return pd.DataFrame(
        {
            "step": np.arange(1, split.starts.size + 1),
            "start_ns": split.starts.astype(np.int64),
            "end_ns": split.ends.astype(np.int64),
            "busy_ms": busy / _NS_PER_MS,
            "gap_ms": (split.ends - split.starts - busy) / _NS_PER_MS,
            "dispatches": (np.searchsorted(s, split.ends, "left") - np.searchsorted(s, split.starts, "left")).astype(np.int64),
            "phase": _phases(split),
        }
    )


def _phase_table(split: StepSplit | None, step_table: pd.DataFrame, gs: np.ndarray, ge: np.ndarray,
                 s: np.ndarray) -> pd.DataFrame:
    """The per-phase figures (`perflib.attribution.phases.phase_table`) over each step's period."""
    if split is None or split.count is not None or not len(step_table):
        return pd.DataFrame(columns=phase_mod.PHASE_COLUMNS)
    lo = phase_mod.periods(split.starts, split.ends, split.named)
    busy = _busy_before(gs, ge, split.ends) - _busy_before(gs, ge, lo)
    count = np.searchsorted(s, split.ends, "left") - np.searchsorted(s, lo, "left")
    return phase_mod.phase_table(step_table["phase"].to_numpy(dtype=object), lo, split.starts, split.ends, busy, count)


def time_inside(s: np.ndarray, e: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Each interval `[s, e)`'s ns inside the ranges `[starts, ends)` (sorted by start, none overlapping:
    steps or their periods), float64."""
    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    return (_busy_before(starts, ends, e) - _busy_before(starts, ends, s)).astype(np.float64)


def starts_inside(s: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Whether each dispatch start `s` lies in one of the ranges `[starts, ends)` (sorted, none overlapping)."""
    starts, ends = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    if not starts.size:
        return np.zeros(np.asarray(s).size, dtype=bool)
    k = np.searchsorted(starts, s, side="right") - 1
    return (k >= 0) & (s < ends[np.maximum(k, 0)])


def phase_kernel_time(codes: np.ndarray, n_names: int, s: np.ndarray, e: np.ndarray, periods: np.ndarray,
                      ends: np.ndarray, phases: np.ndarray, phase: str = phase_mod.DECODE
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Per kernel name (`codes` into `n_names` names): its ns inside the periods `[periods, ends)` of the
    steps of `phase` (each step from the previous step's end, `phases.periods`), and how many of its
    dispatches start in them. What the per-phase class figures stand on: a decode-step figure never
    averages prefill steps in (DESIGN.md)."""
    mine = np.asarray(phases, dtype=object) == phase
    lo, hi = np.asarray(periods, dtype=np.int64)[mine], np.asarray(ends, dtype=np.int64)[mine]
    ns = np.bincount(codes, weights=time_inside(s, e, lo, hi), minlength=n_names)
    count = np.bincount(codes, weights=starts_inside(s, lo, hi).astype(np.float64), minlength=n_names)
    return ns, count.astype(np.int64)


def _in_steps(s: np.ndarray, e: np.ndarray, split: StepSplit) -> np.ndarray:
    """Each dispatch's ns inside the steps' spans (sorted, none overlapping: a step ends where the next
    begins)."""
    return time_inside(s, e, split.starts, split.ends)


def _kernel_tables(
    dispatches: pd.DataFrame,
    codes: np.ndarray,
    names: list[str],
    s: np.ndarray,
    e: np.ndarray,
    classes: ClassTable | str | None,
    per_step: int | None,
    in_steps: np.ndarray | None = None,
    decode: tuple[np.ndarray, np.ndarray, int] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, Any]:
    """Time (clipped), count, ms per step and share by kernel and by kernel class, sorted by time.
    `in_steps`: each dispatch's ns inside the steps, where the ms per step is over the steps only.
    `decode`: per name its ns and dispatches in the decode steps' periods, and the decode steps, where
    the engine names its steps' phases (`phase_kernel_time`): the `DECODE_KERNEL_COLUMNS`, else NaN."""
    dur = np.bincount(codes, weights=(e - s).astype(np.float64), minlength=len(names))
    step_dur = dur if in_steps is None else np.bincount(codes, weights=in_steps, minlength=len(names))
    cnt = np.bincount(codes, minlength=len(names))
    table = class_mod.resolve_table(classes, names, dur)
    kernel_class = table.classify_names(names)
    # a copy or fill that no rule names is classed by its kind (memcpy / memset), not `other`
    kind_code, kind_names = kind_codes(dispatches)
    first_row = np.full(len(names), -1, dtype=np.int64)
    first_row[codes[::-1]] = np.arange(codes.size - 1, -1, -1)
    kernel_class = [
        kind_names[kind_code[i]] if kc == class_mod.OTHER and i >= 0 and kind_code[i] > 0 else kc
        for kc, i in zip(kernel_class, first_row.tolist(), strict=True)
    ]
    present = cnt > 0
    total_ms = float(dur.sum()) / _NS_PER_MS
    kernels = pd.DataFrame(
        {
            "kernel": np.asarray(names, dtype=object)[present],
            "kernel_class": np.asarray(kernel_class, dtype=object)[present],
            "time_ms": dur[present] / _NS_PER_MS,
            "count": cnt[present].astype(np.int64),
            "_step_ms": step_dur[present] / _NS_PER_MS,
            "decode_time_ms": decode[0][present] / _NS_PER_MS if decode else np.nan,
            "decode_count": decode[1][present].astype(np.float64) if decode else np.nan,
        }
    )
    by_class = kernels.groupby("kernel_class", sort=False).agg(
        time_ms=("time_ms", "sum"), count=("count", "sum"), _step_ms=("_step_ms", "sum"),
        decode_time_ms=("decode_time_ms", "sum"), decode_count=("decode_count", "sum")).reset_index()
    out = []
    for frame, key in ((kernels, "kernel"), (by_class, "kernel_class")):
        frame["ms_per_step"] = frame["_step_ms"] / per_step if per_step else np.nan
        frame["share"] = frame["time_ms"] / total_ms if total_ms > 0 else np.nan
        if not decode:  # (a sum of NaN is 0: no phase named, nothing measured)
            frame["decode_time_ms"], frame["decode_count"] = np.nan, np.nan
        frame["decode_ms_per_step"] = frame["decode_time_ms"] / decode[2] if decode and decode[2] else np.nan
        frame = frame.drop(columns="_step_ms")
        out.append(frame.sort_values(["time_ms", key], ascending=[False, True], kind="stable").reset_index(drop=True))
    return out[0], out[1], table


def _decode_kernels(split: StepSplit | None, step_table: pd.DataFrame, codes: np.ndarray, n_names: int,
                    s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, int] | None:
    """Per name its ns and dispatches in the decode steps' periods, and the decode steps
    (`phase_kernel_time`); None where no step has a phase."""
    if split is None or split.count is not None or not len(step_table):
        return None
    phases = step_table["phase"].to_numpy(dtype=object)
    if not any(phases):
        return None
    lo = phase_mod.periods(split.starts, split.ends, split.named)
    ns, count = phase_kernel_time(codes, n_names, s, e, lo, split.ends, phases)
    return ns, count, int(np.count_nonzero(phases == phase_mod.DECODE))


def _in_window(dispatches: pd.DataFrame, window: Window) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, int]:
    """The dispatches overlapping the window, their clipped starts and ends sorted by start, and how
    many began before the window and run into it (clipped and counted: the mlxcel decode split of
    FORMATS.md §5.3 expects none at the decode start, so the summary says how many there are). A
    window inside the trace's span that holds no dispatch (a host stall) is a result: nothing busy, all
    of it gap. One that reaches outside the span and holds nothing is an error: the trace does not
    cover it, and counting it as gap would invent a stall."""
    if window.end_ns <= window.start_ns:
        raise empty_window_error(window, dispatches, "end <= start")
    rows, s, e = _clip(dispatches, window)
    if rows.size == 0:
        span = trace_span(dispatches) if len(dispatches) else None
        if span is None or window.start_ns < span.start_ns or window.end_ns > span.end_ns:
            raise empty_window_error(window, dispatches, "no dispatch inside it, and it reaches outside the "
                                     "trace's dispatches")
    straddling = int(np.count_nonzero(dispatches["start_ns"].to_numpy(dtype=np.int64)[rows] < int(window.start_ns)))
    if rows.size != len(dispatches):
        dispatches = dispatches.iloc[rows]
    if s.size > 1 and bool(np.any(s[1:] < s[:-1])):
        order = np.argsort(s, kind="stable")
        dispatches, s, e = dispatches.iloc[order], s[order], e[order]
    return dispatches, s, e, straddling


def _sampled_summary(w: sampled.SampledWindow, window: Window, top: int) -> TraceSummary:
    """The summary of a sampled window: its figures scaled from the samples (no gaps to size, no step
    boundaries: a profile marks none)."""
    per_step = w.steps
    return TraceSummary(
        window=window, dispatches=w.samples, window_ms=w.window_ms, busy_ms=w.busy_ms, gap_ms=w.window_ms - w.busy_ms,
        busy_share=w.split.compute / w.samples if w.samples else None,
        gap_buckets=gap_buckets(np.empty(0, dtype=np.int64)).iloc[0:0],
        largest_gaps=pd.DataFrame(columns=["offset_ms", "gap_ms", "kernel"]),
        steps=per_step, step_method=w.step_method,
        busy_ms_per_step=w.busy_ms / per_step if per_step else None,
        gap_ms_per_step=(w.window_ms - w.busy_ms) / per_step if per_step else None,
        dispatches_per_step=w.samples / per_step if per_step else None,
        step_table=pd.DataFrame(columns=_STEP_COLUMNS), classes=w.classes, kernels=w.kernels,
        class_table=w.class_table, top=int(top), meta={"straddling_start": 0}, sampling=w.split, work=WORK_SAMPLES,
    )


def _per_step_totals(named: Any, step_table: pd.DataFrame, gs: np.ndarray, ge: np.ndarray, busy: int, total: int,
                     n: int) -> tuple[float, float, float, float | None]:
    """(busy ns, gap ns, dispatches, the steps' own ms) the per-step figures divide: the window's, or where a
    named pattern gave the steps (`named`, the split), inside the matched steps' spans only (they tile no
    more than themselves)."""
    if named is None:
        return float(busy), float(total - busy), float(n), None
    step_busy = float((_busy_before(gs, ge, named.ends) - _busy_before(gs, ge, named.starts)).sum())
    span = int((named.ends - named.starts).sum())
    return step_busy, float(span) - step_busy, float(step_table["dispatches"].sum()), span / _NS_PER_MS


def summarize(
    trace: TraceLike,
    window: Window | None = None,
    classes: ClassTable | str | None = None,
    steps: int | str | StepCount | None = None,
    top: int = 10,
    step_marker: str | None = None,
) -> TraceSummary:
    """Attribute one window of a trace (a `Trace` or a bare dispatch table).

    window: a `Window` (default: the trace span, first GPU event start → last end).
    classes: a `perflib.classes.ClassTable`, a backend name, or None for `auto` (the built-in table that
      leaves the least kernel time in `other`).
    steps: the step source order of `perflib.attribution.steps` (the trace's step ranges, a count from
      outside the trace, the dispatch rhythm): None → that order; a `StepCount` → the count of source 2
      (request records, counters), used where the trace marks no steps; an int → that count outright,
      no boundaries (method `given`); a str → a regex for the step ranges, used instead of the engines'
      own: the per-step figures are then inside the matched steps' spans, and a regex that matches no
      step is a `PerflibError` naming it and the ranges the trace holds.
    top: how many largest gaps, and how many kernels `to_dict()` lists.
    step_marker: the campaign's `profiler.step_marker`, a regex for step ranges tried first.
    Dispatch time in the kernel and class tables is clipped to the window; `share` is of the summed
    kernel time (which exceeds busy where dispatches overlap).
    """
    dispatches = dispatches_of(trace)
    window = window or trace_span(dispatches)
    if sampled.is_sampled(dispatches):  # samples are counted, not unioned (perflib.attribution.samples)
        return _sampled_summary(sampled.split_window(trace, dispatches, window, classes, steps), window, top)
    work = work_of(dispatches)
    dispatches, s, e, straddling = _in_window(dispatches, window)
    n = int(s.size)
    gs, ge, first = union_intervals(s, e)
    w0, w1 = int(window.start_ns), int(window.end_ns)
    busy = int((ge - gs).sum())
    total = w1 - w0
    gap_starts = np.concatenate(([w0], ge))
    gap_ends = np.append(gs, w1)
    gap_len = gap_ends - gap_starts
    codes, names = kernel_codes(dispatches["kernel"])
    ender = np.append(first, -1)  # the dispatch that ends each gap; -1 = trailing ("tail")

    largest = _largest_gaps(gap_starts - w0, gap_len, ender, codes, names, top)
    split = find_steps(trace, steps, codes, names, s, e, window, step_marker)
    step_table = _step_table(split, gs, ge, s)
    step_count = None if split is None else (split.count if split.count is not None else len(step_table))
    step_method = None if split is None else split.method
    per_step = step_count if step_count else None
    named = bool(split is not None and split.named and len(step_table))
    in_steps = _in_steps(s, e, split) if named else None
    decode = _decode_kernels(split, step_table, codes, len(names), s, e)
    kernels, by_class, table = _kernel_tables(dispatches, codes, names, s, e, classes, per_step, in_steps, decode)
    phases = _phase_table(split, step_table, gs, ge, s)
    step_busy, step_gap, step_dispatches, steps_ms = _per_step_totals(split if named else None, step_table, gs, ge,
                                                                        busy, total, n)

    return TraceSummary(
        window=window,
        dispatches=n,
        window_ms=total / _NS_PER_MS,
        busy_ms=busy / _NS_PER_MS,
        gap_ms=(total - busy) / _NS_PER_MS,
        busy_share=busy / total if total > 0 else None,
        gap_buckets=gap_buckets(gap_len[gap_len > 0]),
        largest_gaps=largest,
        steps=step_count,
        step_method=step_method,
        busy_ms_per_step=step_busy / _NS_PER_MS / per_step if per_step else None,
        gap_ms_per_step=step_gap / _NS_PER_MS / per_step if per_step else None,
        dispatches_per_step=step_dispatches / per_step if per_step else None,
        step_table=step_table,
        classes=by_class,
        kernels=kernels,
        class_table=table.name,
        top=int(top),
        meta={"straddling_start": straddling},
        steps_guessed=bool(split is not None and split.guessed),
        phases=phases,
        phase_note=phase_mod.no_decode_note(phases),
        steps_named=named,
        steps_ms=steps_ms,
        work=work,
    )
