"""Verdicts: each candidate decided by its measurement at every scope it applies to, and the gates.

A candidate names a measurement and two thresholds; its verdict is confirmed, ruled out,
inconclusive or not measured, always printed with the number and the threshold that decided it.
Where it is decided: `perflib.verdicts.scopes`. A trace measurement over a window that holds other requests'
prefill (a staggered level whose decode-only part was too short) is measured and shown, but inconclusive
with that reason: the prefill's kernels would otherwise decide a decode candidate. A gate compares each arm with its baseline over the
repeats (`perflib.verdicts.compare`) and passes or fails only where the change's interval clears the
limit; else it is undecided and says how many repeats would decide it.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from perflib import checks
from perflib.config import Campaign, CandidateSpec, GateSpec, parse_threshold
from perflib.derive import DerivedTables
from perflib.errors import InputError
from perflib.runs import RUNS_COLUMNS
from perflib.verdicts import compare
from perflib.verdicts.measures import MEASUREMENTS, Scope, trace_scope, window_prefill
from perflib.verdicts.runmeasures import higher_is_better
from perflib.verdicts.scopes import Context, scopes

CONFIRMED, RULED_OUT, INCONCLUSIVE, NOT_MEASURED = "confirmed", "ruled out", "inconclusive", "not measured"
OUTCOMES = (CONFIRMED, RULED_OUT, INCONCLUSIVE, NOT_MEASURED)


@dataclass(frozen=True)
class Verdict:
    """One candidate at one scope: outcome, value, the sentence and the threshold that decided it."""

    candidate: str
    question: str
    label: str
    measure: str
    scope: str
    outcome: str
    value: float | None
    text: str
    threshold: str
    why: str = ""
    suspect: str = ""
    """Why the levels this verdict rests on are suspect or lost runs (`perflib.checks`), or ''."""
    arm: str | None = None
    backend: str | None = None
    batch: int | None = None
    context: int | None = None
    baseline: str | None = None
    """The arm this one is compared with (a measurement with a baseline), else None."""
    trace_from: str | None = None
    """The traced arm whose traces decided it, where not the arm's own."""
    window_prefill: float | None = None
    """The share of the trace window that other requests' prefill covers, where it holds any: the measured
    figure is kept and shown, but not decided (`PREFILL_IN_WINDOW`)."""

    @property
    def evidence(self) -> str:
        """The number and the threshold, e.g. 'host gaps 3.1 of 65.9 ms per step (4.7%): ruled out (< 15%)'."""
        if self.outcome == NOT_MEASURED:
            return f"not measured ({self.why})" + (f"; {self.suspect}" if self.suspect else "")
        return f"{self.text}: {self.outcome} ({self.threshold})" + (f"; SUSPECT: {self.suspect}" if self.suspect
                                                                        else "")

    @property
    def line(self) -> str:
        return f"{self.label}: {self.evidence}"

    @property
    def who(self) -> str:
        """The arm, or the pair it names ('unified vs slots'), and the traced arm it was read from."""
        who = f"{self.arm} vs {self.baseline}" if self.arm and self.baseline else (self.arm or "")
        return f"{who} (trace from {self.trace_from})" if self.trace_from else who

    def to_dict(self) -> dict[str, Any]:
        return {"candidate": self.candidate, "label": self.label, "scope": self.scope, "arm": self.arm,
                "baseline": self.baseline, "backend": self.backend, "batch": self.batch, "context": self.context,
                "trace_from": self.trace_from, "measure": self.measure, "outcome": self.outcome, "value": self.value,
                "text": self.text, "threshold": self.threshold, "why": self.why, "suspect": self.suspect,
                "window_prefill": self.window_prefill, "evidence": self.evidence, "line": self.line}


def scope_text(scope: Scope) -> str:
    """Where a verdict was decided: `Scope.describe`, the arm with its baseline where it has one."""
    text = scope.describe()
    if scope.baseline and scope.arm and scope.baseline != scope.arm:
        text = text.replace(f"arm {scope.arm}", f"arm {scope.arm} against {scope.baseline}", 1)
    return text


