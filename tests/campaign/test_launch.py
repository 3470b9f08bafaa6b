"""From a campaign's `server:` and `profiler:` to the command perflib starts: presets, templates, arm
overrides, profiler wrapping, and the errors of a bad template (no server is started here)."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest

from perflib import campaign as pc
from perflib.campaign import claims
from perflib.campaign.servers import Prepared, plan_launch
from perflib.errors import InputError, PerflibError
from perflib.server.presets import PRESETS

BASE = """\
name: t
model: {{name: m, path: models/m.gguf}}
backends:
  - name: gpu
    threads: 4
    env: {{GGML_CUDA_GRAPHS: "1"}}
    server:
{server}
{profiler}
batches: [1, 8]
contexts: [512, 2048]
decode_tokens: 32
arms:
  - name: before
  - name: after
    extra_args: [--flash-attn, "on"]
    env: {{FIX: "{{arm_dir}}/x"}}
  - name: traced
    role: traced
    of: after
    extra_args: [--flash-attn, "on"]
    profiler: {{kind: cupti, library: libinject.so}}
"""


def campaign_of(tmp_path: Path, server: str, profiler: str = "") -> pc.Campaign:
    path = tmp_path / "c.yaml"
    path.write_text(BASE.format(server=textwrap.indent(textwrap.dedent(server), " " * 6),
                                profiler=textwrap.indent(textwrap.dedent(profiler), " " * 4)))
    return pc.load_campaign(path)


def launch_of(campaign: pc.Campaign, arm: str, binary: str = "/opt/llama/bin/llama-server", port: int = 4321,
              library: Path | None = None):
    backend = campaign.backends[0]
    spec = backend.server_spec
    prepared = Prepared(spec, PRESETS.get(spec.preset) if spec.preset else None, binary,
                        str(campaign.path.parent / "models/m.gguf"), library)
    arm_dir = campaign.data_dir / "raw" / campaign.name / arm / backend.name
    return plan_launch(campaign, campaign.arm(arm), backend, prepared, arm_dir, 1, port=port)


def test_llama_server_preset_fills_slots_context_and_stacks_arguments(tmp_path):
    campaign = campaign_of(tmp_path, "preset: llama-server\nargs: [-ngl, '99']\nshutdown: {signal: SIGINT, grace_s: 3}")
    launch, capture = launch_of(campaign, "after")
    argv = list(launch.argv)
    assert argv[:2] == ["/opt/llama/bin/llama-server", "-m"] and capture is None
    assert argv[argv.index("--parallel") + 1] == "8"  # the largest batch
    assert argv[argv.index("--ctx-size") + 1] == str(8 * (2048 + 32 + 64))  # every slot its longest prompt
    assert argv[argv.index("--port") + 1] == "4321" and "--metrics" in argv
    # the preset's, then the threads flag, then server.args, then the arm's
    assert argv.index("--threads") < argv.index("-ngl") < argv.index("--flash-attn")
    assert launch.env == {"GGML_CUDA_GRAPHS": "1", "FIX": f"{campaign.data_dir}/raw/t/after/gpu/x"}
    assert (launch.stop_signal, launch.grace_s, launch.kind) == ("SIGINT", 3.0, "llama-server")
    assert launch.health_url == "http://127.0.0.1:4321/health"
    assert launch.version_argv == ("/opt/llama/bin/llama-server", "--version")
    before, _ = launch_of(campaign, "before")
    assert "--flash-attn" not in before.argv and "FIX" not in before.env


def test_vllm_and_sglang_presets_and_a_command_of_ones_own(tmp_path):
    vllm, _ = launch_of(campaign_of(tmp_path, "preset: vllm"), "before", binary="vllm")
    assert list(vllm.argv[:3]) == ["vllm", "serve", str(tmp_path / "models/m.gguf")]
    assert vllm.argv[vllm.argv.index("--max-num-seqs") + 1] == "8"
    assert vllm.argv[vllm.argv.index("--max-model-len") + 1] == str(2048 + 32 + 64)
    assert (vllm.stop_signal, vllm.ready_timeout_s) == ("SIGINT", 900.0)
    sglang, _ = launch_of(campaign_of(tmp_path, "preset: sglang"), "before", binary="python3")
    assert list(sglang.argv[:3]) == ["python3", "-m", "sglang.launch_server"] and "--enable-metrics" in sglang.argv
    own, _ = launch_of(campaign_of(tmp_path, """\
        command: ["{binary}", serve, --port, "{port}", --batch, "{slots}"]
        binary: ./my-engine
        health: /ready
        ready_timeout_s: 30"""), "before", binary="/x/my-engine")
    assert list(own.argv) == ["/x/my-engine", "serve", "--port", "4321", "--batch", "8"]
    assert (own.health_url, own.ready_timeout_s, own.kind, own.version_argv) == (
        "http://127.0.0.1:4321/ready", 30.0, "command", ())


def test_profilers_wrap_or_inject_the_server(tmp_path):
    rocprof = campaign_of(tmp_path, "preset: llama-server", "profiler: {kind: rocprofv3, args: [--hip-trace]}")
    launch, capture = launch_of(rocprof, "before")
    argv = list(launch.argv)
    assert argv[0] == "rocprofv3" and argv[argv.index("--") + 1] == "/opt/llama/bin/llama-server"
    assert argv[argv.index("-d") + 1] == str(capture.directory) and "--hip-trace" in argv[: argv.index("--")]
    assert capture.lifetime_capture() == capture.directory and launch.stdout_path is None

    nsys = campaign_of(tmp_path, "preset: llama-server", "profiler: {kind: nsys, binary: /opt/nsys/bin/nsys}")
    launch, capture = launch_of(nsys, "before")
    assert launch.argv[:2] == ("/opt/nsys/bin/nsys", "profile") and "/opt/llama/bin/llama-server" in launch.argv

    library = tmp_path / "libinject.so"
    library.write_bytes(b"")
    cupti = campaign_of(tmp_path, "preset: llama-server")
    launch, capture = launch_of(cupti, "traced", library=library)  # the arm's own profiler
    assert launch.argv[0] == "/opt/llama/bin/llama-server"  # injected, not wrapped
    assert launch.env["CUDA_INJECTION64_PATH"] == str(library)
    assert launch.stdout_path == capture.directory / "cupti.txt"  # the records apart from the log
    assert launch.log_path.name == "server.log"
    with pytest.raises(PerflibError, match="injection library .* does not exist"):
        launch_of(cupti, "traced", library=tmp_path / "missing.so")

    torch = campaign_of(tmp_path, "preset: vllm", "profiler: {kind: torch}")
    launch, capture = launch_of(torch, "before", binary="vllm")
    assert launch.env["VLLM_TORCH_PROFILER_DIR"] == str(capture.directory) and capture.lifetime_capture() is None
    no_dir = campaign_of(tmp_path, "preset: llama-server", "profiler: {kind: torch}")
    with pytest.raises(PerflibError, match="no PyTorch profiler folder variable"):
        launch_of(no_dir, "before")


@pytest.mark.parametrize(("server", "match"), [
    ("preset: llama-servr", r"server.preset \(line \d+\).*did you mean 'llama-server'"),
    ("command: ['{binary}', --port, '{prot}']", r"server.command \(line \d+\).*unknown \{prot\}"),
    ("preset: vllm\nargs: ['{slot}']", r"server.args \(line \d+\).*unknown \{slot\}"),
    ("binary: x", r"backends\[0\].server \(line \d+\).*a 'preset'.*or a 'command'"),
    ("preset: vllm\nshutdown: {signal: SIGHUP}", r"shutdown.signal.*one of SIGINT, SIGTERM"),
    ("preset: vllm\nready_timeout_s: 0", r"ready_timeout_s.*above 0"),
    ("preset: vllm\ncommand: ['{binary', x]", r"server.command.*braces are placeholders"),
])
def test_a_bad_server_entry_names_its_key_and_line(tmp_path, server, match):
    with pytest.raises(InputError, match=match):
        campaign_of(tmp_path, server)


def test_url_and_server_together_and_duplicate_arms_are_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(BASE.format(server="      preset: vllm", profiler="    url: http://x:1"))
    with pytest.raises(InputError, match="either 'url' or 'server'"):
        pc.load_campaign(path)
    path.write_text(BASE.format(server="      preset: vllm", profiler="").replace("name: after", "name: before"))
    with pytest.raises(InputError, match=r"arms \(line \d+\).*unique arm names"):
        pc.load_campaign(path)


def test_the_demo_start_key_is_the_llama_server_preset_built_for_the_cpu():
    from support import REPO

    demo = pc.load_campaign(REPO / "campaigns" / "demo.yaml")
    spec = demo.backends[0].server_spec
    assert (spec.preset, spec.build) == ("llama-server", "cpu")


def test_a_claim_is_exclusive_and_a_dead_runner_claim_is_taken_over(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLIB_HOST", "host-a")
    with claims.claim(tmp_path) as first:
        assert isinstance(first, claims.Claim)
        with claims.claim(tmp_path) as second:  # a second runner of the same host, alive: refused
            assert isinstance(second, str) and "host host-a" in second and str(os.getpid()) in second
        monkeypatch.setenv("PERFLIB_HOST", "host-b")
        with claims.claim(tmp_path) as other:  # another host: refused while the claim is fresh
            assert isinstance(other, str) and "host-a" in other
    assert not (tmp_path / claims.CLAIM).exists()  # released
    (tmp_path / claims.CLAIM).write_text('{"host": "host-b", "pid": 999999999, "since": 0}')
    with claims.claim(tmp_path) as taken:  # same host, its process gone: stale
        assert isinstance(taken, claims.Claim)
    (tmp_path / claims.CLAIM).write_text('{"host": "host-z", "pid": 1, "since": 0}')
    old = time.time() - claims.STALE_S - 60
    os.utime(tmp_path / claims.CLAIM, (old, old))
    with claims.claim(tmp_path) as taken:  # another host that stopped refreshing it: stale
        assert isinstance(taken, claims.Claim)
