"""Hostile flags and inputs that ended in tracebacks (issue 21, bad 6): a `--window` bound past int64, a
`--steps` pattern that does not compile, a run manifest whose clock fields are a string, NaN or out of
range, and a JSON trace nested past the parser's depth each give one `perflib: error:` line naming the
flag or the file."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from support import DATA, fixture

from perflib.cli import main

RUN = DATA / "campaign-sample" / "raw" / "sample" / "before" / "cpu" / "b1_c128_r1"


def _one_error_line(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("perflib: error: "), err
    return err.strip()


@pytest.mark.parametrize("window", ["1e309ms:", ":1e300s", "-1e30s:", "99999999999999999999999999:"])
def test_a_window_bound_past_int64_is_one_error_line(capsys, window):
    trace = fixture("rocprofv3", "rocm7.0-docs", "kernel_trace.csv")
    line = _one_error_line(capsys, ["trace", "summary", str(trace), f"--window={window}"])
    assert line.startswith(f"perflib: error: --window {window!r}") and "out of range" in line


@pytest.mark.parametrize("pattern", ["(", "[a-", "x{2,1}"])
def test_a_steps_pattern_that_does_not_compile_is_one_error_line(capsys, pattern):
    trace = fixture("rocprofv3", "rocm7.0-docs", "kernel_trace.csv")
    line = _one_error_line(capsys, ["trace", "summary", str(trace), "--steps", pattern])
    assert line.startswith(f"perflib: error: --steps {pattern!r}: expected a step count or a regular expression")


@pytest.mark.parametrize("value, found", [('"abc"', "a string 'abc'"), ("NaN", "a number nan"),
                                          ("1e30", "a number 1e+30"), ("-5", "an integer -5"),
                                          ("99999999999999999999999", "an integer 99999999999999999999999")])
@pytest.mark.parametrize("command", ["summary", "cut"])
def test_a_manifest_clock_that_is_not_int64_ns_is_one_error_line(tmp_path, capsys, value, found, command):
    trace = fixture("rocprofv3", "rocm7.0-docs", "kernel_trace.csv")
    run = tmp_path / "b1_c128_r1"
    shutil.copytree(RUN, run)
    text = (run / "manifest.json").read_text()
    (run / "manifest.json").write_text(re.sub(r'"monotonic_ns": \d+', f'"monotonic_ns": {value}', text, count=1))
    argv = (["trace", "summary", str(trace), "--manifest", str(run)] if command == "summary"
            else ["trace", "cut", str(trace), str(tmp_path)])
    line = _one_error_line(capsys, argv)
    assert line == (f"perflib: error: {run / 'manifest.json'}:field clocks.start.monotonic_ns: expected an integer "
                    f"of nanoseconds from 0 to 2^63 - 1 (int64), found {found}")


@pytest.mark.parametrize("body", [
    '{"schemaVersion": 1, "traceEvents": ' + "[" * 100_000 + "]" * 100_000 + "}",
    '{"schemaVersion": 1, "traceEvents": [{"ph": "X", "args": ' + '{"a": ' * 100_000 + "1" + "}" * 100_000 + "}]}",
], ids=["nested-lists", "nested-objects"])
def test_a_trace_nested_past_the_parsers_depth_is_one_error_line(tmp_path, capsys, body):
    path = tmp_path / "deep.json"
    path.write_text(body)
    for argv in (["trace", "summary", str(path)], ["trace", "cut", str(path), str(tmp_path / "runs")]):
        if argv[1] == "cut":
            shutil.copytree(RUN, tmp_path / "runs" / RUN.name)
        line = _one_error_line(capsys, argv)
        assert line == f"perflib: error: {path}: expected JSON nested to a sensible depth, found deeper than the " \
                       "parser's limit"


def test_the_sample_manifest_still_reads(capsys):
    """The check refuses only what is wrong: every committed manifest's clocks pass it."""
    from perflib import rundir

    for manifest in Path(DATA / "campaign-sample").rglob("manifest.json"):
        assert rundir.read_manifest(manifest)["clocks"]["start"]["monotonic_ns"] > 0
    assert json.loads((RUN / "manifest.json").read_text())["clocks"]
