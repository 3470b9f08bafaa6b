"""Each candidate's answer across levels in one line, the levels the campaign's question names first.

"interleaved prefill: confirmed at ~16K, batch 4 and 16 (8.1%–12.0%, < 50%); ruled out at ~1K (84.2%–88.3%,
>= 80%)": the verdicts of one candidate grouped by outcome, each outcome's levels said as briefly as they
allow (a context whose every decided batch shares the outcome is named alone; an arm is named only where
the arms disagree at a level), with the range of the deciding numbers and the threshold. The page's first
screen shows these lines; `perflib campaign report --json` carries them with every per-level verdict,
the pairs of arms compared, the before/after changes with their intervals and the gates
(`perflib.verdicts.decisions.answer_dict`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from perflib.config import context_label
from perflib.verdicts.evaluate import INCONCLUSIVE, NOT_MEASURED, OUTCOMES, PREFILL_IN_WINDOW, Verdict
from perflib.verdicts.measures import MEASUREMENTS
from perflib.verdicts.scopes import Context

Level = tuple[str | None, int | None, int | None]
"""(backend, context, batch)."""


def format_value(value: float | None, measure: str) -> str:
    """A verdict's number in its measurement's unit: '12.0%', '+5.1%', '2.31 ms', '3.20x'."""
    if value is None or value != value:
        return "n/a"
    unit = MEASUREMENTS[measure].unit if measure in MEASUREMENTS else "ratio"
    return {"fraction": f"{100 * value:.1f}%", "pct": f"{value:+.1f}%", "ms": f"{value:.2f} ms",
            "count": f"{value:.0f}"}.get(unit, f"{value:.2f}x")


def _and(items: Sequence[Any]) -> str:
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def level_rank(ctx: Context, context: int | None, batch: int | None) -> tuple[int, int]:
    """How early the question names a level: (its context's place among the contexts the question names,
    its batch's place among the batches), unnamed ones after; (0, 0) for every level of a question that
    names none."""
    qc, qb = ctx.question_contexts, ctx.question_batches
    return (qc.index(context) if context in qc else len(qc), qb.index(batch) if batch in qb else len(qb))


def level_label(ctx: Context, context: int | None, batch: int | None) -> str:
    """'~16K, batch 4' (the context left out where the campaign has one)."""
    parts = [context_label(context)] if context is not None and len(ctx.contexts) > 1 else []
    if batch is not None:
        parts.append(f"batch {batch}")
    return ", ".join(parts) or "the campaign's level"


def levels_text(levels: set[Level], universe: set[Level], ctx: Context) -> str:
    """The levels said briefly against all the candidate's levels: '~16K, batch 4 and 16, and at ~1K'."""
    groups: dict[tuple[str | None, int | None], list[int | None]] = {}
    for backend, context, batch in levels:
        groups.setdefault((backend, context), []).append(batch)
    backends = sorted({str(b) for b, _, _ in universe})
    several = len(ctx.contexts) > 1
    segments = []
    for (backend, context), batches in sorted(groups.items(), key=lambda kv: (
            str(kv[0][0]), level_rank(ctx, kv[0][1], None)[0], kv[0][1] or 0)):
        mine = sorted(b for b in batches if b is not None)
        every = sorted(b for bk, c, b in universe if bk == backend and c == context and b is not None)
        label = context_label(context) if several and context is not None else ""
        if not (label and mine == every):
            label = ", ".join(p for p in (label, f"batch {_and(mine)}" if mine else "") if p)
        segments.append(label + (f" on {backend}" if len(backends) > 1 else ""))
    return ", and at ".join(segments)


def _numbers(items: Sequence[Verdict], named: bool = False) -> str:
    """'(8.1%–12.0%; < 50%)': the range of the deciding numbers per measurement (named where `named` or
    where there are several), and the threshold."""
    by_measure: dict[str, list[float]] = {}
    for x in items:
        if x.value is not None:
            by_measure.setdefault(x.measure, []).append(x.value)
    ranges = []
    for measure, values in by_measure.items():
        lo, hi = format_value(min(values), measure), format_value(max(values), measure)
        text = lo if lo == hi else f"{lo}–{hi}"
        ranges.append(f"{measure} {text}" if named or len(by_measure) > 1 else text)
    thresholds = list(dict.fromkeys(x.threshold for x in items if x.threshold and items[0].outcome != INCONCLUSIVE))
    return f" ({'; '.join([*ranges, *thresholds])})" if ranges else ""


def _prefilled(items: Sequence[Verdict], universe: set[Level], ctx: Context, level: dict[int, Level]) -> str:
    """'; not decided at ~16K, batch 16: the window holds requests' prefill (87.0% of it)' for the
    verdicts measured over a window that holds prefill (`Verdict.window_prefill`), else ''."""
    held = [x for x in items if x.window_prefill is not None]
    if not held:
        return ""
    lo, hi = min(x.window_prefill for x in held), max(x.window_prefill for x in held)
    share = f"{100 * lo:.1f}%" if f"{100 * lo:.1f}" == f"{100 * hi:.1f}" else f"{100 * lo:.1f}%–{100 * hi:.1f}%"
    where = levels_text({level[id(x)] for x in held}, universe, ctx)
    return f", not decided at {where}: {PREFILL_IN_WINDOW} ({share} of it)"


def answer_line(group: Sequence[Verdict], ctx: Context) -> str:
    """One candidate's verdicts across levels in one line (see the module); '' for none. A level is named
    without an arm where every arm of the candidate has that outcome there; an arm with no level measured
    is named without levels ("not measured for fa-off")."""
    level = {id(x): (x.backend, x.context, x.batch) for x in group}
    universe = set(level.values())
    whos = list(dict.fromkeys(x.who for x in group))
    at_level: dict[Level, dict[str, str]] = {}
    for x in group:
        at_level.setdefault(level[id(x)], {})[x.who] = x.outcome
    nowhere = [w for w in whos if all(x.outcome == NOT_MEASURED for x in group if x.who == w)]
    if len(nowhere) == len(whos):
        return NOT_MEASURED
    parts = []
    for outcome in OUTCOMES:
        items = [x for x in group if x.outcome == outcome and not (outcome == NOT_MEASURED and x.who in nowhere)]
        named = [w for w in nowhere if outcome == NOT_MEASURED]
        if not items and not named:
            continue
        here = {level[id(x)] for x in items}
        whole = {lv for lv in here if len(at_level[lv]) == len(whos)
                 and all(o == outcome for o in at_level[lv].values())}
        segments = [f"at {levels_text(whole, universe, ctx)}"] if whole else []
        shared: dict[str, list[str]] = {}  # the levels' text -> the arms that have this outcome there
        for who in whos:
            own = {level[id(x)] for x in items if x.who == who and level[id(x)] not in whole}
            if own:
                shared.setdefault(levels_text(own, universe, ctx), []).append(who)
        segments += [f"for {_and(names)} at {text}" for text, names in shared.items()]
        if named:
            segments.append(f"for {_and(named)}")
        text = f"{outcome} " + ", and ".join(segments)
        if outcome != NOT_MEASURED:
            text += _numbers(items, named=len({x.measure for x in group if x.value is not None}) > 1)
        text += _prefilled(items, universe, ctx, level)
        text += " ⚠" if any(x.suspect for x in items) else ""
        rank = min((level_rank(ctx, lv[1], lv[2]) for lv in here), default=(0, 0))
        parts.append(((outcome == NOT_MEASURED, rank, OUTCOMES.index(outcome)), text))
    return "; ".join(text for _, text in sorted(parts, key=lambda p: p[0]))


@dataclass(frozen=True)
class Answer:
    """One candidate across its levels: the line, and each level's verdict."""

    candidate: str
    label: str
    question: str
    line: str
    verdicts: tuple[Verdict, ...]

    @property
    def measured(self) -> bool:
        return any(x.outcome != NOT_MEASURED for x in self.verdicts)

    def to_dict(self) -> dict[str, Any]:
        return {"candidate": self.candidate, "label": self.label, "question": self.question, "answer": self.line,
                "levels": [x.to_dict() for x in self.verdicts]}


def answers(verdicts: Sequence[Verdict], ctx: Context) -> list[Answer]:
    """One `Answer` per candidate, in the campaign's order; each candidate's verdicts ordered as its levels
    (the question's first, then by context and batch)."""
    groups: dict[str, list[Verdict]] = {}
    for verdict in verdicts:
        groups.setdefault(verdict.candidate, []).append(verdict)
    out = []
    for group in groups.values():
        ordered = sorted(group, key=lambda x: (level_rank(ctx, x.context, x.batch), x.context or 0, x.batch or 0))
        out.append(Answer(group[0].candidate, group[0].label, group[0].question, answer_line(group, ctx),
                          tuple(ordered)))
    return out
