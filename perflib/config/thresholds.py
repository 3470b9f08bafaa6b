"""A candidate's thresholds as a campaign file writes them: `>= 0.75`, `< 15%`, `<= -10`."""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass

_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_THRESHOLD_RE = re.compile(r"^\s*(<=|>=|<|>)\s*([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*(%?)\s*$")
EXPECTED = "a threshold like '>= 0.75' or '< 15%'"


@dataclass(frozen=True)
class Threshold:
    op: str
    number: float
    percent: bool
    text: str

    def value(self, unit: str) -> float:
        """The threshold in the measurement's unit: '15%' of a fraction is 0.15."""
        return self.number / 100.0 if self.percent and unit == "fraction" else self.number

    def holds(self, value: float, unit: str) -> bool:
        return _OPS[self.op](value, self.value(unit))


def parse_threshold(text: str) -> Threshold:
    """'>= 0.75', '< 15%', '<= -10' → Threshold; anything else raises ValueError."""
    match = _THRESHOLD_RE.match(str(text or ""))
    if not match:
        raise ValueError(f"expected {EXPECTED}, found {text!r}")
    op, number, pct = match.groups()
    return Threshold(op, float(number), bool(pct), f"{op} {number}{pct}")


def threshold_check(text: str) -> str | None:
    """A `key(check=...)`: None for a threshold that parses, else what was expected."""
    try:
        parse_threshold(text)
    except ValueError:
        return EXPECTED
    return None
