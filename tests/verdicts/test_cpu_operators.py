"""The host-gap candidates on a CPU backend whose trace holds the model's CPU operators (a vLLM CPU worker's
PyTorch trace, tests/data/traces): no device API exists, so the time between the operators is host compute
(its share of the decode steps), sync and launch are 0, each sentence saying what it was measured from and,
for a 0, why; decided on the playbook's own thresholds. The tables are attributed from the real trace as
`perflib.derive` writes them."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest
from support import DATA

from perflib import attribution
from perflib import verdicts as v
from perflib.config import read_playbook
from perflib.derive import DerivedTables, normalize
from perflib.traces import read_trace

TRACE = DATA / "traces" / "vllm_cpu_rank0.pt.trace.json.gz"
KEYS = {"campaign": "t", "arm": "a", "backend": "cpu", "batch": 4, "context": 256, "repeat": 1}


@pytest.fixture(scope="module")
def attributed() -> tuple[DerivedTables, attribution.TraceSummary]:
    trace = read_trace(TRACE)
    s = attribution.summarize(trace)
    split = attribution.host_gaps(trace, s.window, s.step_table, s.decode_periods(), sampling=s.sampling)
    trace_row = {**KEYS, "dispatches": s.dispatches, "window_ms": s.window_ms, "busy_ms": s.busy_ms,
                 "gap_ms": s.gap_ms, "busy_share": s.busy_share, "steps": s.steps,
                 "busy_ms_per_step": s.busy_ms_per_step, "gap_ms_per_step": s.gap_ms_per_step,
                 "step_method": s.step_method, "steps_guessed": s.steps_guessed, **s.decode_columns(), **s.extras}
    runs = normalize("runs", pd.DataFrame([{**KEYS, "status": "complete"}]))
    return DerivedTables(runs=runs, trace_runs=normalize("trace_runs", pd.DataFrame([trace_row])),
                         host_gaps=normalize("host_gaps", pd.DataFrame([{**KEYS, **split.row(s.window_ms, s.steps)}]))
                         ), s


def _decide(tables: DerivedTables, cid: str) -> v.Verdict:
    (cand,) = [c for c, _ in read_playbook("batched-decode") if c.id == cid]
    ctx = v.Context(arms=("a",), backends=("cpu",), batches=(4,), contexts=(256,), profilers={"cpu": "torch"})
    (verdict,) = v.evaluate([replace(cand, batch=4, context=256)], tables, ctx)
    return verdict


def test_host_compute_is_the_time_between_the_operators_over_the_decode_steps(attributed) -> None:
    tables, summary = attributed
    decode = summary.decode_columns()
    verdict = _decide(tables, "host-compute")
    assert verdict.value == pytest.approx(decode["decode_gap_ms"] / decode["decode_window_ms"])
    assert verdict.outcome == (v.CONFIRMED if verdict.value >= 0.2 else v.RULED_OUT if verdict.value < 0.05
                               else v.INCONCLUSIVE)
    assert "per decode step" in verdict.text and "the time between the model's CPU operators" in verdict.text
    assert "measured from the model's CPU operators in the trace, no device API" in verdict.text


@pytest.mark.parametrize(("cid", "why"), [
    ("launch-bound", "no kernel launches on a CPU backend: the CPU runs the model's operators itself"),
    ("sync-bound", "no device to wait for on a CPU backend: the CPU runs the model's operators itself")])
def test_launch_and_sync_are_ruled_out_at_zero_saying_why(attributed, cid: str, why: str) -> None:
    tables, _ = attributed
    verdict = _decide(tables, cid)
    assert verdict.outcome == v.RULED_OUT and verdict.value == 0.0
    assert why in verdict.text and "measured from the model's CPU operators" in verdict.text


def test_the_host_gap_evidence_says_what_fills_it(attributed) -> None:
    tables, _ = attributed
    verdict = _decide(tables, "host-gaps")
    assert verdict.outcome != v.NOT_MEASURED
    assert " = sync and copy wait 0.0 + launch 0.0 + other API 0.0 + host compute " in verdict.text
