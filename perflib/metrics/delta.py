"""Two `/metrics` snapshots of one server differenced: deltas, resets, and the derived figures."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perflib.errors import PerflibError
from perflib.metrics.dialects import DIALECTS, resolve_dialect
from perflib.metrics.exposition import Sample, Snapshot, as_samples
from perflib.metrics.figures import FIGURES, derive_figures
from perflib.metrics.names import MetricName, base_name, present_name, spec_keys, values_for


@dataclass(frozen=True)
class MetricsDelta:
    """What the counters did across one level, and the SERVERS.md §5 figures derived from them.

    Figures that cannot be computed are None (JSON null), never 0. On a reset (the server restarted
    between the scrapes, or a counter went backwards) every figure and delta is None and `notes` say
    why; `restarted` holds the evidence of a restart itself (a changed start time or model), `()` where
    none was seen. `absent` lists canonical names missing from the after snapshot.
    """

    dialect: str
    decode_steps: float | None = None
    decode_tokens: float | None = None
    mixed_steps: float | None = None
    prefill_chunks: float | None = None
    tokens_predicted_seconds: float | None = None
    occupancy: float | None = None
    decode_step_ms: float | None = None
    raw_step_ms: float | None = None
    busy_slots_per_decode: float | None = None
    per_stream_tok_s: float | None = None
    reset: bool = False
    restarted: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    requests: int | None = None
    deltas: dict[str, float | None] = field(default_factory=dict)
    gauges_after: dict[str, float] = field(default_factory=dict)
    extras: dict[str, float | None] = field(default_factory=dict)
    sample_deltas: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    not_finite: tuple[str, ...] = ()
    """Counters (server names) that were NaN or ±Inf in a snapshot: their deltas and figures are n/a."""

    @property
    def problem(self) -> str | None:
        """Why the counters could not be used, where they could not: `reset: ...` (a counter went back,
        the server restarted), `NaN: ...` (a counter not a finite number) or `impossible: ...` (a figure
        below 0, fewer tokens counted than requests finished); None where they were fine. A page says
        this, not "not exported"."""
        if self.reset:
            first = next((n.removeprefix("RESET: ") for n in self.notes if n.startswith("RESET: ")), "")
            return f"reset: {first}" if first else "reset"
        if self.not_finite:
            return f"NaN: {', '.join(self.not_finite)} not a finite number"
        impossible = next((n.removeprefix("IMPOSSIBLE: ") for n in self.notes if n.startswith("IMPOSSIBLE: ")), None)
        return f"impossible: {impossible}" if impossible else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: the SCHEMA.md §3 keys, `deltas`, `notes` and the rest; NaN becomes None."""

        def clean(value: Any) -> Any:
            if isinstance(value, float) and not math.isfinite(value):
                return None
            if isinstance(value, dict):
                return {k: clean(v) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                return [clean(v) for v in value]
            return value

        out: dict[str, Any] = {"dialect": self.dialect}
        for name in FIGURES:
            out[name] = getattr(self, name)
        out.update(
            reset=self.reset,
            restarted=list(self.restarted),
            absent=list(self.absent),
            requests=self.requests,
            deltas=dict(self.deltas),
            gauges_after=dict(self.gauges_after),
            extras=dict(self.extras),
            sample_deltas=dict(self.sample_deltas),
            notes=list(self.notes),
            not_finite=list(self.not_finite),
            problem=self.problem,
        )
        return clean(out)



PROCESS_START = "process_start_time_seconds"
"""prometheus_client's process collector: the serving process's start, Unix seconds (vLLM, SGLang)."""
MODEL_LABEL = "model_name"
"""The label that names the served model on vLLM's and SGLang's series. SGLang before 0.4 called it
`name` on its `sglang:` series (read there only where no series has `model_name`: newer SGLang uses `name`
for other things, `func_latency_seconds{name="generate_request"}`). llama.cpp's and mlxcel's samples have
no labels (SERVERS.md §1): their model is not in the text, and a restart shows there only by its
`Process-Start-Time-Unix` header or a counter going back."""
RESTARTED = "server restarted between the scrapes"


def _number(value: float) -> str:
    """A start time as the exposition text meant it: `1733300000`, `1762134400.66` (not `1.76213e+09`)."""
    return str(int(value)) if value.is_integer() else repr(value)


def _start_time(samples: Sequence[Sample]) -> float | None:
    values = [s.value for s in samples if s.name == PROCESS_START and not s.labels and math.isfinite(s.value)]
    return values[0] if values else None


def _models(samples: Sequence[Sample]) -> frozenset[str]:
    """The served model names the samples' labels carry (empty where none do)."""
    named = frozenset(v for s in samples for k, v in s.labels if k == MODEL_LABEL and v)
    return named or frozenset(v for s in samples if s.name.startswith("sglang:") for k, v in s.labels
                              if k == "name" and v)


def restart_evidence(before: Sequence[Sample], after: Sequence[Sample], process_start_before: float | None = None,
                     process_start_after: float | None = None) -> list[str]:
    """What says the server restarted between two scrapes, one line each: a changed
    `Process-Start-Time-Unix` header, a changed `process_start_time_seconds`, a different model in the
    samples' `model_name` (SGLang before 0.4: `name`) labels. A counter going back is `_resets`' part."""
    found = []
    if process_start_before is not None and process_start_after is not None \
            and float(process_start_before) != float(process_start_after):
        found.append(f"{RESTARTED}: Process-Start-Time-Unix {_number(float(process_start_before))} → "
                     f"{_number(float(process_start_after))}")
    start_b, start_a = _start_time(before), _start_time(after)
    if start_b is not None and start_a is not None and start_b != start_a:
        found.append(f"{RESTARTED}: {PROCESS_START} {_number(start_b)} → {_number(start_a)}")
    models_b, models_a = _models(before), _models(after)
    if models_b and models_a and models_b != models_a:
        found.append(f"{RESTARTED}: the model changed, {', '.join(sorted(models_b))} → {', '.join(sorted(models_a))}")
    return found


def _resets(before: Sequence[Sample], after: Sequence[Sample], gauge_like: set[str]) -> list[str]:
    """Reasons for a reset: counter samples that went backwards, counter `_created` stamps that changed."""
    counter_kinds = {"counter", "histogram", "summary"}
    after_by_key = {s.key: s for s in after}
    reasons: list[str] = []
    for s in before:
        a = after_by_key.get(s.key)
        if a is None or s.name in gauge_like or any(k == "quantile" for k, _ in s.labels):
            continue
        is_counter = s.kind in counter_kinds or (s.kind == "unknown" and s.name.endswith("_total"))
        if not (math.isfinite(s.value) and math.isfinite(a.value)):
            continue  # NaN or Inf proves nothing about a reset; `_canonical` reports it
        if s.name.endswith("_created"):
            if a.value != s.value:
                reasons.append(f"{s.key} changed {s.value:g} -> {a.value:g} (counter re-created)")
        elif is_counter and a.value < s.value:
            reasons.append(f"counter {s.key} went backwards: {s.value:g} -> {a.value:g}")
    return reasons


def diff(
    before_text: str | Snapshot | Sequence[Sample],
    after_text: str | Snapshot | Sequence[Sample],
    dialect: str = "auto",
    requests: int | None = None,
    process_start_before: float | None = None,
    process_start_after: float | None = None,
    gauge_samples: Sequence[Mapping[str, float]] | None = None,
) -> MetricsDelta:
    """Difference two `/metrics` snapshots of one server and derive the SERVERS.md §5 figures.

    `before_text`/`after_text` are exposition texts (or `Snapshot`s, whose `process_start` is used
    when not given, or already parsed samples). A name missing before counts from 0; one missing after is `absent`. `requests`
    is the number of requests completed in the level: llama.cpp needs it for `decode_step_ms`
    (its step count divides by Δtokens_predicted − requests; llama.cpp has no completed-requests
    counter, so without it the figure is None and the notes say so). `gauge_samples` are
    `gauge_values` dicts taken during the level: SGLang's occupancy is their time average of
    `num_running_reqs` (an extension of SCHEMA.md §3, optional).
    """
    _check_arguments(requests, process_start_before, process_start_after)
    if isinstance(before_text, Snapshot) and process_start_before is None:
        process_start_before = before_text.process_start
    if isinstance(after_text, Snapshot) and process_start_after is None:
        process_start_after = after_text.process_start
    before = as_samples(before_text, "before")
    after = as_samples(after_text, "after")
    dialect = resolve_dialect(dialect, after, before)
    table = DIALECTS[dialect].names
    c = _canonical(table, before, after)
    notes = list(c.notes)
    deltas, gauges_after, absent = c.deltas, c.gauges_after, c.absent
    if len(absent) == len(table):
        notes.append(f"no {dialect} metric in the after snapshot: is this the right server (dialect)?")
    result: dict[str, Any] = {"dialect": dialect, "absent": tuple(absent), "requests": requests}
    restarted = restart_evidence(before, after, process_start_before, process_start_after)
    reasons = restarted + _resets(before, after, c.gauge_like)
    if reasons:
        shown = reasons[:5] + ([f"... and {len(reasons) - 5} more"] if len(reasons) > 5 else [])
        notes = [f"RESET: {r}" for r in shown] + ["counters reset during the level: no figures; re-measure it"]
        return MetricsDelta(reset=True, restarted=tuple(restarted), deltas=dict.fromkeys(deltas),
                            gauges_after=gauges_after, notes=tuple(notes), not_finite=tuple(c.not_finite), **result)

    if not before:
        notes.append("the before snapshot has no samples: deltas are lifetime totals")
    sample_deltas = _sample_deltas(before, after, c.gauge_like)
    figures, extras, more_notes = derive_figures(DIALECTS[dialect].derive, deltas, c.values_before, c.values_after, requests,
                                                  gauge_samples)
    notes.extend(more_notes)
    running = DIALECTS[dialect].running
    if gauges_after.get(running, 0) > 0:
        notes.append(f"{running} = {gauges_after[running]:g} in the after snapshot: take it once every request "
                     "has finished (tokens_predicted_* are added at completion)")
    return MetricsDelta(deltas=deltas, gauges_after=gauges_after, extras=extras, sample_deltas=sample_deltas,
                        notes=tuple(notes), not_finite=tuple(c.not_finite), **result, **figures)


def _check_arguments(requests: Any, process_start_before: Any, process_start_after: Any) -> None:
    """`requests` a non-negative integer and the start times finite numbers, where given."""
    if requests is not None and (isinstance(requests, bool) or not isinstance(requests, int) or requests < 0):
        raise PerflibError(f"requests: expected a non-negative integer (requests completed in the level), "
                           f"found {requests!r}")
    for name, value in (("process_start_before", process_start_before), ("process_start_after", process_start_after)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not math.isfinite(value)):
            raise PerflibError(f"{name}: expected a finite number (Unix seconds), found {value!r}")


def _not_finite(values: dict[str, float], which: str, server_name: str) -> tuple[set[str], list[str]]:
    """Keys whose value is NaN or ±Inf, and a note for each: reported as such, never computed with."""
    bad = {k for k, v in values.items() if not math.isfinite(v)}
    notes = [f"{key}: {server_name} is {_show(values[key])} in the {which} snapshot: its delta and the figures "
             "from it are n/a" for key in sorted(bad)]
    return bad, notes


def _show(value: float) -> str:
    return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")


@dataclass
class _Canonical:
    """Each canonical name of a dialect resolved in the after snapshot (alias order), then read in both."""

    deltas: dict[str, float | None] = field(default_factory=dict)
    values_before: dict[str, float] = field(default_factory=dict)  # every kind: the busy-slots average needs n
    values_after: dict[str, float] = field(default_factory=dict)
    gauges_after: dict[str, float] = field(default_factory=dict)
    absent: list[str] = field(default_factory=list)
    gauge_like: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    not_finite: list[str] = field(default_factory=list)


def _canonical(table: Sequence[MetricName], before: Sequence[Sample], after: Sequence[Sample]) -> _Canonical:
    out = _Canonical()
    for spec in table:
        server_name = present_name(spec, after)
        if spec.kind == "gauge":
            for n in spec.names:
                out.gauge_like.update({n, base_name(n) + "_total"})
        if server_name is None:
            out.absent.append(spec.canonical)
            if spec.kind != "gauge":
                out.deltas.update(dict.fromkeys(spec_keys(spec)))
            continue
        if server_name != spec.names[0]:
            out.notes.append(f"{spec.canonical}: read from the older name {server_name}")
        a = values_for(spec, server_name, after)
        b = values_for(spec, server_name, before)
        bad_a, notes_a = _not_finite(a, "after", server_name)
        bad_b, notes_b = _not_finite(b, "before", server_name)
        out.notes.extend(notes_a + notes_b)
        if (bad_a or bad_b) and spec.kind != "gauge" and server_name not in out.not_finite:
            out.not_finite.append(server_name)
        out.values_after.update({k: v for k, v in a.items() if k not in bad_a})
        out.values_before.update({k: v for k, v in b.items() if k not in bad_b})
        if spec.kind == "gauge":
            out.gauges_after.update({k: v for k, v in a.items() if k not in bad_a})
        else:
            out.deltas.update({k: None if k in bad_a | bad_b else v - b.get(k, 0.0) for k, v in a.items()})
    return out


def _sample_deltas(before: Sequence[Sample], after: Sequence[Sample], gauge_like: set[str]) -> dict[str, float]:
    """Δ of every counter-like sample (counters, histogram/summary parts), keyed `name{labels}`."""
    old = {s.key: s.value for s in before}
    out: dict[str, float] = {}
    for s in after:
        if s.name in gauge_like or s.name.endswith("_created"):
            continue
        if s.kind in {"counter", "histogram", "summary"} or (s.kind == "unknown" and s.name.endswith("_total")):
            if s.kind == "summary" and dict(s.labels).get("quantile") is not None:
                continue
            out[s.key] = s.value - old.get(s.key, 0.0)
    return out

