"""Per-server metric names (SERVERS.md §1-§4): canonical name -> server names, with old aliases.

A level is judged by the deltas of canonical counters; each server's names (llama.cpp `llamacpp:*`,
mlxcel `llamacpp:*` + `mlxcel_*`, vLLM `vllm:*`, SGLang `sglang:*`) map to them here, so a renamed
metric keeps its canonical name across builds. Which table is which server's is the dialect registry's
business (`perflib.metrics.dialects`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from perflib.metrics.exposition import Sample, escape_label

Kind = Literal["counter", "gauge", "histogram"]


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
    unit: str | None = None
    """"fraction or percent": servers write it either way, and `values_for` gives a fraction."""


def _c(canonical: str, *names: str, by_label: str | None = None) -> MetricName:
    return MetricName(canonical, names, "counter", by_label=by_label)


def _g(canonical: str, *names: str, agg: Literal["sum", "mean"] = "sum", sampled: bool = True,
       unit: str | None = None) -> MetricName:
    return MetricName(canonical, names, "gauge", agg=agg, sampled=sampled, unit=unit)


def _h(canonical: str, *names: str) -> MetricName:
    return MetricName(canonical, names, "histogram")


# llama-server b10621 and the mlxcel mirror of it. `*_tokens_seconds` gauges are reset by every scrape
# (the handler sets metrics_reset_bucket), and `n_busy_slots_per_decode` is a lifetime average: neither
# is sampled. `kv_cache_*` were removed in PR #13660; they stay in the table so a build that has them
# reports them and every other build reports them absent.
LLAMACPP_COMMON: tuple[MetricName, ...] = (
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

LLAMACPP_ONLY: tuple[MetricName, ...] = (
    _c("spec_decode_num_accepted_tokens_per_pos", "llamacpp:spec_decode_num_accepted_tokens_per_pos_total",
       by_label="position"),
    _g("kv_cache_usage", "llamacpp:kv_cache_usage_ratio", agg="mean"),
    _g("kv_cache_tokens", "llamacpp:kv_cache_tokens"),
)

MLXCEL_NATIVE: tuple[MetricName, ...] = (
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
VLLM_NAMES: tuple[MetricName, ...] = (
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

SGLANG_NAMES: tuple[MetricName, ...] = (
    _c("prompt_tokens", "sglang:prompt_tokens_total"),
    _c("generation_tokens", "sglang:generation_tokens_total"),
    _c("cached_tokens", "sglang:cached_tokens_total"),
    _c("num_requests", "sglang:num_requests_total"),
    _c("num_aborted_requests", "sglang:num_aborted_requests_total"),
    _h("time_to_first_token", "sglang:time_to_first_token_seconds"),
    _h("inter_token_latency", "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
    _h("e2e_request_latency", "sglang:e2e_request_latency_seconds"),
    # SGLang up to 0.3 named the two scheduler gauges like vLLM's
    _g("num_running_reqs", "sglang:num_running_reqs", "sglang:num_requests_running"),
    _g("num_queue_reqs", "sglang:num_queue_reqs", "sglang:num_requests_waiting"),
    _g("num_used_tokens", "sglang:num_used_tokens"),
    _g("kv_cache_usage", "sglang:token_usage", agg="mean"),
    _g("gen_throughput", "sglang:gen_throughput"),
    _g("cache_hit_rate", "sglang:cache_hit_rate", agg="mean", unit="fraction or percent"),
)

LLAMACPP_NAMES = LLAMACPP_COMMON + LLAMACPP_ONLY
MLXCEL_NAMES = LLAMACPP_COMMON + MLXCEL_NATIVE


def base_name(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


def sample_part(spec: MetricName, server_name: str, sample_name: str) -> str | None:
    """Which part of `spec` (under `server_name`) a sample is: "" for the value, "sum"/"count"/"bucket"."""
    base = base_name(server_name)
    stems = (base, base + "_total")
    if spec.kind != "histogram":
        return "" if sample_name in stems else None
    for stem in stems:
        for part in ("sum", "count", "bucket"):
            if sample_name == f"{stem}_{part}":
                return part
    return None


def values_for(spec: MetricName, server_name: str, samples: Sequence[Sample]) -> dict[str, float]:
    """Canonical key -> value for one metric under one server name (labels summed, or averaged)."""
    parts: dict[str, list[float]] = {}
    by_label: dict[str, float] = {}
    for s in samples:
        part = sample_part(spec, server_name, s.name)
        if part is None or part == "bucket":
            continue
        key = spec.canonical if not part else f"{spec.canonical}_{part}"
        parts.setdefault(key, []).append(s.value)
        if spec.by_label:
            label = dict(s.labels).get(spec.by_label)
            if label is not None:
                labelled = f'{spec.canonical}{{{spec.by_label}="{escape_label(label)}"}}'
                by_label[labelled] = by_label.get(labelled, 0.0) + s.value
    out = {k: (sum(v) / len(v) if spec.agg == "mean" else sum(v)) for k, v in parts.items()}
    out.update(by_label)
    if spec.unit == "fraction or percent":
        names = {s.name for s in samples}
        out = {k: v / 100.0 if _percent(v, names) else v for k, v in out.items()}
    return out


OLD_SGLANG = "sglang:num_requests_running"
"""A name only SGLang up to 0.3 writes; those builds also write `cache_hit_rate` as a percent."""


def _percent(value: float, names: Iterable[str]) -> bool:
    """Whether a rate is a percent: the old build says so (SGLang <= 0.3 writes 10.61 for 10.61%), and a
    value above 1 cannot be a fraction. A newer build's 0.0075 is a fraction (0.75%)."""
    return value > 1.0 or OLD_SGLANG in names


def present_name(spec: MetricName, samples: Sequence[Sample]) -> str | None:
    """The first of the spec's server names (new before old) that has a sample."""
    names = {s.name for s in samples}
    for server_name in spec.names:
        if any(sample_part(spec, server_name, n) is not None for n in names):
            return server_name
    return None


def spec_keys(spec: MetricName) -> tuple[str, ...]:
    if spec.kind == "histogram":
        return (f"{spec.canonical}_sum", f"{spec.canonical}_count")
    return (spec.canonical,)
