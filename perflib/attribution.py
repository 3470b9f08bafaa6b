"""Attribute a trace window to GPU work and host gaps: busy union, gap sizes, steps, kernels, classes.

Definitions (reference/FORMATS.md §5): `U(I)` is the union of `[start, end)` intervals (sort by start, a
new group when start > running max of end); GPU busy = `|U|` of kernel, memcpy and memset dispatches
clipped to the window; host gap = window − busy. Each idle stretch is charged to the dispatch that ends
it (the trailing one to `tail`). Per-step figures follow reference/SERVERS.md §5.2: window figure / steps.
Everything here is a pure function over the canonical dispatch table (docs/SCHEMA.md §1), in int64 ns.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perflib.errors import PerflibError

GAP_BUCKETS: tuple[tuple[str, int, int | None], ...] = (
    ("<10us", 0, 10_000),
    ("10-50us", 10_000, 50_000),
    ("50-200us", 50_000, 200_000),
    ("0.2-1ms", 200_000, 1_000_000),
    ("1-5ms", 1_000_000, 5_000_000),
    (">=5ms", 5_000_000, None),
)
"""Gap-size buckets `[low, high)` in ns, as in lablup/mlxcel `scripts/rocm_decode_gaps.py`."""

DEFAULT_STEP_MARKER = r"^ProfilerStep\s*#\s*\d+"
"""Markers that delimit a step unless told otherwise (Kineto `ProfilerStep#N`)."""

MIN_STEPS = 3
"""Fewer steps than this found from the rhythm is no rhythm: `steps` stays None."""

_NS_PER_MS = 1e6


# --------------------------------------------------------------------------------------------- windows


@dataclass(frozen=True)
class Window:
    """A time range `[start_ns, end_ns)` on the trace's clock, with a label saying where it came from."""

    start_ns: int
    end_ns: int
    label: str = "range"

    @property
    def duration_ns(self) -> int:
        return int(self.end_ns) - int(self.start_ns)

    def describe(self) -> str:
        return f"window {self.label!r} [{self.start_ns}, {self.end_ns}) ns ({self.duration_ns / _NS_PER_MS:.3f} ms)"


def _dispatches_of(trace: Any) -> pd.DataFrame:
    """The dispatch table of a `Trace`, or the DataFrame itself when given one."""
    return trace if isinstance(trace, pd.DataFrame) else trace.dispatches


def _markers_of(trace: Any) -> pd.DataFrame | None:
    return None if isinstance(trace, pd.DataFrame) else getattr(trace, "markers", None)


def trace_span(dispatches: pd.DataFrame) -> Window:
    """Default window: first GPU event's start to the last one's end (kernels, copies and fills)."""
    if len(dispatches) == 0:
        raise PerflibError("the trace holds no GPU dispatches (kernel, memcpy or memset): nothing to attribute")
    start = int(dispatches["start_ns"].min())
    end = int(dispatches["end_ns"].max())
    return Window(start, end, "trace span")


def window_from_range(start_ns: int, end_ns: int, label: str | None = None) -> Window:
    """A window from explicit ns on the trace's clock."""
    return Window(int(start_ns), int(end_ns), label or f"{int(start_ns)}:{int(end_ns)}")


def window_from_marker(markers: pd.DataFrame | None, name: str, index: int | None = None) -> Window:
    """Window of the roctx / NVTX / Kineto annotation range named exactly `name`.

    Several markers may share the name (a Kineto `ProfilerStep#3` appears on the CPU and as
    `gpu_user_annotation`, a roctx range may repeat): with `index=None` the window spans all of them
    (earliest start to latest end); with `index=i` it is the i-th occurrence in start order (0-based,
    negative counts from the end).
    """
    if markers is None or len(markers) == 0:
        raise PerflibError(f"marker {name!r} not found: the trace has no markers (roctx, NVTX, annotations)")
    hits = markers[markers["name"] == name].sort_values("start_ns", kind="stable")
    if len(hits) == 0:
        known = sorted(set(markers["name"].astype(str)))[:10]
        raise PerflibError(f"marker {name!r} not found among {len(markers)} markers; some names: {known}")
    if index is None:
        return Window(int(hits["start_ns"].min()), int(hits["end_ns"].max()), f"marker {name}")
    try:
        row = hits.iloc[index]
    except IndexError:
        raise PerflibError(f"marker {name!r} occurs {len(hits)} times; index {index} is out of range") from None
    return Window(int(row["start_ns"]), int(row["end_ns"]), f"marker {name}[{index}]")


