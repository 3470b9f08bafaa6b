"""Server `/metrics` counters: parse exposition text, name tables per server, deltas and derived figures.

A load level is judged by counter deltas between a scrape right before it and one right after its last
request finished (reference SERVERS.md §0). This module maps each server's names (llama.cpp
`llamacpp:*`, mlxcel `llamacpp:*` + `mlxcel_*`, vLLM `vllm:*`, SGLang `sglang:*`, with the old → new
aliases) to canonical names, differences two snapshots, detects counter resets, and derives the §5
figures: occupancy, the decode step as one request sees it (`decode_step_ms`) and the raw ratio over
steps (`raw_step_ms`). A figure that cannot be computed is None, never 0; a missing metric is reported
in `absent`, not raised.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from perflib.clocks import now_clocks
from perflib.errors import InputError, PerflibError

DIALECTS = ("mlxcel", "llamacpp", "vllm", "sglang")
Kind = Literal["counter", "gauge", "histogram"]

# The keys `MetricsDelta.to_dict()` always carries (docs/SCHEMA.md §3), figures first.
FIGURES = (
    "decode_steps",
    "decode_tokens",
    "mixed_steps",
    "prefill_chunks",
    "tokens_predicted_seconds",
    "occupancy",
    "decode_step_ms",
    "raw_step_ms",
    "busy_slots_per_decode",
    "per_stream_tok_s",
)

# One line per figure, shared by `perflib metrics diff --help` and the table's unit column.
FIGURE_HELP: dict[str, tuple[str, str]] = {
    "decode_steps": ("steps", "decode steps in the window (llama.cpp: llama_decode() calls, prompt batches included)"),
    "decode_tokens": ("tokens", "rows advanced by decode steps (mlxcel excludes each request's first token)"),
    "mixed_steps": ("steps", "mixed prefill/decode ticks (mlxcel only)"),
    "prefill_chunks": ("chunks", "chunked-prefill pieces interleaved with decode (mlxcel only)"),
    "tokens_predicted_seconds": ("s", "per-request first->last token time summed over requests (k streams add k s/s)"),
    "occupancy": ("rows/step", "mean rows one decode step advanced = decode_tokens / decode_steps"),
    "decode_step_ms": ("ms", "decode step as one request sees it = 1000 * tokens_predicted_seconds / decode_tokens"),
    "raw_step_ms": ("ms", "raw ratio over steps = 1000 * tokens_predicted_seconds / decode_steps = occupancy x step"),
    "busy_slots_per_decode": ("slots", "llama.cpp window average of busy slots per decode, (g2*n2 - g1*n1)/(n2 - n1)"),
    "per_stream_tok_s": ("tok/s", "decode rate of one stream (not throughput): tokens / summed generation seconds"),
}


class MetricsUnavailable(PerflibError):
    """The server answered but serves no metrics (llama.cpp without `--metrics`: HTTP 501; old mlxcel: 404)."""


# --------------------------------------------------------------------------------------------------
# Parsing


@dataclass(frozen=True)
class Sample:
    """One exposition sample. `name` is as prometheus_client reports it: counters always end in `_total`."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    kind: str  # the family's `# TYPE`: counter, gauge, histogram, summary, unknown, ...

    @property
    def key(self) -> str:
        """`name{label="value",...}` with labels sorted, so labelled samples stay distinguishable."""
        if not self.labels:
            return self.name
        inner = ",".join(f'{k}="{v}"' for k, v in self.labels)
        return f"{self.name}{{{inner}}}"


def _bad_line(text: str) -> tuple[int, str] | None:
    """Line number and text of the first sample line prometheus_client rejects (only called on errors)."""
    from prometheus_client.parser import text_string_to_metric_families

    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            list(text_string_to_metric_families(stripped + "\n"))
        except Exception:  # any parser failure marks the line
            return number, stripped
    return None


