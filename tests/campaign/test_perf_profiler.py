"""A campaign with a `perf`-traced arm of the real llama-server on the CPU: perf record wraps the server, its
samples are cut into each run, attributed as CPU samples, and every candidate of the playbook is decided
on the CPU at the traced level."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from perflib import campaign as pc
from perflib import derive, rundir
from perflib import verdicts as v

pytestmark = [pytest.mark.server, pytest.mark.slow,
              pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")]

CAMPAIGN = """\
name: perfcpu
model: {name: tiny random llama, random: {n_layer: 2}}
backends:
  - name: cpu
    dialect: llamacpp
    threads: 2
    kernel_classes: llamacpp-cpu
    server: {preset: llama-server, binary: BINARY}
batches: [1, 2]
contexts: [32]
decode_tokens: 24
data_dir: data
reports_dir: reports
arms:
  - name: default
  - {name: perf, role: traced, of: default, profiler: {kind: perf}}
playbook: batched-decode
"""


def test_a_perf_traced_arm_decides_every_candidate_on_the_cpu(tmp_path: Path, llama_server_binary, tiny_model):
    path = tmp_path / "perfcpu.yaml"
    path.write_text(textwrap.dedent(CAMPAIGN).replace("BINARY", str(llama_server_binary)))
    campaign = pc.load_campaign(path)
    result = pc.run_campaign(campaign, progress=False, contention_threshold=None)
    assert result.failed == (), result.failed
    arm_dir = campaign.data_dir / "raw" / "perfcpu" / "perf" / "cpu"
    capture = arm_dir / "capture" / "1"
    assert (capture / "perf.data").stat().st_size > 0 and (capture / "perf-script.txt.gz").is_file()  # cut, gzipped
    (start,) = rundir.server_starts(arm_dir / "server.json")
    assert start["argv"][:3] == [shutil.which("perf"), "record", "-e"] and start["losses"] == []
    assert start["grace_s"] == 30.0 and not start.get("killed")  # perf had time to write perf.data whole
    # one SIGTERM, to perf, which passes it on: llama-server stops cleanly (a second one from the group made
    # it abort, SIGABRT, reported as a loss), then perf re-raises the SIGTERM it got
    assert start["exit_code"] in (0, -15) and start["losses_text"] == "", start.get("exit")
    for run in ("b1_c32_r1", "b2_c32_r1"):
        manifest = rundir.read_manifest(arm_dir / run)
        assert manifest["trace_path"] == "trace.parquet" and manifest["trace_cut"]["source"] == "perf-script"
    trace_runs = pd.read_csv(campaign.derived_dir() / "trace_runs.csv")
    assert set(trace_runs["arm"]) == {"perf"} and (trace_runs["work"] == "CPU samples").all()
    assert (trace_runs["samples"] == trace_runs["compute_samples"] + trace_runs["sync_samples"]
            + trace_runs["host_samples"]).all() and (trace_runs["compute_samples"] > 0).all()
    assert (trace_runs["sample_hz"] == 999.0).all()
    # steps counted by the client's chunks in the decode window; a run whose stream came in one chunk (a loaded
    # machine) has none to count them by, and its window says why
    coalesced = trace_runs["window_why"].astype(object).fillna("").astype(str).str.contains("stream coalesced")
    assert (trace_runs.loc[~coalesced, "steps"] > 0).all(), trace_runs[["batch", "steps", "window_why"]]
    tables = derive.read(campaign.derived_dir())
    verdicts = v.evaluate(campaign.candidates, tables, v.Context.of(campaign))
    decided = {(x.candidate, x.scope): x for x in verdicts}
    playbook = {"gemm-dequant-route", "batched-gemv-per-row", "host-gaps", "interleaved-prefill",
                "launch-bound", "sync-bound", "host-compute"}
    assert {c for c, _ in decided} == playbook
    # A loaded machine can change the level's shape: requests staggered so that the trace's window holds their
    # prefill (then a trace verdict is inconclusive, the prefill share its threshold text), or a stream in one
    # chunk (below). Those outcomes are the right answer for that shape; no other undecided outcome passes.
    def shaped(x: v.Verdict) -> bool:
        return (x.outcome == v.INCONCLUSIVE and bool(x.window_prefill)
                and x.threshold.startswith("not decided: the window holds requests' prefill"))

    for x in verdicts:  # what fills the gaps, from the samples: launch 0, stated, never a silent 0
        if x.candidate == "launch-bound":
            assert x.value == 0.0 and "no kernel launches on a CPU backend" in x.text, x.line
            assert x.outcome == v.RULED_OUT or shaped(x), x.line
    for verdict in verdicts:
        if verdict.candidate == "interleaved-prefill" and verdict.outcome == v.NOT_MEASURED:
            # on a loaded machine a level's stream can arrive in one chunk: its client window times no decode,
            # and the verdict says so rather than guess (tests/runs/test_coalesced.py); no other reason passes
            assert "stream coalesced" in verdict.line, verdict.line
            continue
        assert verdict.outcome != v.NOT_MEASURED, verdict.line
        if verdict.candidate != "interleaved-prefill":
            assert "sampled estimate, cpu-clock 999 Hz" in verdict.text and "trace from perf" in verdict.scope
    page = result.page.read_text()
    assert "The backend is the CPU" in page and "perf's samples" in page
