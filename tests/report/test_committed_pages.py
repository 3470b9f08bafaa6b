"""Committed results pages are rebuilt from data/raw alone, byte for byte apart from the date, and drawn
again from the data/derived that rebuild wrote, byte for byte."""

from __future__ import annotations

import re
import shutil

import pytest
from support import REPO

from perflib import derive, pageinputs, report
from perflib.campaign import load_campaign
from perflib.cli import main
from perflib.verdicts import Decisions


def _without_date(text: str) -> str:
    return re.sub(r"\d{4}-\d{2}-\d{2}", "DATE", text)


@pytest.mark.parametrize("campaign", ["cpu-reference", "cuda-h200-batch", "cuda-h200-fa", "cuda-h200-answer",
                                      "cuda-cpu-h200-cluster", "vllm-cpu", "cuda-h200-multigpu"])
def test_committed_page_rebuilds_from_raw_data(campaign, tmp_path, capsys):
    pages = sorted((REPO / "reports").glob(f"{campaign}-[0-9][0-9][0-9][0-9]-*.md"))
    assert pages, f"no committed page reports/{campaign}-*.md"
    committed = pages[-1]
    shutil.copytree(REPO / "data" / "raw" / campaign, tmp_path / "data" / "raw" / campaign)
    (tmp_path / "reports").mkdir()
    for other in (REPO / "reports").glob("*.md"):  # `see_also` links the pages that exist beside it
        if not other.name.startswith(f"{campaign}-"):
            shutil.copy(other, tmp_path / "reports" / other.name)
    code = main(["campaign", "report", str(REPO / "campaigns" / f"{campaign}.yaml"),
                 "--data", str(tmp_path / "data"), "--reports", str(tmp_path / "reports")])
    assert code == 0, capsys.readouterr().err
    rebuilt = sorted((tmp_path / "reports").glob(f"{campaign}-[0-9][0-9][0-9][0-9]-*.md"))
    assert len(rebuilt) == 1
    assert _without_date(rebuilt[0].read_text()) == _without_date(committed.read_text())
    figures = committed.with_suffix("")
    for png in sorted(figures.glob("*.png")):
        assert (rebuilt[0].with_suffix("") / png.name).read_bytes() == png.read_bytes(), png.name
    # and data/derived alone draws it again, to the byte: the page reads nothing else
    written = rebuilt[0].read_bytes()
    rebuilt[0].unlink()
    derived = tmp_path / "data" / "derived" / campaign
    shutil.rmtree(tmp_path / "data" / "raw")
    spec, tables = load_campaign(REPO / "campaigns" / f"{campaign}.yaml"), derive.read(derived)
    again = report.write_report(spec, tables, pageinputs.read(derived), Decisions.of(spec, tables))
    assert again == rebuilt[0] and again.read_bytes() == written
