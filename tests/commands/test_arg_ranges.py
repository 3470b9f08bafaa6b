"""Command-line numbers and names out of range are refused by the parser, with the flag and what it
expected (issue 12): never a negative count, a NaN timeout, or a `--date` that climbs out of reports/."""

from __future__ import annotations

import pytest

from perflib.cli import build_parser

SWEEP = ["sweep", "--base-url", "http://127.0.0.1:1", "--batch", "1", "--context", "8", "--out", "x"]
DIFF = ["metrics", "diff", "a.txt", "b.txt"]
SUMMARY = ["trace", "summary", "t.json"]
CUT = ["trace", "cut", "t.json", "runs"]
START = ["server", "start"]

REFUSED = [
    (DIFF, "--requests", "-100"),
    (DIFF, "--process-start-before", "nan"),
    (SWEEP, "--repeats", "0"),
    (SWEEP, "--repeats", "-3"),
    (SWEEP, "--decode-tokens", "1"),
    (SWEEP, "--decode-tokens", "-1"),
    (SWEEP, "--timeout", "nan"),
    (SWEEP, "--timeout", "inf"),
    (SWEEP, "--timeout", "0"),
    (SWEEP, "--timeout", "-5"),
    (SWEEP, "--threads", "0"),
    (SWEEP, "--batch", "-1"),
    (SWEEP, "--context", "0,8"),
    (SWEEP, "--dialect", "klingon"),
    (SUMMARY, "--top", "-1"),
    (CUT, "--repeats", "0"),
    (CUT, "--margin-ms", "-1"),
    (CUT, "--margin-ms", "nan"),
    (START, "--parallel", "0"),
    (START, "--context", "-2048"),
    (START, "--decode-tokens", "0"),
    (START, "--ctx-size", "0"),
    (START, "--port", "70000"),
    (START, "--layers", "0"),
    (["server", "build"], "--jobs", "0"),
    (["server", "model"], "--embd", "-256"),
    (["campaign", "run", "c.yaml"], "--guard-idle-s", "nan"),
    (["campaign", "run", "c.yaml"], "--guard-idle-s", "-1"),
    (["campaign", "report", "c.yaml"], "--date", "../../x"),
    (["campaign", "report", "c.yaml"], "--date", ".."),
    (["campaign", "report", "c.yaml"], "--date", "2026/01/01"),
]


@pytest.mark.parametrize(("argv", "flag", "value"), REFUSED, ids=[f"{a[0]}-{f}={v}" for a, f, v in REFUSED])
def test_a_value_out_of_range_is_refused_by_the_parser(argv, flag, value, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([*argv, flag, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and "expected" in err or "invalid choice" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(("argv", "flag", "value", "parsed"), [
    (SWEEP, "--timeout", "0.5", 0.5),
    (SWEEP, "--repeats", "1", 1),
    (DIFF, "--requests", "0", 0),
    (["campaign", "report", "c.yaml"], "--date", "2026-01-01", "2026-01-01"),
    (START, "--port", "8080", 8080),
])
def test_a_value_in_range_is_taken(argv, flag, value, parsed):
    args = build_parser().parse_args([*argv, flag, value])
    assert getattr(args, flag.lstrip("-").replace("-", "_")) == parsed


def test_write_report_refuses_an_unsafe_date_given_in_code(tmp_path):
    """The library entry point checks the date too (a notebook calls it without the parser)."""
    from support import DATA

    from perflib.campaign import load_campaign
    from perflib.config import replace_data_dir
    from perflib.derive import DerivedTables
    from perflib.errors import PerflibError
    from perflib.pageinputs import PageInputs
    from perflib.report.page import write_report
    from perflib.verdicts import Decisions

    campaign = replace_data_dir(load_campaign(DATA / "campaign-sample" / "campaign.yaml"), None, tmp_path / "r")
    with pytest.raises(PerflibError, match="page date name"):
        write_report(campaign, DerivedTables(), PageInputs(campaign.data_dir, campaign.reports_dir),
                     Decisions.of(campaign, DerivedTables()), date="../../x")
    assert not any(tmp_path.rglob("*.md")) and not (tmp_path / "x.md").exists()
