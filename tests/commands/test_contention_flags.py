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
    assert campaign_cmd.WAIT_THRESHOLD == load.WAIT_THRESHOLD
    assert campaign_cmd.PSI_THRESHOLD == load.PSI_THRESHOLD


def test_the_collect_notebook_defaults_are_the_samplers():
    """collect.ipynb run by hand (not by `campaign run`, which passes both) judges as the CLI does."""
    import nbformat
    from support import REPO

    book = nbformat.read(REPO / "notebooks" / "collect.ipynb", as_version=4)
    cell = next(c for c in book.cells if "parameters" in c.metadata.get("tags", []))
    values: dict = {}
    exec(cell.source, values)  # noqa: S102 - the notebook's own parameter cell: plain assignments
    level = load.LevelSpec.from_json(values["level"])
    assert level.contention_threshold == load.CPU_THRESHOLD and level.wait_threshold == load.WAIT_THRESHOLD
    assert level.psi_threshold == load.PSI_THRESHOLD


def test_campaign_run_takes_a_wait_threshold_and_a_wait_budget(capsys):
    args = build_parser().parse_args(["campaign", "run", "c.yaml", "--wait-threshold", "0.8", "--contention-wait", "0",
                                      "--psi-threshold", "1"])
    assert args.wait_threshold == 0.8 and args.contention_wait == 0 and args.psi_threshold == 1
    defaults = build_parser().parse_args(["campaign", "run", "c.yaml"])
    assert defaults.wait_threshold == load.WAIT_THRESHOLD and defaults.contention_wait == campaign_cmd.WAIT_BUDGET_S
    for flag, value in (("--wait-threshold", "0"), ("--contention-wait", "-1"), ("--psi-threshold", "1.5")):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["campaign", "run", "c.yaml", flag, value])
        assert flag in capsys.readouterr().err


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


def test_every_printed_figure_is_explained_with_its_unit_in_help(capsys):
    """Issue 13: `--help` of sweep and trace summary explains each figure it prints, with its unit."""
    import re

    from perflib.commands.sweep import FIGURE_MEANING, TABLE_FIGURES

    with pytest.raises(SystemExit):
        build_parser().parse_args(["sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for key, header, _ in TABLE_FIGURES:
        meaning = FIGURE_MEANING[key]
        assert f"{header} {meaning}" in text, f"{header!r} not explained in sweep --help"
        assert re.search(r"\((ms|tok/s|count|slots|%)\)", meaning), f"{header!r}: no unit in {meaning!r}"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["trace", "summary", "--help"])
    text = capsys.readouterr().out
    for figure in ("GPU busy", "host gap", "busy share", "per step", "host gaps by size", "largest gaps",
                   "kernel classes", "top kernels"):
        assert any(ln.strip().startswith(figure) for ln in text.splitlines()), figure
    assert "(ms)" in text and "(%)" in text and "(count)" in text
