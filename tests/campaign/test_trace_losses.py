"""Lost profiler data is visible, and a traced arm runs its `of` arm's configuration: campaigns with the
real llama-server under the CUPTI stand-in (tests/campaign/standins/), whose capture ends inside a run,
exits non-zero with a CUPTI error line, or reports dropped records. `perflib campaign run --json`,
runs.csv, server.json and the page's first screen must all say the same."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from support import REPO

from perflib import rundir

pytestmark = [pytest.mark.server, pytest.mark.slow]

STANDINS = Path(__file__).parent / "standins"
LOSS_LINE = ("Error: cupti_trace_injection.cpp:90: Function cuptiGetLastError() failed with error(8): "
             "CUPTI_ERROR_OUT_OF_MEMORY.")


def campaign_file(tmp_path: Path, binary: Path, library: Path) -> Path:
    """One CUPTI-stand-in backend (a command template, as a new user writes it); a compared arm with its
    own binary, flags and environment; two traced arms of it, each with a fault of a real capture."""
    text = textwrap.dedent(f"""\
        name: losses
        model: {{name: tiny random llama, random: {{n_layer: 2}}}}
        backends:
          - name: cuda
            threads: 1
            server:
              command: [{sys.executable}, {STANDINS / "standin_cuda_server.py"}, "{{binary}}", -m, "{{model}}",
                        --host, "{{host}}", --port, "{{port}}", --parallel, "{{slots}}", --ctx-size, "{{ctx_size}}",
                        --metrics, --threads, "{{threads}}"]
              shutdown: {{signal: SIGTERM, grace_s: 20}}
            dialect: llamacpp
        batches: [1, 2]
        contexts: [32]
        decode_tokens: 24
        data_dir: data
        reports_dir: reports
        arms:
          - name: small-ubatch
            binary: {binary}
            extra_args: [--ubatch-size, "32", --batch-size, "32"]
            env: {{STANDIN_MARK: plain}}
          - name: cut-short
            role: traced
            of: small-ubatch
            profiler: {{kind: cupti, library: {library}}}
            env: {{STANDIN_CAPTURE_ENDS_IN: b2_c32_r1, STANDIN_ARM_DIR: "{{arm_dir}}", STANDIN_EXIT: "1",
                   STANDIN_LOSS_LINE: "{LOSS_LINE}"}}
          - name: dropped
            role: traced
            of: small-ubatch
            profiler: {{kind: cupti, library: {library}}}
            env: {{STANDIN_STDOUT_LINE: Dropped 7 activity records, STANDIN_CAPTURE_DIR: "{{capture_dir}}",
                   STANDIN_STATS: '{{{{"dropped_records": 7, "records": 5000}}}}'}}  # a brace is written twice
        playbook: batched-decode
        """)
    path = tmp_path / "losses.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def ran(tmp_path_factory, llama_server_binary, tiny_model):
    """`perflib campaign run --json` of the campaign once, as a user runs it."""
    tmp = tmp_path_factory.mktemp("losses")
    library = tmp / "libcupti-standin.so"
    library.write_bytes(b"stand-in: nothing to inject on a CPU")
    path = campaign_file(tmp, llama_server_binary, library)
    done = subprocess.run([sys.executable, "-m", "perflib", "campaign", "run", str(path), "--json",
                           "--no-contention"], cwd=REPO, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    return tmp, done


def starts(tmp: Path, arm: str) -> list[dict]:
    return json.loads((tmp / "data" / "raw" / "losses" / arm / "cuda" / "server.json").read_text())["starts"]


def masked(argv: list[str]) -> list[str]:
    return ["PORT" if i and argv[i - 1] == "--port" else a for i, a in enumerate(argv)]


def test_a_traced_arm_started_with_its_of_arms_binary_flags_and_environment(ran):
    tmp, done = ran
    (plain,) = starts(tmp, "small-ubatch")
    for arm in ("cut-short", "dropped"):
        (traced,) = starts(tmp, arm)
        assert masked(traced["argv"]) == masked(plain["argv"])  # CUPTI is injected: the same command line
        assert "--ubatch-size" in traced["argv"] and str(Path(traced["argv"][2])) == plain["argv"][2]
        added = set(traced["env_added"]) - set(plain["env_added"])
        assert {"CUDA_INJECTION64_PATH"} <= added and traced["env_added"]["STANDIN_MARK"] == "plain"
        assert all(k == "CUDA_INJECTION64_PATH" or k == "LD_LIBRARY_PATH" or k.startswith("STANDIN_") for k in added)


def test_a_capture_that_ends_inside_a_run_is_not_attributed_and_the_page_says_so_first(ran):
    tmp, done = ran
    assert done.returncode == 1, done.stderr[-3000:]  # a partial run is a failure to report
    out = json.loads(done.stdout)
    assert out["failed"] == []  # every run's counters are complete
    partial = {p["run"]: p["why"] for p in out["partial"]}
    cut = "cut-short/cuda/b2_c32_r1"
    assert cut in partial and "capture ended" in partial[cut] and "CUPTI_ERROR_OUT_OF_MEMORY" in partial[cut]
    assert (out["runs_complete"], out["runs_total"]) == (6, 6)
    (start,) = starts(tmp, "cut-short")
    assert start["exit_code"] == 1 and "server exited with code 1" in start["losses_text"]
    (line,) = [x for x in start["losses"] if x["match"] == "CUPTI_ERROR_OUT_OF_MEMORY"]
    assert (line["file"], line["count"]) == ("server.log", 1)
    assert start["profiler_stats"] is None  # the capture wrote no counts: not reported, not 0

    derived = tmp / "data" / "derived" / "losses"
    runs = pd.read_csv(derived / "runs.csv", keep_default_na=False)
    cut_row = runs[(runs["arm"] == "cut-short") & (runs["batch"] == 2)].iloc[0]
    assert cut_row["trace_loss"].startswith("capture ended") and "decode window" in cut_row["trace_loss"]
    covered = runs[(runs["arm"] == "cut-short") & (runs["batch"] == 1)].iloc[0]
    assert covered["trace_loss"] == "" and "CUPTI_ERROR_OUT_OF_MEMORY" in covered["profiler_loss"]
    traced = pd.read_csv(derived / "trace_runs.csv")
    assert sorted(traced[traced["arm"] == "cut-short"]["batch"]) == [1]  # the cut-short run is not attributed

    page = next((tmp / "reports").glob("losses-*.md")).read_text()
    head = page.split("\n## ")[0]
    assert "**Trace lost.** cut-short/cuda/b2\\_c32\\_r1: capture ended" in head
    assert "**Profiler losses.** cut-short/cuda (2 runs): server exited with code 1" in head
    # other checks may flag a level too on a loaded machine (the counter step against the client's, say)
    assert re.search(r"levels suspect \([^)]*\btrace_loss\b[^)]*\)", head), head
    assert "Traces: 3 of 4 traced runs lost" in head.splitlines()[2]
    assert "Runs on disk: 6 complete of 6." in head  # the same count as --json


def test_dropped_records_a_capture_reports_are_shown_and_mark_its_levels(ran):
    tmp, _ = ran
    (start,) = starts(tmp, "dropped")
    assert start["profiler_stats"] == {"dropped_records": 7, "records": 5000, "file": "cupti-stats.json"}
    (line,) = [x for x in start["losses"] if x["what"] == "CUPTI dropped records"]
    assert (line["file"], line["records"]) == ("cupti.txt", 7)
    assert start["exit_code"] == 0 and "7 of 5,007 records dropped" in start["losses_text"]
    runs = pd.read_csv(tmp / "data" / "derived" / "losses" / "runs.csv", keep_default_na=False)
    mine = runs[runs["arm"] == "dropped"]
    assert (mine["trace_loss"].str.contains("lost 7 records, where is not known")).all()
    traced = pd.read_csv(tmp / "data" / "derived" / "losses" / "trace_runs.csv")
    assert sorted(traced[traced["arm"] == "dropped"]["batch"]) == [1, 2]  # covered: used, and marked suspect
    page = next((tmp / "reports").glob("losses-*.md")).read_text()
    assert "dropped/cuda/b1\\_c32\\_r1: its server start's capture lost 7 records" in page.split("\n## ")[0]


def test_trace_verdicts_of_the_compared_arm_come_from_a_traced_arm(ran):
    tmp, _ = ran
    page = next((tmp / "reports").glob("losses-*.md")).read_text()
    verdicts = page.split("## Verdicts")[1].split("\n## ")[0]
    assert "arm small-ubatch (trace from cut-short)" in verdicts
    assert rundir.read_manifest(tmp / "data" / "raw" / "losses" / "cut-short" / "cuda" / "b2_c32_r1")[
        "trace_cut"]["capture_end_ns"] > 0
