"""The README a newcomer reads first: short, its two commands on top, its figures its JSON's, its links whole.

The benchmark tables moved to docs/BENCHMARKS.md (tests/test_benchmarks_page.py); what the README still
quotes, the first run's and the demo's times in its opening, is tied here to the committed JSON. Every
relative link of the README and of docs/ must reach a file, and a `#fragment` a heading of it.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest
from support import REPO

from perflib.campaign import load_campaign

README = REPO / "README.md"
BENCHMARKS = REPO / "benchmarks"
MAX_LINES = 300
"""Issue 31: a README a newcomer reads in five minutes, at most about 300 lines."""
PENDING: dict[str, str] = {}
"""Link targets another branch adds: absent here, their links are let through; present, they are checked."""
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


@cache
def load(name: str) -> dict:
    return json.loads((BENCHMARKS / name).read_text())


def as_printed(value: float, printed: str) -> bool:
    """Whether `printed` is `value` rounded to the decimals it shows (within half a unit of the last one)."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return abs(value - float(printed)) <= 0.5 * 10 ** -decimals + 1e-9


def text() -> str:
    return README.read_text(encoding="utf-8")


def test_the_readme_is_short_and_opens_with_the_two_commands():
    lines = text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; move prose to docs/ (at most {MAX_LINES})"
    code = lines[lines.index("```sh") + 1:lines.index("```")]
    assert lines[0] == "# perflib" and lines[1:3] == ["", "```sh"], lines[:3]
    assert [ln.split()[:2] for ln in code] == [["make", "demo"], ["make", "test"]]


def test_the_opening_quotes_the_first_run_as_measured():
    """The README's opening gives the install and build time ranges of results-first_run.json."""
    runs = {r["load"]: r["steps"] for r in load("results-first_run.json")["runs"]}
    install = re.search(r"installs perflib with its packages:\s+(\d+) s to (\d+) s", text())
    build = re.search(r"sdist: (\d+\.\d) to\s+(\d+\.\d) minutes", text())
    assert install and build, "the opening's first-run sentence is not where this test looks"
    assert as_printed(runs["quiet"]["install"]["wall_s"], install[1])
    assert as_printed(runs["loaded"]["install"]["wall_s"], install[2])
    assert as_printed(runs["quiet"]["build"]["wall_s"] / 60, build[1])
    assert as_printed(runs["loaded"]["build"]["wall_s"] / 60, build[2])


def test_the_opening_quotes_the_demo_as_measured():
    """The README's 'after that' demo figures, quiet and loaded, and the loaded wait and contended runs,
    are results-demo_run.json's."""
    joined = " ".join(text().split())
    runs = {r["load"]: r["steps"]["demo"] for r in load("results-demo_run.json")["runs"]}
    said = re.search(r"`make demo` .*?took (\d+) s quiet and (\d+) s beside two CPU burners .*? loaded, (\d+) s of it "
                     r"were the runner's bounded wait for quiet CPUs, after which it measured anyway and marked "
                     r"all (\d+) runs contended", joined)
    assert said, "the opening's demo sentence is not where this test looks"
    assert as_printed(runs["quiet"]["wall_s"], said[1]) and as_printed(runs["loaded"]["wall_s"], said[2])
    summary = runs["loaded"]["summary"]
    assert f"waited {said[3]} s in all for quiet CPUs" in summary, summary
    assert f"{said[4]} runs kept marked contended" in summary and f"{said[4]} runs measured" in summary, summary
    assert all(r["exit"] == 0 for r in runs.values())


def test_the_campaign_file_example_is_valid(tmp_path):
    """The README's annotated campaign file loads as `perflib campaign validate` loads it."""
    block = re.search(r"^## A campaign file\n.*?^```yaml\n(.*?)^```", text(), re.S | re.M)
    assert block, "no ```yaml block under '## A campaign file'"
    path = tmp_path / "my-fix.yaml"
    path.write_text(block[1], encoding="utf-8")
    campaign = load_campaign(path)
    assert campaign.name == "my-fix" and [a.name for a in campaign.compared_arms] == ["before", "after"]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces as `-`."""
    plain = re.sub(r"[`*]", "", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", plain).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    headings = re.findall(r"^#{1,6} (.+)$", path.read_text(encoding="utf-8"), re.M)
    return {slug(h) for h in headings}


def broken_links(doc: Path) -> list[str]:
    """`target` for each relative link of a Markdown file that reaches no file, or no heading of it."""
    bad = []
    body = re.sub(r"^```.*?^```", "", doc.read_text(encoding="utf-8"), flags=re.S | re.M)  # code is not links
    for target in LINK.findall(body):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, fragment = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        rel = dest.relative_to(REPO).as_posix() if dest.is_relative_to(REPO) else str(dest)
        if not dest.exists():
            if rel not in PENDING:
                bad.append(target)
            continue
        if fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            bad.append(target)
    return bad


DOCS = [README, *sorted(d for d in (REPO / "docs").rglob("*.md") if "src" not in d.relative_to(REPO / "docs").parts),
        REPO / "tests" / "README.md"]
"""The README, docs/ and tests/README.md; docs/src/ holds the prose of the generated pages, whose links are
relative to docs/ and checked on those pages."""


@pytest.mark.parametrize("doc", DOCS, ids=[d.relative_to(REPO).as_posix() for d in DOCS])
def test_every_relative_link_reaches_its_file_and_heading(doc):
    assert broken_links(doc) == []


def test_a_broken_link_is_caught(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("# Here\n\n[a](x.md#here) [b](x.md#nowhere) [c](missing.md) [d](https://example.org/none)\n")
    assert broken_links(doc) == ["x.md#nowhere", "missing.md"]


def test_the_documents_the_readme_left_are_linked_from_it():
    """Each document under docs/ (the generated pages' prose in docs/src/ aside) is one click from the README."""
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in LINK.findall(text())}
    docs = [d for d in (REPO / "docs").glob("*.md")]
    assert docs and [d.name for d in docs if d.resolve() not in linked] == []


@pytest.mark.parametrize(("value", "printed", "ok"), [(1.2637, "1.26", True), (1.2651, "1.26", False),
                                                      (401.95, "402", True), (53.96, "54.0", True),
                                                      (53.96, "54.1", False)])
def test_as_printed(value, printed, ok):
    assert as_printed(value, printed) is ok