def parse_exposition(text: str, source: str = "<text>") -> tuple[Sample, ...]:
    """Parse Prometheus exposition text (format 0.0.4) into samples.

    Uses `prometheus_client.parser.text_string_to_metric_families`, which drops `_total` from counter
    *family* names and adds it to every counter sample (a llama.cpp gauge typed `counter`, such as
    `llamacpp:n_busy_slots_per_decode` in some builds, comes back as `..._total`); the name tables
    below match with `(_total)?` for that reason. A line the parser rejects raises `InputError`
    naming `source` and the line.
    """
    from prometheus_client.parser import text_string_to_metric_families

    samples: list[Sample] = []
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = tuple(sorted((str(k), str(v)) for k, v in s.labels.items()))
                samples.append(Sample(s.name, labels, float(s.value), family.type))
    except Exception as exc:  # prometheus_client raises ValueError, TypeError, IndexError, ...
        bad = _bad_line(text)
        where = f"line {bad[0]}" if bad else None
        found = repr(bad[1][:120]) if bad else str(exc)
        raise InputError(source, where, "Prometheus exposition text (`name{labels} value`)", found) from exc
    return tuple(samples)


def _as_samples(snapshot: str | Sequence[Sample] | Snapshot, source: str) -> tuple[Sample, ...]:
    if isinstance(snapshot, Snapshot):
        return parse_exposition(snapshot.text, snapshot.url or source)
    if isinstance(snapshot, str):
        return parse_exposition(snapshot, source)
    return tuple(snapshot)


# --------------------------------------------------------------------------------------------------
# Name tables (SERVERS.md §1-§4): canonical name -> server names, preferred first, older aliases after.


@dataclass(frozen=True)
class MetricName:
    """One canonical metric and the server names that carry it.

    `names` are matched with `(_total)?` (and `_sum`/`_count`/`_bucket` for histograms); the first name
    found in the after snapshot wins, so a renamed metric keeps its canonical name across builds.
    Labelled samples are summed (`agg="mean"` for fractions); `by_label` also keeps one delta per
    value of that label (`paged_decode_launches{path="fused_v2"}`). `sampled` gauges are what
    `gauge_values` returns for sampling during a level.
    """

    canonical: str
    names: tuple[str, ...]
    kind: Kind
    by_label: str | None = None
    agg: Literal["sum", "mean"] = "sum"
    sampled: bool = False


def _c(canonical: str, *names: str, by_label: str | None = None) -> MetricName:
    return MetricName(canonical, names, "counter", by_label=by_label)


def _g(canonical: str, *names: str, agg: Literal["sum", "mean"] = "sum", sampled: bool = True) -> MetricName:
    return MetricName(canonical, names, "gauge", agg=agg, sampled=sampled)


def _h(canonical: str, *names: str) -> MetricName:
    return MetricName(canonical, names, "histogram")


# llama-server b10621 and the mlxcel mirror of it. `*_tokens_seconds` gauges are reset by every scrape
# (the handler sets metrics_reset_bucket), and `n_busy_slots_per_decode` is a lifetime average: neither
# is sampled. `kv_cache_*` were removed in PR #13660; they stay in the table so a build that has them
# reports them and every other build reports them absent.
_LLAMACPP_COMMON: tuple[MetricName, ...] = (
    _c("prompt_tokens", "llamacpp:prompt_tokens_total"),
    _c("prompt_tokens_cached", "llamacpp:prompt_tokens_cached_total"),
    _c("prompt_seconds", "llamacpp:prompt_seconds_total"),
    _c("tokens_predicted", "llamacpp:tokens_predicted_total"),
    _c("tokens_predicted_seconds", "llamacpp:tokens_predicted_seconds_total"),
    _c("n_decode", "llamacpp:n_decode_total"),
    _c("spec_decode_num_draft_tokens", "llamacpp:spec_decode_num_draft_tokens_total"),
    _c("spec_decode_num_accepted_tokens", "llamacpp:spec_decode_num_accepted_tokens_total"),
    _c("spec_decode_num_drafts", "llamacpp:spec_decode_num_drafts_total"),
    _g("busy_slots_per_decode", "llamacpp:n_busy_slots_per_decode", sampled=False),
    _g("n_tokens_max", "llamacpp:n_tokens_max", sampled=False),
    _g("prompt_tokens_seconds", "llamacpp:prompt_tokens_seconds", sampled=False),
    _g("predicted_tokens_seconds", "llamacpp:predicted_tokens_seconds", sampled=False),
    _g("requests_processing", "llamacpp:requests_processing"),
    _g("requests_deferred", "llamacpp:requests_deferred"),
)

_LLAMACPP_ONLY: tuple[MetricName, ...] = (
    _c("spec_decode_num_accepted_tokens_per_pos", "llamacpp:spec_decode_num_accepted_tokens_per_pos_total",
       by_label="position"),
    _g("kv_cache_usage", "llamacpp:kv_cache_usage_ratio", agg="mean"),
    _g("kv_cache_tokens", "llamacpp:kv_cache_tokens"),
)