PREFILL_IN_WINDOW = "the window holds requests' prefill"
"""Why a trace verdict is not decided at a staggered level whose decode-only part held too few steps: the
trace was attributed over the decode span, where other requests' prefill kernels run (docs/DEFINITIONS.md)."""


def prefill_text(share: float) -> str:
    """"not decided: the window holds requests' prefill (87.0% of it)"."""
    return f"not decided: {PREFILL_IN_WINDOW} ({100 * share:.1f}% of it)"


def decide(value: float | None, confirmed: str, ruled_out: str, unit: str) -> tuple[str, str]:
    """(outcome, threshold text) for a value; confirmed is checked first."""
    conf, rule = parse_threshold(confirmed), parse_threshold(ruled_out)
    if value is None:
        return NOT_MEASURED, ""
    if conf.holds(value, unit):
        return CONFIRMED, conf.text
    if rule.holds(value, unit):
        return RULED_OUT, rule.text
    return INCONCLUSIVE, f"ruled out {rule.text}, confirmed {conf.text}"


def evaluate_candidate(candidate: CandidateSpec, tables: DerivedTables, ctx: Context,
                       level_checks: pd.DataFrame | None = None) -> list[Verdict]:
    """Verdicts of one candidate, one per scope; a fallback measurement decides where the main
    one could not be measured. A verdict says which of the levels it rests on are suspect."""
    if level_checks is None:
        level_checks = checks.level_checks(tables.runs, tables.trace_runs)
    verdicts = []
    for scope in scopes(candidate, ctx, tables):
        verdict, read = _evaluate_at(candidate, tables, scope)
        meas = MEASUREMENTS.get(verdict.measure)
        batches = [scope.batch, 1] if meas is not None and meas.rests_on_batch1 else [scope.batch]
        reasons = checks.suspect_reasons(level_checks, [scope.arm, *read, scope.baseline], scope.backend, batches,
                                         scope.context)
        verdicts.append(replace(verdict, suspect="; ".join(reasons)) if reasons else verdict)
    return verdicts


def _evaluate_at(candidate: CandidateSpec, tables: DerivedTables, scope: Scope) -> tuple[Verdict, list[str]]:
    """The verdict at one scope, and the traced arms whose traces it read in place of the scope's arm.
    A trace measurement of an arm without traces reads those of its traced arm (`trace_scope`), and
    the verdict's scope says so: `arm fa-on (trace from fa-on-cupti)`."""
    label = candidate.label or candidate.id
    whys = []
    shown, read = scope, []
    for spec in (candidate, *candidate.fallback):  # a fallback keeps the thresholds it does not give
        meas = MEASUREMENTS[spec.measure]
        here = replace(scope, classes=spec.classes or scope.classes, column=spec.column or scope.column,
                       batch=spec.batch or scope.batch, context=spec.context or scope.context)
        if meas.trace:
            here = trace_scope(tables, here)
            if here.trace_from:
                shown, read = replace(scope, trace_from=here.trace_from), [here.trace_from]
                here = replace(here, arm=here.trace_from, trace_from=None)
        result = meas.func(tables, here)
        if result.value is None:
            whys.append(result.why)
            continue
        outcome, threshold = decide(result.value, spec.confirmed or candidate.confirmed,
                                    spec.ruled_out or candidate.ruled_out, meas.unit)
        prefill = window_prefill(tables, here, (here.batch, 1) if meas.rests_on_batch1 else (here.batch,)) \
            if meas.trace else None
        if prefill is not None:  # other requests' prefill kernels would count as the decode's
            outcome, threshold = INCONCLUSIVE, prefill_text(prefill)
        if not (meas.trace and read):
            shown, read = scope, []
        return Verdict(candidate.id, candidate.question, label, spec.measure, scope_text(shown), outcome,
                       result.value, result.text, threshold, window_prefill=prefill, **_where(shown)), read
    return Verdict(candidate.id, candidate.question, label, candidate.measure, scope_text(shown), NOT_MEASURED,
                   None, "", "", "; ".join(dict.fromkeys(w for w in whys if w)), **_where(shown)), read


