"""The papermill runner: resume, failed runs kept, traced runs profiled, and the CLI's exit status.

The runner tests drive real notebooks through papermill and a real llama-server (marked
`server`); the unreachable-server test sends its requests to a closed port for real. They judge no
contention (tests/load/test_contention*.py and test_started_servers.py do): on a shared machine a run
marked contended is left out of the verdicts these tests read.
"""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
from support import DATA, MINIMAL_CAMPAIGN, REPO

from perflib import campaign as pc
from perflib import config, derive
from perflib import verdicts as v
from perflib.errors import PerflibError

SAMPLE = DATA / "campaign-sample"

MINIMAL = MINIMAL_CAMPAIGN


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _complete_manifest(run: config.RunSpec, run_dir: Path) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text(json.dumps({
        "schema": 1, "campaign": run.campaign, "arm": run.arm, "backend": run.backend, "batch": run.batch,
        "context": run.context, "repeat": run.repeat, "status": "complete", "errors": []}))


def test_resume_skips_complete_runs_and_unreachable_server_is_recorded(tmp_path):
    """b1 is complete and must stay untouched; b2 goes to a closed port through the real notebook."""
    campaign = pc.load_campaign(write(tmp_path, MINIMAL))
    data = tmp_path / "data"
    b1, b2 = campaign.expand()
    _complete_manifest(b1, b1.run_dir(data))
    before = (b1.run_dir(data) / "manifest.json").read_bytes()
    result = pc.run_campaign(campaign, data_dir=data, reports_dir=tmp_path / "reports", progress=False, contention_threshold=None)
    assert result.skipped == (b1.label,)
    assert [label for label, _ in result.failed] == [b2.label]
    assert (b1.run_dir(data) / "manifest.json").read_bytes() == before
    manifest = json.loads((b2.run_dir(data) / "manifest.json").read_text())
    assert manifest["status"] == "incomplete"
    assert any("http://127.0.0.1:9" in e for e in manifest["errors"])
    assert (b2.run_dir(data) / "collect.ipynb").is_file()
    assert result.page is not None and result.page.is_file()


def test_every_run_complete_starts_nothing(tmp_path):
    campaign = pc.load_campaign(write(tmp_path, MINIMAL.replace("http://127.0.0.1:9", "http://127.0.0.1:1")))
    data = tmp_path / "data"
    for run in campaign.expand():
        _complete_manifest(run, run.run_dir(data))
    result = pc.run_campaign(campaign, data_dir=data, progress=False, contention_threshold=None, write_page=False)
    assert result.done == () and result.failed == () and len(result.skipped) == 2


def test_find_kernel_runs_this_interpreter():
    from jupyter_client.kernelspec import KernelSpecManager

    name = pc.find_kernel()
    argv0 = KernelSpecManager().get_kernel_spec(name).argv[0]
    assert argv0.startswith("python") or Path(argv0).resolve() == Path(sys.executable).resolve()


def test_missing_trace_path_is_a_clear_error(tmp_path):
    if not (SAMPLE / "raw").is_dir():
        pytest.skip("committed sample capture missing")
    text = (SAMPLE / "campaign.yaml").read_text().replace(
        "    profiler: {kind: none}", "    profiler: {kind: rocprofv3, output: 'traces/{arm}/b{batch}_r{repeat}.csv'}")
    text = text.replace("data_dir: .", f"data_dir: {SAMPLE}")
    path = write(tmp_path, text)
    campaign = pc.load_campaign(path)
    tables = derive.build(campaign)
    assert any("does not exist" in n and "traces/before/b1_r1.csv" in n for n in tables.notes)
    with pytest.raises(PerflibError, match="does not exist"):
        pc.profile_run({"campaign_file": str(path), "arm": "before", "backend": "cpu", "batch": 1, "context": 128,
                        "repeat": 1})
    gaps = [x for x in v.evaluate(campaign.candidates, tables, v.Context.of(campaign)) if x.candidate == "host-gaps"]
    assert gaps and all(x.outcome == v.NOT_MEASURED for x in gaps)


