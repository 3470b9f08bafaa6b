"""Interleaved prefill from the engine's own step phases (`step_prefill_share`), the fallback where the client
has no decode window: its arithmetic on a phases table, and on the real vLLM 0.32 CPU campaign, whose batch-4
streams reached the client in one burst (data/raw/vllm-cpu)."""

from __future__ import annotations

import pandas as pd
import pytest
from support import REPO

from perflib import derive
from perflib import verdicts as v
from perflib.campaign import load_campaign
from perflib.derive import DerivedTables
from perflib.verdicts.measures import MEASUREMENTS, Scope

KEYS = {"campaign": "c", "arm": "a", "backend": "b", "batch": 4, "context": 128, "status": "complete"}


def _phases(rows: list[tuple[int, str, float]]) -> DerivedTables:
    frame = pd.DataFrame([{**KEYS, "repeat": r, "phase": p, "window_ms": ms} for r, p, ms in rows])
    trace = pd.DataFrame([{**KEYS, "repeat": r} for r in sorted({r for r, _, _ in rows})])
    return DerivedTables(phases=frame, trace_runs=trace)


def test_the_share_is_prefill_and_mixed_periods_over_all_median_of_the_repeats():
    tables = _phases([(1, "prefill", 30.0), (1, "mixed", 10.0), (1, "decode", 60.0),
                      (2, "prefill", 5.0), (2, "decode", 90.0), (2, "empty", 5.0),
                      (3, "decode", 100.0)])
    got = MEASUREMENTS["step_prefill_share"].func(tables, Scope(arm="a", backend="b", batch=4, context=128))
    assert got.value == pytest.approx(0.05)  # repeats give 0.40, 0.05 and 0.0: the median
    assert "5.0 of 100.0 ms" in got.text and "median of 3" in got.text


def test_steps_with_no_phase_are_not_measured_and_say_why():
    tables = DerivedTables(trace_runs=pd.DataFrame([{**KEYS, "repeat": 1}]))
    got = MEASUREMENTS["step_prefill_share"].func(tables, Scope(arm="a", backend="b", batch=4, context=128))
    assert got.value is None and "name no phase" in got.why


def test_the_vllm_page_decides_interleaved_prefill_from_the_engine_steps_where_the_stream_was_coalesced():
    campaign = load_campaign(REPO / "campaigns" / "vllm-cpu.yaml")
    tables = derive.build(campaign)
    coalesced = tables.runs[(tables.runs["arm"] == "compiled") & (tables.runs["batch"] == 4)]
    assert coalesced["prefill_share"].isna().all()  # the client saw no decode window
    found = [x for x in v.evaluate(campaign.candidates, tables, v.Context.of(campaign))
             if x.candidate == "interleaved-prefill" and x.scope.startswith("arm compiled (trace from compiled-torch),") and "batch 4" in x.scope]
    assert found and found[0].measure == "step_prefill_share" and found[0].outcome != v.NOT_MEASURED
    phases = tables.phases[(tables.phases["arm"] == "compiled-torch") & (tables.phases["batch"] == 4)]
    share = [float(g.loc[g["phase"].isin(["prefill", "mixed"]), "window_ms"].sum() / g["window_ms"].sum())
             for _, g in phases.groupby("repeat")]
    assert found[0].value == pytest.approx(sorted(share)[len(share) // 2])
