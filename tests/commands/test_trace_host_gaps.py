"""`perflib trace summary` says what fills the host gaps where the trace holds host API calls (the
library's split, in JSON and as a table), and why not where it holds none."""

from __future__ import annotations

import json

import pytest
from support import REPO, fixture

from perflib import attribution
from perflib.cli import main
from perflib.traces import ReadMode, read_trace


@pytest.mark.parametrize("path", [("kineto", "a100_event_sync_trace.json.gz"),
                                  ("external", "nsys", "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite")])
def test_json_carries_the_librarys_split(path, capsys) -> None:
    file = fixture(*path)
    assert main(["trace", "summary", str(file), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    trace = read_trace(file, ReadMode.LEAN)
    summary = attribution.summarize(trace)
    split = attribution.host_gaps(trace, summary.window, summary.step_table)
    assert {k: out["host_gaps"][k] for k in split.to_dict()} == split.to_dict()
    parts = [out["host_gaps"][f"{p}_ms"] for p in attribution.HOST_GAP_PARTS]
    assert sum(parts) == pytest.approx(out["gap_ms"]) and out["host_gaps"]["note"] == ""
    if out["steps"]:
        assert out["host_gaps"]["launch_ms_per_step"] == pytest.approx(out["host_gaps"]["launch_ms"] / out["steps"])


def test_the_table_prints_the_four_parts(capsys) -> None:
    assert main(["trace", "summary", str(REPO / "data/raw/h200-pytorch/cupti_decode_window_excerpt.txt.gz")]) == 0
    text = capsys.readouterr().out
    block = text.split("what fills the host gaps (", 1)[1].split("\n\n", 1)[0]
    assert "launching thread" in block and "found by correlation" in block
    for part in attribution.HOST_GAP_PARTS:
        assert attribution.HOST_GAP_LABELS[part] in block
    assert "% of gap" in block and "ms/step" in block


def test_a_trace_without_api_calls_says_why(capsys) -> None:
    assert main(["trace", "summary", str(fixture("rocprofv3", "rocm7.0-docs", "kernel_trace.csv"))]) == 0
    text = capsys.readouterr().out
    assert "what fills the host gaps: not measured: the capture holds no host API records" in text
    assert main(["trace", "summary", str(fixture("rocprofv3", "rocm7.0-docs", "kernel_trace.csv")), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["host_gaps"]
    assert out["launch_ms"] is None and out["note"].startswith("the capture holds no host API records")


def test_help_explains_the_split(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["trace", "summary", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "what fills the host gaps (JSON host_gaps)" in text and "the four add up to the gap" in text


def test_where_the_engine_names_phases_the_decode_steps_figures_stand_beside(tmp_path, capsys) -> None:
    """An SGLang capture (Kineto, its step ranges launching their kernels): the split and the class table
    give the decode steps' own ms per step beside the all-steps figure; JSON carries the decode split."""
    from synthetic import SGLANG_DECODE, SGLANG_EXTEND, engine_steps

    from perflib.traces.writers import write_kineto_json

    frame, events, _ = engine_steps([SGLANG_EXTEND, SGLANG_DECODE] * 4, seed=1)
    path = write_kineto_json(frame, tmp_path / "sglang.json.gz", events=events)
    assert main(["trace", "summary", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    decode = next(p for p in out["phases"] if p["phase"] == "decode")
    split = out["host_gaps"]["decode"]
    assert split["decode_steps"] == 4 == decode["steps"]
    assert split["decode_gap_ms"] == pytest.approx(decode["gap_ms"], abs=1e-9)
    assert sum(split[f"decode_{p}_ms"] for p in attribution.HOST_GAP_PARTS) == pytest.approx(decode["gap_ms"])
    gemm = next(c for c in out["classes"] if c["kernel_class"] == "gemm")
    assert gemm["decode_ms_per_step"] == pytest.approx(gemm["decode_time_ms"] / 4) and gemm["decode_count"] == 80
    assert main(["trace", "summary", str(path)]) == 0
    text = capsys.readouterr().out
    block = text.split("what fills the host gaps (", 1)[1].split("\n\n", 1)[0]
    assert "ms/step (all steps)" in block and "decode ms/step" in block and "% of decode gap" in block
    host = next(x for x in block.splitlines() if x.startswith("host compute"))
    assert f"{split['decode_host_compute_ms'] / 4:.3f}" in host.split()
    classes = text.split("kernel classes (", 1)[1].split("\n\n", 1)[0]
    row = next(x for x in classes.splitlines() if x.startswith("gemm "))
    assert f"{gemm['decode_ms_per_step']:.3f}" in row.split() and "decode ms/step" in classes


def test_a_cpu_operator_trace_says_its_host_time_is_host_compute(capsys) -> None:
    """The committed vLLM CPU trace: no device API, its split from the operators, named as such."""
    path = REPO / "tests" / "data" / "traces" / "vllm_cpu_rank0.pt.trace.json.gz"
    assert main(["trace", "summary", str(path)]) == 0
    text = capsys.readouterr().out
    assert f"what fills the host time (CPU operators): {attribution.HOST_GAP_BASIS_TEXT['CPU operators']}" in text
    assert main(["trace", "summary", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    split = out["host_gaps"]
    assert split["basis"] == "CPU operators" and split["note"] == "" and split["launch_ms"] == 0.0
    assert split["host_compute_ms"] == pytest.approx(out["gap_ms"]) and split["sync_ms"] == 0.0
