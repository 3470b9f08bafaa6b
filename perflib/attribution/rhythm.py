"""Steps from the dispatch rhythm: the period at which the dispatch names repeat, opened at the host's turn.

Used only where the trace marks no steps and no counter or request record gives their number
(`perflib.attribution.steps` has the order). A decoder runs the same dispatches every step, and inside
a step the same few dispatches once per layer, so two kinds of period show in the name sequence: the
layer (12 to 36 of them per step) and the step. The step is told from the layer by two facts:

1. Period of a name. For a name seen at position p_0 < p_1 < ..., the lag-k distances p_{i+k} - p_i are
   taken for k = 1, 2, ... 16; the first k at which at least 75% of them lie within 10% of their median,
   and the name occurs k times per repeat on average (its count over its span's repeats), gives the name's period (that median) with k
   occurrences per repeat. A name seen twice a step at
   uneven places (an embedding lookup and a bias add; nine input copies in a row) has no lag-1 period
   but a lag-2 or lag-9 one. A period counts only where its repeats span at least half the window's
   dispatches (a prefill kernel's short burst is no rhythm).
2. The host's turn. Between two steps the host samples, schedules and builds the next batch, so the
   dispatch that opens a step follows an idle stretch far longer than the typical one inside a step.
   Each period is opened by the name (and the one of its k occurrences) with the largest median idle
   before it; a period whose opener's median idle is below 4x the median positive idle of the window
   does not start at the host's turn: it repeats inside a step (a layer), and is not a step.

Of the periods that open at the host's turn the longest is the step, unless it is m (2 or more) times a
shorter one that also opens at the host's turn with at least half its idle: then the longer one holds
m steps (a name seen every other step) and the shorter one is the step. Where names repeat but no
period opens at the host's turn, no step is found (a layer count would be off by the layer count); where
no name repeats, the window is split at every idle longer than 10x the median.
Segments whose dispatch count is off the median by more than 10% (a prefill burst, a warm-up) are not
steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from perflib.classes import base_name

MIN_STEPS = 3
"""Fewer steps than this found from the rhythm is no rhythm: no steps."""
MAX_PER_REPEAT = 16
"""Occurrences of one name per repeat that the lag search tries."""
CONSISTENT_SHARE = 0.75
"""Share of lag distances within `TOLERANCE` of their median for a name to be periodic."""
TOLERANCE = 0.10
COVERAGE = 0.5
"""A period's repeats must span this share of the window's dispatches."""
HOST_TURN = 4.0
"""An opener's median idle over the window's median positive idle, at least, for a step boundary."""
SAME_PERIOD = 0.05
GUESS = "dispatch rhythm, a guess"
"""How a step method found here begins: the count is inferred from the names' repetition, not marked
or counted (a page and `--json` say so: `StepSplit.guessed`, `TraceSummary.steps_guessed`)."""


@dataclass(frozen=True)
class Period:
    """A name's period in dispatches, its occurrences per repeat, and the occurrence that opens it."""

    period: float
    code: int
    per_repeat: int
    phase: int
    idle_ns: float  # median idle before the opening occurrence
    turn_ns: float  # median over repeats of the longest idle inside a repeat


@dataclass(frozen=True)
class Rhythm:
    """Step boundaries found from the rhythm and how; `period` is None for a gap split."""

    starts: np.ndarray
    ends: np.ndarray
    method: str
    period: Period | None = None


