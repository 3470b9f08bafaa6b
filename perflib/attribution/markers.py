"""Steps from the ranges a trace marks: the engine's own step annotations, `ProfilerStep#N`, named ranges.

Families are tried in order, and the first with a range on the GPU in the window gives the steps; the
families are never mixed, so a vLLM-style `execute_...` range around SGLang's `step[...]` (both in
one SGLang trace) does not count the step twice:

1. a range the campaign names (`profiler.step_marker`, or `trace summary --steps REGEX`): NVTX, roctx
   or annotation names;
2. SGLang's `step[DECODE bs=32]` / `step[EXTEND bs=8 toks=4096]` (`ModelRunner.forward`'s span);
3. vLLM's `execute_model` / `execute_<r>_context_<n>(...)_generation_<m>(...)` ranges and vLLM V1's
   `execute_context_<n>(...)_generation_<m>(...)` (the model runner's `record_function`), anything
   inside the parentheses (`execute_context_1(888_788544)_generation_0(0)`);
4. vLLM 0.8's steps marked only as Python frames, `gpu_model_runner.py(N): execute_model` (Kineto
   `python_function` events of a `with_stack` trace, which the reader keeps for this);
5. the PyTorch profiler's `ProfilerStep#N`.

A named range (1) that matches no range with GPU work in the window is an error naming the pattern and
the ranges the trace does hold, never a fall back to the engines' ranges or the rhythm: the figures
asked for are those of the named steps. Each step keeps the name of its range, from which
`perflib.attribution.phases` reads its phase (SGLang's `EXTEND`/`DECODE`, vLLM's context/generation
counts).

A range seen on the GPU stream (Kineto's `gpu_user_annotation`) covers the kernels launched inside
it and is used as it stands. A host range precedes its kernels (the launch queue, a CUDA/HIP graph
replayed later), so it is moved onto the GPU: it becomes the span from the first start to the last
end of the dispatches whose launching API call (joined by correlation id) began inside it, on its
thread. A host range whose copy on the GPU stream is there is that step already and is dropped; one
that launched nothing is no step of the GPU (a profiler's last `ProfilerStep#` after it stopped).
Where the trace has no launch calls to join, host ranges are used as they stand. A range inside
another of its family (a nested span) is not a step of its own; a step ends where the next begins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from perflib.attribution.windows import DEFAULT_STEP_MARKER, TraceLike, Window, dispatches_of, markers_of
from perflib.errors import PerflibError


@dataclass(frozen=True)
class StepFamily:
    """Ranges that mark one step each: a label for the step method and a regex on their names."""

    label: str
    pattern: str


ENGINE_FAMILIES: tuple[StepFamily, ...] = (
    StepFamily("SGLang step[...] annotations", r"^step\["),
    StepFamily("vLLM execute_... annotations",
               r"^execute_(?:model\b|\d+_context_\d+|(?:\d+_)?context_\d+\(.*\)_generation_\d+\()"),
    StepFamily("vLLM execute_model Python frames", r"gpu_model_runner\.py\(\d+\): execute_model$"),
    StepFamily("ProfilerStep# markers", DEFAULT_STEP_MARKER),
)
"""The engines' own step ranges, in the order they are tried after a named one."""


@dataclass(frozen=True)
class MarkedSteps:
    """Steps from one family's ranges, on the GPU's timeline, clipped to the window."""

    starts: np.ndarray
    ends: np.ndarray
    method: str
    family: str
    span: tuple[int, int]  # earliest start to latest end of the ranges and their GPU spans, unclipped
    names: np.ndarray | None = None  # each step's range name (object array of str)
    named: bool = False  # the ranges of a named pattern (`--steps REGEX`, `profiler.step_marker`)


def check_pattern(step_marker: str | None, named: str = "step_marker") -> None:
    """A `PerflibError` naming the flag or key where the step regex does not compile: said at once,
    whether or not the trace has ranges to match it against."""
    if not step_marker:
        return
    try:
        re.compile(step_marker)
    except (re.error, RecursionError, OverflowError) as exc:
        raise PerflibError(f"{named} {step_marker!r}: expected a step count or a regular expression (Python re) "
                           f"for the step ranges' names; it does not compile: {exc}") from None


def families(step_marker: str | None = None, named: str = "step_marker") -> tuple[StepFamily, ...]:
    """The families in the order tried: the named regex (if any) first, then the engines'."""
    if not step_marker:
        return ENGINE_FAMILIES
    check_pattern(step_marker, named)
    return (StepFamily(f"{named} /{step_marker}/ ranges", step_marker), *ENGINE_FAMILIES)


