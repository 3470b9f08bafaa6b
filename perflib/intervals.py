"""The exact union of half-open time intervals, and how much of a range it covers (int64 ns).

`U(I)` of docs/reference/FORMATS.md §5: sort by start; a new group begins where start > running max of
end (touching intervals merge); a group is (min start, max end). GPU busy of a trace window
(`perflib.attribution`) and other requests' prefill inside a decode window (`perflib.runs`) are
both this union.
"""

from __future__ import annotations

import numpy as np


def union_intervals(start_ns: np.ndarray, end_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact union of `[start, end)` intervals: (group starts, group ends, order index of each group's first).

    The sort is skipped when the input is already sorted by start, as dispatch tables are. The third
    array gives, for each group, the position in the input of the interval that opens it (first by
    start).
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


def covered_ns(lo: int, hi: int, group_starts: np.ndarray, group_ends: np.ndarray) -> int:
    """Nanoseconds of `[lo, hi)` covered by disjoint union groups (from `union_intervals`)."""
    if group_starts.size == 0 or hi <= lo:
        return 0
    overlap = np.minimum(group_ends, hi) - np.maximum(group_starts, lo)
    return int(overlap[overlap > 0].sum())


def covered_before(group_starts: np.ndarray, group_ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Nanoseconds of `(-inf, t)` covered by disjoint union groups sorted by start (from
    `union_intervals`), for each t: the coverage of `[a, b)` is `covered_before(b) - covered_before(a)`,
    for many ranges at once."""
    gs = np.asarray(group_starts, dtype=np.int64)
    ge = np.asarray(group_ends, dtype=np.int64)
    t = np.asarray(t, dtype=np.int64)
    if gs.size == 0:
        return np.zeros(t.shape, dtype=np.int64)
    done = np.concatenate(([0], np.cumsum(ge - gs)))
    k = np.searchsorted(gs, t, side="right")  # groups starting at or before t
    prev = np.maximum(k - 1, 0)
    partial = np.clip(np.minimum(t, ge[prev]) - gs[prev], 0, None)
    return np.where(k > 0, done[prev] + partial, 0).astype(np.int64)
