"""Campaign files, matrix expansion, resume, the papermill runner, bad input and the GPU guard.

The runner tests drive real notebooks through papermill and a real llama-server (marked
`server`); the unreachable-server test sends its requests to a closed port for real.
"""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from perflib import campaign as pc
from perflib.errors import InputError, PerflibError

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "tests" / "data" / "campaign-sample"

MINIMAL = """\
name: t
model: {name: tiny}
backends:
  - name: cpu
    url: http://127.0.0.1:9
batches: [1, 2]
contexts: [64]
decode_tokens: 8
"""


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# ------------------------------------------------------------------------------ validation


def test_unknown_key_names_path_line_and_suggestion(tmp_path):
    text = MINIMAL.replace("batches:", "batchs:")
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        pc.load_campaign(path)
    msg = str(err.value)
    assert str(path) in msg and "batchs" in msg and "did you mean 'batches'" in msg
    line = next(i for i, t in enumerate(text.splitlines(), start=1) if t.startswith("batchs:"))
    assert f"(line {line})" in msg


def test_nested_wrong_type_names_key_path(tmp_path):
    text = MINIMAL.replace("    url: http://127.0.0.1:9\n", "    url: http://127.0.0.1:9\n"
                           "  - name: gpu\n    url: http://x\n    profiler: {kind: 3}\n")
    with pytest.raises(InputError) as err:
        pc.load_campaign(write(tmp_path, text))
    msg = str(err.value)
    assert "backends[1].profiler.kind" in msg and "expected a string" in msg and "found an integer 3" in msg


def test_bad_choice_suggests_nearest(tmp_path):
    text = MINIMAL.replace("    url: http://127.0.0.1:9\n", "    url: http://127.0.0.1:9\n    profiler: {kind: rocprof}\n")
    with pytest.raises(InputError) as err:
        pc.load_campaign(write(tmp_path, text))
    assert "backends[0].profiler.kind" in str(err.value) and "rocprofv3" in str(err.value)


def test_list_item_type_and_missing_required(tmp_path):
    with pytest.raises(InputError, match=r"batches\[1\].*expected an integer.*found a string"):
        pc.load_campaign(write(tmp_path, MINIMAL.replace("[1, 2]", "[1, two]")))
    with pytest.raises(InputError, match="required key 'decode_tokens'"):
        pc.load_campaign(write(tmp_path, MINIMAL.replace("decode_tokens: 8\n", "")))
    with pytest.raises(InputError, match="'url' or a 'start'"):
        pc.load_campaign(write(tmp_path, MINIMAL.replace("    url: http://127.0.0.1:9\n", "")))


def test_bad_yaml_and_candidates(tmp_path):
    with pytest.raises(InputError, match="valid YAML"):
        pc.load_campaign(write(tmp_path, MINIMAL + "contexts: [\n"))
    bad_measure = MINIMAL + "candidates:\n  - {id: x, measure: step_ratoi, confirmed: '>= 2', ruled_out: '< 1'}\n"
    with pytest.raises(InputError, match="did you mean 'step_ratio'"):
        pc.load_campaign(write(tmp_path, bad_measure))
    bad_threshold = MINIMAL + "candidates:\n  - {id: x, measure: step_ratio, confirmed: 'big', ruled_out: '< 1'}\n"
    with pytest.raises(InputError, match=r"candidates\[0\]\.confirmed"):
        pc.load_campaign(write(tmp_path, bad_threshold))
    with pytest.raises(InputError, match="playbook"):
        pc.load_campaign(write(tmp_path, MINIMAL + "playbook: nope\n"))


def test_committed_campaigns_load():
    demo = pc.load_campaign(REPO / "campaigns" / "demo.yaml")
    assert demo.backends[0].start == "llama-server-local"
    ids = {c.id for c in demo.candidates}
    assert {"gemm-dequant-route", "batched-gemv-per-row", "host-gaps", "interleaved-prefill"} <= ids
    assert demo.data_dir == (REPO / "data").resolve()
    sample = pc.load_campaign(SAMPLE / "campaign.yaml")
    assert [a.name for a in sample.arms] == ["before", "after"] and sample.gates[0].max_regression_pct == 3


# ------------------------------------------------------------------------------ matrix and resume