_MLXCEL_NATIVE: tuple[MetricName, ...] = (
    _c("decode_steps", "mlxcel_batch_decode_steps_total"),
    _c("decode_tokens", "mlxcel_batch_decode_tokens_total"),
    _c("mixed_steps", "mlxcel_batch_mixed_steps_total"),
    _c("prefill_chunks", "mlxcel_batch_prefill_chunks_total"),
    _c("decode_lookahead_steps", "mlxcel_batch_decode_lookahead_steps_total"),
    _c("prefill_tokens", "mlxcel_batch_prefill_tokens_total"),
    _c("sequences_started", "mlxcel_batch_sequences_started"),
    _c("sequences_completed", "mlxcel_batch_sequences_completed"),
    _c("prefill_grants", "mlxcel_batch_prefill_grants_total"),
    _c("paged_decode_launches", "mlxcel_paged_decode_launches_total", by_label="path"),
    _c("cascade_shared_tokens", "mlxcel_cascade_shared_tokens_total"),
    _c("cascade_member_sequences", "mlxcel_cascade_member_sequences_total"),
    _c("cascade_failures", "mlxcel_cascade_failures_total"),
    _c("decode_storage_fallbacks", "mlxcel_decode_storage_fallbacks_total"),
    _c("generation_requests", "mlxcel_requests_total"),
    _c("request_prompt_tokens", "mlxcel_prompt_tokens_total"),
    _c("request_completion_tokens", "mlxcel_completion_tokens_total"),
    _c("generation_time_seconds", "mlxcel_generation_time_seconds_total"),
    _c("prompt_cache_hits", "mlxcel_prompt_cache_hits_total"),
    _c("prompt_cache_misses", "mlxcel_prompt_cache_misses_total"),
    _c("prompt_cache_prefix_tokens_reused", "mlxcel_prompt_cache_prefix_tokens_reused_total"),
    _h("request_ttft_ms", "mlxcel_request_ttft_ms"),
    _h("request_decode_tok_s", "mlxcel_request_decode_tok_s"),
    _g("batch_current_size", "mlxcel_batch_current_size"),
    _g("slots_total", "mlxcel_slots_total"),
    _g("slots_available", "mlxcel_slots_available"),
    _g("queue_depth", "mlxcel_queue_depth"),
    _g("cache_pool_paged_blocks_live", "mlxcel_cache_pool_paged_blocks_live"),
    _g("cache_pool_paged_blocks_free", "mlxcel_cache_pool_paged_blocks_free"),
    _g("cache_pool_paged_bytes_in_use", "mlxcel_cache_pool_paged_bytes_in_use"),
)

