"""Every level answers, each variant against its baseline (issue 27): the campaign shape users write, built
from synthetic run folders (`synthetic.shapes_campaign`: slots the baseline, unified, nographs and kvq, a traced
arm of slots, batch 1 and 4 at ~1K and ~16K, the ~16K requests staggered so that no window has all decoding)."""

from __future__ import annotations

import re

import pytest
import synthetic

from perflib import derive
from perflib import verdicts as v
from perflib.campaign import load_campaign

VARIANTS = ("unified", "nographs", "kvq")


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    campaign = load_campaign(synthetic.shapes_campaign(tmp_path_factory.mktemp("shapes")))
    tables = derive.build(campaign)
    ctx = v.Context.of(campaign)
    return campaign, tables, ctx, v.evaluate(campaign.candidates, tables, ctx)


def _of(verdicts, cid):
    return [x for x in verdicts if x.candidate == cid]


def test_every_candidate_is_decided_at_every_level_it_applies_to(shapes):
    campaign, tables, ctx, verdicts = shapes
    levels = {(b, c) for b in campaign.batches for c in campaign.contexts}
    compared = [a.name for a in campaign.compared_arms]
    # other requests' prefill: every batch above 1, every compared arm, every context
    assert {(x.arm, x.batch, x.context) for x in _of(verdicts, "interleaved-prefill")} == {
        (a, b, c) for a in compared for b, c in levels if b > 1}
    # a trace measurement: at every traced level of slots (from its traced arm), once for an arm with none
    gaps = _of(verdicts, "host-gaps")
    traced = {(int(b), int(c)) for b, c in zip(tables.trace_runs["batch"], tables.trace_runs["context"], strict=True)}
    assert {(x.batch, x.context) for x in gaps if x.arm == "slots"} == traced == levels
    assert all(x.trace_from == "slots-traced" and x.outcome != v.NOT_MEASURED for x in gaps if x.arm == "slots")
    for arm in VARIANTS:
        assert {(x.batch, x.context, x.outcome) for x in gaps if x.arm == arm} == {
            (max(campaign.batches), c, v.NOT_MEASURED) for c in campaign.contexts}
    # a ratio to batch 1: every batch above 1, resting on both levels
    assert {(x.batch, x.context) for x in _of(verdicts, "batched-gemv-per-row")} == {
        (b, c) for b, c in levels if b > 1}


def test_each_variant_is_measured_against_the_named_baseline(shapes):
    """`baseline: slots`, though unified is the first arm in the file: three pairs, at every level."""
    campaign, tables, ctx, verdicts = shapes
    assert campaign.comparisons == tuple(("slots", a) for a in VARIANTS)
    change = _of(verdicts, "step-change")
    assert {(x.arm, x.baseline, x.batch, x.context) for x in change} == {
        (a, "slots", b, c) for a in VARIANTS for b in campaign.batches for c in campaign.contexts}
    for x in change:
        assert f"arm {x.arm} against slots," in x.scope and x.who == f"{x.arm} vs slots"
        factor = synthetic.SHAPES_STEP_MS[x.arm] / synthetic.SHAPES_STEP_MS["slots"]
        assert x.value == pytest.approx(100 * (factor - 1), abs=0.01)  # the steps the folders were built with
        assert "95% interval" in x.text and "means of 2 and 2" in x.text
    outcomes = {x.arm: {y.outcome for y in change if y.arm == x.arm} for x in change}
    assert outcomes == {"unified": {v.CONFIRMED}, "nographs": {v.RULED_OUT}, "kvq": {v.RULED_OUT}}


def test_interleaved_prefill_is_confirmed_at_the_staggered_level_not_skipped(shapes):
    """At ~16K batch 4 the requests are staggered: no steady step, so the own-step share is n/a with why, and
    the other requests' prefill covering each decode window decides it; at ~1K the own steps do."""
    campaign, tables, ctx, verdicts = shapes
    prefill = _of(verdicts, "interleaved-prefill")
    staggered = [x for x in prefill if x.context == 16384]
    assert staggered and all(x.outcome == v.CONFIRMED and x.measure == "prefill_share" for x in staggered)
    assert all(x.outcome == v.RULED_OUT and x.measure == "own_step_share" for x in prefill if x.context == 1024)
    (answer,) = [a for a in v.answers(verdicts, ctx) if a.candidate == "interleaved-prefill"]
    # the question names ~16K and batch 4: that level's answer comes first
    assert ctx.question_contexts == (16384,) and ctx.question_batches == (4,)
    assert re.fullmatch(r"confirmed at ~16K \(prefill_share [\d.]+%; >= 50%\); "
                        r"ruled out at ~1K \(own_step_share [\d.]+%; >= 80%\)", answer.line), answer.line
    assert [x.batch for x in answer.verdicts][:len(campaign.compared_arms)] == [4] * len(campaign.compared_arms)
    assert all(x.context == 16384 for x in answer.verdicts[:len(campaign.compared_arms)])


def test_the_answer_names_an_arm_only_where_the_arms_disagree(shapes):
    campaign, tables, ctx, verdicts = shapes
    lines = {a.candidate: a.line for a in v.answers(verdicts, ctx)}
    # decided for slots from its traced arm at every level; the variants have no trace
    assert lines["host-gaps"].startswith("confirmed for slots (trace from slots-traced) at ~16K, and at ~1K (")
    assert lines["host-gaps"].endswith("not measured for unified, nographs and kvq")
    change = lines["step-change"]
    assert change.startswith("confirmed for unified vs slots at ~16K, and at ~1K (")
    assert "ruled out for nographs vs slots and kvq vs slots at ~16K, and at ~1K (" in change


def test_the_json_answer_carries_the_same_per_level_decisions(shapes):
    campaign, tables, ctx, verdicts = shapes
    answer = v.answer_dict(campaign, tables)
    assert answer["question_levels"] == {"contexts": [16384], "batches": [4]}
    assert [p["name"] for p in answer["pairs"]] == [f"{a} vs slots" for a in VARIANTS]
    levels = [level for entry in answer["candidates"] for level in entry["levels"]]
    assert sorted((x["candidate"], str(x["arm"]), x["batch"], x["context"], x["outcome"], x["value"] or 0)
                  for x in levels) == sorted((x.candidate, str(x.arm), x.batch, x.context, x.outcome, x.value or 0)
                                             for x in verdicts)
    assert {(g["arm"], g["state"]) for g in answer["gates"]} == {("unified", v.PASS), ("nographs", v.FAIL),
                                                                 ("kvq", v.UNDECIDED)}
    kvq = [g for g in answer["gates"] if g["arm"] == "kvq"]
    assert all(g["repeats_needed"] and g["ci_low_pct"] < 5 < g["ci_high_pct"] for g in kvq)
    pairs = {r["pair"] for r in answer["comparisons"]}
    assert pairs == {f"{a} vs slots" for a in VARIANTS}
