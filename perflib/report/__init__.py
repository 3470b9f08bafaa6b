"""The results page: tables, figures, and the Markdown page that holds them, rendered from the derived
tables (`perflib.derive`) and the page's other inputs (`perflib.pageinputs`) alone: nothing here reads a file.

- `tables`: the page's tables as DataFrames (also `perflib.open_campaign`'s).
- `figures`: the page's figures.
- `page`: the page itself (`write_report`), rendered from `templates/report.md.j2`.
- `text`: Markdown-safe cells and numbers with units.
"""

from perflib.report.page import build_page_data, render, write_report
from perflib.report.text import escape_md, fmt, pct

__all__ = ["build_page_data", "escape_md", "fmt", "pct", "render", "write_report"]
