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
