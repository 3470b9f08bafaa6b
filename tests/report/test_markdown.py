"""Every committed page, and the notebook export, read as GitHub reads them.

The pages are parsed with markdown-it-py, CommonMark plus the GFM table and strikethrough rules (the
GFM-like preset less linkify, which needs another package and adds no check here). GFM pads a table
row with too few cells and drops the cells past the header's, silently, so an unescaped `|` in a
cell shifts a row without any error: each row's cells are counted in the source, split as the
renderer splits them, against the header's. A line that looks like a table row but is outside any
table the renderer found (a broken delimiter row) fails too, and so does every relative link or image
target that is not an existing file or folder.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt
from markdown_it.rules_block.table import escapedSplit
from support import DATA, REPO

PAGES = sorted((REPO / "reports").glob("*.md"))
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"])


def _cells(line: str) -> int:
    """Cells of one table row, split on unescaped pipes as the renderer splits them."""
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") and not line.endswith("\\|") else line
    return len(escapedSplit(line))


def _walk(tokens):
    for token in tokens:
        yield token
        if token.children:
            yield from _walk(token.children)


def problems(page: Path) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """(kind, what) for each problem of a page ('table', 'row', 'link'), and how much was checked."""
    text = page.read_text()
    lines = text.splitlines()
    tokens = parser().parse(text)
    found: list[tuple[str, str]] = []
    counts = {"tables": 0, "rows": 0, "targets": 0}
    covered: set[int] = set()
    for token in tokens:
        if token.type in ("code_block", "fence", "html_block") and token.map:
            covered.update(range(*token.map))
        if token.type != "table_open":
            continue
        start, end = token.map
        covered.update(range(start, end))
        counts["tables"] += 1
        header = _cells(lines[start])
        for number in [start, *range(start + 2, end)]:
            counts["rows"] += 1
            if _cells(lines[number]) != header:
                found.append(("table", f"line {number + 1}: {_cells(lines[number])} cells, the header has "
                                       f"{header}: {lines[number][:120]}"))
    for number, line in enumerate(lines):
        if line.lstrip().startswith("|") and number not in covered:
            found.append(("row", f"line {number + 1} is a table row outside any table: {line[:120]}"))
    for token in _walk(tokens):
        target = token.attrGet("href") if token.type == "link_open" else (
            token.attrGet("src") if token.type == "image" else None)
        if target is None:
            continue
        counts["targets"] += 1
        target = str(target)
        if SCHEME.match(target) or target.startswith("#"):
            continue
        path = unquote(urlsplit(target).path)
        if not path or not (page.parent / path).exists():
            found.append(("link", f"{token.type} target {target!r} does not exist beside {page.name}"))
    return found, counts


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_committed_page_renders_as_github_markdown(page):
    found, counts = problems(page)
    assert found == []
    assert counts["tables"] >= 5 and counts["rows"] > 30 and counts["targets"] >= 5


def test_every_committed_page_is_checked():
    assert {p.name.rsplit("-", 3)[0] for p in PAGES} >= {"cpu-reference", "cuda-h200", "h200-pytorch"}


GOOD = """# A page

| a | b |
| --- | ---: |
| x \\| y | 1 |
| `z` | 2 |

![a figure](figs/one.png) and [the data](data/) and [a site](https://example.org/x) and [here](#a-page).
"""


def test_a_page_broken_on_purpose_fails(tmp_path):
    (tmp_path / "figs").mkdir()
    (tmp_path / "figs" / "one.png").write_bytes(b"png")
    (tmp_path / "data").mkdir()
    page = tmp_path / "good.md"
    page.write_text(GOOD)
    assert problems(page)[0] == []
    broken = {
        "pipe.md": (GOOD.replace("x \\| y", "x | y"), "table"),
        "short.md": (GOOD.replace("| `z` | 2 |", "| z |"), "table"),
        "delimiter.md": (GOOD.replace("| --- | ---: |", "| --- |"), "row"),
        "image.md": (GOOD.replace("figs/one.png", "figs/two.png"), "link"),
        "folder.md": (GOOD.replace("(data/)", "(raw/)"), "link"),
        "empty.md": (GOOD.replace("(data/)", "()"), "link"),
    }
    for name, (text, kind) in broken.items():
        (tmp_path / name).write_text(text)
        found, _ = problems(tmp_path / name)
        assert found and {k for k, _ in found} == {kind}, (name, found)


def test_a_committed_page_with_an_unescaped_pipe_fails(tmp_path):
    """A real page with one kernel-class cell left unescaped (`a|b`): its row gains a cell."""
    page = REPO / "reports" / "cuda-h200-2026-11-29.md"
    if not page.is_file():
        page = next(p for p in PAGES if p.name.startswith("cuda-h200-"))
    text = page.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| after-cupti | llamacpp-cuda | 1 | 1024 |"))
    broken = tmp_path / page.name
    broken.write_text(text.replace(row, row.replace("llamacpp-cuda", "llamacpp|cuda", 1), 1))
    assert problems(page.parent / page.name)[0] == []
    tables = [what for kind, what in problems(broken)[0] if kind == "table"]
    assert len(tables) == 1 and "llamacpp|cuda" in tables[0]


@pytest.mark.slow
def test_notebook_export_renders_as_github_markdown(tmp_path):
    """`perflib campaign report FILE --notebook-export`'s Markdown, with the figures nbconvert writes beside it."""
    from perflib.campaign import export_notebook, load_campaign

    shutil.copytree(DATA / "campaign-sample", tmp_path / "sample")
    exported = export_notebook(load_campaign(tmp_path / "sample" / "campaign.yaml"), reports_dir=tmp_path / "r")
    found, counts = problems(exported)
    assert found == []
    images = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", exported.read_text())
    assert len(images) == 3  # report.ipynb draws batch scaling, decomposition and before/after of the sample
    text = exported.read_text()
    assert text.count("| cause | answer per level (deciding numbers, threshold) |") == 1  # the summary, once
    assert text.count("| label | scope | outcome | evidence |") == 1  # the verdicts, once
    assert "<table" not in text and "<div" not in text  # Markdown tables, not DataFrame HTML
    assert not [ln for ln in text.splitlines() if ln.startswith("    ") and ln.strip()]  # no code-block dumps
