"""Where a candidate is decided: every level (batch x context, per compared arm and backend) it applies to.

A candidate that names no batch is decided at every batch its measurement applies to (`Measurement`'s
flags): a measurement that divides by batch 1 (`rests_on_batch1`) or reads the other requests of the
level (`batched`) at every batch above 1, a trace measurement at every level with a trace (its own or
its traced arm's; the largest batch where there is none, to say why), any other at every batch. A
measurement with a baseline (`has_baseline`) is decided for each compared arm against its baseline
(`Campaign.baseline_of`, or the candidate's `baseline:`). Unnamed arms, backends and contexts expand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from perflib.classes import builtin_class_names, load_class_file
from perflib.config import Campaign, CandidateSpec, question_levels
from perflib.derive import DerivedTables
from perflib.server.presets import PRESETS
from perflib.verdicts.measures import MEASUREMENTS, Scope


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
    baselines: dict[str, str] = field(default_factory=dict)
    """Compared arm -> the arm it is measured against (`Campaign.baseline_of`); the first compared arm is the
    baseline of those not in it."""
    question_contexts: tuple[int, ...] = ()
    """The contexts the campaign's `question:` names, in its order (`perflib.config.question_levels`)."""
    question_batches: tuple[int, ...] = ()

    @classmethod
    def of(cls, campaign: Campaign) -> Context:
        no_requests = {b.name: f"trace-only backend {b.name}: no server, no /metrics and no request records"
                       for b in campaign.backends if b.trace_only}
        traced_by: dict[str, tuple[str, ...]] = {}
        for arm in campaign.arms:
            if arm.role == "traced" and arm.of:
                traced_by[arm.of] = (*traced_by.get(arm.of, ()), arm.name)
        hints = {b.name: hint for b in campaign.backends if (hint := profiler_hint(b)) is not None}
        baselines = {a.name: base for a in campaign.compared_arms if (base := campaign.baseline_of(a.name))}
        contexts, batches = question_levels(campaign.question, campaign.batches, campaign.contexts)
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
                   traced_by=traced_by, trace_hints=hints, known_classes=_known_classes(campaign),
                   baselines=baselines, question_contexts=contexts, question_batches=batches)

    def profiler(self, arm: str | None, backend: str) -> str | None:
        """The profiler kind of (arm, backend): the arm's own, else the backend's."""
        return self.arm_profilers.get((arm, backend)) if arm and (arm, backend) in self.arm_profilers \
            else self.profilers.get(backend)

    def baseline_of(self, arm: str | None) -> str | None:
        """The arm `arm` is measured against (None for the campaign's baseline and for no arm)."""
        if arm is None:
            return None
        base = self.baselines.get(arm, self.arms[0] if self.arms and not self.baselines else None)
        return None if base == arm else base


def profiler_hint(backend: Any) -> str | None:
    """The `profiler.kind` that traces this backend's kernels, to name in a "not measured" reason: the
    PyTorch profiler for vLLM and SGLang, CUPTI for a CUDA build or device, rocprofv3 for ROCm, perf's
    samples for llama-server on the CPU (`perflib.server.perf`); None for a trace-only backend."""
    if backend.trace_only:
        return None
    spec = backend.server_spec
    preset = spec.preset if spec is not None else None
    build = (spec.build if spec is not None else None) or ""
    if preset in PRESETS and PRESETS[preset].kernel_profiler:  # a PyTorch engine: its own profiler
        return PRESETS[preset].kernel_profiler
    if build == "cpu" or backend.start == "llama-server-local":
        return "perf"
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