def idle_before(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Idle ns before each dispatch: its start minus the latest end of all dispatches before it (>= 0)."""
    out = np.zeros(starts.size, dtype=np.int64)
    if starts.size > 1:
        out[1:] = np.maximum(starts[1:] - np.maximum.accumulate(ends)[:-1], 0)
    return out


def _name_period(positions: np.ndarray, idle: np.ndarray, code: int, n: int) -> Period | None:
    """The first lag k at which a name's positions repeat consistently, k times per repeat, and span the
    window, if any."""
    span = int(positions[-1] - positions[0])
    for k in range(1, MAX_PER_REPEAT + 1):
        if positions.size < k * MIN_STEPS + 1:
            return None
        lag = positions[k:] - positions[:-k]
        med = float(np.median(lag))
        if med < 2 or np.mean(np.abs(lag - med) <= TOLERANCE * med) < CONSISTENT_SHARE:
            continue
        if round(positions.size / (span / med + 1)) != k:  # 9 copies a step repeat at lag 7 too, across its edge
            continue
        if positions.size / k * med < COVERAGE * n:
            continue
        phases = [float(np.median(idle[positions[r::k]])) for r in range(k)]
        phase = int(np.argmax(phases))
        return Period(med, code, k, phase, phases[phase], _turn(positions[phase::k], idle))
    return None


def _turn(anchors: np.ndarray, idle: np.ndarray) -> float:
    """Median, over the repeats between consecutive anchors, of the longest idle inside each (the gaps
    after a repeat's first dispatch up to the one before the next repeat's)."""
    anchors = anchors[anchors + 1 < idle.size]
    if anchors.size < 2:
        return 0.0
    return float(np.median(np.maximum.reduceat(idle, anchors + 1)[:-1]))


def name_periods(codes: np.ndarray, idle: np.ndarray) -> list[Period]:
    """The period of every name that has one (see the module's point 1)."""
    n = codes.size
    small = codes.astype(np.int16) if codes.max(initial=0) < 2**15 else codes
    order = np.argsort(small, kind="stable")
    groups = np.split(order, np.flatnonzero(np.diff(codes[order])) + 1)
    found = (_name_period(np.sort(g), idle, int(codes[g[0]]), n) for g in groups if g.size > MIN_STEPS)
    return [p for p in found if p is not None]


def choose_period(periods: Sequence[Period], idle: np.ndarray) -> Period | None:
    """The step's period (the module's point 2): the longest one opened at the host's turn, or the
    shorter one it is a multiple of; None where no period opens at the host's turn."""
    typical = float(idle.mean()) if idle.size else 0.0
    at_turn = [p for p in periods if p.turn_ns > 0 and p.turn_ns >= HOST_TURN * typical]
    if not at_turn:
        return None
    # one opener per period: the name with the largest idle before it
    by_period: list[Period] = []
    for p in sorted(at_turn, key=lambda p: (p.period, -p.idle_ns, p.code)):
        if by_period and p.period <= (1 + SAME_PERIOD) * by_period[-1].period:
            if p.idle_ns > by_period[-1].idle_ns:
                by_period[-1] = p
            continue
        by_period.append(p)
    step = by_period[-1]
    for shorter in by_period[:-1]:
        m = round(step.period / shorter.period)
        if (m >= 2 and abs(step.period - m * shorter.period) <= SAME_PERIOD * step.period
                and shorter.turn_ns >= 0.5 * step.turn_ns):
            return shorter
    return step


def _segments(anchors: np.ndarray, starts: np.ndarray, ends: np.ndarray, window_end: int
              ) -> tuple[np.ndarray, np.ndarray, float] | None:
    """Steps from anchor positions: each runs to the next anchor; segments off the median count by more
    than 10% are dropped, and the last one is cut to the median count where it runs long."""
    n = starts.size
    counts = np.append(anchors[1:], n) - anchors
    med = float(np.median(counts[:-1])) if counts.size > 1 else float(counts[0])
    regular = np.abs(counts - med) <= TOLERANCE * med
    seg_starts = starts[anchors]
    seg_ends = np.append(starts[anchors[1:]], window_end)
    if not regular[-1] and counts[-1] > med:  # trailing work after the final step
        last = anchors[-1] + int(med) - 1
        seg_ends[-1] = int(np.maximum.accumulate(ends)[last]) if last < n else window_end
        regular[-1] = True
    if int(regular.sum()) < MIN_STEPS:
        return None
    return seg_starts[regular], seg_ends[regular], med


def _gap_split(starts: np.ndarray, idle: np.ndarray, window_end: int) -> Rhythm | None:
    """No name repeats: split at every idle longer than 10x the median positive idle."""
    gaps = idle[1:]
    positive = gaps[gaps > 0]
    if positive.size == 0:
        return None
    threshold = 10 * float(np.median(positive))
    cut = np.flatnonzero(gaps > threshold) + 1
    if cut.size + 1 < MIN_STEPS:
        return None
    seg_starts = np.concatenate(([starts[0]], starts[cut]))
    seg_ends = np.append(starts[cut], window_end)
    return Rhythm(seg_starts, seg_ends, f"{GUESS} (gap split: idle > {threshold / 1e3:.1f} us, 10x median)")


def steps_from_rhythm(codes: np.ndarray, names: Sequence[str], starts: np.ndarray, ends: np.ndarray,
                      window_end: int) -> Rhythm | None:
    """Step boundaries of dispatches sorted by start (codes into `names`), by the module's method."""
    if codes.size < 2 * MIN_STEPS:
        return None
    idle = idle_before(starts, ends)
    periods = name_periods(codes, idle)
    if not periods:
        return _gap_split(starts, idle, window_end)
    step = choose_period(periods, idle)
    if step is None:
        return None
    anchors = np.flatnonzero(codes == step.code)[step.phase::step.per_repeat]
    found = _segments(anchors, starts, ends, window_end)
    if found is None:
        return None
    seg_starts, seg_ends, med = found
    method = f"{GUESS} (period {med:.0f} dispatches, opened by {base_name(names[step.code])})"
    return Rhythm(seg_starts, seg_ends, method, step)
