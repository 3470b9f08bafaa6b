"""Hostile campaign files (issue 12): each refused at `campaign validate` with its key and line, what
was expected and what was found; bounded work (the matrix counted before it is expanded, an alias
bomb refused at once); a FIFO or device given as the file is refused without being opened for long."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest
from support import MINIMAL_CAMPAIGN

from perflib.campaign import load_campaign
from perflib.cli import main as cli_main
from perflib.config import MAX_RUNS, Campaign
from perflib.errors import InputError, PerflibError

MINIMAL = MINIMAL_CAMPAIGN
BACKEND = "    url: http://127.0.0.1:9\n"


def _backend(extra: str) -> str:
    return MINIMAL.replace(BACKEND, BACKEND + textwrap.indent(extra, "    "))


def _server(command: str, env: str = "") -> str:
    """MINIMAL with a server perflib starts (line 6: `command`, line 7: `env`) instead of its URL (issue 21)."""
    return MINIMAL.replace(BACKEND, f"    server:\n      command: {command}\n"
                           + (f"      env: {env}\n" if env else "") + "      binary: /bin/true\n")


# (campaign text, the key path the error names, a piece of what it says was found)
REFUSED = {
    "duplicate arm names": (MINIMAL + "arms: [{name: a}, {name: a}]\n", "arms (line 9)", "['a', 'a']"),
    "campaign name ../..": (MINIMAL.replace("name: t", "name: ../.."), "name (line 1)", "'../..'"),
    "arm name ../..": (MINIMAL + "arms: [{name: '../..'}]\n", "arms[0].name (line 9)", "'../..'"),
    "backend name with a slash": (MINIMAL.replace("name: cpu", "name: a/b"), "backends[0].name (line 4)", "'a/b'"),
    "unknown placeholder in profiler.output": (_backend("profiler: {kind: kineto, output: '{nope}/x.json'}\n"),
                                               "backends[0].profiler.output (line 6)", "unknown {nope}"),
    "attribute in profiler.output": (_backend("profiler: {kind: kineto, output: '{run_dir.parent}/x'}\n"),
                                     "backends[0].profiler.output (line 6)", "unknown {run_dir.parent}"),
    "lone brace in profiler.output": (_backend("profiler: {kind: kineto, output: 'x{'}\n"),
                                      "backends[0].profiler.output (line 6)", "'x{'"),
    "negative bandwidth": (_backend("peak_bandwidth_gbs: -5\n"), "backends[0].peak_bandwidth_gbs (line 6)", "-5"),
    "NaN bandwidth": (_backend("peak_bandwidth_gbs: .nan\n"), "backends[0].peak_bandwidth_gbs (line 6)", "nan"),
    "infinite bandwidth": (_backend("peak_bandwidth_gbs: .inf\n"), "backends[0].peak_bandwidth_gbs (line 6)", "inf"),
    "negative weight bytes": (MINIMAL.replace("{name: tiny}", "{name: tiny, weight_bytes: -1}"),
                              "model.weight_bytes (line 2)", "-1"),
    "negative KV bytes": (MINIMAL.replace("{name: tiny}", "{name: tiny, kv_bytes_per_token: -8}"),
                          "model.kv_bytes_per_token (line 2)", "-8"),
    "weight bytes past int64": (MINIMAL.replace("{name: tiny}", "{name: tiny, weight_bytes: 99999999999999999999}"),
                                "model.weight_bytes (line 2)", "99999999999999999999"),
    "negative threads": (_backend("threads: -2\n"), "backends[0].threads (line 6)", "-2"),
    "unknown gate measure": (MINIMAL + "gate: {measure: decode_tok_z, batch: 1, max_regression_pct: 5}\n",
                             "gate.measure (line 9)", "did you mean 'decode_tok_s'"),
    "NaN gate threshold": (MINIMAL + "gate: {measure: decode_tok_s, batch: 1, max_regression_pct: .nan}\n",
                           "gate.max_regression_pct (line 9)", "nan"),
    "gate batch not in the matrix": (MINIMAL + "gate: {measure: decode_tok_s, batch: 8, max_regression_pct: 5}\n",
                                     "gate.batch (line 9)", "8"),
    "gate arm unknown": (MINIMAL + "gate: {measure: decode_tok_s, batch: 1, max_regression_pct: 5, arm: zz}\n",
                         "gate.arm (line 9)", "'zz'"),
    "missing compare_with file": (MINIMAL + "compare_with: [{campaign: nothere.yaml}]\n",
                                  "compare_with[0].campaign (line 9)", "nothere.yaml"),
    "unknown kernel-class table": (_backend("kernel_classes: pytorch-cuad\n"), "backends[0].kernel_classes (line 6)",
                                   "'pytorch-cuad'"),
    "missing kernel-class file": (_backend("kernel_classes: mine.yaml\n"), "backends[0].kernel_classes (line 6)",
                                  "mine.yaml"),
    "a format spec in a template": (_server("['{binary}', --port, '{port:99999999999}']"),
                                    "backends[0].server.command (line 6)", "{port:99999999999}"),
    "a conversion in a template": (_server("['{binary}', '{model!r}']"), "backends[0].server.command (line 6)",
                                   "{model!r}"),
    "a NUL byte in an argument": (_server('["{binary}", "a\\0b"]'), "backends[0].server.command[1] (line 6)",
                                  "'a\\x00b'"),
    "a NUL byte in an env value": (_server("['{binary}']", '{A: "x\\0y"}'), "backends[0].server.env.A (line 7)",
                                   "'x\\x00y'"),
    "= in an env name": (_server("['{binary}']", "{'A=B': '1'}"), "backends[0].server.env.A=B (line 7)", "'A=B'"),
    "a literal brace in an env value": (_server("['{binary}']", "{A: 'x{y'}"), "backends[0].server.env (line 7)",
                                        "'x{y'"),
    "a matrix past the limit": (MINIMAL + "repeats: 100000000\n", "repeats (line 9)",
                                "200000000 runs (1 arms x 1 backends x 1 contexts x 2 batches x 100000000 repeats)"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_at_validate_with_its_line(case, tmp_path, capsys):
    text, where, found = REFUSED[case]
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_campaign(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}:{where}: expected ") and ", found " in msg and found in msg, msg
    assert cli_main(["campaign", "validate", str(path)]) == 2
    assert capsys.readouterr().err.strip() == f"perflib: error: {msg}"


def test_a_literal_brace_in_an_env_value_says_to_double_it(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(_server("['{binary}']", "{A: 'x{y'}"))
    with pytest.raises(InputError, match=r"a literal \{ is written \{\{"):
        load_campaign(path)
    path.write_text(_server("['{binary}']", "{A: 'x{{y}}'}"))
    assert load_campaign(path).backends[0].server.env == {"A": "x{{y}}"}  # doubled: one brace each, once rendered


def test_a_good_campaign_with_every_checked_key_loads(tmp_path):
    (tmp_path / "other.yaml").write_text(MINIMAL)
    (tmp_path / "mine.yaml").write_text("rules: []\n")
    text = _backend("peak_bandwidth_gbs: 4800\nkernel_classes: mine.yaml\nthreads: 2\n"
                    "profiler: {kind: kineto, output: '{data_dir}/{arm}/{batch}-{{x}}.json'}\n")
    text = text.replace("{name: tiny}", "{name: tiny, weight_bytes: 1000, kv_bytes_per_token: 0}")
    text += ("arms: [{name: before}, {name: after}]\n"
             "gate: {measure: decode_tok_s, batch: 2, max_regression_pct: 5, baseline: before}\n"
             "compare_with: [{campaign: other.yaml}]\n")
    path = tmp_path / "c.yaml"
    path.write_text(text)
    campaign = load_campaign(path)
    assert campaign.run_count == 4 and len(campaign.expand()) == 4


ALIAS_BOMB = "".join(f"{a}: &{a} [{', '.join([f'*{p}'] * 9) if p.strip() else ', '.join(['x'] * 9)}]\n"
                     for p, a in zip(" abcdefgh", "abcdefghi", strict=True))


@pytest.mark.parametrize(("text", "found"), [
    (ALIAS_BOMB + MINIMAL, "more than 100000"),
    ("loop: &l [*l]\n" + MINIMAL, "an alias that contains itself"),
    ("[" * 20000 + "]" * 20000 + "\n", "deeper nesting"),
    ("\x1f" + MINIMAL, "special characters are not allowed"),  # found by tests/fuzz/test_inputs.py
])
def test_hostile_yaml_is_refused_quickly(text, found, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    started = time.monotonic()
    with pytest.raises(InputError, match=found):
        load_campaign(path)
    assert time.monotonic() - started < 5


def test_the_line_map_does_not_follow_aliases():
    """9**9 paths once expanded; the map walks each node once, so it is built at once and small."""
    from perflib.config.declare import Lines

    started = time.monotonic()
    lines = Lines(ALIAS_BOMB)
    assert time.monotonic() - started < 2
    assert lines.where("i") == "i (line 9)" and len(lines.lines) < 200


def test_aliases_of_a_small_document_still_load(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(MINIMAL.replace("contexts: [64]", "contexts: &ctx [64, 128]") + "arms: [{name: a}]\n"
                    "candidates: []\n")
    assert load_campaign(path).contexts == (64, 128)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_device_given_as_the_campaign_is_refused(kind, tmp_path, capsys):
    if kind == "fifo":
        path = tmp_path / "c.yaml"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    started = time.monotonic()
    assert cli_main(["campaign", "validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "in a regular file" in err and ("FIFO" in err or "device" in err), err
    assert time.monotonic() - started < 5


def test_expand_counts_before_it_expands():
    from perflib.config import ArmSpec, BackendSpec, ModelSpec

    campaign = Campaign(name="t", model=ModelSpec("m"), backends=(BackendSpec("b", url="http://x"),),
                        batches=(1, 2), contexts=(8,), decode_tokens=4, repeats=MAX_RUNS,
                        arms=(ArmSpec("a"),))
    started = time.monotonic()
    with pytest.raises(PerflibError, match=f"at most {MAX_RUNS} runs, found {2 * MAX_RUNS}"):
        campaign.expand()
    assert time.monotonic() - started < 1
