"""A campaign decided once: its candidates at every level, its gates and its level checks.

`Decisions.of(campaign, tables)` evaluates each candidate and gate over the derived tables once, with the
level checks the verdicts rest on, and lines each candidate up across its levels (`perflib.verdicts.answer`).
The page (`perflib.report`), `perflib campaign report --json`, the terminal and a notebook all show this one
result (`perflib.publish`), so none of them decides anything again. `answer_dict` is its JSON form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from perflib import checks
from perflib.config import Campaign
from perflib.derive import DerivedTables
from perflib.verdicts import compare
from perflib.verdicts.answer import Answer, answers
from perflib.verdicts.evaluate import GateResult, Verdict, evaluate, evaluate_gate
from perflib.verdicts.scopes import Context


@dataclass(frozen=True)
class Decisions:
    """Every verdict (candidate x level, in the campaign's order), every gate result, the level checks they
    rest on (`perflib.checks.level_checks`), each candidate's answer across its levels, and the campaign's
    `Context` they were decided in."""

    context: Context
    verdicts: tuple[Verdict, ...]
    gates: tuple[GateResult, ...]
    level_checks: pd.DataFrame
    answers: tuple[Answer, ...]

    @classmethod
    def of(cls, campaign: Campaign, tables: DerivedTables) -> Decisions:
        """The campaign's candidates, gates and checks decided over `tables`, each once."""
        ctx = Context.of(campaign)
        level_checks = checks.level_checks(tables.runs, tables.trace_runs)
        verdicts = tuple(evaluate(campaign.candidates, tables, ctx, level_checks))
        gates = tuple(g for gate in campaign.gates for g in evaluate_gate(gate, tables, ctx))
        return cls(ctx, verdicts, gates, level_checks, tuple(answers(verdicts, ctx)))


def answer_dict(campaign: Campaign, tables: DerivedTables, decisions: Decisions | None = None) -> dict[str, Any]:
    """The campaign's answer as JSON-ready data: the question and the levels it names, each candidate's line
    with its per-level verdicts, the pairs of arms compared and their before/after changes per level (with
    95% intervals), and the gates; `decisions` where they were made already (else made here)."""
    decided = decisions if decisions is not None else Decisions.of(campaign, tables)
    ctx = decided.context
    pairs = list(campaign.comparisons)
    return {
        "question": campaign.question or None,
        "question_levels": {"contexts": list(ctx.question_contexts), "batches": list(ctx.question_batches)},
        "candidates": [a.to_dict() for a in decided.answers],
        "pairs": [{"baseline": b, "arm": a, "name": f"{a} vs {b}"} for b, a in pairs],
        "comparisons": compare.comparisons(tables.runs, pairs),
        "gates": [g.to_dict() for g in decided.gates],
    }
