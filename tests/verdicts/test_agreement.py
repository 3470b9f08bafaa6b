"""The rule by which two runs' before/after changes agree (`perflib.verdicts.agreement.changes_agree`): each
change lies within the other run's 95% interval, both ways; one interval judges alone; none, nothing."""

from __future__ import annotations

import math

import pytest

from perflib.verdicts import change_of
from perflib.verdicts.agreement import changes_agree


def test_two_changes_each_inside_the_others_interval_agree():
    assert changes_agree(-20.0, -30.0, -10.0, -18.0, -25.0, -11.0) is True


def test_the_bounds_are_inside():
    assert changes_agree(-30.0, -30.0, -10.0, -10.0, -30.0, -10.0) is True


def test_one_way_is_not_enough():
    """A wide interval holds the narrow run's change, but the narrow interval does not hold the wide run's."""
    wide, narrow = (-40.0, -90.0, 10.0), (-10.0, -12.0, -8.0)
    assert not narrow[1] <= wide[0] <= narrow[2]  # -40 lies outside the narrow one
    assert wide[1] <= narrow[0] <= wide[2]  # while -10 lies inside the wide one
    assert changes_agree(*wide, *narrow) is False
    assert changes_agree(*narrow, *wide) is False  # the same either way round


def test_changes_apart_differ():
    assert changes_agree(-20.0, -25.0, -15.0, +5.0, 0.0, 10.0) is False


@pytest.mark.parametrize("other_pct, expected", [(-12.0, True), (+3.0, False)])
def test_where_one_run_has_no_interval_its_change_is_judged_by_the_others(other_pct, expected):
    assert changes_agree(-20.0, -25.0, -10.0, other_pct, None, None) is expected
    assert changes_agree(other_pct, None, None, -20.0, -25.0, -10.0) is expected


def test_where_neither_has_an_interval_or_a_change_is_missing_nothing_is_judged():
    assert changes_agree(-20.0, None, None, -5.0, None, None) is None
    assert changes_agree(None, None, None, -5.0, -6.0, -4.0) is None
    assert changes_agree(math.nan, -1.0, 1.0, 0.0, -1.0, 1.0) is None  # NaN, as runs.csv reads back, is missing
    assert changes_agree(0.0, math.nan, math.nan, 0.5, -1.0, 1.0) is True  # a NaN interval is no interval


def test_on_changes_made_from_repeats():
    """The rule on `change_of`'s own intervals: the same spread shifted by half a step still agrees; shifted
    far beyond the spread, it does not."""
    before, after = [10.0, 10.2, 9.9], [8.0, 8.1, 7.9]
    a = change_of(before, after)
    b = change_of(before, [x + 0.05 for x in after])
    c = change_of(before, [x - 3.0 for x in after])
    assert changes_agree(a.pct, a.lo, a.hi, b.pct, b.lo, b.hi) is True
    assert changes_agree(a.pct, a.lo, a.hi, c.pct, c.lo, c.hi) is False
