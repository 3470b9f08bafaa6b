"""Steps from what the trace marks: the engines' own step annotations on public vLLM and SGLang traces
(counted here from the raw JSON, not through perflib), ProfilerStep#, named ranges, host ranges moved
onto the kernels they launched."""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pandas as pd
import pytest
from support import fixture
from synthetic import dispatch_frame, trace_of

from perflib import attribution as attr
from perflib.errors import PerflibError
from perflib.traces.trace import Trace

EXTERNAL = ("external", "kineto")


def raw_events(name: str) -> list[dict]:
    with gzip.open(fixture(*EXTERNAL, name), "rt") as f:
        return json.load(f)["traceEvents"]


def annotations(events: list[dict], pattern: str) -> list[dict]:
    """Complete (`ph: X`) annotation events whose name matches, on the host or the GPU stream."""
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in ("user_annotation", "gpu_user_annotation")
            and re.search(pattern, str(e.get("name", "")))]


def launched_inside(events: list[dict], range_event: dict) -> list[dict]:
    """GPU events whose launching runtime call (same correlation) starts inside the range, on its thread."""
    lo, hi = range_event["ts"], range_event["ts"] + range_event["dur"]
    calls = {e["args"]["correlation"] for e in events if e.get("cat") == "cuda_runtime"
             and e.get("tid") == range_event["tid"] and lo <= e["ts"] < hi and "correlation" in e.get("args", {})}
    return [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
            and e.get("args", {}).get("correlation") in calls]


@pytest.mark.parametrize(("name", "pattern", "family"), [
    ("tracelens_sglang_Qwen3-8B_decode_mi300x.json.gz", r"^step\[", "SGLang step[...] annotations"),
    ("tracelens_vllm_decode_full_graph_execution_mi300x.json.gz", r"^execute_", "vLLM execute_... annotations"),
])
def test_engine_step_annotations_of_public_traces(name: str, pattern: str, family: str) -> None:
    """Each trace holds one engine step, marked by the engine's own host annotation and no ProfilerStep#;
    before, perflib fell back to the rhythm and counted the layers (36 for Qwen3-8B, 12 for gpt-oss)."""
    from perflib.traces import read_trace

    events = raw_events(name)
    marked = annotations(events, pattern)
    assert annotations(events, r"ProfilerStep") == []
    assert all(e["cat"] == "user_annotation" for e in marked)  # host side only: a ROCm build
    s = attr.summarize(read_trace(fixture(*EXTERNAL, name)))
    assert s.steps == len(marked) == 1
    assert s.step_method == f"{family} (host ranges, on the kernels they launched)"
    # the step is the GPU span of what the annotation launched, not the host range (which, for the
    # vLLM graph replay, ends before the first kernel starts)
    gpu = launched_inside(events, marked[0])
    assert gpu
    table = s.step_table
    base = int(s.window.start_ns) - int(round(min(e["ts"] for e in events if e.get("cat") in ("kernel", "gpu_memcpy")) * 1000))
    first = int(round(min(e["ts"] for e in gpu) * 1000)) + base
    last = int(round(max(e["ts"] + e["dur"] for e in gpu) * 1000)) + base
    assert abs(int(table["start_ns"].iloc[0]) - first) <= 2 and abs(int(table["end_ns"].iloc[0]) - last) <= 2
    starting = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                and first <= int(round(e["ts"] * 1000)) + base < last]
    assert int(table["dispatches"].iloc[0]) == len(starting) >= len(gpu)
    assert s.busy_ms_per_step == pytest.approx(s.busy_ms)


