"""Steps by phase (issue 27 item 6): prefill and decode steps told apart where the engine names them,
per-step figures per phase, `--steps REGEX` figures inside the matched steps only, a pattern that
matches nothing an error, a capture without decode steps said so, vLLM's Python-frame steps read.

Synthetic captures are written as Kineto JSON (`perflib.traces.writers`) and read back through the
reader; every expected figure is computed here from how the capture was built (`synthetic.engine_steps`)
or from the raw JSON of the public traces, never copied from perflib's output."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest
from support import fixture
from synthetic import SGLANG_DECODE, SGLANG_EXTEND, VLLM_FRAME, engine_steps, union_ns

from perflib import attribution as attr
from perflib.attribution import phases
from perflib.cli import main
from perflib.errors import PerflibError
from perflib.traces import ReadMode, read_trace
from perflib.traces.writers import write_kineto_json

EXTERNAL = ("external", "kineto")
SGLANG_MIX = [SGLANG_EXTEND, SGLANG_EXTEND, SGLANG_DECODE, SGLANG_EXTEND, SGLANG_DECODE, SGLANG_DECODE,
              SGLANG_EXTEND, SGLANG_DECODE, SGLANG_EXTEND, SGLANG_DECODE, SGLANG_EXTEND, SGLANG_DECODE,
              SGLANG_DECODE, SGLANG_EXTEND, SGLANG_DECODE, SGLANG_EXTEND]
"""8 extend and 8 decode steps, interleaved, as the SGLang bs16 capture of issue 27 holds them."""


# ------------------------------------------------------------------------------ independent arithmetic


def spans(truth: list[dict]) -> list[tuple[int, int]]:
    """Each step on the GPU: first start to last end of the kernels its range launched."""
    return [(min(s for s, _ in t["kernels"]), max(e for _, e in t["kernels"])) for t in truth]


def write(tmp_path: Path, names: list[str], cat: str = "user_annotation", long_phase: str = "EXTEND",
          seed: int = 0) -> tuple[Path, list[tuple[int, int]], list[tuple[int, int]], list[dict]]:
    frame, events, truth = engine_steps(names, seed=seed, cat=cat, long_phase=long_phase)
    path = write_kineto_json(frame, tmp_path / "engine.json.gz", events=events)
    every = list(zip(frame["start_ns"].tolist(), frame["end_ns"].tolist(), strict=True))
    return path, every, spans(truth), truth


# ------------------------------------------------------------------------------ names


@pytest.mark.parametrize(("name", "phase"), [
    (SGLANG_EXTEND, "prefill"),
    (SGLANG_DECODE, "decode"),
    ("step[DECODE bs=32]", "decode"),  # the public SGLang MI300X trace
    ("step[MIXED bs=4]", "mixed"),
    ("step[IDLE bs=0]", "empty"),
    ("step[TARGET_VERIFY bs=4]", ""),  # a speculative mode: no phase read into it
    ("execute_context_1(888_788544)_generation_0(0)", "prefill"),  # issue 27: missed before
    ("execute_context_0(0)_generation_4(4)", "decode"),
    ("execute_context_2(512)_generation_3(3)", "mixed"),
    ("execute_context_0(0)_generation_0(0)", "empty"),
    ("execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk32785sqsq32sqsk32785)", "decode"),  # public
    ("execute_model", ""),
    (VLLM_FRAME, ""),
    ("ProfilerStep#3", ""),
])
def test_phase_is_what_the_engine_names(name: str, phase: str) -> None:
    assert phases.phase_of(name) == phase


def test_vllm_steps_with_anything_inside_the_parentheses_are_steps(tmp_path: Path) -> None:
    """`execute_context_1(888_788544)_generation_0(0)` gave no step before (digits only were taken)."""
    names = (["execute_context_1(888_788544)_generation_0(0)"] * 2 + ["execute_context_0(0)_generation_16(16)"] * 3
             + ["execute_context_1(888_788544)_generation_15(15)", "execute_context_0(0)_generation_0(0)"])
    path, _, truth_spans, _ = write(tmp_path, names, long_phase="context_1(")
    s = attr.summarize(read_trace(path))
    assert s.steps == len(names) and s.step_method.startswith("vLLM execute_... annotations") and not s.steps_guessed
    assert list(zip(s.step_table["start_ns"], s.step_table["end_ns"], strict=True)) == truth_spans
    assert s.step_table["phase"].tolist() == ["prefill"] * 2 + ["decode"] * 3 + ["mixed", "empty"]
    assert dict(zip(s.phases["phase"], s.phases["steps"], strict=True)) == {"prefill": 2, "mixed": 1, "decode": 3,
                                                                             "empty": 1}
    assert s.decode_columns()["prefill_steps"] == 3 and s.decode_columns()["decode_steps"] == 3


# ------------------------------------------------------------------------------ per phase


@pytest.mark.parametrize("mode", [ReadMode.FULL, ReadMode.LEAN])
def test_sglang_capture_gives_each_phase_its_own_figures(tmp_path: Path, mode: ReadMode) -> None:
    path, every, truth_spans, truth = write(tmp_path, SGLANG_MIX)
    s = attr.summarize(read_trace(path, mode))
    assert s.steps == 16 and s.step_method == "SGLang step[...] annotations (host ranges, on the kernels they launched)"
    expected_phase = ["prefill" if "EXTEND" in t["name"] else "decode" for t in truth]
    assert s.step_table["phase"].tolist() == expected_phase
    # each step's period: from the previous step's end (the host preparing it) to its own end
    lo = [truth_spans[0][0]] + [end for _, end in truth_spans[:-1]]
    table = s.phases.set_index("phase")
    assert list(table.index) == ["prefill", "decode"]
    for phase in ("prefill", "decode"):
        mine = [k for k, p in enumerate(expected_phase) if p == phase]
        period = sum(truth_spans[k][1] - lo[k] for k in mine)
        busy = sum(union_ns(every, lo[k], truth_spans[k][1]) for k in mine)
        span = sum(truth_spans[k][1] - truth_spans[k][0] for k in mine)
        starting = sum(1 for k in mine for st, _ in every if lo[k] <= st < truth_spans[k][1])
        row = table.loc[phase]
        assert row["steps"] == len(mine) == 8
        assert row["step_ms"] == pytest.approx(period / 8 / 1e6, abs=1e-9)
        assert row["busy_ms_per_step"] == pytest.approx(busy / 8 / 1e6, abs=1e-9)
        assert row["gap_ms_per_step"] == pytest.approx((period - busy) / 8 / 1e6, abs=1e-9)
        assert row["span_ms_per_step"] == pytest.approx(span / 8 / 1e6, abs=1e-9)
        assert row["dispatches_per_step"] == starting / 8
    # a decode step is ~5 ms of kernels, an extend step ~28 ms: the all-step average is neither
    assert table.loc["decode", "busy_ms_per_step"] < s.busy_ms_per_step < table.loc["prefill", "busy_ms_per_step"]
    decode = s.decode_columns()
    assert (decode["decode_steps"], decode["prefill_steps"], decode["phase_note"]) == (8, 8, "")
    assert decode["decode_gap_ms_per_step"] == table.loc["decode", "gap_ms_per_step"]
    # the periods tile the steps' time: from the first step's start to the last step's end
    assert table["window_ms"].sum() == pytest.approx((truth_spans[-1][1] - truth_spans[0][0]) / 1e6, abs=1e-9)


def test_a_capture_without_a_decode_step_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, *_ = write(tmp_path, [SGLANG_EXTEND] * 8)
    s = attr.summarize(read_trace(path))
    assert s.phase_note == "no decode step in this capture: 8 prefill steps"
    assert s.decode_columns()["decode_steps"] == 0 and s.decode_columns()["decode_busy_ms_per_step"] is None
    assert main(["trace", "summary", str(path)]) == 0
    out = capsys.readouterr().out
    assert "no decode step in this capture: 8 prefill steps" in out and "steps by phase" in out
    assert main(["trace", "summary", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["phase_note"] == "no decode step in this capture: 8 prefill steps"
    assert [p["phase"] for p in doc["phases"]] == ["prefill"] and doc["decode"]["decode_steps"] == 0


def test_steps_of_no_phase_give_no_phase_table(tmp_path: Path) -> None:
    path, *_ = write(tmp_path, ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"], long_phase="none")
    s = attr.summarize(read_trace(path))
    assert s.steps == 3 and len(s.phases) == 0 and s.phase_note == ""
    assert all(v is None for v in s.decode_columns().values())


# ------------------------------------------------------------------------------ --steps REGEX


@pytest.mark.parametrize("how", ["steps", "step_marker"])
def test_a_named_pattern_gives_figures_over_the_matched_steps_only(tmp_path: Path, how: str) -> None:
    """Issue 27: `--steps 'step\\[DECODE'` divided the whole trace's busy by the 8 matched steps."""
    path, every, truth_spans, truth = write(tmp_path, SGLANG_MIX, seed=4)
    trace = read_trace(path)
    pattern = r"step\[DECODE"
    s = attr.summarize(trace, steps=pattern) if how == "steps" else attr.summarize(trace, step_marker=pattern)
    mine = [k for k, t in enumerate(truth) if t["name"] == SGLANG_DECODE]
    matched = [truth_spans[k] for k in mine]
    busy = sum(union_ns(every, lo, hi) for lo, hi in matched)
    span = sum(hi - lo for lo, hi in matched)
    assert s.steps == 8 and s.steps_named
    assert s.busy_ms_per_step == pytest.approx(busy / 8 / 1e6, abs=1e-9)
    assert s.gap_ms_per_step == pytest.approx((span - busy) / 8 / 1e6, abs=1e-9)
    assert s.steps_ms == pytest.approx(span / 1e6, abs=1e-9)
    assert s.dispatches_per_step == sum(1 for st, _ in every for lo, hi in matched if lo <= st < hi) / 8
    inside = sum(max(0, min(e, hi) - max(st, lo)) for st, e in every for lo, hi in matched)
    assert s.classes["ms_per_step"].sum() == pytest.approx(inside / 8 / 1e6, abs=1e-9)
    assert s.busy_ms_per_step < s.busy_ms / 8 / 3  # the old figure: the whole trace over 8 steps
    assert set(s.phases["phase"]) == {"decode"} and s.phases["gap_ms"].sum() == pytest.approx(
        (span - busy) / 1e6, abs=1e-9)  # a named pattern's steps: each its own span, no lead gap


