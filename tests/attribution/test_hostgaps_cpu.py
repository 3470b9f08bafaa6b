"""What fills the host gaps on a CPU backend (`perflib.attribution.hostgaps`), from the committed real CPU
traces (tests/data/traces): a vLLM CPU worker's PyTorch trace (its model's CPU operators, no device API)
splits all of its host time into host compute, over the window, each step and the decode steps' periods;
a `perf` profile of llama-server splits its sync + host share of the decode threads' samples into sync and
host compute; launch and other API are 0, measured, with what each was measured from (`basis`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from support import DATA

from perflib import attribution
from perflib.attribution import StepCount, Window
from perflib.attribution.hostgaps import API_RECORDS, BASIS_TEXT, NO_LAUNCH, host_gaps
from perflib.traces import ReadMode, read_trace

VLLM_CPU = DATA / "traces" / "vllm_cpu_rank0.pt.trace.json.gz"
PERF = DATA / "traces" / "perf_llama_server_b4.perf-script.txt.gz"


@pytest.fixture(scope="module")
def operators():
    trace = read_trace(VLLM_CPU)
    summary = attribution.summarize(trace)
    return trace, summary, host_gaps(trace, summary.window, summary.step_table, summary.decode_periods())


def test_a_cpu_operator_traces_host_time_is_all_host_compute(operators) -> None:
    trace, summary, split = operators
    assert summary.work == attribution.WORK_CPU_OPS and not len(trace.api)  # no device API to split by
    assert split.measured and split.basis == attribution.WORK_CPU_OPS
    assert split.gap_ns == round(summary.gap_ms * 1e6) and split.host_compute_ns == split.gap_ns > 0
    assert split.sync_ns == split.launch_ns == split.other_api_ns == 0
    row = split.row(summary.window_ms, summary.steps)
    assert row["basis"] == attribution.WORK_CPU_OPS and row["note"] == "" and row["launch_calls"] == 0
    assert row["host_compute_gap_share"] == 1.0 and row["launch_ms"] == 0.0


def test_each_step_and_the_decode_periods_are_split_the_same_way(operators) -> None:
    _, summary, split = operators
    steps = split.with_steps(summary.step_table)
    assert len(steps) == summary.steps and (steps[["sync_ms", "launch_ms", "other_api_ms"]] == 0).all().all()
    assert np.allclose(steps["host_compute_ms"], steps["gap_ms"], rtol=0, atol=1e-6)
    decode = summary.decode_columns()
    over = split.periods
    assert over is not None and over["steps"] == decode["decode_steps"] > 0
    assert over["host_compute_ns"] == over["gap_ns"] and over["launch_ns"] == 0
    assert over["gap_ns"] / 1e6 == pytest.approx(decode["decode_gap_ms"])


def test_a_sampled_window_splits_its_sync_and_host_samples() -> None:
    trace = read_trace(PERF, ReadMode.LEAN)
    summary = attribution.summarize(trace, classes="llamacpp-cpu", steps=StepCount(40, "request records"))
    s = summary.sampling
    split = host_gaps(trace, summary.window, summary.step_table, summary.decode_periods(), sampling=s)
    assert split.measured and split.basis == attribution.WORK_SAMPLES and s.sync > 0 and s.host > 0
    window_ns = summary.window.end_ns - summary.window.start_ns
    assert split.gap_ns / 1e6 == pytest.approx(summary.gap_ms, abs=1e-6)
    assert split.sync_ns == pytest.approx(window_ns * s.sync / s.samples, abs=1)
    assert split.host_compute_ns == pytest.approx(window_ns * s.host / s.samples, abs=1)
    assert split.sync_ns + split.host_compute_ns == split.gap_ns and split.launch_ns == split.other_api_ns == 0
    row = split.row(summary.window_ms, summary.steps)
    assert row["sync_ms_per_step"] == pytest.approx(split.sync_ns / 1e6 / 40)
    without = host_gaps(trace, summary.window)  # the roles need the class table: never a silent zero
    assert not without.measured and "TraceSummary.sampling" in without.note


def test_a_gpu_trace_keeps_its_api_basis_and_each_basis_says_what_it_is_measured_from() -> None:
    stand_in = read_trace(VLLM_CPU)
    one = stand_in.dispatches.iloc[:1].assign(kind="kernel")  # a GPU kernel among them: not a CPU backend
    gpu = replace(stand_in, dispatches=one)
    split = host_gaps(gpu, Window(int(one["start_ns"].iloc[0]), int(one["end_ns"].iloc[0]) + 1000))
    assert not split.measured and split.basis == API_RECORDS and split.row()["basis"] == ""
    assert NO_LAUNCH in BASIS_TEXT[attribution.WORK_CPU_OPS] and NO_LAUNCH in BASIS_TEXT[attribution.WORK_SAMPLES]
    assert "host API records" in BASIS_TEXT[API_RECORDS]