def test_expand_is_the_full_product_and_only_filters(tmp_path):
    text = MINIMAL.replace("contexts: [64]", "contexts: [64, 128]") + (
        "repeats: 3\narms:\n  - {name: before}\n  - {name: after}\n")
    campaign = pc.load_campaign(write(tmp_path, text))
    runs = pc.expand(campaign)
    assert len(runs) == 2 * 1 * 2 * 2 * 3
    assert len({r.run_dir(tmp_path) for r in runs}) == len(runs)
    assert runs[0].run_dir(tmp_path) == tmp_path / "raw" / "t" / "before" / "cpu" / "b1_c64_r1"
    only = pc.expand(campaign, pc.parse_only(["arm=after", "batch=2", "repeat=1,3"]))
    assert {(r.arm, r.batch, r.repeat) for r in only} == {("after", 2, 1), ("after", 2, 3)}
    assert len(only) == 4
    with pytest.raises(PerflibError, match="KEY=V1,V2"):
        pc.parse_only(["size=2"])


def _complete_manifest(run: pc.RunSpec, run_dir: Path) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text(json.dumps({
        "schema": 1, "campaign": run.campaign, "arm": run.arm, "backend": run.backend, "batch": run.batch,
        "context": run.context, "repeat": run.repeat, "status": "complete", "errors": []}))


def test_resume_skips_complete_runs_and_unreachable_server_is_recorded(tmp_path):
    """b1 is complete and must stay untouched; b2 goes to a closed port through the real notebook."""
    campaign = pc.load_campaign(write(tmp_path, MINIMAL))
    data = tmp_path / "data"
    b1, b2 = pc.expand(campaign)
    _complete_manifest(b1, b1.run_dir(data))
    before = (b1.run_dir(data) / "manifest.json").read_bytes()
    result = pc.run_campaign(campaign, data_dir=data, reports_dir=tmp_path / "reports", progress=False)
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
    for run in pc.expand(campaign):
        _complete_manifest(run, run.run_dir(data))
    result = pc.run_campaign(campaign, data_dir=data, progress=False, write_page=False)
    assert result.done == () and result.failed == () and len(result.skipped) == 2


# ------------------------------------------------------------------------------ kernel, guard, traces


def test_find_kernel_runs_this_interpreter():
    from jupyter_client.kernelspec import KernelSpecManager

    name = pc.find_kernel()
    argv0 = KernelSpecManager().get_kernel_spec(name).argv[0]
    assert argv0.startswith("python") or Path(argv0).resolve() == Path(sys.executable).resolve()


def test_gpu_guard_without_gpu_is_a_noop_that_says_so():
    if shutil.which("nvidia-smi") or Path("/sys/class/kfd/kfd/proc").is_dir():
        pytest.skip("this machine has GPU tooling; the no-GPU path is not reachable here")
    messages = []
    guard = pc.GpuGuard(idle_s=0.1, log=messages.append)
    assert guard.vendor is None and any("no GPU" in m for m in messages)
    guard.wait_idle()
    with guard.watching() as seen:
        pass
    assert seen == set()


def test_descendants_include_this_process_children():
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        import os

        assert child.pid in pc._descendants({os.getpid()})
    finally:
        child.kill()
        child.wait()


def test_missing_trace_path_is_a_clear_error(tmp_path):
    if not (SAMPLE / "raw").is_dir():
        pytest.skip("committed sample capture missing")
    text = (SAMPLE / "campaign.yaml").read_text().replace(
        "    profiler: {kind: none}", "    profiler: {kind: rocprofv3, output: 'traces/{arm}/b{batch}_r{repeat}.csv'}")
    text = text.replace("data_dir: .", f"data_dir: {SAMPLE}")
    path = write(tmp_path, text)
    from perflib import derive
    from perflib import verdicts as v

    campaign = pc.load_campaign(path)
    tables = derive.build(campaign)
    assert any("does not exist" in n and "traces/before/b1_r1.csv" in n for n in tables.notes)
    with pytest.raises(PerflibError, match="does not exist"):
        derive.profile_run(path, "before", "cpu", 1, 128, 1)
    gaps = [x for x in v.evaluate(campaign.candidates, tables, v.Context.of(campaign)) if x.candidate == "host-gaps"]
    assert gaps and all(x.outcome == v.NOT_MEASURED for x in gaps)


# ------------------------------------------------------------------------------ against a real server