def test_sglang_trace_holds_two_nested_families_and_counts_one_step() -> None:
    """The SGLang trace wraps `step[DECODE bs=32]` in a vLLM-style `execute_...` range: families are
    not mixed, so the step is counted once, by SGLang's own annotation."""
    events = raw_events("tracelens_sglang_Qwen3-8B_decode_mi300x.json.gz")
    outer, inner = annotations(events, r"^execute_"), annotations(events, r"^step\[")
    assert len(outer) == len(inner) == 1
    assert outer[0]["ts"] <= inner[0]["ts"] and inner[0]["ts"] + inner[0]["dur"] <= outer[0]["ts"] + outer[0]["dur"]
    from perflib.traces import read_trace

    trace = read_trace(fixture(*EXTERNAL, "tracelens_sglang_Qwen3-8B_decode_mi300x.json.gz"))
    assert attr.summarize(trace).steps == 1
    named = attr.summarize(trace, step_marker=r"^execute_")  # a campaign naming the outer range
    assert named.steps == 1 and named.step_method.startswith("profiler.step_marker /^execute_/ ranges (host")


def test_profiler_step_of_a_public_h100_trace() -> None:
    events = raw_events("tracelens_h100_Qwen1.5-0.5B-Chat__1016005.json.gz")
    gpu_steps = [e for e in annotations(events, r"^ProfilerStep#") if e["cat"] == "gpu_user_annotation"]
    from perflib.traces import read_trace

    s = attr.summarize(read_trace(fixture(*EXTERNAL, "tracelens_h100_Qwen1.5-0.5B-Chat__1016005.json.gz")))
    assert s.steps == len(gpu_steps) == 1 and s.step_method == "ProfilerStep# markers (GPU ranges)"


def engine_trace(steps: int, name: str = "step[DECODE bs=4]", gpu_copy: bool = False,
                 idle_step: bool = False) -> tuple[Trace, list[tuple[int, int]]]:
    """A synthetic engine: per step a host annotation `name` (same name every step) launching 6
    kernels that run 2 ms after their launch (a deep queue); `gpu_copy`: Kineto's GPU-side copy of
    each range too; `idle_step`: one more annotation at the end that launches nothing."""
    kernels, api, markers, truth = [], [], [], []
    t, corr = 10**12, 0
    for _ in range(steps):
        host_start = t
        first = None
        for _ in range(6):
            corr += 1
            api.append(("cudaLaunchKernel", t, t + 5_000, 7, 7, corr, "cuda_runtime"))
            k0 = t + 2_000_000
            kernels.append(("gemv_kernel", k0, k0 + 50_000, corr))
            first = k0 if first is None else first
            t += 20_000
        truth.append((first, kernels[-1][2]))
        markers.append((name, host_start, t, 7, 7, "user_annotation"))
        if gpu_copy:
            markers.append((name, first, kernels[-1][2], 0, 7, "gpu_user_annotation"))
        t += 600_000
    if idle_step:
        markers.append((name, t, t + 100_000, 7, 7, "user_annotation"))
    frame = dispatch_frame([k[:3] for k in kernels])
    frame["correlation_id"] = np.array([k[3] for k in kernels], dtype=np.int64)
    api_frame = pd.DataFrame(api, columns=["name", "start_ns", "end_ns", "pid", "tid", "correlation_id", "domain"])
    mk = pd.DataFrame(markers, columns=["name", "start_ns", "end_ns", "pid", "tid", "domain"]).assign(source="synthetic")
    trace = trace_of(frame, "realtime", markers=mk.sort_values("start_ns", kind="stable").reset_index(drop=True))
    return Trace(trace.dispatches, api_frame.assign(source="synthetic"), trace.markers, "realtime", "synthetic",
                 "<synthetic>"), truth


def test_repeated_engine_annotations_each_give_a_step_on_their_kernels() -> None:
    """SGLang names every decode step alike: each host range is a step (the old rule kept one range per
    name), placed on the kernels it launched 2 ms later, not on the host range."""
    trace, truth = engine_trace(steps=9, idle_step=True)
    s = attr.summarize(trace)
    assert s.steps == 9  # the trailing range launched nothing: no step of the GPU
    assert s.step_method == "SGLang step[...] annotations (host ranges, on the kernels they launched)"
    assert list(zip(s.step_table["start_ns"], s.step_table["end_ns"], strict=True)) == truth
    assert (s.step_table["dispatches"] == 6).all()