def _traced_batches(tables: DerivedTables | None, arms: tuple[str, ...], backend: str, context: int | None) -> set[int]:
    """The batches at which any of `arms` on `backend` (at `context`) has a trace, or lost the one it was to
    have (a `trace_loss`: that level then says why it is not measured)."""
    if tables is None:
        return set()
    found: set[int] = set()
    names = {str(a) for a in arms}
    for frame, lost in ((tables.trace_runs, False), (tables.runs, True)):
        if frame is None or not len(frame) or "batch" not in frame.columns:
            continue
        mask = frame["arm"].astype(str).isin(names) & (frame["backend"].astype(str) == str(backend))
        if context is not None:
            mask &= frame["context"].astype(str) == str(context)
        if lost:
            mask &= frame["trace_loss"].map(lambda t: isinstance(t, str) and bool(t.strip())) \
                if "trace_loss" in frame.columns else False
        found |= {int(b) for b in pd.to_numeric(frame.loc[mask, "batch"], errors="coerce").dropna()}
    return found


def candidate_batches(candidate: CandidateSpec, ctx: Context, arm: str | None, backend: str, context: int | None,
                      tables: DerivedTables | None = None) -> list[int]:
    """The batches a candidate is decided at for (arm, backend, context): its own `batch:`, else every batch
    the measurement (or a fallback) applies to (see the module); the largest where none does, so that one
    verdict says why it is not measured."""
    largest = [max(ctx.batches)] if ctx.batches else [None]
    if candidate.batch:
        return [candidate.batch]
    out: set[int] = set()
    for spec in (candidate, *candidate.fallback):
        meas = MEASUREMENTS.get(spec.measure)
        if meas is None or (spec is not candidate and spec.batch):
            continue
        batches = {b for b in ctx.batches if b > 1 or not (meas.rests_on_batch1 or meas.batched)}
        if meas.trace:
            batches &= _traced_batches(tables, (arm or "", *ctx.traced_by.get(arm or "", ())), backend, context)
        out |= batches
    return sorted(out) or largest  # type: ignore[return-value]


def _arms(candidate: CandidateSpec, ctx: Context) -> list[tuple[str | None, str | None]]:
    """(arm, baseline) pairs to decide: for a measurement with a baseline each compared arm against the
    candidate's `baseline:` or its own; else each arm, with no baseline."""
    meas = MEASUREMENTS.get(candidate.measure)
    if meas is None or not meas.has_baseline:
        return [(arm, None) for arm in ([candidate.arm] if candidate.arm else list(ctx.arms))]
    if candidate.arm:
        return [(candidate.arm, candidate.baseline or ctx.baseline_of(candidate.arm) or (ctx.arms[0] if ctx.arms
                                                                                         else None))]
    pairs = [(arm, candidate.baseline or ctx.baseline_of(arm)) for arm in ctx.arms]
    return [(arm, base) for arm, base in pairs if base and base != arm] or [(None, None)]


def scopes(candidate: CandidateSpec, ctx: Context, tables: DerivedTables | None = None) -> list[Scope]:
    """Every scope a candidate is decided at: arm (with its baseline), backend, context and batch, in that
    order of nesting (batches ascending). Without `tables` a trace measurement cannot know its traced
    levels: it is decided at the largest batch only."""
    out = []
    for arm, baseline in _arms(candidate, ctx):
        for backend in [candidate.backend] if candidate.backend else list(ctx.backends):
            for context in [candidate.context] if candidate.context else list(ctx.contexts):
                for batch in candidate_batches(candidate, ctx, arm, backend, context, tables):
                    out.append(Scope(
                        arm=arm, backend=backend, batch=batch, context=context, classes=candidate.classes,
                        column=candidate.column, baseline=baseline, weight_bytes=ctx.weight_bytes,
                        kv_bytes_per_token=ctx.kv_bytes_per_token, peak_bandwidth_gbs=ctx.bandwidth.get(backend),
                        profiler=ctx.profiler(arm, backend), trace_note=ctx.trace_notes.get(arm) if arm else None,
                        known_classes=ctx.known_classes, no_requests=ctx.no_requests.get(backend),
                        traced_by=tuple((t, ctx.profiler(t, backend) or "none", ctx.trace_notes.get(t))
                                        for t in ctx.traced_by.get(arm or "", ())),
                        trace_hint=ctx.trace_hints.get(backend)))
    return out
