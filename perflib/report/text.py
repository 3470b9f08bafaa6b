"""Text on the page: Markdown-safe cells, numbers with units, 'n/a' (never 0) where a value is missing."""

from __future__ import annotations

import math
import re
from typing import Any

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|#])")


def escape_md(text: Any) -> str:
    """Text safe inside a Markdown table cell: `| * _ [ ] # \\ \\`` are backslash-escaped, `< > &`
    become entities, and line breaks become spaces."""
    if text is None:
        return ""
    out = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    out = _MD_SPECIAL.sub(r"\\\1", out)
    return re.sub(r"[\r\n]+", " ", out)


def fmt(value: Any, spec: str = ".1f", unit: str = "") -> str:
    """A number with its unit, or 'n/a' where it is None/NaN (never 0)."""
    if value is None:
        return "n/a"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return escape_md(value)
    if math.isnan(number):
        return "n/a"
    if math.isinf(number):
        return ("" if number > 0 else "-") + "inf" + unit
    text = f"{number:{spec}}"
    if text.startswith("-") and not text.strip("-0.,"):  # -0.0: a rounding, not a sign
        text = text[1:]
    return text + unit


def int_or_na(value: Any) -> str:
    try:
        return str(int(value))
    except (TypeError, ValueError):
        return "n/a"


def pct(value: Any) -> str:
    """A fraction as a percentage with one decimal, 'n/a' where missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return fmt(100 * float(value), ".1f", "%")