def _where(scope: Scope) -> dict[str, Any]:
    return {"arm": scope.arm, "backend": scope.backend, "batch": scope.batch, "context": scope.context,
            "baseline": scope.baseline, "trace_from": scope.trace_from}


def evaluate(candidates: Sequence[CandidateSpec], tables: DerivedTables, ctx: Context,
             level_checks: pd.DataFrame | None = None) -> list[Verdict]:
    """Verdicts of all candidates, in the campaign's order; `level_checks` where they were made already."""
    out: list[Verdict] = []
    if level_checks is None:
        level_checks = checks.level_checks(tables.runs, tables.trace_runs)
    for cand in candidates:
        out.extend(evaluate_candidate(cand, tables, ctx, level_checks))
    return out


def verdict_table(verdicts: list[Verdict]) -> pd.DataFrame:
    """One row per verdict: candidate, scope, outcome, the measurement sentence, the threshold."""
    cols = ["candidate", "label", "scope", "arm", "baseline", "backend", "batch", "context", "trace_from", "measure",
            "outcome", "value", "text", "threshold", "why", "suspect", "evidence", "line"]
    return pd.DataFrame([v.to_dict() for v in verdicts], columns=cols)


# ----------------------------------------------------------------------------------- the gate


PASS, FAIL, UNDECIDED = "pass", "FAIL", "undecided"


@dataclass(frozen=True)
class GateResult:
    """One gate for one pair of arms at one level: pass or FAIL where the change's interval clears the
    limit, undecided where it straddles it (with the repeats per arm that would decide), or not measured."""

    gate: str
    passed: bool | None
    change_pct: float | None
    text: str
    state: str = NOT_MEASURED
    baseline: str | None = None
    arm: str | None = None
    backend: str | None = None
    batch: int | None = None
    context: int | None = None
    interval: tuple[float, float] | None = None
    """The 95% interval of the change in % (`perflib.verdicts.compare`), None where there is none."""
    repeats_needed: int | None = None
    """Repeats per arm at which the spread seen would decide an undecided gate (None: unknown or never)."""

    @property
    def line(self) -> str:
        return f"{self.gate}: {self.text}: {self.state}"

    def to_dict(self) -> dict[str, Any]:
        return {"gate": self.gate, "state": self.state, "passed": self.passed, "baseline": self.baseline,
                "arm": self.arm, "backend": self.backend, "batch": self.batch, "context": self.context,
                "change_pct": self.change_pct, "ci_low_pct": self.interval[0] if self.interval else None,
                "ci_high_pct": self.interval[1] if self.interval else None, "ci_method": compare.METHOD,
                "repeats_needed": self.repeats_needed, "text": self.text, "line": self.line}


def gate_pairs(gate: GateSpec, ctx: Context) -> list[tuple[str | None, str | None]]:
    """(baseline, arm) pairs a gate judges: its `arm` against its `baseline` (default the arm's own), else
    every compared arm against its baseline."""
    if gate.arm:
        return [(gate.baseline or ctx.baseline_of(gate.arm) or (ctx.arms[0] if ctx.arms else None), gate.arm)]
    pairs = [(gate.baseline or ctx.baseline_of(arm), arm) for arm in ctx.arms]
    return [(b, a) for b, a in pairs if b and b != a] or [(None, None)]


