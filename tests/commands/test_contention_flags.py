"""`--contention-threshold` and `--no-contention` on `sweep` and `campaign run` (issue 11 item 1)."""

from __future__ import annotations

import pytest

from perflib import load
from perflib.cli import build_parser
from perflib.commands import campaign as campaign_cmd
from perflib.commands.sweep import format_level_table

SWEEP = ["sweep", "--base-url", "http://127.0.0.1:1", "--batch", "1", "--context", "8", "--out", "x"]


def test_the_help_default_is_the_samplers_threshold():
    assert campaign_cmd.CPU_THRESHOLD == load.CPU_THRESHOLD


@pytest.mark.parametrize("argv", [SWEEP, ["campaign", "run", "c.yaml"]])
def test_defaults_sample_contention(argv):
    args = build_parser().parse_args(argv)
    assert args.no_contention is False and args.contention_threshold == load.CPU_THRESHOLD


@pytest.mark.parametrize("value", ["0", "-0.1", "1.5", "nan", "inf", "half"])
def test_a_threshold_outside_0_to_1_is_refused(value, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([*SWEEP, "--contention-threshold", value])
    assert exc.value.code == 2
    assert "--contention-threshold" in capsys.readouterr().err


def test_the_sweep_table_counts_contended_repeats():
    row = {"batch": 1, "context": 8, "repeats": 3, "complete": 3, "contended": 2, "counters": "ok"}
    table = format_level_table([row])
    assert "3/3 (2 contended)" in table
    assert "3/3 (" not in format_level_table([{**row, "contended": 0}])