_CLOCK_KEYS = {"monotonic": "monotonic_ns", "boottime": "boottime_ns", "realtime": "realtime_ns"}


def window_from_step_markers(markers: pd.DataFrame | None, pattern: str = DEFAULT_STEP_MARKER) -> Window:
    """The decode window of a trace-only capture: first start to last end of the step markers
    (`ProfilerStep#N` on the host and the GPU stream), so set-up and export fall outside it."""
    if markers is None or len(markers) == 0:
        raise PerflibError(f"no step markers /{pattern}/: the trace has no markers (annotations, NVTX, roctx)")
    hits = markers[markers["name"].astype(str).str.contains(pattern, regex=True)]
    if not len(hits):
        known = sorted(set(markers["name"].astype(str)))[:10]
        raise PerflibError(f"no step marker matches /{pattern}/ among {len(markers)} markers; some names: {known}")
    return Window(int(hits["start_ns"].min()), int(hits["end_ns"].max()), f"step markers /{pattern}/")


def window_from_clocks(trace: Any, clocks: Mapping[str, Mapping[str, int]], label: str = "level") -> Window:
    """Window of a sweep level from its manifest `clocks` (`{"start": now_clocks(), "end": now_clocks()}`).

    The trace's `clock` picks the reading: `realtime` (Kineto with `baseTimeNanoseconds`) uses only the
    realtime reading. rocprofv3 stamps with CLOCK_MONOTONIC or CLOCK_BOOTTIME and does not say which, so
    for `monotonic`/`boottime` both are tried, and for `unknown` the reader's `meta["clock_candidates"]`
    (else all three); the clock whose window holds the most dispatch starts wins (reference/FORMATS.md
    §0; ties keep the first candidate, the trace's own clock). The label records the clock chosen.
    """
    dispatches = _dispatches_of(trace)
    clock = "unknown" if isinstance(trace, pd.DataFrame) else str(getattr(trace, "clock", "unknown"))
    hinted = [] if isinstance(trace, pd.DataFrame) else list((getattr(trace, "meta", None) or {}).get("clock_candidates") or [])
    if clock == "realtime":
        candidates = ["realtime"]
    elif clock in ("monotonic", "boottime"):
        candidates = [clock, "boottime" if clock == "monotonic" else "monotonic"]
    else:
        candidates = hinted or ["monotonic", "boottime", "realtime"]
    starts = np.sort(dispatches["start_ns"].to_numpy(dtype=np.int64))
    best: tuple[int, Window] | None = None
    for name in candidates:
        key = _CLOCK_KEYS[name]
        try:
            lo, hi = int(clocks["start"][key]), int(clocks["end"][key])
        except (KeyError, TypeError):
            continue
        held = int(np.searchsorted(starts, hi, "left") - np.searchsorted(starts, lo, "left"))
        if best is None or held > best[0]:
            best = (held, Window(lo, hi, f"{label} ({name} clock)"))
    if best is None:
        raise PerflibError(
            f"level clocks hold none of {candidates}: expected clocks.start/end with monotonic_ns, "
            "boottime_ns, realtime_ns (docs/SCHEMA.md §2)"
        )
    return best[1]