# vLLM V1; old names (SERVERS.md §3 table) after the new ones.
_VLLM: tuple[MetricName, ...] = (
    _c("prompt_tokens", "vllm:prompt_tokens_total"),
    _c("generation_tokens", "vllm:generation_tokens_total"),
    _c("num_preemptions", "vllm:num_preemptions_total"),
    _c("request_success", "vllm:request_success_total"),
    _c("prefix_cache_queries", "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    _c("prefix_cache_hits", "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    _h("iteration_tokens", "vllm:iteration_tokens_total"),
    _h("inter_token_latency", "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    _h("request_time_per_output_token", "vllm:request_time_per_output_token_seconds"),
    _h("time_to_first_token", "vllm:time_to_first_token_seconds"),
    _h("e2e_request_latency", "vllm:e2e_request_latency_seconds"),
    _h("request_queue_time", "vllm:request_queue_time_seconds"),
    _h("request_prefill_time", "vllm:request_prefill_time_seconds"),
    _h("request_decode_time", "vllm:request_decode_time_seconds"),
    _h("request_inference_time", "vllm:request_inference_time_seconds"),
    _g("num_requests_running", "vllm:num_requests_running"),
    _g("num_requests_waiting", "vllm:num_requests_waiting"),
    _g("kv_cache_usage", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", agg="mean"),
)

_SGLANG: tuple[MetricName, ...] = (
    _c("prompt_tokens", "sglang:prompt_tokens_total"),
    _c("generation_tokens", "sglang:generation_tokens_total"),
    _c("cached_tokens", "sglang:cached_tokens_total"),
    _c("num_requests", "sglang:num_requests_total"),
    _c("num_aborted_requests", "sglang:num_aborted_requests_total"),
    _h("time_to_first_token", "sglang:time_to_first_token_seconds"),
    _h("inter_token_latency", "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
    _h("e2e_request_latency", "sglang:e2e_request_latency_seconds"),
    _g("num_running_reqs", "sglang:num_running_reqs"),
    _g("num_queue_reqs", "sglang:num_queue_reqs"),
    _g("num_used_tokens", "sglang:num_used_tokens"),
    _g("kv_cache_usage", "sglang:token_usage", agg="mean"),
    _g("gen_throughput", "sglang:gen_throughput"),
    _g("cache_hit_rate", "sglang:cache_hit_rate", agg="mean"),
)

NAME_TABLES: dict[str, tuple[MetricName, ...]] = {
    "llamacpp": _LLAMACPP_COMMON + _LLAMACPP_ONLY,
    "mlxcel": _LLAMACPP_COMMON + _MLXCEL_NATIVE,
    "vllm": _VLLM,
    "sglang": _SGLANG,
}


def _base(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


def _part(spec: MetricName, server_name: str, sample_name: str) -> str | None:
    """Which part of `spec` (under `server_name`) a sample is: "" for the value, "sum"/"count"/"bucket"."""
    base = _base(server_name)
    stems = (base, base + "_total")
    if spec.kind != "histogram":
        return "" if sample_name in stems else None
    for stem in stems:
        for part in ("sum", "count", "bucket"):
            if sample_name == f"{stem}_{part}":
                return part
    return None


def _values_for(spec: MetricName, server_name: str, samples: Iterable[Sample]) -> dict[str, float]:
    """Canonical key -> value for one metric under one server name (labels summed, or averaged)."""
    parts: dict[str, list[float]] = {}
    by_label: dict[str, float] = {}
    for s in samples:
        part = _part(spec, server_name, s.name)
        if part is None or part == "bucket":
            continue
        key = spec.canonical if not part else f"{spec.canonical}_{part}"
        parts.setdefault(key, []).append(s.value)
        if spec.by_label:
            label = dict(s.labels).get(spec.by_label)
            if label is not None:
                labelled = f'{spec.canonical}{{{spec.by_label}="{label}"}}'
                by_label[labelled] = by_label.get(labelled, 0.0) + s.value
    out = {k: (sum(v) / len(v) if spec.agg == "mean" else sum(v)) for k, v in parts.items()}
    out.update(by_label)
    return out


def _present_name(spec: MetricName, samples: Sequence[Sample]) -> str | None:
    """The first of the spec's server names (new before old) that has a sample."""
    names = {s.name for s in samples}
    for server_name in spec.names:
        if any(_part(spec, server_name, n) is not None for n in names):
            return server_name
    return None


def _spec_keys(spec: MetricName) -> tuple[str, ...]:
    if spec.kind == "histogram":
        return (f"{spec.canonical}_sum", f"{spec.canonical}_count")
    return (spec.canonical,)


def detect_dialect(text_or_samples: str | Sequence[Sample]) -> str | None:
    """`mlxcel` (llamacpp: families + mlxcel_*), `llamacpp`, `vllm`, `sglang`, or None if none is present."""
    samples = _as_samples(text_or_samples, "<text>")
    names = [s.name for s in samples]
    if any(n.startswith("mlxcel_") for n in names):
        return "mlxcel"
    if any(n.startswith("vllm:") for n in names):
        return "vllm"
    if any(n.startswith("sglang:") for n in names):
        return "sglang"
    if any(n.startswith("llamacpp:") for n in names):
        return "llamacpp"
    return None


def canonical_values(text_or_samples: str | Sequence[Sample], dialect: str = "auto") -> dict[str, float]:
    """Every canonical metric present in one snapshot -> its value (histograms as `_sum`/`_count`)."""
    samples = _as_samples(text_or_samples, "<text>")
    dialect = _resolve_dialect(dialect, samples)
    out: dict[str, float] = {}
    for spec in NAME_TABLES[dialect]:
        server_name = _present_name(spec, samples)
        if server_name is not None:
            out.update(_values_for(spec, server_name, samples))
    return out


def gauge_values(text: str | Sequence[Sample], dialect: str = "auto") -> dict[str, float]:
    """Gauges worth sampling during a level (SERVERS.md §0: sample every 0.3-1 s, report mean/max).

    llama.cpp/mlxcel: `requests_processing`, `requests_deferred` (mlxcel also batch size, slots, queue,
    paged KV blocks); vLLM: `num_requests_running`, `num_requests_waiting`, `kv_cache_usage`; SGLang:
    `num_running_reqs`, `num_queue_reqs`, `num_used_tokens`, `kv_cache_usage`, `gen_throughput`,
    `cache_hit_rate`. Not returned: llama.cpp's `prompt_tokens_seconds`/`predicted_tokens_seconds`,
    which every scrape resets (they mean "since the previous scrape by anyone", so sampling would both
    read and disturb them), and `n_busy_slots_per_decode`, a lifetime average. KV usage on llama.cpp
    is absent on current builds (removed upstream): the key is then missing, not 0.
    """
    samples = _as_samples(text, "<text>")
    dialect = _resolve_dialect(dialect, samples)
    out: dict[str, float] = {}
    for spec in NAME_TABLES[dialect]:
        if spec.kind != "gauge" or not spec.sampled:
            continue
        server_name = _present_name(spec, samples)
        if server_name is not None:
            out.update(_values_for(spec, server_name, samples))
    return out


def _resolve_dialect(dialect: str, *snapshots: Sequence[Sample]) -> str:
    if dialect != "auto":
        if dialect not in DIALECTS:
            raise PerflibError(f"unknown metrics dialect {dialect!r}: expected auto or one of {', '.join(DIALECTS)}")
        return dialect
    for samples in snapshots:
        found = detect_dialect(samples)
        if found:
            return found
    raise PerflibError(
        "cannot tell the server from its /metrics text: no llamacpp:, mlxcel_, vllm: or sglang: sample found; "
        "pass dialect= (or --dialect) explicitly"
    )


# --------------------------------------------------------------------------------------------------
# Deltas and derived figures


@dataclass(frozen=True)
class MetricsDelta:
    """What the counters did across one level, and the SERVERS.md §5 figures derived from them.

    Figures that cannot be computed are None (JSON null), never 0. On a reset (a counter that went
    backwards, or a changed `Process-Start-Time-Unix`) every figure and delta is None and `notes`
    say why. `absent` lists canonical names missing from the after snapshot.
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
    absent: tuple[str, ...] = ()
    requests: int | None = None
    deltas: dict[str, float | None] = field(default_factory=dict)
    gauges_after: dict[str, float] = field(default_factory=dict)
    extras: dict[str, float | None] = field(default_factory=dict)
    sample_deltas: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

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
            absent=list(self.absent),
            requests=self.requests,
            deltas=dict(self.deltas),
            gauges_after=dict(self.gauges_after),
            extras=dict(self.extras),
            sample_deltas=dict(self.sample_deltas),
            notes=list(self.notes),
        )
        return clean(out)


def _ratio(num: float | None, den: float | None, scale: float = 1.0) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return scale * num / den


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
    if isinstance(before_text, Snapshot) and process_start_before is None:
        process_start_before = before_text.process_start
    if isinstance(after_text, Snapshot) and process_start_after is None:
        process_start_after = after_text.process_start
    before = _as_samples(before_text, "before")
    after = _as_samples(after_text, "after")
    dialect = _resolve_dialect(dialect, after, before)
    table = NAME_TABLES[dialect]
    notes: list[str] = []

    # Resolve each canonical name against the after snapshot (alias order), then read before likewise.
    deltas: dict[str, float | None] = {}
    values_before: dict[str, float] = {}  # absolute values, every kind (the busy-slots average needs n)
    values_after: dict[str, float] = {}
    gauges_after: dict[str, float] = {}
    absent: list[str] = []
    gauge_like: set[str] = set()
    for spec in table:
        server_name = _present_name(spec, after)
        if spec.kind == "gauge":
            for n in spec.names:
                gauge_like.update({n, _base(n) + "_total"})
        if server_name is None:
            absent.append(spec.canonical)
            if spec.kind != "gauge":
                deltas.update(dict.fromkeys(_spec_keys(spec)))
            continue
        if server_name != spec.names[0]:
            notes.append(f"{spec.canonical}: read from the older name {server_name}")
        a = _values_for(spec, server_name, after)
        b = _values_for(spec, server_name, before)
        values_after.update(a)
        values_before.update(b)
        if spec.kind == "gauge":
            gauges_after.update(a)
        else:
            deltas.update({k: v - b.get(k, 0.0) for k, v in a.items()})

    if len(absent) == len(table):
        notes.append(f"no {dialect} metric in the after snapshot: is this the right server (dialect)?")
    result: dict[str, Any] = {"dialect": dialect, "absent": tuple(absent), "requests": requests}
    reasons = _resets(before, after, gauge_like)
    if process_start_before is not None and process_start_after is not None:
        if float(process_start_before) != float(process_start_after):
            reasons.insert(0, f"Process-Start-Time-Unix changed {process_start_before:g} -> "
                              f"{process_start_after:g} (server restarted)")
    if reasons:
        shown = reasons[:5] + ([f"... and {len(reasons) - 5} more"] if len(reasons) > 5 else [])
        notes = [f"RESET: {r}" for r in shown] + ["counters reset during the level: no figures; re-measure it"]
        return MetricsDelta(reset=True, deltas=dict.fromkeys(deltas), gauges_after=gauges_after,
                            notes=tuple(notes), **result)

    if not before:
        notes.append("the before snapshot has no samples: deltas are lifetime totals")
    sample_deltas = _sample_deltas(before, after, gauge_like)
    figures, extras, more_notes = _derive(dialect, deltas, values_before, values_after, requests,
                                          gauge_samples)
    notes.extend(more_notes)
    running = {"llamacpp": "requests_processing", "mlxcel": "requests_processing",
               "vllm": "num_requests_running", "sglang": "num_running_reqs"}[dialect]
    if gauges_after.get(running, 0) > 0:
        notes.append(f"{running} = {gauges_after[running]:g} in the after snapshot: take it once every request "
                     "has finished (tokens_predicted_* are added at completion)")
    return MetricsDelta(deltas=deltas, gauges_after=gauges_after, extras=extras, sample_deltas=sample_deltas,
                        notes=tuple(notes), **result, **figures)


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


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return sum(vals) / len(vals) if vals else None


def _derive(
    dialect: str,
    d: Mapping[str, float | None],
    v1: Mapping[str, float],
    v2: Mapping[str, float],
    requests: int | None,
    gauge_samples: Sequence[Mapping[str, float]] | None,
) -> tuple[dict[str, float | None], dict[str, float | None], list[str]]:
    """The SERVERS.md §5 figures for one dialect from canonical deltas; notes say which formula."""
    f: dict[str, float | None] = dict.fromkeys(FIGURES)
    extras: dict[str, float | None] = {}
    notes: list[str] = []

    if dialect in ("mlxcel", "llamacpp"):
        # Window average of the lifetime gauge: B = g·n is the cumulative busy-slot sum.
        g_after, n_after = v2.get("busy_slots_per_decode"), v2.get("n_decode")
        if g_after is not None and n_after is not None:
            g_before, n_before = v1.get("busy_slots_per_decode", 0.0), v1.get("n_decode", 0.0)
            f["busy_slots_per_decode"] = _ratio(g_after * n_after - g_before * n_before, n_after - n_before)
        f["per_stream_tok_s"] = _ratio(d.get("tokens_predicted"), d.get("tokens_predicted_seconds"))
        f["tokens_predicted_seconds"] = d.get("tokens_predicted_seconds")

    if dialect == "mlxcel":
        for name in ("decode_steps", "decode_tokens", "mixed_steps", "prefill_chunks"):
            f[name] = d.get(name)
        steps, tokens, tps = f["decode_steps"], f["decode_tokens"], f["tokens_predicted_seconds"]
        if steps is not None and steps > 0:
            f["occupancy"] = _ratio(tokens, steps)
            f["decode_step_ms"] = _ratio(tps, tokens, 1000.0)
            f["raw_step_ms"] = _ratio(tps, steps, 1000.0)
        elif steps is not None:
            notes.append("no decode steps in the window: occupancy and step times n/a")
        notes.append("mlxcel: occupancy = Δmlxcel_batch_decode_tokens_total / Δmlxcel_batch_decode_steps_total; "
                     "decode_step_ms = 1000·Δllamacpp:tokens_predicted_seconds_total / Δdecode_tokens; "
                     "raw_step_ms = 1000·Δtokens_predicted_seconds / Δdecode_steps (SERVERS.md §5)")
        if requests is not None and tokens is not None and d.get("tokens_predicted") is not None:
            expected = d["tokens_predicted"] - requests  # type: ignore[operator]
            if expected != tokens:
                notes.append(f"Δdecode_tokens {tokens:g} != Δtokens_predicted − requests = {expected:g}: "
                             "some request did not finish in the window, or the count of requests is off")

    elif dialect == "llamacpp":
        f["decode_steps"] = d.get("n_decode")
        predicted, tps, steps = d.get("tokens_predicted"), f["tokens_predicted_seconds"], f["decode_steps"]
        if requests is not None and predicted is not None:
            f["decode_tokens"] = predicted - requests
            f["decode_step_ms"] = _ratio(tps, f["decode_tokens"], 1000.0)
            notes.append(f"llama.cpp: decode_step_ms = 1000·Δtokens_predicted_seconds_total / "
                         f"(Δtokens_predicted_total − requests), requests = {requests} (given)")
        else:
            notes.append("llama.cpp: decode_step_ms and decode_tokens need the number of requests completed "
                         "in the level (llama.cpp has no completed-requests counter): pass requests= / "
                         "--requests; dividing by Δtokens_predicted_total alone is low by n/(n−1)")
        f["occupancy"] = f["busy_slots_per_decode"]
        f["raw_step_ms"] = _ratio(tps, steps, 1000.0)
        notes.append("llama.cpp has no pure decode-step counter: decode_steps = Δn_decode_total (llama_decode() "
                     "calls, prompt batches included); occupancy = window average of n_busy_slots_per_decode "
                     "(counts prefill calls and slots still in prompt phase); raw_step_ms = "
                     "1000·Δtokens_predicted_seconds_total / Δn_decode_total (SERVERS.md §5)")
        notes.append("llama.cpp: mixed_steps and prefill_chunks have no counter here (n/a)")

    elif dialect == "vllm":
        f["decode_steps"] = d.get("iteration_tokens_count")
        f["decode_tokens"] = d.get("generation_tokens")
        f["tokens_predicted_seconds"] = d.get("request_decode_time_sum")
        steps = f["decode_steps"]
        f["occupancy"] = _ratio(f["decode_tokens"], steps)
        extras["iteration_tokens_per_step"] = _ratio(d.get("iteration_tokens_sum"), steps)
        itl_sum, itl_count = d.get("inter_token_latency_sum"), d.get("inter_token_latency_count")
        f["decode_step_ms"] = _ratio(itl_sum, itl_count, 1000.0)
        f["raw_step_ms"] = _ratio(itl_sum, steps, 1000.0)
        extras["itl_mean_ms"] = f["decode_step_ms"]
        extras["request_tpot_mean_ms"] = _ratio(d.get("request_time_per_output_token_sum"),
                                                d.get("request_time_per_output_token_count"), 1000.0)
        finished = d.get("request_success")
        if finished is None and requests is not None:
            finished = float(requests)
        gen = f["decode_tokens"]
        extras["decode_time_step_ms"] = _ratio(
            f["tokens_predicted_seconds"], None if gen is None or finished is None else gen - finished, 1000.0)
        notes.append("vLLM: decode_steps = Δiteration_tokens_total_count (engine steps, prefill steps included); "
                     "decode_tokens = Δgeneration_tokens_total (first tokens included); occupancy = "
                     "Δgeneration_tokens / Δiteration_tokens_count (extras.iteration_tokens_per_step = Δ_sum/Δ_count "
                     "includes prefill tokens); tokens_predicted_seconds = Δrequest_decode_time_seconds_sum")
        if f["decode_step_ms"] is not None:
            notes.append("vLLM: decode_step_ms = ITL mean = 1000·Δinter_token_latency_seconds_sum/Δ_count "
                         "(token-weighted; request-weighted TPOT mean in extras.request_tpot_mean_ms); "
                         "raw_step_ms = 1000·ΔITL_sum/Δiteration_tokens_count")
        elif extras["decode_time_step_ms"] is not None:
            f["decode_step_ms"] = extras["decode_time_step_ms"]
            notes.append("vLLM: no ITL histogram, decode_step_ms = 1000·Δrequest_decode_time_seconds_sum / "
                         "(Δgeneration_tokens_total − Δrequest_success_total); raw_step_ms n/a")
        f["per_stream_tok_s"] = _ratio(1000.0, f["decode_step_ms"])
        notes.append("vLLM: mixed_steps and prefill_chunks have no counter here (n/a)")

    elif dialect == "sglang":
        f["decode_tokens"] = d.get("generation_tokens")
        f["decode_step_ms"] = _ratio(d.get("inter_token_latency_sum"), d.get("inter_token_latency_count"), 1000.0)
        running = _mean(s.get("num_running_reqs") for s in gauge_samples or ())
        if running is not None:
            f["occupancy"] = running
            if f["decode_step_ms"] is not None:
                f["raw_step_ms"] = running * f["decode_step_ms"]
            f["per_stream_tok_s"] = _ratio(_mean(s.get("gen_throughput") for s in gauge_samples or ()), running)
            notes.append(f"SGLang (approximate): occupancy = mean of {len(gauge_samples or ())} sampled "
                         "num_running_reqs; raw_step_ms = occupancy × decode_step_ms; per_stream_tok_s = "
                         "mean gen_throughput / mean num_running_reqs")
        else:
            notes.append("SGLang: occupancy needs num_running_reqs sampled during the level (gauge_samples=); "
                         "occupancy, raw_step_ms and per_stream_tok_s n/a")
        notes.append("SGLang: decode_step_ms = 1000·Δinter_token_latency_seconds_sum/Δ_count; no step counter, "
                     "no per-request decode-time counter: decode_steps, tokens_predicted_seconds, mixed_steps, "
                     "prefill_chunks n/a")
    return f, extras, notes


# --------------------------------------------------------------------------------------------------
# Scraping


@dataclass(frozen=True)
class Snapshot:
    """One `/metrics` scrape: the body, the server's start time (header) and when it was taken."""

    text: str
    process_start: float | None
    taken: dict[str, int]
    url: str = ""


def classify_metrics_response(status: int, body: str, url: str) -> PerflibError | None:
    """None for HTTP 200; otherwise the error to raise, `MetricsUnavailable` when metrics are switched off.

    llama-server without `--metrics` (and mlxcel 08e09036) answer 501 with a JSON `not_supported_error`;
    mlxcel builds before Jul 2026 did not mount the route (404); router mode needs `?model=` (400).
    """
    if status == 200:
        return None
    detail = ""
    try:
        err = json.loads(body).get("error", {})
        if isinstance(err, dict):
            detail = f"{err.get('type', '')}: {err.get('message', '')}".strip(": ")
    except (ValueError, AttributeError):
        detail = body.strip()[:200]
    said = f" ({detail})" if detail else ""
    if status == 501 or "not_supported_error" in body:
        return MetricsUnavailable(f"{url} answered HTTP {status}{said}: metrics are disabled; "
                                  "start the server with --metrics")
    if status == 404:
        return MetricsUnavailable(f"{url} answered HTTP 404: no /metrics route (mlxcel before Jul 2026 mounts it "
                                  "only when enabled); start the server with --metrics")
    if status == 400 and "model name is missing" in body:
        return PerflibError(f"{url} answered HTTP 400{said}: llama-server in router mode; scrape "
                            "/metrics?model=<id> (scrape(..., model=...))")
    return PerflibError(f"{url} answered HTTP {status}{said}: expected 200 with Prometheus text")


def scrape(base_url: str, *, client: Any = None, timeout: float = 10.0, model: str | None = None) -> Snapshot:
    """GET `<base_url>/metrics` with httpx (sync) and return a `Snapshot`.

    Raises `MetricsUnavailable` when the server serves no metrics (501/404) and `PerflibError` on a
    connection failure or another status. `taken` is `now_clocks()` read when the answer arrived.
    One scraper per server during a run: each scrape resets llama.cpp's `*_tokens_seconds` gauges.
    """
    import httpx

    url = base_url.rstrip("/") + "/metrics"
    params = {"model": model} if model else None
    try:
        if client is None:
            resp = httpx.get(url, params=params, timeout=timeout)
        else:
            resp = client.get(url, params=params, timeout=timeout)
    except httpx.HTTPError as exc:
        raise PerflibError(f"{url}: could not scrape ({type(exc).__name__}: {exc}); is the server running?") from exc
    taken = now_clocks()
    error = classify_metrics_response(resp.status_code, resp.text, url)
    if error is not None:
        raise error
    header = resp.headers.get("Process-Start-Time-Unix")
    try:
        process_start = float(header) if header is not None else None
    except ValueError:
        process_start = None
    return Snapshot(text=resp.text, process_start=process_start, taken=taken, url=url)
