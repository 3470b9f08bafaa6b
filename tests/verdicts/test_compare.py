"""A before/after change over the repeats: Welch's t interval of the % change, and gates that pass or fail only
where the interval clears the limit, else undecided with the repeats that would decide (issue 27)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from perflib import verdicts as v
from perflib.config import GateSpec
from perflib.derive import DerivedTables, normalize
from perflib.verdicts import compare

# Student's t, 0.975 quantile, from the published table (any statistics textbook): df -> t
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 6: 2.447, 10: 2.228, 30: 2.042}


@pytest.mark.parametrize("df, t", sorted(T_975.items()))
def test_t_quantile_matches_the_table(df, t):
    assert compare.t_quantile(0.975, df) == pytest.approx(t, abs=5e-4)
    assert compare.t_quantile(0.025, df) == pytest.approx(-t, abs=5e-4)
    assert compare.t_cdf(t, df) == pytest.approx(0.975, abs=1e-4)


def test_a_large_df_is_the_normal_quantile():
    assert compare.t_quantile(0.975, 1e6) == pytest.approx(1.95996, abs=1e-4)


def test_welch_interval_of_the_change_worked_by_hand():
    """Before 9, 10, 11 and after 7, 8, 9: means 10 and 8 (-20%), each variance 1, so the standard error of
    the difference is sqrt(1/3 + 1/3) and Welch's degrees of freedom are exactly 4."""
    found = compare.change_of([9.0, 10.0, 11.0], [7.0, 8.0, 9.0])
    half = T_975[4] * math.sqrt(2 / 3) / 10 * 100
    assert found.pct == pytest.approx(-20.0)
    assert found.lo == pytest.approx(-20.0 - half, abs=0.01) and found.hi == pytest.approx(-20.0 + half, abs=0.01)
    assert "95% interval -42.7% to +2.7% (Welch t over 3 and 3 repeats)" == found.interval_text()
    # four repeats each (df 6) would put the interval below 0: that is what would decide "faster"
    assert T_975[6] * math.sqrt(2 / 4) * 10 < 20 < T_975[4] * math.sqrt(2 / 3) * 10
    assert compare.repeats_to_decide(found, 0.0) == 4


def test_one_repeat_gives_no_interval_and_the_other_arms_spread_says_how_many_would():
    found = compare.change_of([10.0], [7.0, 8.0, 9.0])
    assert found.lo is None and not found.has_interval
    assert found.interval_text() == "no interval (1 repeat of the baseline)"
    assert compare.repeats_to_decide(found, 0.0) == 4  # the arm's variance 1 stands for both, as above
    assert compare.repeats_to_decide(compare.change_of([10.0], [8.0]), 0.0) is None  # no spread at all
    assert compare.change_of([], [1.0]) is None and compare.change_of([0.0, 0.0], [1.0]) is None


def _runs(values: dict[str, list[float]], column: str = "decode_step_ms") -> DerivedTables:
    rows = [{"campaign": "t", "arm": arm, "backend": "gpu", "batch": 1, "context": 1024, "repeat": i + 1,
             "status": "complete", column: x} for arm, xs in values.items() for i, x in enumerate(xs)]
    return DerivedTables(runs=normalize("runs", pd.DataFrame(rows)))


CTX = v.Context(arms=("slots", "unified", "nographs", "kvq"), backends=("gpu",), batches=(1,), contexts=(1024,))


def test_a_gate_on_every_pair_passes_fails_or_is_undecided_by_its_interval():
    """Three variants against one baseline: one clearly faster (pass), one clearly slower (FAIL), one whose
    interval straddles the 5% limit (undecided, with the repeats that would decide it)."""
    tables = _runs({"slots": [2.0, 2.02, 1.98], "unified": [1.8, 1.82, 1.78], "nographs": [3.0, 3.03, 2.97],
                    "kvq": [2.0, 2.2, 1.9]})
    gates = v.evaluate_gate(GateSpec("decode_step_ms", batch=1, max_regression_pct=5), tables, CTX)
    by = {g.arm: g for g in gates}
    assert [(g.baseline, g.arm) for g in gates] == [("slots", "unified"), ("slots", "nographs"), ("slots", "kvq")]
    assert (by["unified"].state, by["unified"].passed) == (v.PASS, True) and max(by["unified"].interval) <= 5
    assert (by["nographs"].state, by["nographs"].passed) == (v.FAIL, False) and min(by["nographs"].interval) > 5
    kvq = by["kvq"]
    assert (kvq.state, kvq.passed) == (v.UNDECIDED, None) and kvq.interval[0] <= 5 < kvq.interval[1]
    found = compare.change_of([2.0, 2.02, 1.98], [2.0, 2.2, 1.9])
    assert kvq.repeats_needed == compare.repeats_to_decide(found, 5.0) and kvq.repeats_needed > 3
    assert f"about {kvq.repeats_needed} repeats per arm would decide it" in kvq.line
    assert "(kvq vs slots, gpu, context 1024)" in kvq.gate and kvq.line.endswith(": undecided")
    assert kvq.to_dict()["ci_method"] == compare.METHOD


def test_a_higher_is_better_gate_reads_a_fall_as_the_regression():
    rows = {"slots": [100.0, 101.0, 99.0], "unified": [80.0, 81.0, 79.0]}
    tables = _runs(rows, "decode_tok_s")
    (gate,) = v.evaluate_gate(GateSpec("decode_tok_s", batch=1, max_regression_pct=5, arm="unified"), tables, CTX)
    assert gate.state == v.FAIL and "20.0% worse" in gate.text


def test_comparisons_name_every_pair_at_every_level():
    tables = _runs({"slots": [2.0, 2.02], "unified": [1.8, 1.82], "kvq": [2.1]})
    rows = compare.comparisons(tables.runs, [("slots", "unified"), ("slots", "kvq")], ("decode_step_ms",))
    assert [(r["pair"], r["runs_before"], r["runs_after"]) for r in rows] == [("unified vs slots", 2, 2),
                                                                              ("kvq vs slots", 2, 1)]
    assert rows[0]["change_pct"] == pytest.approx(100 * (1.81 - 2.01) / 2.01)
    assert rows[1]["ci_low_pct"] is None  # one repeat of kvq
