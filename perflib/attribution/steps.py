"""Steps of a window: from step markers, else from the rhythm of the kernel dispatches.

A step split is the boundaries `[starts[k], ends[k])` of each step found in a window, and the method
that found them, or a step count given from the server's counters with no boundaries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from perflib.attribution.codes import kind_codes
from perflib.attribution.windows import DEFAULT_STEP_MARKER, Window, markers_of
from perflib.classes import base_name

MIN_STEPS = 3
"""Fewer steps than this found from the rhythm is no rhythm: `steps` stays None."""


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


def find_steps(
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
    split = _steps_from_markers(markers_of(trace), pattern, window)
    if split is not None or isinstance(steps, str):
        return split
    is_kernel = kind_codes(dispatches)[0] == 0
    if is_kernel.all():
        return _steps_from_rhythm(codes, names, s, e, window)
    kpos = np.flatnonzero(is_kernel)
    return _steps_from_rhythm(codes[kpos], names, s[kpos], e[kpos], window)
