"""A level whose server restarted between its two scrapes (issue 27, item 7) gets the row a counter reset
gets: `metrics_problem` says `reset:` and which evidence, no counter figure, and the sweep measures it
again (`sweep.REMEASURED`), whatever the evidence: the llama.cpp header, a vLLM process start time or
model, a counter going back."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support import DATA, fixture

from perflib import rundir, runs, sweep

SAMPLE = DATA / "campaign-sample" / "raw" / "sample" / "after" / "cpu" / "b2_c128_r1"
RESTARTED = "reset: server restarted between the scrapes"


def _folder(tmp_path: Path) -> Path:
    run = tmp_path / SAMPLE.name
    shutil.copytree(SAMPLE, run)
    return run


def _vllm(run: Path, edit) -> None:
    """The run's scrapes replaced by two consecutive real vLLM scrapes, the second edited."""
    snaps = sorted(fixture("external", "vllm-metrics", "qwen2.5-3b_3snapshots").glob("snap*.prom"))
    (run / rundir.METRICS_BEFORE).write_text(snaps[0].read_text())
    (run / rundir.METRICS_AFTER).write_text(edit(snaps[1].read_text()))
    manifest = json.loads((run / rundir.MANIFEST).read_text())
    manifest["metrics"].update(dialect="vllm", process_start_before=None, process_start_after=None)
    (run / rundir.MANIFEST).write_text(json.dumps(manifest))


def _header(run: Path) -> None:
    manifest = json.loads((run / rundir.MANIFEST).read_text())
    manifest["metrics"]["process_start_after"] = manifest["metrics"]["process_start_before"] + 450
    (run / rundir.MANIFEST).write_text(json.dumps(manifest))


CASES = {
    "llama.cpp header": (_header, "Process-Start-Time-Unix"),
    "vLLM process start": (lambda r: _vllm(r, lambda t: t.replace("process_start_time_seconds 1.76213440066e+09",
                                                                  "process_start_time_seconds 1.76213485066e+09")),
                           "process_start_time_seconds 1762134400.66 → 1762134850.66"),
    "vLLM model": (lambda r: _vllm(r, lambda t: t.replace("Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-7B-Instruct")),
                   "the model changed, Qwen/Qwen2.5-3B-Instruct → Qwen/Qwen2.5-7B-Instruct"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_restarted_level_is_a_reset_and_measured_again(tmp_path, case):
    mutate, evidence = CASES[case]
    good = runs.summarize_run(SAMPLE)
    assert good["metrics_problem"] is None and good["decode_step_ms"] is not None
    run = _folder(tmp_path)
    mutate(run)
    row = runs.summarize_run(run)
    assert row["metrics_problem"].startswith(f"{RESTARTED}: ") and evidence in row["metrics_problem"]
    assert row["decode_step_ms"] is None and row["occupancy"] is None and row["decode_steps"] is None
    assert row["metrics_problem"].startswith(sweep.REMEASURED)
    assert runs.level_rows([row])[0]["counters"] == "reset"
    assert row["decode_tok_s"] == good["decode_tok_s"]  # the client's figures stand
