"""A Kineto trace without GPU work (`perflib.traces.kineto_cpu`): the model's CPU operators are its
dispatches. On a real vLLM CPU worker trace (tests/data/traces/README.md), checked against its raw events,
and on small traces of known structure."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support import DATA

from perflib import attribution
from perflib.traces import ReadMode, read_trace

VLLM = DATA / "traces" / "vllm_cpu_rank0.pt.trace.json.gz"
MODEL = re.compile(r"\): (?:_model_forward|compute_logits)$")


@pytest.fixture(scope="module")
def raw() -> dict:
    events = json.loads(gzip.decompress(VLLM.read_bytes()))["traceEvents"]
    base = json.loads(gzip.decompress(VLLM.read_bytes())).get("baseTimeNanoseconds", 0)

    def ns(e: dict) -> tuple[int, int]:
        start = round(e["ts"] * 1000) + base
        return start, start + round(e["dur"] * 1000)

    ops = [(e["name"], *ns(e), e["tid"]) for e in events if e.get("cat") == "cpu_op"]
    model = [(*ns(e), e["tid"]) for e in events if e.get("cat") == "python_function" and MODEL.search(e["name"])]
    sampler = [(*ns(e), e["tid"]) for e in events if e.get("cat") == "python_function"
               and e["name"].startswith("nn.Module: Sampler")]
    steps = [ns(e) for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("execute_")]
    return {"ops": ops, "model": model, "sampler": sampler, "steps": steps}


def _inside(t: int, tid: int, ranges: list) -> bool:
    return any(lo <= t < hi and tid == rt for lo, hi, rt in ranges)


def test_the_model_operators_are_the_dispatches_in_every_mode(raw):
    full = read_trace(VLLM, ReadMode.FULL)
    d = full.dispatches
    assert len(d) > 0 and set(d["kind"].astype(str)) == {"cpu_op"} and (d["device"] == -1).all()
    assert "vLLM's _model_forward and compute_logits ranges" in full.meta["device_work"]
    for mode in (ReadMode.LEAN, ReadMode.LEAN_IDS):
        got = read_trace(VLLM, mode).dispatches
        columns = ["kernel", "start_ns", "end_ns"] + (["stream"] if mode is ReadMode.LEAN_IDS else [])
        pd.testing.assert_frame_equal(got[columns].assign(kernel=got["kernel"].astype(str)), d[columns])
    # every dispatch lies in the model's ranges of its thread; none in the sampler's
    assert all(_inside(int(s), int(t), raw["model"]) for s, t in zip(d["start_ns"], d["stream"], strict=True))
    assert not any(_inside(int(s), int(t), raw["sampler"]) for s, t in zip(d["start_ns"], d["stream"], strict=True))


def test_top_level_operators_stand_and_compiled_calls_are_tiled_by_theirs(raw):
    d = read_trace(VLLM, ReadMode.FULL).dispatches
    rows = set(zip(d["kernel"], d["start_ns"], d["end_ns"], strict=True))
    ops = [o for o in raw["ops"] if _inside(o[1], o[3], raw["model"])]
    top = [o for o in ops if not any(p is not o and p[3] == o[3] and p[1] <= o[1] and o[2] <= p[2]
                                     and (p[1], -p[2]) < (o[1], -o[2]) for p in ops)]
    calls = [o for o in top if o[0].startswith("## ")]
    assert calls, "the vLLM trace runs a compiled graph"
    for name, start, end, _tid in top:
        if name.startswith("## "):
            continue
        assert (name, start, end) in rows  # a top-level operator is a dispatch as it stands
    for name, start, end, _ in calls:
        mine = d[(d["start_ns"] >= start) & (d["end_ns"] <= end)].sort_values("start_ns")
        assert mine["start_ns"].iloc[0] == start and mine["end_ns"].iloc[-1] == end
        assert (mine["start_ns"].to_numpy()[1:] == mine["end_ns"].to_numpy()[:-1]).all()  # tiled: no hole, no overlap
        assert (mine["kernel"] != name).any() and (mine["kernel"] == name).any()  # its operators and its own code
    assert len(d) == len(top) - len(calls) + sum(
        len(d[(d["start_ns"] >= s) & (d["end_ns"] <= e)]) for _, s, e, _ in calls)


def test_the_steps_split_into_the_model_and_the_host(raw):
    trace = read_trace(VLLM, ReadMode.LEAN)
    summary = attribution.summarize(trace, classes="pytorch-cpu")
    span = (int(trace.dispatches["start_ns"].min()), int(trace.dispatches["end_ns"].max()))
    in_span = [s for s in raw["steps"] if s[0] < span[1] and s[1] > span[0]]
    assert summary.work == "CPU operators" and summary.steps == len(in_span)
    assert summary.step_method.startswith("vLLM execute_... annotations")
    table = summary.step_table
    assert ((table["busy_ms"] > 0) & (table["gap_ms"] > 0)).all()  # every step: model work and host time
    assert np.allclose(table["busy_ms"] + table["gap_ms"], (table["end_ns"] - table["start_ns"]) / 1e6)
    classes = summary.classes.set_index("kernel_class")
    assert classes.loc["gemm", "share"] > 0.5  # the projections and the LM head: oneDNN matmuls
    assert {"attention", "compiled"} <= set(classes.index) and "other" not in classes.index


def _trace(tmp_path: Path, events: list[dict]) -> Path:
    path = tmp_path / "cpu.pt.trace.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def _op(name: str, ts: float, dur: float, tid: int = 7, cat: str = "cpu_op") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def test_without_python_ranges_every_top_level_operator_counts_and_a_call_is_split(tmp_path):
    path = _trace(tmp_path, [
        _op("aten::linear", 10, 20), _op("aten::addmm", 12, 15),  # held by linear: not a dispatch
        _op("## Call CompiledFxGraph abc ##", 40, 30), _op("_C::onednn_mm", 45, 5), _op("aten::item", 46, 1),
        _op("vllm::unified_attention_with_output", 55, 10),
        _op("aten::copy_", 100, 4, tid=8),
    ])
    trace = read_trace(path)
    got = list(zip(trace.dispatches["kernel"], trace.dispatches["start_ns"] // 1000,
                   trace.dispatches["end_ns"] // 1000, strict=True))
    assert got == [("aten::linear", 10, 30), ("## Call CompiledFxGraph abc ##", 40, 45), ("_C::onednn_mm", 45, 50),
                   ("## Call CompiledFxGraph abc ##", 50, 55), ("vllm::unified_attention_with_output", 55, 65),
                   ("## Call CompiledFxGraph abc ##", 65, 70), ("aten::copy_", 100, 104)]
    assert "the whole trace" in trace.meta["device_work"]


def test_module_ranges_choose_the_model_but_not_the_sampler(tmp_path):
    path = _trace(tmp_path, [
        _op("nn.Module: LlamaForCausalLM_0", 0, 100, cat="python_function"), _op("aten::mm", 10, 20),
        _op("nn.Module: Sampler_0", 200, 50, cat="python_function"), _op("aten::topk", 210, 10),
        _op("aten::index_select", 150, 5),  # input preparation, outside the model
    ])
    trace = read_trace(path, ReadMode.LEAN)
    assert trace.dispatches["kernel"].astype(str).tolist() == ["aten::mm"]
    assert "nn.Module ranges but the sampler's" in trace.meta["device_work"]


def test_a_trace_with_gpu_work_keeps_its_kernels(tmp_path):
    path = _trace(tmp_path, [_op("aten::mm", 0, 10), _op("ampere_gemm", 2, 5, cat="kernel")])
    trace = read_trace(path)
    assert trace.dispatches["kernel"].tolist() == ["ampere_gemm"] and "device_work" not in trace.meta
