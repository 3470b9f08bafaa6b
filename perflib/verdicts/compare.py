"""A before/after change over the repeats: its % change, its interval, and the repeats that would decide it.

The change of a figure (a runs.csv column) from the baseline arm to the arm at one level is the
difference of the two arms' means over their repeats, divided by the baseline's mean, in %. Its 95%
interval is Welch's t interval on the difference of the means (each arm's own variance, the
Welch–Satterthwaite degrees of freedom), divided by the same baseline mean (docs/reference/COMPARE.md).
An arm with one repeat gives no interval; a gate is then undecided, and the repeats that would decide
it are estimated from the other arm's spread.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from perflib import checks

CONFIDENCE = 0.95
"""The interval's coverage."""
METHOD = "Welch t, 95%"
"""How the page names the interval."""
MAX_REPEATS = 1000
"""The most repeats per arm `repeats_to_decide` looks at: past it, more repeats would not decide."""


# ------------------------------------------------------------------------------ Student's t


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function with `df` (not necessarily whole) degrees of freedom."""
    tail = 0.5 * _betai(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The `p` quantile of Student's t with `df` degrees of freedom (bisection on `t_cdf`, to 1e-10)."""
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"expected 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-10:
            break
    return (lo + hi) / 2.0


# ------------------------------------------------------------------------------ the change


@dataclass(frozen=True)
class Change:
    """The % change of the mean from `before` (the baseline arm's repeats) to `after`, with its interval
    (`lo`, `hi` in %; None where an arm has fewer than two repeats)."""

    before: tuple[float, ...]
    after: tuple[float, ...]
    pct: float
    lo: float | None
    hi: float | None

    @property
    def before_mean(self) -> float:
        return statistics.fmean(self.before)

    @property
    def after_mean(self) -> float:
        return statistics.fmean(self.after)

    @property
    def has_interval(self) -> bool:
        return self.lo is not None and self.hi is not None

    def interval_text(self) -> str:
        """'95% interval -25.0% to -18.8% (Welch t over 3 and 3 repeats)', or why there is none."""
        if not self.has_interval:
            few = [f"{len(v)} repeat of {name}" for name, v in (("the baseline", self.before), ("the arm", self.after))
                   if len(v) < 2]
            return f"no interval ({' and '.join(few)})"
        return (f"95% interval {self.lo:+.1f}% to {self.hi:+.1f}% (Welch t over {len(self.before)} and "
                f"{len(self.after)} repeats)")

    def to_dict(self) -> dict[str, float | int | None]:
        return {"before_mean": self.before_mean, "after_mean": self.after_mean, "n_before": len(self.before),
                "n_after": len(self.after), "change_pct": self.pct, "ci_low_pct": self.lo, "ci_high_pct": self.hi,
                "ci_method": METHOD}


def _welch(before: Sequence[float], after: Sequence[float], n_before: int, n_after: int,
           sd_before: float, sd_after: float, scale: float) -> float | None:
    """Half the width of Welch's interval on the difference of means, in % of `scale` (the baseline mean)."""
    vb, va = sd_before ** 2 / n_before, sd_after ** 2 / n_after
    se2 = vb + va
    if se2 == 0:
        return 0.0
    df = se2 ** 2 / ((vb ** 2 / (n_before - 1) if vb else 0.0) + (va ** 2 / (n_after - 1) if va else 0.0))
    return t_quantile(0.5 + CONFIDENCE / 2, df) * math.sqrt(se2) / abs(scale) * 100.0


def change_of(before: Sequence[float], after: Sequence[float]) -> Change | None:
    """The change from the baseline's repeats to the arm's (NaN dropped), or None where an arm has none or
    the baseline's mean is 0."""
    before = tuple(float(x) for x in before if x == x)
    after = tuple(float(x) for x in after if x == x)
    if not before or not after:
        return None
    mb, ma = statistics.fmean(before), statistics.fmean(after)
    if mb == 0:
        return None
    pct = 100.0 * (ma - mb) / mb
    if len(before) < 2 or len(after) < 2:
        return Change(before, after, pct, None, None)
    half = _welch(before, after, len(before), len(after), statistics.stdev(before), statistics.stdev(after), mb)
    return Change(before, after, pct, pct - half, pct + half)


def repeats_to_decide(change: Change, boundary: float) -> int | None:
    """The repeats per arm at which an interval of the spread seen would lie wholly on one side of
    `boundary` (a % change): where an arm has one repeat, the other arm's spread stands for both; None
    where neither arm has two, the change sits on the boundary, or more than `MAX_REPEATS` would be needed."""
    sd_b = statistics.stdev(change.before) if len(change.before) >= 2 else None
    sd_a = statistics.stdev(change.after) if len(change.after) >= 2 else None
    if sd_b is None and sd_a is None:
        return None
    sd_b, sd_a = (sd_b if sd_b is not None else sd_a), (sd_a if sd_a is not None else sd_b)
    distance = abs(change.pct - boundary)
    if distance == 0:
        return None
    current = max(2, min(len(change.before), len(change.after)))
    for n in range(current, MAX_REPEATS + 1):
        if _welch(change.before, change.after, n, n, sd_b, sd_a, change.before_mean) < distance:
            return n
    return None


def level_values(runs: pd.DataFrame | None, column: str, arm: str, backend: str | None, batch: int | None,
                 context: int | None) -> list[float]:
    """The values of `column` over the usable repeats (complete, not left out) of one arm at one level."""
    if runs is None or not len(runs) or column not in runs.columns:
        return []
    sel = checks.usable(runs)
    for key, value in (("arm", arm), ("backend", backend), ("batch", batch), ("context", context)):
        if value is not None and key in sel.columns:
            sel = sel[sel[key].astype(str) == str(value)]
    return [float(x) for x in pd.to_numeric(sel[column], errors="coerce").dropna()]


COMPARED = ("decode_step_ms", "steady_step_ms", "decode_tok_s")
"""The runs.csv figures the before/after table compares."""


def comparisons(runs: pd.DataFrame | None, pairs: Sequence[tuple[str, str]],
                columns: Sequence[str] = COMPARED) -> list[dict[str, object]]:
    """Per (baseline, arm) pair, level (backend, batch, context) and column: both arms' means over their
    usable repeats, their counts, and the change with its interval (None where an arm has no value there)."""
    if runs is None or not len(runs) or not pairs:
        return []
    used = checks.usable(runs)
    levels = used[["backend", "batch", "context"]].drop_duplicates()
    levels = sorted((str(b), int(n), int(c)) for b, n, c in levels.itertuples(index=False))
    rows: list[dict[str, object]] = []
    for base, arm in pairs:
        for backend, batch, context in levels:
            for column in columns:
                before, after = (level_values(used, column, name, backend, batch, context) for name in (base, arm))
                found = change_of(before, after)
                rows.append({"backend": backend, "batch": batch, "context": context, "measure": column,
                             "baseline": base, "arm": arm, "pair": f"{arm} vs {base}",
                             "before": statistics.fmean(before) if before else None,
                             "after": statistics.fmean(after) if after else None,
                             "runs_before": len(before), "runs_after": len(after),
                             "change_pct": found.pct if found else None, "ci_low_pct": found.lo if found else None,
                             "ci_high_pct": found.hi if found else None})
    return rows