# ------------------------------------------------------------------------------ against a real server


def _raising_notebooks(tmp_path: Path) -> Path:
    """A copy of notebooks/ whose collect.ipynb raises for repeat 2 after its parameters (--papermill)."""
    out = tmp_path / "notebooks"
    shutil.copytree(REPO / "notebooks", out)
    book = nbformat.read(out / "collect.ipynb", as_version=4)
    index = next(i for i, c in enumerate(book.cells) if "parameters" in c.metadata.get("tags", []))
    book.cells.insert(index + 1, nbformat.v4.new_code_cell(
        'if level["repeat"] == 2:\n    raise RuntimeError("notebook failure on purpose")'))
    for i, cell in enumerate(book.cells):
        cell["id"] = f"c{i}"
    nbformat.write(book, out / "collect.ipynb")
    return out


@pytest.mark.server
@pytest.mark.slow
def test_campaign_end_to_end_with_a_failing_notebook_and_resume(tmp_path, llama_server_binary, tiny_model):
    text = """\
    name: e2e
    model:
      name: tiny random llama
    backends:
      - name: cpu
        start: llama-server-local
        dialect: llamacpp
        threads: 1
    batches: [1, 2]
    contexts: [64]
    decode_tokens: 12
    repeats: 2
    playbook: batched-decode
    candidates:
      - {id: step-ratio, label: batched step, measure: step_ratio, confirmed: '>= 2', ruled_out: '< 1.2'}
    """
    path = write(tmp_path, text)
    campaign = pc.load_campaign(path)
    data, reports = tmp_path / "data", tmp_path / "reports"
    result = pc.run_campaign(campaign, data_dir=data, reports_dir=reports, progress=False, contention_threshold=None,
                             notebooks=_raising_notebooks(tmp_path), papermill=True)
    assert sorted(result.done) == ["default/cpu/b1_c64_r1", "default/cpu/b2_c64_r1"]
    assert sorted(label for label, _ in result.failed) == ["default/cpu/b1_c64_r2", "default/cpu/b2_c64_r2"]
    failed_dir = data / "raw" / "e2e" / "default" / "cpu" / "b1_c64_r2"
    executed = nbformat.read(failed_dir / "collect.ipynb", as_version=4)
    assert any(o.get("ename") == "RuntimeError" for c in executed.cells for o in c.get("outputs", []))
    assert json.loads((failed_dir / "manifest.json").read_text())["status"] == "incomplete"
    ok_dir = data / "raw" / "e2e" / "default" / "cpu" / "b2_c64_r1"
    assert json.loads((ok_dir / "manifest.json").read_text())["status"] == "complete"
    assert (ok_dir / "requests.jsonl").stat().st_size > 0 and (ok_dir / "collect.ipynb").is_file()
    page = result.page.read_text()
    summary, *verdict_rows = [ln for ln in page.splitlines() if ln.startswith("| batched step |")]
    assert "x" in summary and page.index(summary) < page.index("## Verdicts")  # the answer opens the page
    (line,) = [ln for ln in verdict_rows if "| arm default," in ln]  # the detail row, below the level grid
    assert "ms at batch 2 over" in line and "x:" in line  # the verdict carries its numbers
    # an untraced CPU arm: "not measured", naming the key that would trace it (perf's samples on the CPU)
    assert "not measured (no kernel trace of arm default on backend cpu" in page and "{kind: perf}" in page

    # resume in the runner's process: the two complete runs are skipped, the failed ones redone
    kept = (ok_dir / "requests.jsonl").read_bytes()
    again = pc.run_campaign(campaign, data_dir=data, reports_dir=reports, progress=False, contention_threshold=None)
    assert sorted(again.skipped) == sorted(result.done)
    assert sorted(again.done) == sorted(label for label, _ in result.failed) and again.failed == ()
    assert (ok_dir / "requests.jsonl").read_bytes() == kept
    assert any(p.name.startswith("b1_c64_r2.incomplete") for p in failed_dir.parent.iterdir())


