"""Verdicts: each candidate decided by its measurement at every scope it applies to, and the gates.

A candidate names a measurement and two thresholds; its verdict is confirmed, ruled out,
inconclusive or not measured, always printed with the number and the threshold that decided it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from perflib import checks
from perflib.classes import builtin_class_names, load_class_file
from perflib.config import Campaign, CandidateSpec, GateSpec, parse_threshold
from perflib.derive import DerivedTables
from perflib.errors import InputError
from perflib.runs import RUNS_COLUMNS
from perflib.server.presets import PRESETS
from perflib.verdicts.measures import MEASUREMENTS, Scope, change_pct, higher_is_better, trace_scope

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

    def to_dict(self) -> dict[str, Any]:
        return {"candidate": self.candidate, "label": self.label, "scope": self.scope, "measure": self.measure,
                "outcome": self.outcome, "value": self.value, "text": self.text, "threshold": self.threshold,
                "why": self.why, "suspect": self.suspect, "evidence": self.evidence, "line": self.line}


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


@dataclass(frozen=True)
class Context:
    """What a campaign contributes to evaluation: its arms, backends, batches, contexts and facts."""

    arms: tuple[str, ...]
    backends: tuple[str, ...]
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    weight_bytes: int | None = None
    kv_bytes_per_token: int | None = None
    bandwidth: dict[str, float | None] = field(default_factory=dict)
    profilers: dict[str, str] = field(default_factory=dict)
    trace_notes: dict[str, str] = field(default_factory=dict)  # arm -> why it has no trace
    known_classes: frozenset[str] | None = None
    no_requests: dict[str, str] = field(default_factory=dict)  # backend -> why it has no request records
    arm_profilers: dict[tuple[str, str], str] = field(default_factory=dict)  # (arm, backend) -> its own profiler
    traced_by: dict[str, tuple[str, ...]] = field(default_factory=dict)  # compared arm -> its traced arms
    trace_hints: dict[str, str] = field(default_factory=dict)  # backend -> the profiler kind to suggest

    @classmethod
    def of(cls, campaign: Campaign) -> Context:
        no_requests = {b.name: f"trace-only backend {b.name}: no server, no /metrics and no request records"
                       for b in campaign.backends if b.trace_only}
        traced_by: dict[str, tuple[str, ...]] = {}
        for arm in campaign.arms:
            if arm.role == "traced" and arm.of:
                traced_by[arm.of] = (*traced_by.get(arm.of, ()), arm.name)
        hints = {b.name: hint for b in campaign.backends if (hint := profiler_hint(b)) is not None}
        return cls(arms=tuple(a.name for a in campaign.compared_arms),
                   backends=tuple(b.name for b in campaign.backends),
                   trace_notes={a.name: a.trace_note for a in campaign.arms if a.trace_note},
                   no_requests=no_requests,
                   batches=tuple(sorted(campaign.batches)), contexts=tuple(sorted(campaign.contexts)),
                   weight_bytes=campaign.model.weight_bytes, kv_bytes_per_token=campaign.model.kv_bytes_per_token,
                   bandwidth={b.name: b.peak_bandwidth_gbs for b in campaign.backends},
                   profilers={b.name: b.profiler.kind for b in campaign.backends},
                   arm_profilers={(a.name, b.name): a.profiler.kind for a in campaign.arms if a.profiler
                                  for b in campaign.backends},
                   traced_by=traced_by, trace_hints=hints, known_classes=_known_classes(campaign))

    def profiler(self, arm: str | None, backend: str) -> str | None:
        """The profiler kind of (arm, backend): the arm's own, else the backend's."""
        return self.arm_profilers.get((arm, backend)) if arm and (arm, backend) in self.arm_profilers \
            else self.profilers.get(backend)


def profiler_hint(backend: Any) -> str | None:
    """The `profiler.kind` that traces this backend's kernels, to name in a "not measured" reason: the
    PyTorch profiler for vLLM and SGLang, CUPTI for a CUDA build or device, rocprofv3 for ROCm; None for
    a CPU server (no GPU kernels) or a trace-only backend."""
    if backend.trace_only:
        return None
    spec = backend.server_spec
    preset = spec.preset if spec is not None else None
    build = (spec.build if spec is not None else None) or ""
    if preset in PRESETS and PRESETS[preset].kernel_profiler:  # a PyTorch engine: its own profiler
        return PRESETS[preset].kernel_profiler
    if build == "cpu" or backend.start == "llama-server-local":
        return None
    text = " ".join(str(x or "") for x in (build, backend.kernel_classes, backend.device, backend.name)).lower()
    if "cuda" in text or "nvidia" in text:
        return "cupti"
    if "rocm" in text or "hip" in text or "amd" in text:
        return "rocprofv3"
    return "cupti, rocprofv3, nsys or torch" if spec is not None or backend.url else None


def _known_classes(campaign: Campaign) -> frozenset[str]:
    """The shipped tables' classes plus those of the campaign's own class files."""
    names = set(builtin_class_names())
    for backend in campaign.backends:
        file = campaign.class_file(backend)
        if file is not None and file.is_file():  # a missing file is reported by derive, per run
            names |= {r.kernel_class for r in load_class_file(file).rules}
    return frozenset(names)


def scopes(candidate: CandidateSpec, ctx: Context) -> list[Scope]:
    """Every scope a candidate applies to: unspecified arm, backend and context expand; the batch
    defaults to the campaign's largest (the batch-B window)."""
    measure = candidate.measure
    if measure == "change_pct":
        baseline = candidate.baseline or ctx.arms[0]
        arms = [candidate.arm] if candidate.arm else [a for a in ctx.arms if a != baseline] or [None]
    else:
        baseline = candidate.baseline
        arms = [candidate.arm] if candidate.arm else list(ctx.arms)
    backends = [candidate.backend] if candidate.backend else list(ctx.backends)
    contexts = [candidate.context] if candidate.context else list(ctx.contexts)
    batch = candidate.batch or (max(ctx.batches) if ctx.batches else None)
    out = []
    for arm in arms:
        for backend in backends:
            for context in contexts:
                out.append(Scope(arm=arm, backend=backend, batch=batch, context=context, classes=candidate.classes,
                                 column=candidate.column, baseline=baseline if measure == "change_pct" else None,
                                 weight_bytes=ctx.weight_bytes, kv_bytes_per_token=ctx.kv_bytes_per_token,
                                 peak_bandwidth_gbs=ctx.bandwidth.get(backend), profiler=ctx.profiler(arm, backend),
                                 trace_note=ctx.trace_notes.get(arm) if arm else None,
                                 known_classes=ctx.known_classes,
                                 no_requests=ctx.no_requests.get(backend),
                                 traced_by=tuple((t, ctx.profiler(t, backend) or "none", ctx.trace_notes.get(t))
                                                 for t in ctx.traced_by.get(arm or "", ())),
                                 trace_hint=ctx.trace_hints.get(backend)))
    return out