def test_a_pattern_that_matches_nothing_is_an_error_naming_it_and_the_ranges(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path, *_ = write(tmp_path, SGLANG_MIX)
    trace = read_trace(path)
    with pytest.raises(PerflibError) as err:
        attr.summarize(trace, steps=r"step\[DECODX")
    msg = str(err.value)
    assert msg.startswith("--steps /step\\[DECODX/: no step: it matches no range of the trace")
    assert f"{SGLANG_EXTEND!r} (8)" in msg and f"{SGLANG_DECODE!r} (8)" in msg and "dispatch rhythm" in msg
    with pytest.raises(PerflibError, match=r"^profiler\.step_marker /nope/: no step"):
        attr.summarize(trace, step_marker="nope")
    assert main(["trace", "summary", str(path), "--steps", r"step\[DECODX"]) != 0
    assert "DECODX" in capsys.readouterr().err


def test_a_pattern_with_no_step_in_the_window_or_no_ranges_at_all_is_an_error(tmp_path: Path) -> None:
    path, _, truth_spans, truth = write(tmp_path, SGLANG_MIX)
    trace = read_trace(path)
    first = attr.Window(truth_spans[0][0], truth_spans[1][1], "the first two steps")  # both extend steps
    assert all("EXTEND" in t["name"] for t in truth[:2])
    with pytest.raises(PerflibError, match=r"it matches 8 ranges, none with GPU work inside the window \(the first two"):
        attr.summarize(trace, first, steps=r"step\[DECODE")
    assert attr.summarize(trace, first, steps=r"step\[EXTEND").steps == 2
    with pytest.raises(PerflibError, match="holds no named ranges"):
        attr.summarize(trace.dispatches, steps=r"step\[DECODE")


# ------------------------------------------------------------------------------ vLLM's Python frames


@pytest.mark.parametrize("mode", [ReadMode.FULL, ReadMode.LEAN])
def test_vllm_python_frame_steps_are_read_as_steps(tmp_path: Path, mode: ReadMode) -> None:
    """vLLM 0.8 marks its steps only as `gpu_model_runner.py(N): execute_model` Python frames: each is a
    step (phase unknown), placed on the kernels it launched; other frames are not read at all."""
    path, _, truth_spans, _ = write(tmp_path, [VLLM_FRAME] * 6, cat="python_function", long_phase="none")
    trace = read_trace(path, mode)
    assert set(trace.markers["name"]) == {VLLM_FRAME}
    s = attr.summarize(trace)
    assert s.steps == 6 and not s.steps_guessed
    assert s.step_method == "vLLM execute_model Python frames (host ranges, on the kernels they launched)"
    assert list(zip(s.step_table["start_ns"], s.step_table["end_ns"], strict=True)) == truth_spans
    assert len(s.phases) == 0


# ------------------------------------------------------------------------------ public traces


def raw_events(name: str) -> list[dict]:
    with gzip.open(fixture(*EXTERNAL, name), "rt") as f:
        return json.load(f)["traceEvents"]


def test_public_vllm_trace_holds_the_python_frame_step_and_names_a_decode_step() -> None:
    name = "tracelens_vllm_decode_full_graph_execution_mi300x.json.gz"
    events = raw_events(name)
    frames = [e for e in events if e.get("cat") == "python_function"
              and re.search(r"gpu_model_runner\.py\(\d+\): execute_model$", e.get("name", ""))]
    assert len(frames) == 1
    trace = read_trace(fixture(*EXTERNAL, name))
    kept = trace.markers[trace.markers["domain"] == "python_function"]
    assert kept["name"].tolist() == [frames[0]["name"]]
    s = attr.summarize(trace)  # the annotation comes first and names the phase
    assert s.step_method.startswith("vLLM execute_... annotations") and s.phases["phase"].tolist() == ["decode"]
    from perflib.traces.trace import Trace  # only here: the frames alone, as a vLLM 0.8 trace holds them

    alone = attr.summarize(Trace(trace.dispatches, trace.api, kept.reset_index(drop=True), trace.clock,
                                 trace.source, trace.path))
    assert alone.step_method.startswith("vLLM execute_model Python frames") and alone.steps == 1
    assert alone.step_table[["start_ns", "end_ns"]].values.tolist() == s.step_table[["start_ns", "end_ns"]].values.tolist()


def test_public_sglang_trace_decode_pattern_over_its_span() -> None:
    """`--steps 'step\\[DECODE'` on the public SGLang trace: busy per step is the union of every GPU event
    inside the step's span (the kernels its range launched, first start to last end), from the raw JSON."""
    name = "tracelens_sglang_Qwen3-8B_decode_mi300x.json.gz"
    events = raw_events(name)
    step = next(e for e in events if e.get("cat") == "user_annotation" and e.get("name", "").startswith("step[DECODE"))
    lo, hi = step["ts"], step["ts"] + step["dur"]
    calls = {e["args"]["correlation"] for e in events if e.get("cat") == "cuda_runtime" and e.get("tid") == step["tid"]
             and lo <= e["ts"] < hi and "correlation" in e.get("args", {})}
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]

    def ns(x: float) -> int:
        whole = int(np.floor(x))
        return whole * 1000 + int(round((x - whole) * 1000))

    launched = [(ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in gpu if e.get("args", {}).get("correlation") in calls]
    span = (min(s for s, _ in launched), max(e for _, e in launched))
    every = [(ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in gpu]
    trace = read_trace(fixture(*EXTERNAL, name))
    s = attr.summarize(trace, steps=r"step\[DECODE")
    assert s.steps == 1 and s.steps_named and s.phases["phase"].tolist() == ["decode"]
    assert s.busy_ms_per_step == pytest.approx(union_ns(every, *span) / 1e6, abs=1e-9)
    assert s.gap_ms_per_step == pytest.approx((span[1] - span[0] - union_ns(every, *span)) / 1e6, abs=1e-9)
    assert s.phase_note == "" and attr.summarize(trace).phases["phase"].tolist() == ["decode"]


def test_phase_kernel_time_is_each_names_time_and_starts_inside_that_phases_periods() -> None:
    """By hand: periods [0, 10) prefill, [10, 20) decode, [20, 30) prefill, [30, 40) decode; kernel 0 runs
    [5, 15) and [32, 38), kernel 1 [18, 25), kernel 2 [21, 29) (in prefill only)."""
    codes = np.array([0, 1, 2, 0])
    s, e = np.array([5, 18, 21, 32]), np.array([15, 25, 29, 38])
    lo, hi = np.array([0, 10, 20, 30]), np.array([10, 20, 30, 40])
    names = np.array(["prefill", "decode", "prefill", "decode"], dtype=object)
    ns, count = attr.phase_kernel_time(codes, 3, s, e, lo, hi, names)
    assert ns.tolist() == [5 + 6, 2, 0] and count.tolist() == [1, 1, 0]  # kernel 0 started in prefill once
    ns, count = attr.phase_kernel_time(codes, 3, s, e, lo, hi, names, phase="prefill")
    assert ns.tolist() == [5, 5, 8] and count.tolist() == [1, 0, 1]


def test_the_kernel_and_class_tables_carry_the_decode_steps_time(tmp_path: Path) -> None:
    """Each kernel's time inside the decode steps' periods (each from the previous step's end), and its
    dispatches starting there, computed here by a plain sweep over the capture's own kernels."""
    path, every, step_spans, truth = write(tmp_path, SGLANG_MIX, seed=4)
    trace = read_trace(path)
    frame = trace.dispatches
    window = attr.window_from_range(min(s for s, _ in step_spans), max(e for _, e in step_spans))
    summary = attr.summarize(trace, window)
    lo = [step_spans[0][0]] + [end for _, end in step_spans[:-1]]
    periods = [(lo[k], step_spans[k][1]) for k, t in enumerate(truth) if t["name"] == SGLANG_DECODE]
    kernels = summary.kernels.set_index("kernel")
    for name, rows in frame.groupby(frame["kernel"].astype(str)):
        inside = sum(max(0, min(e, b) - max(s, a)) for s, e in zip(rows["start_ns"], rows["end_ns"], strict=True)
                     for a, b in periods)
        starting = sum(1 for s in rows["start_ns"] for a, b in periods if a <= max(s, window.start_ns) < b)
        assert kernels.loc[name, "decode_time_ms"] == pytest.approx(inside / 1e6, abs=1e-9), name
        assert kernels.loc[name, "decode_count"] == starting
        assert kernels.loc[name, "decode_ms_per_step"] == pytest.approx(inside / 1e6 / 8, abs=1e-9)
    by_class = summary.kernels.groupby("kernel_class")[["decode_time_ms", "decode_count"]].sum()
    classes = summary.classes.set_index("kernel_class")
    assert np.allclose(classes.loc[by_class.index, "decode_time_ms"], by_class["decode_time_ms"], rtol=0, atol=1e-9)
    assert (classes.loc[by_class.index, "decode_count"] == by_class["decode_count"]).all()
    assert classes["decode_time_ms"].sum() < classes["time_ms"].sum() / 2  # the prefill steps' time is not in it
    none = attr.summarize(trace, window, steps=16)  # a count: no phase, nothing measured
    assert none.classes[attr.DECODE_KERNEL_COLUMNS].isna().all().all()
