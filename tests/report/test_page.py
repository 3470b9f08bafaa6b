"""The results page on the committed sample capture (no server)."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from support import DATA, REPO, write_page

from perflib import derive, pageinputs
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
    first = write_page(campaign, reports_dir=tmp_path / "r1")
    second = write_page(campaign, reports_dir=tmp_path / "r2")
    assert first.read_bytes() == second.read_bytes()
    figures = sorted((first.parent / first.stem).glob("*.png"))
    # the sample gives no bandwidth, so it has no step-over-floor figure (tests/report/test_figures.py)
    assert {p.name for p in figures} == {"batch_scaling.png", "decomposition.png", "before_after.png"}
    for png in figures:
        assert png.read_bytes() == (second.parent / second.stem / png.name).read_bytes()
    other = write_page(campaign, reports_dir=tmp_path / "r3", date="2000-01-01")
    date = first.stem.rsplit("-", 3)[-3:]
    a = first.read_text().replace("-".join(date), "DATE")
    b = other.read_text().replace("2000-01-01", "DATE")
    assert a == b
    assert sum("DATE" in line for line in a.splitlines() if line.startswith("Date:")) == 1


def test_page_sections_units_links_and_verdict_numbers(sample_copy, tmp_path):
    campaign = load_campaign(sample_copy)
    page = write_page(campaign, reports_dir=tmp_path / "reports")
    body = page.read_text()
    for heading in ("## Environment", "## Per level", "## Decode-window decomposition", "## Step over floor",
                    "## Before / after", "## Cross-backend reference ratio", "## Verdicts", "## Raw data"):
        assert heading in body
    assert " tok/s |" in body and " ms |" in body
    assert "| mean TTFT |" in body and "each run's mean over its requests" in body  # not a bare "TTFT"
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
    assert "not measured (no kernel trace of arm" in verdicts and "profiler: {kind: perf}" in verdicts  # the key
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
    body = write_page(campaign, reports_dir=tmp_path / "reports").read_text()
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
    found = pageinputs.see_also(["h200-pytorch-*.md", "missing-*.md", "https://example.org/p"], tmp_path)
    links = report.see_also_links(pageinputs.PageInputs(tmp_path, tmp_path, see_also=found))
    assert links[0]["href"] == "h200-pytorch-2026-03-04.md"
    assert links[1]["href"] == "" and links[1]["note"] == "not present yet"
    assert links[2]["href"] == "https://example.org/p"


@pytest.mark.parametrize("name", ["cpu-reference", "cuda-h200", "cuda-h200-batch", "cuda-h200-fa", "h200-pytorch"])
def test_committed_pages_open_with_their_answer(name):
    """Summary first: the question, a row per measured candidate with its answer across levels and their
    numbers, the checks,
    all before the first section, in a screenful; the bulk is collapsed in <details>."""
    page = sorted((REPO / "reports").glob(f"{name}-[0-9][0-9][0-9][0-9]-*.md"))[-1]
    text = page.read_text()
    head = text.split("\n## ")[0]
    lines = [ln for ln in head.splitlines()[4:] if ln.strip()]  # after the title, date and description
    campaign = load_campaign(REPO / "campaigns" / f"{name}.yaml")
    opening = f"**Question.** {text_mod.escape_md(campaign.question)}" if campaign.question else \
        text_mod.escape_md(campaign.description)  # the campaign's own question, else its description
    assert opening and head.splitlines()[4] == opening
    assert "| cause | answer per level (deciding numbers, threshold) |" in head
    assert "- **Checks.**" in head and "Sections:" in head
    assert len(lines) <= 25, len(lines)
    verdict_rows = [ln for ln in lines if ln.startswith("| ") and ("**confirmed**" in ln or "**ruled out**" in ln
                                                                   or "**inconclusive**" in ln)]
    assert verdict_rows and all(re.search(r"\d", ln.split("|")[2]) for ln in verdict_rows)
    assert text.index("## Verdicts") < text.index("## Per level")
    assert text.count("<details>") >= 3 and text.count("<details>") == text.count("</details>")


def test_pages_of_two_data_folders_on_one_day_are_two_pages(sample_copy, tmp_path):
    """Two `make demo` runs on one UTC day (data/demo/<UTC time>): each page is named by its data
    folder, rebuilding one rewrites only its own page, and a folder not named by its time never
    takes the page of another folder of the same day."""
    campaign = load_campaign(sample_copy)
    raw = sample_copy.parent / "raw"
    folders = [tmp_path / "demo" / stamp for stamp in ("2026-12-03T101530Z", "2026-12-03T114501Z")]
    for folder in folders:
        shutil.copytree(raw, folder / "raw")
    reports = tmp_path / "reports"
    first, second = (write_page(campaign, data_dir=folder, reports_dir=reports) for folder in folders)
    assert (first.name, second.name) == ("sample-2026-12-03T101530Z.md", "sample-2026-12-03T114501Z.md")
    assert (reports / first.stem / "batch_scaling.png").is_file() and (reports / second.stem).is_dir()
    before, written = first.read_text(), second.read_text()
    second.write_text(written + "a line the rebuild removes\n")
    again = write_page(campaign, data_dir=folders[1], reports_dir=reports)
    assert again == second and again.read_text() == written and first.read_text() == before

    plain = [tmp_path / "a" / "data", tmp_path / "b" / "data"]  # the same run days, folders not named by time
    for folder in plain:
        shutil.copytree(raw, folder / "raw")
    pages = [write_page(campaign, data_dir=folder, reports_dir=reports) for folder in plain]
    assert pages[0].name == f"sample-{report.page_date(pageinputs.build(campaign, plain[0], reports))}.md"
    assert pages[1] != pages[0] and re.fullmatch(r"sample-\d{4}-\d{2}-\d{2}T\d{6}Z\.md", pages[1].name)
    assert "../a/data/derived/sample/" in pages[0].read_text() and "../b/data/derived/" in pages[1].read_text()
    assert write_page(campaign, data_dir=plain[0], reports_dir=reports) == pages[0]  # its own, again


def test_a_loaded_page_says_what_was_left_out_and_why(sample_copy, tmp_path):
    """Both batch-1 runs of arm `after` kept complete but marked contended (as `campaign run` keeps
    them on a loaded machine): no sentence says "no complete run" or that every level passes."""
    import json

    campaign = load_campaign(sample_copy)
    why = "contended: the server's and client's threads waited 1.20 s on a run queue per CPU second (threshold 0.50)"
    for repeat in (1, 2):
        path = sample_copy.parent / "raw" / "sample" / "after" / "cpu" / f"b1_c128_r{repeat}" / "manifest.json"
        manifest = json.loads(path.read_text())
        assert manifest["status"] == "complete"
        manifest["contention"] = {"available": True, "contended": True, "why": why}
        path.write_text(json.dumps(manifest))
    derived = derive.build(campaign)
    assert list(derived.runs["left_out"].astype(bool)).count(True) == 2
    body = write_page(campaign, reports_dir=tmp_path / "reports").read_text()
    summary = body.split("## Verdicts")[0]
    assert "Runs on disk: 8 complete of 8 (2 of them left out of medians and verdicts as contended)." in body
    assert "all 4 levels pass" not in summary and "2 of 4 levels pass their checks" in summary  # after b2: spread
    assert "1 of 4 levels not checked, every complete run left out as contended: after b1 c128" in summary
    assert "2 of 8 complete runs left out of medians and verdicts as contended" in summary
    assert "no complete run" not in body
    assert ("no run used at arm after, backend cpu, batch 1, context 128: all 2 complete runs left out as "
            "contended (the server's and client's threads waited 1.20 s") in body.replace("\\_", "_")
    per_level = body.split("## Per level")[1].split("\n## ")[0]
    assert "Not in the table, every complete run left out as contended: after cpu b1 c128 (2 of 2: contended" in per_level
    checks_rows = body.split("## Checks")[1].split("\n## ")[0]
    assert "0 of 2, 2 left out (contended: the server" in checks_rows and "not checked: no run used" in checks_rows
    ratio = tables.ratio_table(derived, ["cpu"], [], [2], ["before", "after"])
    assert ratio["note"].iloc[0].startswith("not measured: all 2 complete runs at batch 1 left out as contended")


def test_the_first_screen_says_traces_are_whole_only_when_nothing_was_lost():
    """A page silent about its traces cannot be told from one that never looked: with traces attributed and
    no loss, one line says so; a lost trace or a profiler loss replaces it with the loss."""
    import pandas as pd

    from perflib.report import sections as sec

    keys = {"arm": "a-traced", "backend": "cuda", "batch": 32, "context": 1024}
    runs = pd.DataFrame([{**keys, "repeat": r, "status": "complete", "trace_loss": "", "profiler_loss": ""}
                         for r in (1, 2)])
    trace_runs = pd.DataFrame([{**keys, "repeat": r} for r in (1, 2)])
    (line,) = sec.loss_lines(runs, trace_runs)
    assert line.startswith("- **Traces.** All 2 traced runs' traces cover their windows")
    assert sec.loss_lines(runs, trace_runs.iloc[:0]) == []  # nothing traced: nothing to say
    runs.loc[1, "trace_loss"] = "capture ended 412 ms into the 1.91 s decode window"
    lines = sec.loss_lines(runs, trace_runs.iloc[:1])
    assert len(lines) == 1 and lines[0].startswith("- **Trace lost.** a-traced/cuda/b32\\_c1024\\_r2: capture ended")