def test_gpu_copies_are_used_and_their_host_ranges_dropped() -> None:
    trace, truth = engine_trace(steps=5, name="execute_model", gpu_copy=True)
    s = attr.summarize(trace)
    assert s.steps == 5 and s.step_method == "vLLM execute_... annotations (GPU ranges)"
    assert list(zip(s.step_table["start_ns"], s.step_table["end_ns"], strict=True)) == truth


def test_named_range_comes_first_and_counts_and_rhythm_come_after_marks() -> None:
    """The order: a named range, the engine's annotations, then a count from outside, then the rhythm."""
    trace, _ = engine_trace(steps=4, name="decode_step")
    unnamed = attr.summarize(trace, steps=attr.StepCount(17, "request records (decode window)"))
    assert unnamed.steps == 17 and unnamed.step_method == "request records (decode window)"
    named = attr.summarize(trace, steps=attr.StepCount(17, "request records (decode window)"), step_marker=r"^decode_step$")
    assert named.steps == 4 and named.step_method == "profiler.step_marker /^decode_step$/ ranges (host ranges, on the kernels they launched)"
    assert attr.summarize(trace, steps=r"^decode_step$").step_method.startswith("--steps /^decode_step$/ ranges")
    assert attr.summarize(trace, steps=11).step_method == "given"  # a count given outright overrides


def test_nested_ranges_of_one_family_are_one_step() -> None:
    trace, truth = engine_trace(steps=3)
    outer = trace.markers.assign(start_ns=trace.markers["start_ns"] - 1_000, end_ns=trace.markers["end_ns"] + 1_000)
    both = pd.concat([outer, trace.markers], ignore_index=True).sort_values("start_ns", kind="stable")
    nested = Trace(trace.dispatches, trace.api, both.reset_index(drop=True), "realtime", "synthetic", "<synthetic>")
    assert attr.summarize(nested).steps == 3


def test_window_of_a_trace_only_capture_spans_host_ranges_and_their_kernels() -> None:
    trace, truth = engine_trace(steps=3)
    window = attr.window_from_step_annotations(trace)
    assert window.start_ns == int(trace.markers["start_ns"].min()) and window.end_ns == truth[-1][1]
    assert window.label == "span of the SGLang step[...] annotations"
    with pytest.raises(PerflibError, match="no step ranges"):
        attr.window_from_step_annotations(trace_of(trace.dispatches))


@pytest.mark.parametrize("names", [
    ["execute_context_0(0)_generation_4(4)"] * 5,  # vLLM V1: decode only, every step named alike
    [f"execute_context_{c}({t})_generation_{g}({g})" for c, t, g in
     ((1, 512, 3), (0, 0, 4), (1, 37, 3), (0, 0, 4), (0, 0, 4))],  # prefill beside decode in some steps
    ["execute_4_context_0(sq0sk0sqsq0sqsk0)_generation_4(sq4sk1040sqsq4sqsk1040)"] * 5,  # the earlier form
    ["execute_model"] * 5,
])
def test_vllm_step_ranges_of_every_form_are_one_step_each(names: list[str]) -> None:
    trace, truth = engine_trace(steps=5, name="placeholder")
    markers = trace.markers.assign(name=names)  # one range a step, in step order
    named = Trace(trace.dispatches, trace.api, markers, "realtime", "synthetic", "<synthetic>")
    s = attr.summarize(named)
    assert s.steps == 5 and s.step_method.startswith("vLLM execute_... annotations") and not s.steps_guessed
    assert list(zip(s.step_table["start_ns"], s.step_table["end_ns"], strict=True)) == truth


def test_a_range_that_merely_starts_with_execute_is_no_vllm_step() -> None:
    trace, _ = engine_trace(steps=5, name="execute_context_switch")
    s = attr.summarize(trace)
    assert not (s.step_method or "").startswith("vLLM")