@pytest.mark.server
def test_a_levels_repeats_share_its_warm_up_and_scrapes_and_get_their_notebooks_after_it(
        tmp_path, llama_server_binary, tiny_model):
    """In the runner's process, the repeats of a level share one warm-up and the scrape between them
    (`perflib.load.Repeats`), each run still gets its collect.ipynb, and the server's record names the runs."""
    path = write(tmp_path, """\
    name: levels
    model:
      name: tiny random llama
    backends:
      - {name: cpu, start: llama-server-local, dialect: llamacpp, threads: 1}
    batches: [1, 2]
    contexts: [32]
    decode_tokens: 8
    repeats: 3
    """)
    campaign = pc.load_campaign(path)
    data = tmp_path / "data"
    result = pc.CampaignRun(campaign, pc.RunOptions(progress=False, write_page=False, contention_threshold=None),
                            data).run()
    assert result.failed == () and len(result.done) == 6, result.failed
    group = data / "raw" / "levels" / "default" / "cpu"
    for batch in (1, 2):
        names = [f"b{batch}_c32_r{r}" for r in (1, 2, 3)]
        manifests = [json.loads((group / n / "manifest.json").read_text()) for n in names]
        assert [m["warmup_from"] for m in manifests] == [names[0]] * 3
        assert [m["metrics_before_from"] for m in manifests] == [None, names[0], names[1]]
        assert (group / names[1] / "metrics_before.txt").read_bytes() == (group / names[0] / "metrics_after.txt").read_bytes()
        for name in names:
            book = json.loads((group / name / "collect.ipynb").read_text())
            assert book["metadata"]["perflib"]["level"]["repeat"] == int(name[-1])
            assert book["metadata"]["perflib"]["error"] is None
    (start,) = json.loads((group / "server.json").read_text())["starts"]
    assert start["runs"] == [f"default/cpu/b{b}_c32_r{r}" for b in (1, 2) for r in (1, 2, 3)]