def _raising_notebooks(tmp_path: Path) -> Path:
    """A copy of notebooks/ whose collect.ipynb raises for repeat 2 after its parameters."""
    out = tmp_path / "notebooks"
    shutil.copytree(REPO / "notebooks", out)
    book = nbformat.read(out / "collect.ipynb", as_version=4)
    index = next(i for i, c in enumerate(book.cells) if "parameters" in c.metadata.get("tags", []))
    book.cells.insert(index + 1, nbformat.v4.new_code_cell(
        'if repeat == 2:\n    raise RuntimeError("notebook failure on purpose")'))
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
    result = pc.run_campaign(campaign, data_dir=data, reports_dir=reports, progress=False,
                             notebooks=_raising_notebooks(tmp_path))
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
    (line,) = [ln for ln in page.splitlines() if ln.startswith("| batched step |")]
    assert "ms at batch 2 over" in line and "x:" in line  # the verdict carries its numbers
    assert "not measured (no kernel trace for backend cpu" in page

    # resume with the real notebooks: the two complete runs are skipped, the failed ones redone
    kept = (ok_dir / "requests.jsonl").read_bytes()
    again = pc.run_campaign(campaign, data_dir=data, reports_dir=reports, progress=False)
    assert sorted(again.skipped) == sorted(result.done)
    assert sorted(again.done) == sorted(label for label, _ in result.failed) and again.failed == ()
    assert (ok_dir / "requests.jsonl").read_bytes() == kept
    assert any(p.name.startswith("b1_c64_r2.incomplete") for p in failed_dir.parent.iterdir())


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
    run = pc.RunSpec("sample", "after", "cpu", 2, 128, 1, campaign.decode_tokens)
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

    from perflib import derive
    from perflib import verdicts as v

    tables = derive.build(campaign)
    assert len(tables.trace_runs) == 1
    row = tables.trace_runs.iloc[0]
    assert row["dispatches"] == len(trace)
    assert 0 < row["busy_ms"] <= row["window_ms"]
    assert row["gap_ms"] == pytest.approx(row["window_ms"] - row["busy_ms"], rel=1e-6)
    assert pd.to_numeric(tables.classes["time_ms"]).sum() > 0
    cand = pc.CandidateSpec(id="gaps", measure="gap_share", confirmed=">= 30%", ruled_out="< 15%", arm="after")
    (verdict,) = v.evaluate([cand], tables, v.Context.of(campaign))
    assert verdict.value == pytest.approx(row["gap_ms"] / row["window_ms"])
    assert verdict.outcome != v.NOT_MEASURED and f"{100 * verdict.value:.1f}%" in verdict.line
    # the other runs say which trace file is missing
    assert any("does not exist" in n for n in tables.notes)
    # profile.ipynb through papermill writes the run's derived tables
    executed = tmp_path / "profile.ipynb"
    error = pc.execute_notebook(pc.NOTEBOOKS / "profile.ipynb", executed, {
        "campaign_file": str(path), "arm": "after", "backend": "cpu", "batch": 2, "context": 128, "repeat": 1},
        pc.find_kernel(), cwd=tmp_path)
    assert error is None
    written = campaign.derived_dir() / "runs" / "after" / "cpu" / "b2_c128_r1" / "trace_runs.csv"
    assert pd.read_csv(written)["dispatches"].iloc[0] == len(trace)
    # a campaign run over complete runs profiles them without a server; the run whose trace
    # is missing fails with the path named, and no measured file changes
    manifests = {p: p.read_bytes() for p in campaign.raw_dir().rglob("manifest.json")}
    result = pc.run_campaign(campaign, only=pc.parse_only(["arm=after", "batch=2"]), progress=False,
                             write_page=False)
    assert sorted(result.skipped) == ["after/cpu/b2_c128_r1", "after/cpu/b2_c128_r2"]
    assert [label for label, _ in result.failed] == ["after/cpu/b2_c128_r2"]
    assert "does not exist" in result.failed[0][1] and "b2_c128_r2.csv" in result.failed[0][1]
    assert not pc._needs_profile(run.run_dir(campaign.data_dir))
    assert {p: p.read_bytes() for p in campaign.raw_dir().rglob("manifest.json")} == manifests


def test_cli_run_exits_non_zero_and_names_failed_runs(tmp_path, capsys):
    from perflib.cli import main

    path = write(tmp_path, MINIMAL.replace("batches: [1, 2]", "batches: [1]"))
    code = main(["campaign", "run", str(path), "--data", str(tmp_path / "data"), "--reports", str(tmp_path / "r")])
    captured = capsys.readouterr()
    assert code == 1
    assert "0 runs measured" in captured.out and "1 failed" in captured.out
    assert "FAILED default/cpu/b1_c64_r1" in captured.err and "127.0.0.1:9" in captured.err
    assert main(["campaign", "validate", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == 1
