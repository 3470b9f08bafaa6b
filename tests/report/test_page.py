"""The results page on the committed sample capture (no server)."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from support import DATA, REPO

from perflib import derive
from perflib.campaign import load_campaign
from perflib.cli import main
from perflib.report import page as report
from perflib.report import tables, text
from perflib.report import text as text_mod

SAMPLE = DATA / "campaign-sample"


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
    escaped = text.escape_md(name)
    for raw in ("<", ">"):
        assert raw not in escaped
    assert "&lt;" in escaped and "&gt;" in escaped
    # every | * _ [ ] is preceded by a backslash
    for ch in "|*_[]":
        assert all(escaped[i - 1] == "\\" for i, c in enumerate(escaped) if c == ch)
    row = f"| {escaped} | 1 |"
    assert len(re.findall(r"(?<!\\)\|", row)) == 3  # only the cell borders split the row
    assert text.escape_md("a\nb") == "a b"
    assert text.escape_md(None) == ""


def test_fmt_never_prints_zero_for_missing():
    assert text.fmt(None, ".1f", " ms") == "n/a"
    assert text.fmt(float("nan"), ".1f", " ms") == "n/a"
    assert text.fmt(2.345, ".2f", " ms") == "2.35 ms"
    assert text.pct(None) == "n/a" and text.pct(0.5) == "50.0%"


# ------------------------------------------------------------------------------ the page


def test_page_is_deterministic_apart_from_the_date(sample_copy, tmp_path):
    campaign = load_campaign(sample_copy)
    first = report.write_report(campaign, reports_dir=tmp_path / "r1")
    second = report.write_report(campaign, reports_dir=tmp_path / "r2")
    assert first.read_bytes() == second.read_bytes()
    figures = sorted((first.parent / first.stem).glob("*.png"))
    # the sample gives no bandwidth, so it has no step-over-floor figure (tests/report/test_figures.py)
    assert {p.name for p in figures} == {"batch_scaling.png", "decomposition.png", "before_after.png"}
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
    body = page.read_text()
    for heading in ("## Environment", "## Per level", "## Decode-window decomposition", "## Step over floor",
                    "## Before / after", "## Cross-backend reference ratio", "## Verdicts", "## Raw data"):
        assert heading in body
    assert " tok/s |" in body and " ms |" in body
    levels = tables.level_table(derive.build(campaign))
    b1 = levels[(levels["arm"] == "after") & (levels["batch"] == 1)].iloc[0]
    assert f"{b1.decode_step_ms:.2f} ms" in body
    # links are relative and resolve to the run folders
    links = re.findall(r"\]\((\.\./[^)]+/)\)", body)
    assert len([x for x in links if "/raw/" in x]) == 8
    assert all((page.parent / link).resolve().is_dir() for link in links if "/raw/" in link)
    # the campaign's backend in the ratio table; other backends only where the campaign names them
    ratio = body.split("## Cross-backend reference ratio")[1].split("\n## ")[0]
    assert "| cpu |" in ratio and "| rocm |" not in ratio and "| metal |" not in ratio
    verdicts = body.split("## Verdicts")[1].split("## ")[0]
    measured = [ln for ln in verdicts.splitlines() if "| confirmed |" in ln or "| ruled out |" in ln
                or "| inconclusive |" in ln]
    assert measured and all(re.search(r"\d+\.\d+", ln) for ln in measured)
    assert "not measured (no kernel trace for backend cpu" in verdicts
    assert "Gate: decode\\_tok\\_s at batch 1" in body


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


@pytest.mark.parametrize("case", ["question", "description", "neither"])
def test_the_page_opens_with_the_campaigns_question(sample_copy, tmp_path, capsys, case):
    """Its `question:` first (above the description), else the description itself, else the playbook's
    generic question; `campaign validate` says which."""
    from perflib.config import playbook_question

    own = "Does a second llama-server thread halve the batch-2 decode step on this 2-core machine?"
    text = sample_copy.read_text()
    if case == "question":
        text = text.replace("model:\n", f"question: {own}\nmodel:\n", 1)
    elif case == "neither":
        text = text.split("description: >-")[0] + "model:" + text.split("\nmodel:", 1)[1]
    sample_copy.write_text(text)
    campaign = load_campaign(sample_copy)
    assert (campaign.question == own) is (case == "question") and bool(campaign.description) is (case != "neither")
    body = report.write_report(campaign, reports_dir=tmp_path / "reports").read_text()
    head = [ln for ln in body.split("\n## ")[0].splitlines()[3:] if ln.strip()]  # after the title and date
    generic = playbook_question("batched-decode")
    assert generic and "batched decode" in generic.lower()
    if case == "question":
        assert head[0] == f"**Question.** {text_mod.escape_md(own)}"
        assert head[1] == text_mod.escape_md(campaign.description)  # the description follows it
    elif case == "description":
        assert head[0] == text_mod.escape_md(campaign.description) and "**Question.**" not in body
    else:
        assert head[0] == f"**Question.** {text_mod.escape_md(generic)}"
    assert generic not in body or case == "neither"
    assert main(["campaign", "validate", str(sample_copy), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    expected = {"question": (own, "question"), "description": (campaign.description, "description"),
                "neither": (generic, "playbook batched-decode")}[case]
    assert (info["question"], info["question_from"]) == expected
    assert main(["campaign", "validate", str(sample_copy)]) == 0
    assert f"the page opens with its {expected[1]}: {expected[0]}" in capsys.readouterr().out


def test_see_also_links_existing_pages_only(tmp_path):
    (tmp_path / "h200-pytorch-2026-01-02.md").write_text("x")
    (tmp_path / "h200-pytorch-2026-03-04.md").write_text("y")
    links = report.see_also_links(["h200-pytorch-*.md", "missing-*.md", "https://example.org/p"], tmp_path)
    assert links[0]["href"] == "h200-pytorch-2026-03-04.md"
    assert links[1]["href"] == "" and links[1]["note"] == "not present yet"
    assert links[2]["href"] == "https://example.org/p"


@pytest.mark.parametrize("name", ["cpu-reference", "cuda-h200", "cuda-h200-batch", "h200-pytorch"])
def test_committed_pages_open_with_their_answer(name):
    """Summary first: the question, a verdict row per measured candidate with its number, the checks,
    all before the first section, in a screenful; the bulk is collapsed in <details>."""
    page = sorted((REPO / "reports").glob(f"{name}-[0-9][0-9][0-9][0-9]-*.md"))[-1]
    text = page.read_text()
    head = text.split("\n## ")[0]
    lines = [ln for ln in head.splitlines()[4:] if ln.strip()]  # after the title, date and description
    campaign = load_campaign(REPO / "campaigns" / f"{name}.yaml")
    opening = f"**Question.** {text_mod.escape_md(campaign.question)}" if campaign.question else \
        text_mod.escape_md(campaign.description)  # the campaign's own question, else its description
    assert opening and head.splitlines()[4] == opening
    assert "| cause | verdict | deciding number | where |" in head
    assert "- **Checks.**" in head and "Sections:" in head
    assert len(lines) <= 25, len(lines)
    verdict_rows = [ln for ln in lines if ln.startswith("| ") and ("**confirmed**" in ln or "**ruled out**" in ln
                                                                   or "**inconclusive**" in ln)]
    assert verdict_rows and all(re.search(r"\d", ln.split("|")[3]) for ln in verdict_rows)
    assert text.index("## Verdicts") < text.index("## Per level")
    assert text.count("<details>") >= 3 and text.count("<details>") == text.count("</details>")
