"""GitHub Markdown pieces of the page: tables that leave out what is empty, collapsible sections.

`table(rows, columns)` renders a pipe table and drops every column whose cells are all `n/a` or
empty (the keys excepted), returning which were dropped so the page can say why in one line; a
table with no rows renders as nothing. `details(summary, body)` wraps a section's bulk in
`<details>`, which GitHub shows collapsed with its summary line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from perflib.report.text import escape_md

if TYPE_CHECKING:
    import pandas as pd

EMPTY = ("", "n/a")


@dataclass(frozen=True)
class Column:
    """One table column: the row key, its header, right-aligned numbers, and kept even when empty."""

    key: str
    header: str
    number: bool = False
    keep: bool = False


def table(rows: Sequence[Mapping[str, object]], columns: Sequence[Column]) -> tuple[str, list[str]]:
    """(Markdown table, headers of the columns dropped for being empty on every row); ('', []) for no rows."""
    if not rows:
        return "", []
    shown = [c for c in columns if c.keep or any(str(r.get(c.key, "")) not in EMPTY for r in rows)]
    dropped = [c.header for c in columns if c not in shown]
    lines = ["| " + " | ".join(c.header for c in shown) + " |",
             "| " + " | ".join("---:" if c.number else "---" for c in shown) + " |"]
    for r in rows:
        lines.append("| " + " | ".join(str(r.get(c.key, "")) or " " for c in shown) + " |")
    return "\n".join(lines), dropped


def dropped_line(dropped: Sequence[str], why: str) -> str:
    """One sentence naming the columns left out and why, or '' where none were."""
    if not dropped:
        return ""
    names = ", ".join(dropped)
    return f"Left out, n/a on every row ({why}): {names}."


def details(summary: str, body: str, open_: bool = False) -> str:
    """`body` in a collapsible `<details>` block (blank lines around it so GitHub renders its Markdown)."""
    if not body.strip():
        return ""
    return f"<details{' open' if open_ else ''}><summary>{summary}</summary>\n\n{body.strip()}\n\n</details>"


def join(*parts: str) -> str:
    """Paragraphs joined by one blank line, empty ones left out."""
    return "\n\n".join(p.strip() for p in parts if p and p.strip())


class MarkdownText(str):
    """Markdown text that Jupyter shows rendered (`_repr_markdown_`) and nbconvert exports as Markdown."""

    def _repr_markdown_(self) -> str:
        return str(self)


def frame_table(frame: pd.DataFrame, digits: int = 3) -> MarkdownText:
    """A DataFrame as a GitHub Markdown table (numbers rounded to `digits` significant decimals, text
    escaped, NaN as n/a, all-n/a columns left out and named below it)."""
    def cell(value: object) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "n/a"
        if isinstance(value, float):
            return f"{value:.{digits}g}" if abs(value) < 1e6 else f"{value:,.0f}"
        return escape_md(value)

    columns = [Column(str(c), escape_md(c), number=frame.dtypes[c].kind in "iuf") for c in frame.columns]
    rows = [{str(k): cell(v) for k, v in row.items()} for row in frame.to_dict("records")]
    text, dropped = table(rows, columns)
    return MarkdownText(join(text or "(no rows)", dropped_line(dropped, "nothing measured there")))
