"""Verdicts on a sampling profile (`perf` samples of a CPU server): each share is the pooled count of the
repeats' samples, labelled a sampled estimate with its sample count, rate and 95% interval, never an
exact figure. The tables are attributed from the real llama-server capture (tests/data/traces)."""

from __future__ import annotations

import re
from dataclasses import replace

import pandas as pd
import pytest
from support import DATA

from perflib import attribution
from perflib import verdicts as v
from perflib.attribution import StepCount, Window, interval
from perflib.config import CandidateSpec, read_playbook
from perflib.derive import DerivedTables, normalize
from perflib.traces import ReadMode, read_trace

SAMPLE = DATA / "traces" / "perf_llama_server_b4.perf-script.txt.gz"
KEYS = {"campaign": "t", "arm": "a", "backend": "cpu", "context": 256}


def _tables() -> tuple[DerivedTables, list]:
    """Two repeats at batch 4 (the two halves of the real capture) and their summaries, as derive writes them."""
    trace = read_trace(SAMPLE, ReadMode.LEAN)
    ends = trace.dispatches["end_ns"]
    start, end = int(ends.min()), int(ends.max()) + 1
    half = (start + end) // 2
    rows, classes, summaries = [], [], []
    for repeat, (lo, hi) in enumerate(((start, half), (half, end)), 1):
        s = attribution.summarize(trace, window=Window(lo, hi), classes="llamacpp-cpu", steps=StepCount(30, "records"))
        keys = {**KEYS, "batch": 4, "repeat": repeat}
        rows.append({**keys, "dispatches": s.dispatches, "window_ms": s.window_ms, "busy_ms": s.busy_ms,
                     "gap_ms": s.gap_ms, "busy_share": s.busy_share, "steps": s.steps,
                     "busy_ms_per_step": s.busy_ms_per_step, "gap_ms_per_step": s.gap_ms_per_step,
                     "step_method": s.step_method, "steps_guessed": False, **s.extras})
        classes.append(s.classes.assign(**keys))
        summaries.append(s)
    runs = normalize("runs", pd.DataFrame([{**KEYS, "batch": 4, "repeat": r, "status": "complete",
                                            "decode_step_ms": 30.0} for r in (1, 2)]))
    return DerivedTables(runs=runs, trace_runs=normalize("trace_runs", pd.DataFrame(rows)),
                         classes=normalize("classes", pd.concat(classes, ignore_index=True))), summaries


def _ctx() -> v.Context:
    return v.Context(arms=("a",), backends=("cpu",), batches=(1, 4), contexts=(256,), profilers={"cpu": "perf"})


def _cand(measure: str, confirmed: str, ruled_out: str, **kw) -> CandidateSpec:
    return CandidateSpec(id=measure, measure=measure, confirmed=confirmed, ruled_out=ruled_out, batch=4, **kw)


def test_host_gaps_on_the_cpu_are_the_pooled_sync_and_host_share_labelled_an_estimate():
    tables, summaries = _tables()
    (verdict,) = v.evaluate([_cand("gap_share", ">= 30%", "< 15%")], tables, _ctx())
    n = sum(s.sampling.samples for s in summaries)
    rest = sum(s.sampling.sync + s.sampling.host for s in summaries)
    assert verdict.value == pytest.approx(rest / n)  # pooled, not the median of two shares
    lo, hi = interval(rest, n)
    assert f"of {n:,} samples on the decode threads over 2 repeats" in verdict.text
    assert "(sampled estimate, cpu-clock 999 Hz)" in verdict.text
    assert f"95% interval {100 * lo:.1f}-{100 * hi:.1f}%" in verdict.text
    sync = sum(s.sampling.sync for s in summaries) / n
    assert f"sync {100 * sync:.1f}%" in verdict.text and verdict.outcome != v.NOT_MEASURED


