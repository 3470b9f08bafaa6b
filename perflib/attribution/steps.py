"""Steps of a window, from one source in a fixed order, the same wherever steps are counted.

1. What the trace marks (`perflib.attribution.markers`): a range the campaign names, the engine's own
   step annotations (SGLang `step[...]`, vLLM `execute_...` and its `execute_model` Python frames), the
   PyTorch profiler's `ProfilerStep#N`. A named range that gives no step is an error, not a reason to
   go on down the order.
2. A count for the window from outside the trace (`StepCount`): the request records of a decode window,
   the server's counters of a level window (`perflib.attribution.level`).
3. The dispatch rhythm (`perflib.attribution.rhythm`): a guess, and labelled one (`StepSplit.guessed`).

A count given outright (`summarize(steps=N)`, `trace summary --steps N`) overrides the order. A step
split is the boundaries `[starts[k], ends[k])` of each step found in the window and the method that
found them, or a count with no boundaries; marked steps carry their ranges' names (the engine's phase).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perflib.attribution.markers import check_pattern, marked_steps
from perflib.attribution.rhythm import steps_from_rhythm
from perflib.attribution.windows import TraceLike, Window


@dataclass(frozen=True)
class StepCount:
    """Steps of a window counted outside the trace, and where from (`request records (decode window)`)."""

    count: int
    source: str


@dataclass(frozen=True)
class StepSplit:
    """Step boundaries found in a window: `[starts[k], ends[k])` is step k; `method` says how."""

    starts: np.ndarray
    ends: np.ndarray
    method: str
    count: int | None = None  # a count from outside the trace, without boundaries
    guessed: bool = False
    """True where the steps come from the dispatch rhythm: inferred, neither marked by the engine nor
    counted by the client or the server."""
    names: np.ndarray | None = None
    """Each marked step's range name (`perflib.attribution.phases` reads its phase); None otherwise."""
    named: bool = False
    """The ranges a named pattern matched (`--steps REGEX`, `profiler.step_marker`): other steps may lie
    between them, so per-step figures are taken inside these steps' spans only."""


def _counted(count: int, method: str) -> StepSplit:
    return StepSplit(np.empty(0, np.int64), np.empty(0, np.int64), method, int(count))


def find_steps(
    trace: TraceLike,
    steps: int | str | StepCount | None,
    codes: np.ndarray,
    names: list[str],
    s: np.ndarray,
    e: np.ndarray,
    window: Window,
    step_marker: str | None = None,
) -> StepSplit | None:
    """The steps of the window's dispatches (sorted by start; `codes` into `names`, `s`/`e` clipped to
    the window; kernels, copies and fills alike: an input copy may open each step), by
    the module's order. `steps`: an int overrides it (method `given`); a str is a regex for the ranges
    tried first (as `step_marker`, the campaign's, is); a `StepCount` is source 2."""
    if isinstance(steps, (int, np.integer)) and not isinstance(steps, bool):
        return _counted(int(steps), "given")
    named = "--steps" if isinstance(steps, str) else "profiler.step_marker"
    check_pattern(steps if isinstance(steps, str) else step_marker, named)
    marked = marked_steps(trace, window, steps if isinstance(steps, str) else step_marker, named)
    if marked is not None:
        return StepSplit(marked.starts, marked.ends, marked.method, names=marked.names, named=marked.named)
    if isinstance(steps, StepCount) and steps.count > 0:
        return _counted(steps.count, steps.source)
    found = steps_from_rhythm(codes, names, s, e, int(window.end_ns))
    return None if found is None else StepSplit(found.starts, found.ends, found.method, guessed=True)