def test_traced_run_feeds_trace_tables_verdicts_and_profile_notebook(tmp_path, fixtures):
    """A real rocprofv3 kernel trace (the ROCm 7.0 docs fixture), its timestamps moved into one
    sample run's level window, flows through derive, the verdicts and profile.ipynb."""
    import pandas as pd

    if not (SAMPLE / "raw").is_dir():
        pytest.skip("committed sample capture missing")
    shutil.copytree(SAMPLE, tmp_path / "sample")
    path = tmp_path / "sample" / "campaign.yaml"
    path.write_text(path.read_text().replace(
        "    profiler: {kind: none}",
        # window: level, so every dispatch spread over the level counts (the default decode window
        # of SERVERS.md §5.2 is tested in test_decode_window.py)
        "    profiler: {kind: rocprofv3, output: 'traces/{arm}/b{batch}_c{context}_r{repeat}.csv', window: level}"))
    campaign = pc.load_campaign(path)
    run = config.RunSpec("sample", "after", "cpu", 2, 128, 1, campaign.decode_tokens)
    clocks = json.loads((run.run_dir(campaign.data_dir) / "manifest.json").read_text())["clocks"]
    lo, hi = clocks["start"]["monotonic_ns"], clocks["end"]["monotonic_ns"]
    trace = pd.read_csv(fixtures / "rocprofv3" / "rocm7.0-docs" / "kernel_trace.csv")
    first, last = trace["Start_Timestamp"].min(), trace["End_Timestamp"].max()
    scale = 0.8 * (hi - lo) / (last - first)
    for col in ("Start_Timestamp", "End_Timestamp"):
        trace[col] = (lo + 0.1 * (hi - lo) + (trace[col] - first) * scale).astype("int64")
    out = tmp_path / "sample" / "traces" / "after" / "b2_c128_r1.csv"
    out.parent.mkdir(parents=True)
    trace.to_csv(out, index=False)

    tables = derive.build(campaign)
    assert len(tables.trace_runs) == 1
    row = tables.trace_runs.iloc[0]
    assert row["dispatches"] == len(trace)
    assert 0 < row["busy_ms"] <= row["window_ms"]
    assert row["gap_ms"] == pytest.approx(row["window_ms"] - row["busy_ms"], rel=1e-6)
    assert pd.to_numeric(tables.classes["time_ms"]).sum() > 0
    cand = config.CandidateSpec(id="gaps", measure="gap_share", confirmed=">= 30%", ruled_out="< 15%", arm="after")
    # decided at each level whose trace was to be made: batch 2 from its trace; batch 1, whose file is
    # missing, not measured and saying so
    verdicts = {x.batch: x for x in v.evaluate([cand], tables, v.Context.of(campaign))}
    verdict = verdicts.pop(2)
    assert [(b, x.outcome) for b, x in verdicts.items()] == [(1, v.NOT_MEASURED)] and "lost" in verdicts[1].why
    assert verdict.value == pytest.approx(row["gap_ms"] / row["window_ms"])
    assert verdict.outcome != v.NOT_MEASURED and f"{100 * verdict.value:.1f}%" in verdict.line
    # the other runs say which trace file is missing
    assert any("does not exist" in n for n in tables.notes)
    # profile.ipynb through papermill gives the run's derived tables, those the page read (stored once)
    executed = tmp_path / "profile.ipynb"
    spec = pc.ProfileSpec(str(path), "after", "cpu", 2, 128, 1)
    error = pc.execute_notebook(pc.NOTEBOOKS / "profile.ipynb", executed, {"run": spec.to_dict()}, pc.find_kernel(),
                                cwd=tmp_path)
    assert error is None
    shown = json.loads(executed.read_text())["cells"]
    assert any(f"dispatches {len(trace)}" in " ".join("".join(o.get("data", {}).get("text/plain", [])).split())
               for c in shown if c["cell_type"] == "code" for o in c.get("outputs", []))
    written = campaign.derived_dir() / "runs" / "after" / "cpu" / "b2_c128_r1" / "trace_runs.parquet"
    assert pd.read_parquet(written)["dispatches"].iloc[0] == len(trace)
    # a campaign run over complete runs profiles them without a server; the run whose trace
    # is missing is partial (its counters stand) with the path named, and no measured file changes
    manifests = {p: p.read_bytes() for p in campaign.raw_dir().rglob("manifest.json")}
    result = pc.run_campaign(campaign, only=config.parse_only(["arm=after", "batch=2"]), progress=False,
                             write_page=False)
    assert sorted(result.skipped) == ["after/cpu/b2_c128_r1", "after/cpu/b2_c128_r2"]
    assert result.failed == () and [label for label, _ in result.partial] == ["after/cpu/b2_c128_r2"]
    assert "does not exist" in result.partial[0][1] and "b2_c128_r2.csv" in result.partial[0][1]
    assert not pc.runner.needs_profile(run.run_dir(campaign.data_dir))
    assert {p: p.read_bytes() for p in campaign.raw_dir().rglob("manifest.json")} == manifests


def test_cli_run_exits_non_zero_and_names_failed_runs(tmp_path, capsys):
    from perflib.cli import main

    path = write(tmp_path, MINIMAL.replace("batches: [1, 2]", "batches: [1]"))
    code = main(["campaign", "run", str(path), "--data", str(tmp_path / "data"), "--reports", str(tmp_path / "r"),
                 "--no-contention"])
    captured = capsys.readouterr()
    assert code == 1
    assert "0 runs measured" in captured.out and "1 failed" in captured.out
    assert "FAILED default/cpu/b1_c64_r1" in captured.err and "127.0.0.1:9" in captured.err
    assert main(["campaign", "validate", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == 1
