"""The exact interval union, against a brute-force reference (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from synthetic import dispatch_frame

from perflib import attribution as attr
from perflib.intervals import union_intervals


def brute_union_len(intervals: list[tuple[int, int]], lo: int, hi: int) -> int:
    """Mark every ns of [lo, hi) covered by some [s, e): the independent reference for the union."""
    covered = np.zeros(hi - lo, dtype=bool)
    for s, e in intervals:
        a, b = max(s, lo), min(e, hi)
        if b > a:
            covered[a - lo : b - lo] = True
    return int(covered.sum())


def test_union_nested_touching_identical() -> None:
    starts = np.array([0, 2, 10, 10, 20, 25, 30], dtype=np.int64)
    ends = np.array([10, 5, 15, 15, 25, 28, 30], dtype=np.int64)
    gs, ge, first = union_intervals(starts, ends)
    # [0,10)+[2,5) nested, [10,15) touches and repeats -> [0,15); [20,25)+[25,28) touch -> [20,28); [30,30)
    assert gs.tolist() == [0, 20, 30]
    assert ge.tolist() == [15, 28, 30]
    assert first.tolist() == [0, 4, 6]


def test_union_unsorted_input_reports_original_positions() -> None:
    gs, ge, first = union_intervals(np.array([50, 0, 10]), np.array([60, 5, 20]))
    assert gs.tolist() == [0, 10, 50] and ge.tolist() == [5, 20, 60]
    assert first.tolist() == [1, 2, 0]


interval = st.tuples(st.integers(0, 400), st.integers(0, 60)).map(lambda p: (p[0], p[0] + p[1]))


@settings(max_examples=300, deadline=None)
@given(
    intervals=st.lists(interval, min_size=1, max_size=40).flatmap(
        lambda xs: st.lists(st.sampled_from(xs), max_size=10).map(lambda dup: xs + dup)  # identical copies
    ),
    cut=st.tuples(st.integers(0, 470), st.integers(1, 470)),
)
def test_busy_matches_brute_force(intervals: list[tuple[int, int]], cut: tuple[int, int]) -> None:
    """Fast union == marking every ns, for random sets (nested, touching, identical) and cutting windows."""
    lo, hi = cut[0], cut[0] + cut[1]
    frame = dispatch_frame([(f"k{i % 3}", s, e) for i, (s, e) in enumerate(intervals)])
    assert attr.busy_ns(frame, attr.Window(lo, hi)) == brute_union_len(intervals, lo, hi)
    span_lo = min(s for s, _ in intervals)
    span_hi = max(e for _, e in intervals)
    if span_hi > span_lo:
        assert attr.busy_ns(frame) == brute_union_len(intervals, span_lo, span_hi)
    has_inside = any((e > lo and s < hi) or (s == e and lo <= s < hi) for s, e in intervals)
    if has_inside:
        summary = attr.summarize(frame, attr.Window(lo, hi), classes="mlx-rocm", steps=1)
        busy = brute_union_len(intervals, lo, hi)
        assert summary.busy_ms * 1e6 == pytest.approx(busy, abs=1e-6)
        assert summary.gap_ms * 1e6 == pytest.approx((hi - lo) - busy, abs=1e-6)
        # the buckets partition the gap
        assert summary.gap_buckets["gap_ms"].sum() * 1e6 == pytest.approx((hi - lo) - busy, abs=1e-6)