RATIO_MEASURES = frozenset({"step_ratio", "step_scaling", "gap_scaling", "class_scaling"})
"""Measurements that divide batch B by batch 1: they rest on both levels."""


def evaluate_candidate(candidate: CandidateSpec, tables: DerivedTables, ctx: Context,
                       level_checks: pd.DataFrame | None = None) -> list[Verdict]:
    """Verdicts of one candidate, one per scope; a fallback measurement decides where the main
    one could not be measured. A verdict says which of the levels it rests on are suspect."""
    if level_checks is None:
        level_checks = checks.level_checks(tables.runs, tables.trace_runs)
    verdicts = []
    for scope in scopes(candidate, ctx):
        verdict, read = _evaluate_at(candidate, tables, scope)
        batches = [scope.batch, 1] if verdict.measure in RATIO_MEASURES else [scope.batch]
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
        if not (meas.trace and read):
            shown, read = scope, []
        return Verdict(candidate.id, candidate.question, label, spec.measure, shown.describe(), outcome,
                       result.value, result.text, threshold), read
    return Verdict(candidate.id, candidate.question, label, candidate.measure, shown.describe(), NOT_MEASURED,
                   None, "", "", "; ".join(dict.fromkeys(w for w in whys if w))), read


def evaluate(candidates: Any, tables: DerivedTables, ctx: Context) -> list[Verdict]:
    """Verdicts of all candidates, in the campaign's order."""
    out: list[Verdict] = []
    level_checks = checks.level_checks(tables.runs, tables.trace_runs)
    for cand in candidates:
        out.extend(evaluate_candidate(cand, tables, ctx, level_checks))
    return out


def verdict_table(verdicts: list[Verdict]) -> pd.DataFrame:
    """One row per verdict: candidate, scope, outcome, the measurement sentence, the threshold."""
    cols = ["candidate", "label", "scope", "measure", "outcome", "value", "text", "threshold", "why", "suspect",
            "evidence", "line"]
    return pd.DataFrame([v.to_dict() for v in verdicts], columns=cols)


# ----------------------------------------------------------------------------------- the gate


@dataclass(frozen=True)
class GateResult:
    gate: str
    passed: bool | None
    change_pct: float | None
    text: str

    @property
    def line(self) -> str:
        state = {True: "pass", False: "FAIL", None: "not measured"}[self.passed]
        return f"{self.gate}: {self.text}: {state}"


def evaluate_gate(gate: GateSpec, tables: DerivedTables, ctx: Context) -> list[GateResult]:
    """Regression gate per backend (and context): the arm's change against the baseline arm must
    not be worse than `max_regression_pct` (worse = lower tok/s, higher ms)."""
    baseline = gate.baseline or ctx.arms[0]
    arm = gate.arm or (ctx.arms[-1] if len(ctx.arms) > 1 else None)
    name = f"{gate.measure} at batch {gate.batch}, at most {gate.max_regression_pct:g}% worse"
    contexts = [gate.context] if gate.context else list(ctx.contexts)
    results = []
    for backend in ctx.backends:
        for context in contexts:
            scope = Scope(arm=arm, backend=backend, batch=gate.batch, context=context, column=gate.measure,
                          baseline=baseline, no_requests=ctx.no_requests.get(backend))
            measured = change_pct(tables, scope)
            where = f"{name} ({backend}, context {context})"
            if measured.value is None:
                results.append(GateResult(where, None, None, f"not measured ({measured.why})"))
                continue
            regression = -measured.value if higher_is_better(gate.measure) else measured.value
            how = (f"{regression:.1f}% worse" if regression > 0 else f"{-regression:.1f}% better" if regression < 0
                   else "unchanged")
            results.append(GateResult(where, regression <= gate.max_regression_pct, measured.value,
                                      f"{measured.text} ({how})"))
    return results


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
