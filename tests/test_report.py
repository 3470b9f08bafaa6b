"""The results page and the derived tables, on the committed sample capture (no server)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from perflib import derive, report, sweep
from perflib.campaign import load_campaign, replace_data_dir, run_folders
from perflib.cli import main

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "tests" / "data" / "campaign-sample"


@pytest.fixture(scope="module")
def sample():
    if not (SAMPLE / "raw").is_dir():
        pytest.skip("committed sample capture tests/data/campaign-sample/raw is missing")
    return load_campaign(SAMPLE / "campaign.yaml")


@pytest.fixture()
def sample_copy(tmp_path):
    """The sample campaign copied to tmp, so derived/ and reports/ land there."""
    if not (SAMPLE / "raw").is_dir():
        pytest.skip("committed sample capture tests/data/campaign-sample/raw is missing")
    shutil.copytree(SAMPLE, tmp_path / "sample")
    return tmp_path / "sample" / "campaign.yaml"


# ------------------------------------------------------------------------------ escaping


def test_escape_md_keeps_table_cells_intact():
    name = "void k<__half, 4>(a|b) *x* _y_ [z]"
    escaped = report.escape_md(name)
    for raw in ("<", ">"):
        assert raw not in escaped
    assert "&lt;" in escaped and "&gt;" in escaped
    # every | * _ [ ] is preceded by a backslash
    for ch in "|*_[]":
        assert all(escaped[i - 1] == "\\" for i, c in enumerate(escaped) if c == ch)
    row = f"| {escaped} | 1 |"
    assert len(re.findall(r"(?<!\\)\|", row)) == 3  # only the cell borders split the row
    assert report.escape_md("a\nb") == "a b"
    assert report.escape_md(None) == ""


def test_fmt_never_prints_zero_for_missing():
    assert report.fmt(None, ".1f", " ms") == "n/a"
    assert report.fmt(float("nan"), ".1f", " ms") == "n/a"
    assert report.fmt(2.345, ".2f", " ms") == "2.35 ms"
    assert report.pct(None) == "n/a" and report.pct(0.5) == "50.0%"


# ------------------------------------------------------------------------------ derive


def test_derive_from_sample_matches_summarize_run(sample):
    tables = derive.build(sample)
    folders = run_folders(sample)
    assert len(tables.runs) == len(folders) == 8
    assert list(tables.runs.columns[:len(derive.COLUMNS["runs"])]) == derive.COLUMNS["runs"]
    assert set(tables.runs["status"]) == {"complete"}
    # rows sorted by the keys
    keys = tables.runs[derive.KEYS].astype(str).values.tolist()
    assert keys == sorted(keys, key=lambda k: (k[0], k[1], k[2], int(k[3]), int(k[4]), int(k[5])))
    for arm, _backend, run_dir in folders:
        row = sweep.summarize_run(run_dir)
        mine = tables.runs[(tables.runs["arm"] == arm) & (tables.runs["batch"] == row["batch"])
                           & (tables.runs["repeat"] == row["repeat"])].iloc[0]
        for col in ("decode_step_ms", "occupancy", "decode_tok_s"):
            assert mine[col] == pytest.approx(row[col])
    assert len(tables.trace_runs) == 0
    assert "arm before: no kernel trace for backend cpu (profiler: none)" in tables.notes


def test_derived_csv_bytes_are_stable(sample, tmp_path):
    tables = derive.build(sample)
    derive.write(tables, tmp_path / "a")
    derive.write(derive.build(sample), tmp_path / "b")
    for name in derive.COLUMNS:
        assert (tmp_path / "a" / f"{name}.csv").read_bytes() == (tmp_path / "b" / f"{name}.csv").read_bytes()
    back = derive.read(tmp_path / "a")
    assert back.runs["decode_step_ms"].tolist() == pytest.approx(
        pd.to_numeric(tables.runs["decode_step_ms"]).tolist(), rel=1e-5)


# ------------------------------------------------------------------------------ the page


def test_page_is_deterministic_apart_from_the_date(sample_copy, tmp_path):
    campaign = load_campaign(sample_copy)
    first = report.write_report(campaign, reports_dir=tmp_path / "r1")
    second = report.write_report(campaign, reports_dir=tmp_path / "r2")
    assert first.read_bytes() == second.read_bytes()
    figures = sorted((first.parent / first.stem).glob("*.png"))
    assert {p.name for p in figures} >= {"batch_scaling.png", "decomposition.png", "step_over_floor.png",
                                         "before_after.png"}
    for png in figures:
        assert png.read_bytes() == (second.parent / second.stem / png.name).read_bytes()
    other = report.write_report(campaign, reports_dir=tmp_path / "r3", date="2000-01-01")
    date = first.stem.rsplit("-", 3)[-3:]
    a = first.read_text().replace("-".join(date), "DATE")
    b = other.read_text().replace("2000-01-01", "DATE")
    assert a == b
    assert sum("DATE" in line for line in a.splitlines() if line.startswith("Date:")) == 1


def test_page_sections_units_links_and_verdict_numbers(sample_copy, tmp_path):
    campaign = load_campaign(sample_copy)
    page = report.write_report(campaign, reports_dir=tmp_path / "reports")
    text = page.read_text()
    for heading in ("## Environment", "## Per level", "## Decode-window decomposition", "## Step over floor",
                    "## Before / after", "## Cross-backend reference ratio", "## Verdicts", "## Raw data"):
        assert heading in text
    assert " tok/s |" in text and " ms |" in text
    levels = report.level_table(derive.build(campaign))
    b1 = levels[(levels["arm"] == "after") & (levels["batch"] == 1)].iloc[0]
    assert f"{b1.decode_step_ms:.2f} ms" in text
    # links are relative and resolve to the run folders
    links = re.findall(r"\]\((\.\./[^)]+/)\)", text)
    assert len([x for x in links if "/raw/" in x]) == 8
    assert all((page.parent / link).resolve().is_dir() for link in links if "/raw/" in link)
    # every backend of the campaign plus ROCm and Metal in the ratio table, each with a number or a why
    ratio = text.split("## Cross-backend reference ratio")[1].split("## Verdicts")[0]
    for backend in ("cpu", "rocm", "metal"):
        assert f"| {backend} |" in ratio
    assert "not measured: not part of this campaign" in ratio
    verdicts = text.split("## Verdicts")[1].split("## ")[0]
    measured = [ln for ln in verdicts.splitlines() if "| confirmed |" in ln or "| ruled out |" in ln
                or "| inconclusive |" in ln]
    assert measured and all(re.search(r"\d+\.\d+", ln) for ln in measured)
    assert "not measured (no kernel trace for backend cpu" in verdicts
    assert "Gate: decode\\_tok\\_s at batch 1" in text


def test_cli_report_and_bad_campaign(sample_copy, tmp_path, capsys):
    assert main(["campaign", "report", str(sample_copy), "--reports", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "page:" in out and list((tmp_path / "out").glob("sample-*.md"))
    assert (sample_copy.parent / "derived" / "sample" / "runs.csv").is_file()
    bad = tmp_path / "bad.yaml"
    bad.write_text(sample_copy.read_text().replace("repeats:", "repeatz:"))
    assert main(["campaign", "report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("perflib: error:") and "did you mean 'repeats'" in err


def test_data_dir_override(sample, tmp_path):
    moved = replace_data_dir(sample, tmp_path, None)
    assert derive.build(moved).runs.empty


def test_see_also_links_existing_pages_only(tmp_path):
    (tmp_path / "h200-pytorch-2026-01-02.md").write_text("x")
    (tmp_path / "h200-pytorch-2026-03-04.md").write_text("y")
    links = report.see_also_links(["h200-pytorch-*.md", "missing-*.md", "https://example.org/p"], tmp_path)
    assert links[0]["href"] == "h200-pytorch-2026-03-04.md"
    assert links[1]["href"] == "" and links[1]["note"] == "not present yet"
    assert links[2]["href"] == "https://example.org/p"