def _outermost(frame: pd.DataFrame) -> pd.DataFrame:
    """Ranges not inside another of the frame on the same thread (a nested span is not a step)."""
    if len(frame) < 2:
        return frame
    frame = frame.sort_values(["tid", "start_ns", "end_ns"], ascending=[True, True, False], kind="stable")
    ends = frame["end_ns"].to_numpy(np.int64)
    tids = frame["tid"].to_numpy()
    inside = np.zeros(len(frame), dtype=bool)
    running, last_tid = np.iinfo(np.int64).min, None
    for i, (tid, end) in enumerate(zip(tids, ends, strict=True)):
        if tid != last_tid:
            running, last_tid = np.iinfo(np.int64).min, tid
        inside[i] = end <= running
        running = max(running, int(end))
    return frame[~inside]


def _launch_times(trace: TraceLike) -> pd.DataFrame | None:
    """Per dispatch: its start, end, and its launching call's start and thread; None without a join."""
    api = getattr(trace, "api", None)
    dispatches = dispatches_of(trace)
    if api is None or len(api) == 0 or "correlation_id" not in dispatches or len(dispatches) == 0:
        return None
    calls = api[api["correlation_id"] >= 0].drop_duplicates("correlation_id")[["correlation_id", "start_ns", "tid"]]
    joined = dispatches[["start_ns", "end_ns", "correlation_id"]].merge(
        calls.rename(columns={"start_ns": "launch_ns"}), on="correlation_id", how="inner")
    return joined.sort_values("launch_ns", kind="stable") if len(joined) else None