def window_from_manifest(trace: Any, manifest: Mapping[str, Any] | str) -> Window:
    """Window of a run folder's level: `manifest.json` (path or parsed dict) `clocks`, aligned to the trace."""
    if isinstance(manifest, str):
        import json
        from pathlib import Path

        path = Path(manifest)
        if path.is_dir():
            path = path / "manifest.json"
        try:
            manifest = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise PerflibError(f"{path}: expected a run manifest (JSON with clocks.start/end): {exc}") from None
    if "clocks" not in manifest:
        raise PerflibError("manifest has no `clocks` (expected {start: {...}, end: {...}}, docs/SCHEMA.md §2)")
    label = f"level b{manifest.get('batch', '?')}_c{manifest.get('context', '?')}_r{manifest.get('repeat', '?')}"
    return window_from_clocks(trace, manifest["clocks"], label)


@dataclass(frozen=True)
class DecodeWindow:
    """The all-decoding window of a level on the trace's clock, and the decode steps inside it."""

    window: Window
    steps: int | None


def decode_window_from_run(trace: Any, run_dir: str | Path) -> DecodeWindow:
    """SERVERS.md §5.2: last request's first token → first request's last token, on the trace's clock.

    Request times are CLOCK_MONOTONIC; the level clocks in the manifest give the offset to whichever
    clock the trace uses (chosen as in `window_from_clocks`). Steps inside the window are counted from
    the client: the median, over requests, of token chunks that arrive inside it (one per decode step
    while every request decodes). No such window (a request finished before the last one started
    decoding, as at long context with large batches) is a `PerflibError` saying so.
    """
    import json

    run_dir = Path(run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    level = window_from_manifest(trace, manifest)
    name = level.label.rsplit("(", 1)[-1].split(" ")[0]
    clocks = manifest["clocks"]
    offset = int(clocks["start"][_CLOCK_KEYS[name]]) - int(clocks["start"]["monotonic_ns"])
    records = []
    path = run_dir / "requests.jsonl"
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a torn last line of a crashed level
        if rec.get("ok") and rec.get("first_token_ns") is not None and rec.get("last_token_ns") is not None:
            records.append(rec)
    if not records:
        raise PerflibError(f"{path}: no successful request with first and last token times")
    lo = max(int(r["first_token_ns"]) for r in records)
    hi = min(int(r["last_token_ns"]) for r in records)
    if hi <= lo:
        raise PerflibError(f"{run_dir.name}: no window with all {len(records)} requests decoding (a request "
                           "finished before the last one produced its first token)")
    counts = sorted(sum(1 for t in (r.get("chunk_ns") or []) if lo < int(t) <= hi) for r in records)
    steps = counts[len(counts) // 2] if counts and counts[len(counts) // 2] > 0 else None
    window = Window(lo + offset, hi + offset, f"decode window of {run_dir.name}: last first token → first last "
                    f"token ({name} clock)")
    return DecodeWindow(window, steps)


# ------------------------------------------------------------------------------------- interval union


def union_intervals(start_ns: np.ndarray, end_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact union of `[start, end)` intervals: (group starts, group ends, order index of each group's first).

    Sort by start (skipped when already sorted, as dispatch tables are); a new group begins where
    start > running max of end (touching intervals merge); group = (min start, max end). The third array
    gives, for each group, the position in the input of the interval that opens it (first by start).
    """
    s = np.asarray(start_ns, dtype=np.int64)
    e = np.asarray(end_ns, dtype=np.int64)
    n = s.size
    if n == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, empty
    if n > 1 and bool(np.any(s[1:] < s[:-1])):
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    else:
        order = None
    run_end = np.maximum.accumulate(e)
    opens = np.empty(n, dtype=bool)
    opens[0] = True
    np.greater(s[1:], run_end[:-1], out=opens[1:])
    first = np.flatnonzero(opens)
    last = np.empty_like(first)
    last[:-1] = first[1:] - 1
    last[-1] = n - 1
    return s[first], run_end[last], (first if order is None else order[first])


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


def _empty_window_error(window: Window, dispatches: pd.DataFrame, why: str) -> PerflibError:
    if len(dispatches):
        span = trace_span(dispatches)
        where = f"the trace's dispatches span [{span.start_ns}, {span.end_ns}) ns ({span.duration_ns / _NS_PER_MS:.3f} ms)"
    else:
        where = "the trace has no dispatches"
    return PerflibError(f"empty {window.describe()}: {why}; {where}")


# --------------------------------------------------------------------------------------------- steps


@dataclass(frozen=True)
class StepSplit:
    """Step boundaries found in a window: `[starts[k], ends[k])` is step k; `method` says how."""

    starts: np.ndarray
    ends: np.ndarray
    method: str
    count: int | None = None  # a count given from counters, without boundaries


def _steps_from_markers(
    markers: pd.DataFrame | None, pattern: str, window: Window, api: pd.DataFrame | None = None
) -> StepSplit | None:
    """Steps from annotation ranges whose name matches `pattern`; GPU-side ones preferred.

    Kineto writes `ProfilerStep#N` on the CPU (`user_annotation`) and, for most steps, on the GPU stream
    (`gpu_user_annotation`); the GPU copy covers the step's kernels, so for each step name it is used
    when present. A host-only range precedes its kernels; its boundaries are used as they stand (the
    step's kernels trail by the launch queue) and the method says `host markers` (or `gpu+host`).
    """
    if markers is None or len(markers) == 0:
        return None
    names = markers["name"].astype(str)
    hits = markers[names.str.contains(pattern, regex=True)]
    if len(hits) == 0:
        return None
    domain = hits["domain"].astype(str).str.lower() if "domain" in hits else pd.Series("", index=hits.index)
    on_gpu = domain.str.contains("gpu").to_numpy()
    # one range per step name: its GPU copy where there is one, else the host range
    hits = hits.assign(_host=~on_gpu).sort_values(["_host", "start_ns"], kind="stable").drop_duplicates("name")
    hits = hits.sort_values("start_ns", kind="stable")
    s = np.maximum(hits["start_ns"].to_numpy(np.int64), window.start_ns)
    e = np.minimum(hits["end_ns"].to_numpy(np.int64), window.end_ns)
    keep = e > s
    if not keep.any():
        return None
    n_host = int(hits["_host"].to_numpy()[keep].sum())
    side = "gpu markers" if n_host == 0 else "host markers" if n_host == int(keep.sum()) else "gpu+host markers"
    return StepSplit(s[keep], e[keep], f"{side} /{pattern}/")


def _steps_from_rhythm(
    kernel_codes: np.ndarray, kernel_names: Sequence[str], starts: np.ndarray, ends: np.ndarray, window: Window
) -> StepSplit | None:
    """Steps from the dispatch rhythm: the kernel that opens every step, else a split at large gaps.

    1. Kernel period: for each kernel name seen at least 3 times, take the dispatch-index distances
       between its consecutive occurrences. A name is *periodic* when at least 75% of those distances lie
       within 10% of their median. Of the periodic names, those with the longest period (within 5%)
       occur once per step; among them the step opener is the one preceded by the largest median idle
       gap (the host's turn between steps). Its occurrences are the boundaries; a segment whose dispatch
       count is off the median by more than 10% (a prefill burst, a warm-up) is not counted as a step.
    2. Gap split, when no name is periodic: split at every gap longer than 10× the median gap.
    """
    n = kernel_codes.size
    if n < 6:
        return None
    small = kernel_codes.astype(np.int16) if kernel_codes.max(initial=0) < 2**15 else kernel_codes
    order = np.argsort(small, kind="stable")  # radix sort for int16 codes
    sorted_codes = kernel_codes[order]
    bounds = np.flatnonzero(np.diff(sorted_codes)) + 1
    groups = np.split(order, bounds)
    run_end = np.maximum.accumulate(ends)
    idle_before = np.empty(n, dtype=np.int64)
    idle_before[0] = 0
    idle_before[1:] = np.maximum(starts[1:] - run_end[:-1], 0)
    candidates: list[tuple[float, float, int]] = []  # (period, idle before, code)
    for positions in groups:
        if positions.size < 3:
            continue
        dist = np.diff(positions)
        med = float(np.median(dist))
        if med < 2 or np.mean(np.abs(dist - med) <= 0.1 * med) < 0.75:
            continue
        candidates.append((med, float(np.median(idle_before[positions])), int(kernel_codes[positions[0]])))
    if candidates:
        longest = max(c[0] for c in candidates)
        opener = max((c for c in candidates if c[0] >= 0.95 * longest), key=lambda c: (c[1], -c[2]))
        positions = np.flatnonzero(kernel_codes == opener[2])
        seg_end_pos = np.append(positions[1:], n)
        counts = seg_end_pos - positions
        med = np.median(counts[:-1]) if counts.size > 1 else counts[0]
        regular = np.abs(counts - med) <= 0.1 * med
        # The last segment runs to the window's end: it may hold trailing work after the final step.
        seg_starts = starts[positions]
        seg_ends = np.append(starts[positions[1:]], window.end_ns)
        if not regular[-1] and counts[-1] > med:
            seg_ends[-1] = int(run_end[positions[-1] + int(med) - 1]) if positions[-1] + int(med) - 1 < n else window.end_ns
            regular[-1] = True
        if int(regular.sum()) < MIN_STEPS:
            return None
        from perflib.classes import base_name

        name = base_name(kernel_names[opener[2]])
        method = f"kernel period: {name} opens a step every {med:.0f} dispatches"
        return StepSplit(seg_starts[regular], seg_ends[regular], method)
    gaps = idle_before[1:]
    positive = gaps[gaps > 0]
    if positive.size == 0:
        return None
    threshold = 10 * float(np.median(positive))
    cut = np.flatnonzero(gaps > threshold) + 1
    if cut.size + 1 < MIN_STEPS:
        return None
    seg_starts = np.concatenate(([starts[0]], starts[cut]))
    seg_ends = np.append(starts[cut], window.end_ns)
    return StepSplit(seg_starts, seg_ends, f"gap split: gaps > {threshold / 1e3:.1f} us (10x median gap)")


# ------------------------------------------------------------------------------------------- summary


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
    classes: pd.DataFrame  # kernel_class, time_ms, count, ms_per_step, share
    kernels: pd.DataFrame  # kernel, kernel_class, time_ms, count, ms_per_step, share (all kernels)
    class_table: str = "none"
    top: int = 10
    meta: dict[str, Any] = field(default_factory=dict)

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
            "busy_ms_per_step": _num(self.busy_ms_per_step),
            "gap_ms_per_step": _num(self.gap_ms_per_step),
            "dispatches_per_step": _num(self.dispatches_per_step),
            "class_table": self.class_table,
            "classes": _records(self.classes),
            "kernels": _records(self.kernels.head(self.top)),
            "kernels_total": int(len(self.kernels)),
            "straddling_start": self.meta.get("straddling_start"),
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


_KINDS = ("kernel", "memcpy", "memset")


def _kind_codes(dispatches: pd.DataFrame) -> tuple[np.ndarray, tuple[str, ...]]:
    """Per row 0 = kernel, 1 = memcpy, 2 = memset (from the categorical's codes: no string copies)."""
    n = len(dispatches)
    if "kind" not in dispatches:
        return np.zeros(n, dtype=np.int8), _KINDS
    kind = dispatches["kind"]
    if isinstance(kind.dtype, pd.CategoricalDtype):
        remap = np.array([_KINDS.index(str(c)) if str(c) in _KINDS else 0 for c in kind.cat.categories] + [0], dtype=np.int8)
        return remap[kind.cat.codes.to_numpy()], _KINDS  # code -1 (missing) maps to the trailing 0
    values = kind.astype(str).to_numpy()
    return np.select([values == "memcpy", values == "memset"], [1, 2], 0).astype(np.int8), _KINDS


def _kernel_codes(kernel: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Integer code per row and the distinct names; a missing name gets its own `<unnamed>` code."""
    if isinstance(kernel.dtype, pd.CategoricalDtype):
        codes, names = kernel.cat.codes.to_numpy(np.int64), [str(c) for c in kernel.cat.categories]
    else:
        raw, uniques = pd.factorize(kernel, sort=False)
        codes, names = raw.astype(np.int64), [str(u) for u in uniques]
    if codes.size and codes.min() < 0:
        codes = np.where(codes < 0, len(names), codes)
        names.append("<unnamed>")
    return codes, names


_STEP_COLUMNS = ["step", "start_ns", "end_ns", "busy_ms", "gap_ms", "dispatches"]


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


def _find_steps(
    trace: Any,
    dispatches: pd.DataFrame,
    steps: int | str | None,
    codes: np.ndarray,
    names: list[str],
    s: np.ndarray,
    e: np.ndarray,
    window: Window,
) -> StepSplit | None:
    """A given count, else step markers (`steps` as regex, default `ProfilerStep#N`), else the rhythm of
    kernel dispatches (copies and fills left out). A regex that matches no marker finds no steps."""
    if isinstance(steps, (int, np.integer)) and not isinstance(steps, bool):
        return StepSplit(np.empty(0, np.int64), np.empty(0, np.int64), "given", int(steps))
    pattern = steps if isinstance(steps, str) else DEFAULT_STEP_MARKER
    split = _steps_from_markers(_markers_of(trace), pattern, window)
    if split is not None or isinstance(steps, str):
        return split
    is_kernel = _kind_codes(dispatches)[0] == 0
    if is_kernel.all():
        return _steps_from_rhythm(codes, names, s, e, window)
    kpos = np.flatnonzero(is_kernel)
    return _steps_from_rhythm(codes[kpos], names, s[kpos], e[kpos], window)


def _step_table(split: StepSplit | None, gs: np.ndarray, ge: np.ndarray, s: np.ndarray) -> pd.DataFrame:
    """One row per step with boundaries: busy (union inside the step), gap, dispatches starting in it."""
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
        }
    )


def _kernel_tables(
    dispatches: pd.DataFrame,
    codes: np.ndarray,
    names: list[str],
    s: np.ndarray,
    e: np.ndarray,
    classes: Any,
    per_step: int | None,
) -> tuple[pd.DataFrame, pd.DataFrame, Any]:
    """Time (clipped), count, ms per step and share by kernel and by kernel class, sorted by time."""
    from perflib import classes as class_mod

    dur = np.bincount(codes, weights=(e - s).astype(np.float64), minlength=len(names))
    cnt = np.bincount(codes, minlength=len(names))
    table = class_mod.resolve_table(classes, names, dur)
    kernel_class = table.classify_names(names)
    # a copy or fill that no rule names is classed by its kind (memcpy / memset), not `other`
    kind_code, kind_names = _kind_codes(dispatches)
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
        }
    )
    by_class = kernels.groupby("kernel_class", sort=False).agg(time_ms=("time_ms", "sum"), count=("count", "sum")).reset_index()
    out = []
    for frame, key in ((kernels, "kernel"), (by_class, "kernel_class")):
        frame["ms_per_step"] = frame["time_ms"] / per_step if per_step else np.nan
        frame["share"] = frame["time_ms"] / total_ms if total_ms > 0 else np.nan
        out.append(frame.sort_values(["time_ms", key], ascending=[False, True], kind="stable").reset_index(drop=True))
    return out[0], out[1], table


def summarize(
    trace: Any,
    window: Window | None = None,
    classes: Any = None,
    steps: int | str | None = None,
    top: int = 10,
) -> TraceSummary:
    """Attribute one window of a trace (a `Trace` or a bare dispatch table).

    window: a `Window` (default: the trace span, first GPU event start → last end).
    classes: a `perflib.classes.ClassTable`, a backend name, or None for `auto` (the built-in table that
      leaves the least kernel time in `other`).
    steps: None → detect (markers named like `ProfilerStep#N`, else the dispatch rhythm; see
      `_steps_from_rhythm`); an int → the step count from counters (Δdecode_steps), no boundaries;
      a str → a regex for the step markers.
    top: how many largest gaps, and how many kernels `to_dict()` lists.
    Dispatch time in the kernel and class tables is clipped to the window; `share` is of the summed
    kernel time (which exceeds busy where dispatches overlap).
    """
    dispatches = _dispatches_of(trace)
    window = window or trace_span(dispatches)
    if window.end_ns <= window.start_ns:
        raise _empty_window_error(window, dispatches, "end <= start")
    rows, s, e = _clip(dispatches, window)
    if rows.size == 0:
        raise _empty_window_error(window, dispatches, "no dispatch inside it")
    # dispatches that began before the window and run into it are clipped to it and counted; the
    # mlxcel decode split (FORMATS.md §5.3) expects none at the decode start, so say how many there are
    straddling = int(np.count_nonzero(
        dispatches["start_ns"].to_numpy(dtype=np.int64)[rows] < int(window.start_ns)))
    if rows.size != len(dispatches):
        dispatches = dispatches.iloc[rows]
    if s.size > 1 and bool(np.any(s[1:] < s[:-1])):
        order = np.argsort(s, kind="stable")
        dispatches, s, e = dispatches.iloc[order], s[order], e[order]
    n = int(s.size)
    gs, ge, first = union_intervals(s, e)
    w0, w1 = int(window.start_ns), int(window.end_ns)
    busy = int((ge - gs).sum())
    total = w1 - w0
    gap_starts = np.concatenate(([w0], ge))
    gap_ends = np.append(gs, w1)
    gap_len = gap_ends - gap_starts
    codes, names = _kernel_codes(dispatches["kernel"])
    ender = np.append(first, -1)  # the dispatch that ends each gap; -1 = trailing ("tail")

    largest = _largest_gaps(gap_starts - w0, gap_len, ender, codes, names, top)
    split = _find_steps(trace, dispatches, steps, codes, names, s, e, window)
    step_table = _step_table(split, gs, ge, s)
    step_count = None if split is None else (split.count if split.count is not None else len(step_table))
    step_method = None if split is None else split.method
    per_step = step_count if step_count else None
    kernels, by_class, table = _kernel_tables(dispatches, codes, names, s, e, classes, per_step)

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
        busy_ms_per_step=busy / _NS_PER_MS / per_step if per_step else None,
        gap_ms_per_step=(total - busy) / _NS_PER_MS / per_step if per_step else None,
        dispatches_per_step=n / per_step if per_step else None,
        step_table=step_table,
        classes=by_class,
        kernels=kernels,
        class_table=table.name,
        top=int(top),
        meta={"straddling_start": straddling},
    )


def parse_window(text: str, dispatches: pd.DataFrame) -> Window:
    """`START:END` in ns on the trace's clock, or with a unit suffix (`ns`/`us`/`ms`/`s`) relative to the
    first dispatch's start (`100ms:250ms`); either side may be empty (trace start / end)."""
    m = re.fullmatch(r"\s*([^:]*)\s*:\s*([^:]*)\s*", text)
    if not m:
        raise PerflibError(f"--window {text!r}: expected START:END (ns on the trace clock, or e.g. 100ms:250ms)")
    span = trace_span(dispatches)
    units = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}

    def one(part: str, default: int) -> int:
        part = part.strip()
        if not part:
            return default
        u = re.fullmatch(r"([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)\s*(ns|us|ms|s)", part)
        if u:
            return span.start_ns + int(round(float(u.group(1)) * units[u.group(2)]))
        if re.fullmatch(r"[-+]?\d+", part):
            return int(part)
        raise PerflibError(f"--window {text!r}: {part!r} is neither integer ns nor a number with ns/us/ms/s")

    return Window(one(m.group(1), span.start_ns), one(m.group(2), span.end_ns), text)