def evaluate_gate(gate: GateSpec, tables: DerivedTables, ctx: Context) -> list[GateResult]:
    """Regression gate per pair of arms, backend and context: the arm's change against its baseline must
    not be worse than `max_regression_pct` (worse = lower tok/s, higher ms). It passes where the whole 95%
    interval of the change is within the limit, fails where the whole interval is beyond it, and is
    undecided in between, saying how many repeats per arm would decide it."""
    name = f"{gate.measure} at batch {gate.batch}, at most {gate.max_regression_pct:g}% worse"
    contexts = [gate.context] if gate.context else list(ctx.contexts)
    sign = -1.0 if higher_is_better(gate.measure) else 1.0  # regression = sign x change
    results = []
    for baseline, arm in gate_pairs(gate, ctx):
        for backend in ctx.backends:
            for context in contexts:
                where = f"{name} ({arm} vs {baseline}, {backend}, context {context})" if arm else \
                    f"{name} ({backend}, context {context})"
                keys = {"baseline": baseline, "arm": arm, "backend": backend, "batch": gate.batch, "context": context}
                scope = Scope(arm=arm, backend=backend, batch=gate.batch, context=context, column=gate.measure,
                              baseline=baseline, no_requests=ctx.no_requests.get(backend))
                measured = MEASUREMENTS["change_pct"].func(tables, scope)
                if measured.value is None:
                    results.append(GateResult(where, None, None, f"not measured ({measured.why})", **keys))
                    continue
                results.append(_judge(where, gate, tables, measured.text, sign, keys))
    return results


def _judge(where: str, gate: GateSpec, tables: DerivedTables, text: str, sign: float,
           keys: dict[str, Any]) -> GateResult:
    """The gate's state from the change's interval against the limit."""
    found = compare.change_of(*(compare.level_values(tables.runs, gate.measure, arm, keys["backend"], gate.batch,
                                                     keys["context"]) for arm in (keys["baseline"], keys["arm"])))
    assert found is not None  # change_pct measured it from the same runs
    limit = gate.max_regression_pct
    regression = sign * found.pct
    how = (f"{regression:.1f}% worse" if regression > 0 else f"{-regression:.1f}% better" if regression < 0
           else "unchanged")
    if not found.has_interval:
        state, passed = UNDECIDED, None
    else:
        worst, best = max(sign * found.lo, sign * found.hi), min(sign * found.lo, sign * found.hi)
        state, passed = (PASS, True) if worst <= limit else (FAIL, False) if best > limit else (UNDECIDED, None)
    needed = compare.repeats_to_decide(found, sign * limit) if state == UNDECIDED else None
    decide_text = ""
    if state == UNDECIDED:
        decide_text = (f"; about {needed} repeats per arm would decide it (from the spread seen)" if needed
                       else "; more repeats would not decide it (the change sits on the limit, or no spread is known)")
    interval = (found.lo, found.hi) if found.has_interval else None
    return GateResult(where, passed, found.pct, f"{text} ({how}){decide_text}", state, interval=interval,
                      repeats_needed=needed, **keys)


GATE_COLUMNS = tuple(c for c in RUNS_COLUMNS if c not in
                     ("campaign", "arm", "backend", "batch", "context", "repeat", "status"))
"""The runs.csv figures a gate (or `change_pct`'s `column`) may name."""


def check_campaign(campaign: Campaign) -> None:
    """What the campaign file alone cannot decide: every candidate (and fallback) names a registered
    measurement; an `InputError` names the key and its line, with the nearest name for a typo."""
    for i, gate in enumerate(campaign.gates):
        if gate.measure not in GATE_COLUMNS:
            close = difflib.get_close_matches(gate.measure, GATE_COLUMNS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            key_path = f"gate[{i}].measure" if f"gate[{i}]" in getattr(campaign.lines, "lines", {}) else "gate.measure"
            raise InputError(campaign.path, campaign.where(key_path),
                             f"a runs.csv figure, one of {', '.join(GATE_COLUMNS)}", f"{gate.measure!r}{hint}")
    for cand, source in zip(campaign.candidates, campaign.candidate_sources, strict=True):
        for j, spec in enumerate((cand, *cand.fallback)):
            if spec.measure not in MEASUREMENTS:
                close = difflib.get_close_matches(spec.measure, list(MEASUREMENTS), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                key_path = "measure" if j == 0 else f"fallback[{j - 1}].measure"
                raise InputError(source.file, source.where(key_path),
                                 f"a measurement, one of {', '.join(sorted(MEASUREMENTS))}", f"{spec.measure!r}{hint}")