def _on_gpu(host: pd.DataFrame, launched: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each host range's GPU span: first start to last end of what its thread launched inside it (any
    thread's launches where its thread launched nothing at all); -1, -1 where nothing."""
    lo = np.full(len(host), -1, dtype=np.int64)
    hi = np.full(len(host), -1, dtype=np.int64)
    by_tid = {tid: group for tid, group in launched.groupby("tid", sort=False)}
    columns: dict[Any, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for i, (start, end, tid) in enumerate(zip(host["start_ns"], host["end_ns"], host["tid"], strict=True)):
        key = tid if tid in by_tid else None
        if key not in columns:
            mine = by_tid[key] if key is not None else launched
            columns[key] = (mine["launch_ns"].to_numpy(np.int64), mine["start_ns"].to_numpy(np.int64),
                            mine["end_ns"].to_numpy(np.int64))
        t, s, e = columns[key]
        a, b = np.searchsorted(t, int(start), "left"), np.searchsorted(t, int(end), "left")
        if b > a:
            lo[i], hi[i] = int(s[a:b].min()), int(e[a:b].max())
    return lo, hi


def _family_ranges(hits: pd.DataFrame, launched: pd.DataFrame | None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """One family's steps on the GPU timeline (unclipped, sorted), their range names, and which side
    they came from."""
    on_gpu = hits["domain"].astype(str).str.lower().str.contains("gpu").to_numpy()
    gpu, host = _outermost(hits[on_gpu]), _outermost(hits[~on_gpu])
    gs, ge = gpu["start_ns"].to_numpy(np.int64), gpu["end_ns"].to_numpy(np.int64)
    gn = gpu["name"].astype(str).to_numpy(dtype=object)
    if launched is None:  # no launch calls to join: host ranges as they stand, unless seen on the GPU
        host = host[~host["name"].isin(set(gpu["name"]))]
        hs, he, how = host["start_ns"].to_numpy(np.int64), host["end_ns"].to_numpy(np.int64), "as they stand"
        hn = host["name"].astype(str).to_numpy(dtype=object)
    else:
        hs, he = _on_gpu(host, launched)
        names = host["name"].astype(str).to_numpy(dtype=object)
        keep = hs >= 0
        for i in np.flatnonzero(keep) if gs.size else ():  # the step seen on the GPU stream: keep that copy
            keep[i] = not bool(np.any((gn == names[i]) & (gs < he[i]) & (ge > hs[i])))
        hs, he, hn, how = hs[keep], he[keep], names[keep], "on the kernels they launched"
    side = ("GPU ranges" if hs.size == 0 else f"host ranges, {how}" if gs.size == 0
            else f"GPU ranges and host ranges, {how}")
    starts, ends = np.concatenate([gs, hs]), np.concatenate([ge, he])
    order = np.argsort(starts, kind="stable")
    return starts[order], ends[order], np.concatenate([gn, hn])[order], side


def _ranges(markers: pd.DataFrame) -> pd.DataFrame:
    """Marker rows that are ranges (a mark has no length), with a thread column."""
    ranges = markers[markers["end_ns"].to_numpy(np.int64) > markers["start_ns"].to_numpy(np.int64)]
    return ranges if "tid" in ranges else ranges.assign(tid=-1)


def marked_steps(trace: TraceLike, window: Window | None, step_marker: str | None = None,
                 named: str = "step_marker") -> MarkedSteps | None:
    """Steps from the first family (see the module) with a step on the GPU inside the window (any
    window where None); None where no family has one. A `step_marker` that gives no step is a
    `PerflibError` (`no_match_error`)."""
    markers = markers_of(trace)
    if markers is None or len(markers) == 0:
        if step_marker:
            raise no_match_error(step_marker, named, None, window, 0, _no_markers_note(trace))
        return None
    ranges = _ranges(markers)
    names = ranges["name"].astype(str)
    launched = _launch_times(trace)
    for i, family in enumerate(families(step_marker, named)):
        is_named = bool(step_marker) and i == 0
        hits = ranges[names.str.contains(family.pattern, regex=True)]
        found = _steps_of(hits, launched, window, family, is_named) if len(hits) else None
        if found is not None:
            return found
        if is_named:
            raise no_match_error(step_marker, named, ranges, window, len(hits))
    return None


def _steps_of(hits: pd.DataFrame, launched: pd.DataFrame | None, window: Window | None, family: StepFamily,
              is_named: bool) -> MarkedSteps | None:
    """One family's steps clipped to the window, or None where none has GPU work inside it."""
    starts, ends, step_names, side = _family_ranges(hits, launched)
    if starts.size == 0:
        return None
    span = (int(min(starts.min(), hits["start_ns"].min())), int(max(ends.max(), hits["end_ns"].max())))
    ends = np.minimum(ends, np.append(starts[1:], np.iinfo(np.int64).max))  # a step ends where the next begins
    if window is not None:
        starts, ends = np.maximum(starts, window.start_ns), np.minimum(ends, window.end_ns)
    keep = ends > starts
    if not keep.any():
        return None
    return MarkedSteps(starts[keep], ends[keep], f"{family.label} ({side})", family.label, span, step_names[keep],
                       is_named)


NAMES_SHOWN = 6
"""How many of a trace's range names a no-match error lists."""


def _no_markers_note(trace: TraceLike) -> str:
    """Why a trace holds no ranges, where its read said (a cut made before perflib kept them, none in the
    cut's window: `meta["markers_note"]`), else ''."""
    meta = getattr(trace, "meta", None) or {}
    return str(meta.get("markers_note") or "")


def no_match_error(step_marker: str, named: str, ranges: pd.DataFrame | None, window: Window | None,
                   matched: int, why_none: str = "") -> PerflibError:
    """The error of a named step pattern that gives no step: the pattern, what it matched, and the names
    of the ranges the trace holds (the engines' step ranges first, then the most frequent others), or
    why it holds none (`why_none`, what its read said)."""
    where = "" if window is None else f" inside the window ({window.label})"
    what = (f"it matches {matched} range{'s' if matched != 1 else ''}, none with GPU work{where}" if matched
            else "it matches no range of the trace")
    if ranges is None or not len(ranges):
        seen = f"the trace holds no named ranges ({why_none or 'the capture recorded none'})"
    else:
        counts = ranges["name"].astype(str).value_counts(sort=False)
        engine = pd.Series([any(re.search(f.pattern, n) for f in ENGINE_FAMILIES) for n in counts.index],
                           index=counts.index)
        order = sorted(counts.index, key=lambda n: (not engine[n], -int(counts[n]), n))
        shown = [f"{n[:80]!r} ({int(counts[n])})" for n in order[:NAMES_SHOWN]]
        more = f", and {len(order) - NAMES_SHOWN} more" if len(order) > NAMES_SHOWN else ""
        seen = f"the trace's ranges: {', '.join(shown)}{more}"
    return PerflibError(f"{named} /{step_marker}/: no step: {what}; {seen}. Steps are counted from the ranges "
                        "it names or not at all (no fall back to other ranges or the dispatch rhythm)")


def window_from_step_annotations(trace: TraceLike, step_marker: str | None = None,
                                 named: str = "profiler.step_marker") -> Window:
    """The decode window of a trace-only capture: the span of its step ranges (the first family that
    has any, `marked_steps`), host ranges and their kernels both inside, so set-up and export fall
    outside it."""
    found = marked_steps(trace, None, step_marker, named)
    if found is None:
        markers = markers_of(trace)
        tried = ", ".join(f"/{f.pattern}/" for f in families(step_marker))
        some = sorted(set(markers["name"].astype(str)))[:10] if markers is not None and len(markers) else []
        why = _no_markers_note(trace) if not some else ""
        raise PerflibError(f"no step ranges: no marker matches {tried} with GPU work; "
                           + (f"the trace holds no markers: {why}" if why else f"some names: {some}"))
    return Window(found.span[0], found.span[1], f"span of the {found.family}")