def test_a_class_share_on_the_cpu_is_its_samples_over_the_decode_threads():
    tables, summaries = _tables()
    (verdict,) = v.evaluate([_cand("class_share", ">= 20%", "< 5%", classes=("gemm", "dequantize", "mul_mat_q"))],
                            tables, _ctx())
    n = sum(s.sampling.samples for s in summaries)
    k = sum(int(s.classes.loc[s.classes["kernel_class"].isin(["gemm", "dequantize"]), "count"].sum())
            for s in summaries)
    assert k > 0 and verdict.value == pytest.approx(k / n)
    assert re.search(rf"gemm\+dequantize\+mul_mat_q {100 * k / n:.1f}% \(95% interval [\d.]+-[\d.]+%\) of {n:,} "
                     "samples", verdict.text)


def test_class_scaling_on_the_cpu_names_the_samples_at_each_batch():
    base = {**KEYS, "step_method": "records", "steps_guessed": False, "work": "CPU samples", "sample_hz": 999.0,
            "sample_event": "cpu-clock"}
    trace = normalize("trace_runs", pd.DataFrame([
        {**base, "batch": 1, "repeat": 1, "window_ms": 300.0, "steps": 100, "samples": 600, "compute_samples": 500,
         "sync_samples": 60, "host_samples": 40},
        {**base, "batch": 4, "repeat": 1, "window_ms": 800.0, "steps": 100, "samples": 1600,
         "compute_samples": 1200, "sync_samples": 300, "host_samples": 100}]))
    classes = normalize("classes", pd.DataFrame([
        {**KEYS, "batch": 1, "repeat": 1, "kernel_class": "gemv", "time_ms": 300.0 * 450 / 600, "count": 450},
        {**KEYS, "batch": 4, "repeat": 1, "kernel_class": "gemv", "time_ms": 800.0 * 40 / 1600, "count": 40},
        {**KEYS, "batch": 4, "repeat": 1, "kernel_class": "gemm", "time_ms": 800.0 * 1100 / 1600, "count": 1100}]))
    for frame in (classes,):
        frame["ms_per_step"] = frame["time_ms"] / 100
    runs = normalize("runs", pd.DataFrame([{**KEYS, "batch": b, "repeat": 1, "status": "complete"} for b in (1, 4)]))
    (verdict,) = v.evaluate([_cand("class_scaling", ">= 0.75", "<= 0.5", classes=("gemv",))],
                            DerivedTables(runs=runs, trace_runs=trace, classes=classes), _ctx())
    assert verdict.outcome == v.RULED_OUT and verdict.value == pytest.approx((0.2 / 2.25) / 4)
    assert "sampled estimate, cpu-clock 999 Hz: 40 of 1,600 samples at batch 4, 450 of 600 at batch 1" in verdict.text


def _playbook(cid: str) -> CandidateSpec:
    (cand,) = [c for c, _ in read_playbook("batched-decode") if c.id == cid]
    return replace(cand, batch=4)


def test_sync_and_host_compute_on_the_cpu_are_the_pooled_sync_and_host_shares_labelled_estimates():
    tables, summaries = _tables()
    n = sum(s.sampling.samples for s in summaries)
    for cid, role in (("sync-bound", "sync"), ("host-compute", "host")):
        (verdict,) = v.evaluate([_playbook(cid)], tables, _ctx())
        k = sum(getattr(s.sampling, role) for s in summaries)
        lo, hi = interval(k, n)
        assert k > 0 and verdict.value == pytest.approx(k / n) and verdict.outcome != v.NOT_MEASURED
        assert f"{100 * k / n:.1f}% (95% interval {100 * lo:.1f}-{100 * hi:.1f}%) of {n:,} samples on the decode " \
               "threads over 2 repeats (sampled estimate, cpu-clock 999 Hz)" in verdict.text


def test_launch_bound_on_the_cpu_is_ruled_out_at_zero_saying_why_and_from_what():
    tables, summaries = _tables()
    (verdict,) = v.evaluate([_playbook("launch-bound")], tables, _ctx())
    assert verdict.outcome == v.RULED_OUT and verdict.value == 0.0
    assert "no kernel launches on a CPU backend: the CPU runs the model's operators itself" in verdict.text
    n = sum(s.sampling.samples for s in summaries)
    assert f"measured from perf samples ({n:,} on the decode threads over 2 repeats, sampled estimate" in verdict.text
