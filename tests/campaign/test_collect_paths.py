"""The runner's two ways of measuring, against the real llama-server: in its own process (the default:
each run measured there, each traced run attributed there once at the end of its arm, the notebooks
written from the results) and through papermill (`--papermill`: each run's collect.ipynb and
profile.ipynb executed in a kernel). Both leave the same files in every run folder and the same
tables; the page reads each trace's stored tables instead of the raw trace; and a collect notebook the
runner wrote, executed by hand with papermill, measures its run again."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from perflib import campaign as pc
from perflib import derive, rundir, safeinput
from perflib.campaign import records
from perflib.server import start_llama_server

pytestmark = [pytest.mark.server, pytest.mark.slow]

STANDINS = Path(__file__).parent / "standins"


def write_campaign(tmp_path: Path, binary: Path) -> Path:
    """Two backends of the real llama-server, one of them wrapped by the rocprofv3 stand-in."""
    rocprof = tmp_path / "standin_rocprofv3"
    rocprof.write_text(f"#!/bin/sh\nexec {sys.executable} {STANDINS / 'standin_rocprofv3.py'} \"$@\"\n")
    rocprof.chmod(0o755)
    path = tmp_path / "paths.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: paths
        model: {{name: tiny random llama, random: {{n_layer: 2}}}}
        backends:
          - {{name: cpu, dialect: llamacpp, threads: 1, server: {{preset: llama-server, binary: {binary}}}}}
          - name: rocprof
            threads: 1
            server: {{preset: llama-server, binary: {binary}}}
            profiler: {{kind: rocprofv3, binary: {rocprof}}}
        batches: [1, 2]
        contexts: [32]
        decode_tokens: 8
        data_dir: data
        reports_dir: reports
        """))
    return path


def code_cells(path: Path) -> list[str]:
    """The code cells a notebook runs, parameters left out (their values differ, and papermill adds a cell)."""
    book = json.loads(path.read_text())
    return ["".join(c["source"]) for c in book["cells"] if c["cell_type"] == "code"
            and not {"parameters", "injected-parameters"} & set(c["metadata"].get("tags", []))]


def test_both_ways_write_the_same_run_folders_and_a_written_notebook_measures_again(
        tmp_path, llama_server_binary, tiny_model, monkeypatch):
    path = write_campaign(tmp_path, llama_server_binary)
    attributed: list[Path] = []
    real = derive._read_trace_cached
    monkeypatch.setattr(derive, "_read_trace_cached", lambda p: attributed.append(Path(p)) or real(p))
    results, reads = {}, {}
    for way in ("in-process", "papermill"):
        campaign = pc.load_campaign(path)
        attributed.clear()
        derive._read_trace_keyed.cache_clear()
        results[way] = pc.run_campaign(campaign, data_dir=tmp_path / way, reports_dir=tmp_path / f"{way}-pages",
                                       progress=False, contention_threshold=None, papermill=way == "papermill")
        reads[way] = list(attributed)
        assert results[way].failed == () and len(results[way].done) == 4, results[way].failed
    roots = {way: tmp_path / way / "raw" / "paths" / "default" for way in results}
    for run in sorted(p.relative_to(roots["in-process"]) for p in roots["in-process"].glob("*/b*_c32_r1")):
        ours, theirs = roots["in-process"] / run, roots["papermill"] / run
        assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in theirs.iterdir()), run
        assert set(rundir.read_manifest(ours)) == set(rundir.read_manifest(theirs))
        assert set(rundir.read_manifest(ours)["server"]) == set(rundir.read_manifest(theirs)["server"])
        for notebook in [p.name for p in ours.glob("*.ipynb")]:
            assert code_cells(ours / notebook) == code_cells(theirs / notebook), (run, notebook)
            assert json.loads((ours / notebook).read_text())["metadata"]["perflib"]["written_by"] == records.WRITTEN_BY
            assert records.failed(ours / notebook) is False and records.failed(theirs / notebook) is False
    traced = sorted(roots["in-process"].glob("rocprof/*/trace.parquet"))
    assert len(traced) == 2 and len(list(roots["in-process"].glob("*/*/profile.ipynb"))) == 2
    # in this process each trace was attributed once, at the end of its arm; the page took the stored tables
    assert sorted(reads["in-process"]) == traced
    assert reads["papermill"] == []  # the kernel attributed them; the page here read none
    tables = {way: pd.read_csv(tmp_path / way / "derived" / "paths" / "trace_runs.csv") for way in results}
    assert len(tables["in-process"]) == len(tables["papermill"]) == 2
    assert (tables["in-process"]["dispatches"] > 0).all()

    # the notebook written for a run, executed by hand against a running server into another folder
    written = roots["in-process"] / "cpu" / "b2_c32_r1" / "collect.ipynb"
    with start_llama_server(tiny_model, parallel=2, ctx_size=2 * 256, threads=1, binary=llama_server_binary,
                            log_path=tmp_path / "by-hand.log") as handle:
        done = subprocess.run([sys.executable, "-m", "papermill", str(written), str(tmp_path / "again.ipynb"),
                               "-k", pc.find_kernel(), "-p", "base_url", handle.base_url,
                               "-p", "out_dir", str(tmp_path / "again")],
                              capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = rundir.read_manifest(tmp_path / "again" / "b2_c32_r1")
    assert manifest["status"] == "complete" and manifest["base_url"] == handle.base_url
    assert (manifest["campaign"], manifest["arm"], manifest["backend"], manifest["decode_tokens"]) == (
        "paths", "default", "cpu", 8)
    assert len(safeinput.read_jsonl(tmp_path / "again" / "b2_c32_r1" / "requests.jsonl")) == 2
    assert manifest["server"]["flags"] is None  # another server than the campaign's: its flags are not known
