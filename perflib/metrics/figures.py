"""The SERVERS.md §5 figures from canonical counter deltas: one function per dialect.

occupancy = Δdecode_tokens / Δdecode_steps; decode_step_ms = 1000·Δtokens_predicted_seconds /
Δdecode_tokens (the step as one request sees it); raw_step_ms = 1000·Δtokens_predicted_seconds /
Δdecode_steps, each with its server's equivalents. A figure that cannot be computed is None, never 0,
and the notes say which formula was used.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

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



def _ratio(num: float | None, den: float | None, scale: float = 1.0) -> float | None:
    """scale·num/den, or None where either is missing or not finite, or den is not above 0."""
    if num is None or den is None or not (math.isfinite(num) and math.isfinite(den)) or den <= 0:
        return None
    value = scale * num / den
    return value if math.isfinite(value) else None



def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return sum(vals) / len(vals) if vals else None


@dataclass(frozen=True)
class Counters:
    """What a dialect's figures are computed from: canonical deltas `d`, the absolute values before
    (`v1`) and after (`v2`), the requests completed in the level and the gauges sampled during it."""

    d: Mapping[str, float | None]
    v1: Mapping[str, float]
    v2: Mapping[str, float]
    requests: int | None
    gauge_samples: Sequence[Mapping[str, float]]


Derived = tuple[dict[str, float | None], dict[str, float | None], list[str]]
"""(figures, extras, notes) of one dialect."""


def _llama_family(c: Counters, f: dict[str, float | None]) -> None:
    """llama.cpp and mlxcel: the window average of the lifetime busy-slots gauge (B = g·n is the
    cumulative busy-slot sum), the per-stream rate and the summed generation seconds."""
    g_after, n_after = c.v2.get("busy_slots_per_decode"), c.v2.get("n_decode")
    if g_after is not None and n_after is not None:
        g_before, n_before = c.v1.get("busy_slots_per_decode", 0.0), c.v1.get("n_decode", 0.0)
        f["busy_slots_per_decode"] = _ratio(g_after * n_after - g_before * n_before, n_after - n_before)
    f["per_stream_tok_s"] = _ratio(c.d.get("tokens_predicted"), c.d.get("tokens_predicted_seconds"))
    f["tokens_predicted_seconds"] = c.d.get("tokens_predicted_seconds")


def derive_mlxcel(c: Counters) -> Derived:
    """mlxcel: real decode-step and decode-token counters (SERVERS.md §2.2)."""
    f: dict[str, float | None] = dict.fromkeys(FIGURES)
    notes: list[str] = []
    _llama_family(c, f)
    for name in ("decode_steps", "decode_tokens", "mixed_steps", "prefill_chunks"):
        f[name] = c.d.get(name)
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
    predicted = c.d.get("tokens_predicted")
    if c.requests is not None and tokens is not None and predicted is not None:
        expected = predicted - c.requests
        if expected != tokens:
            notes.append(f"Δdecode_tokens {tokens:g} != Δtokens_predicted − requests = {expected:g}: "
                         "some request did not finish in the window, or the count of requests is off")
    return f, {}, notes


def derive_llamacpp(c: Counters) -> Derived:
    """llama.cpp: no decode-step counter; `n_decode_total` and the busy-slots gauge (SERVERS.md §1)."""
    f: dict[str, float | None] = dict.fromkeys(FIGURES)
    notes: list[str] = []
    _llama_family(c, f)
    f["decode_steps"] = c.d.get("n_decode")
    predicted, tps, steps = c.d.get("tokens_predicted"), f["tokens_predicted_seconds"], f["decode_steps"]
    if c.requests is not None and predicted is not None and predicted < c.requests:
        notes.append(f"IMPOSSIBLE: Δtokens_predicted_total {predicted:g} is below the {c.requests} requests given "
                     "(each finished request counts at least its first token): the counters did not count this "
                     "level's tokens, or requests is larger than the requests that finished in it; "
                     "decode_tokens and decode_step_ms are n/a")
    elif c.requests is not None and predicted is not None:
        f["decode_tokens"] = predicted - c.requests
        f["decode_step_ms"] = _ratio(tps, f["decode_tokens"], 1000.0)
        notes.append(f"llama.cpp: decode_step_ms = 1000·Δtokens_predicted_seconds_total / "
                     f"(Δtokens_predicted_total − requests), requests = {c.requests} (given)")
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
    return f, {}, notes


def derive_vllm(c: Counters) -> Derived:
    """vLLM V1: engine steps from the iteration-tokens histogram, the step from the ITL histogram, the
    decode tokens without each request's first, and what prefill put into the window's steps."""
    d = c.d
    f: dict[str, float | None] = dict.fromkeys(FIGURES)
    extras: dict[str, float | None] = {}
    notes: list[str] = []
    steps, gen = d.get("iteration_tokens_count"), d.get("generation_tokens")
    finished = d.get("request_success")
    if finished is None and c.requests is not None:
        finished = float(c.requests)
    f["decode_steps"] = steps
    f["decode_tokens"] = None if gen is None or finished is None else gen - finished
    f["tokens_predicted_seconds"] = d.get("request_decode_time_sum")
    f["occupancy"] = _ratio(gen, steps)
    extras["iteration_tokens_per_step"] = _ratio(d.get("iteration_tokens_sum"), steps)
    iteration_sum = d.get("iteration_tokens_sum")
    extras["prefill_tokens_per_step"] = (_ratio(iteration_sum - gen, steps)
                                         if iteration_sum is not None and gen is not None else None)
    extras["prompt_tokens"] = d.get("prompt_tokens")
    extras["preemptions"] = d.get("num_preemptions")
    extras["prefix_cache_hit_share"] = _ratio(d.get("prefix_cache_hits"), d.get("prefix_cache_queries"))
    extras["request_prefill_ms"] = _ratio(d.get("request_prefill_time_sum"), d.get("request_prefill_time_count"),
                                          1000.0)
    extras["request_queue_ms"] = _ratio(d.get("request_queue_time_sum"), d.get("request_queue_time_count"), 1000.0)
    itl_sum, itl_count = d.get("inter_token_latency_sum"), d.get("inter_token_latency_count")
    f["decode_step_ms"] = _ratio(itl_sum, itl_count, 1000.0)
    f["raw_step_ms"] = _ratio(itl_sum, steps, 1000.0)
    extras["itl_mean_ms"] = f["decode_step_ms"]
    extras["request_tpot_mean_ms"] = _ratio(d.get("request_time_per_output_token_sum"),
                                            d.get("request_time_per_output_token_count"), 1000.0)
    extras["decode_time_step_ms"] = _ratio(f["tokens_predicted_seconds"], f["decode_tokens"], 1000.0)
    notes.append("vLLM: decode_steps = Δiteration_tokens_total_count (engine steps, prefill steps included); "
                 "decode_tokens = Δgeneration_tokens_total − Δrequest_success_total (each request's first token "
                 "comes from its prefill); occupancy = Δgeneration_tokens_total / Δiteration_tokens_count; "
                 "extras.iteration_tokens_per_step = Δ_sum/Δ_count includes prefill tokens, "
                 "extras.prefill_tokens_per_step = (Δiteration_tokens_sum − Δgeneration_tokens) / Δ_count is the "
                 "prompt work interleaved into the window's steps; tokens_predicted_seconds = "
                 "Δrequest_decode_time_seconds_sum")
    if f["decode_step_ms"] is not None:
        notes.append("vLLM: decode_step_ms = ITL mean = 1000·Δinter_token_latency_seconds_sum/Δ_count "
                     "(token-weighted; request-weighted TPOT mean in extras.request_tpot_mean_ms); "
                     "raw_step_ms = 1000·ΔITL_sum/Δiteration_tokens_count")
    elif extras["decode_time_step_ms"] is not None:
        f["decode_step_ms"] = extras["decode_time_step_ms"]
        notes.append("vLLM: no ITL histogram, decode_step_ms = 1000·Δrequest_decode_time_seconds_sum / "
                     "(Δgeneration_tokens_total − Δrequest_success_total); raw_step_ms n/a")
    if extras["preemptions"]:
        notes.append(f"vLLM: {extras['preemptions']:g} preemptions in the window: their recomputed prefill stays "
                     "inside the ITL and decode times (SERVERS.md §3)")
    f["per_stream_tok_s"] = _ratio(1000.0, f["decode_step_ms"])
    notes.append("vLLM: mixed_steps and prefill_chunks have no counter here (n/a); prefill interleaved with "
                 "decode is extras.prefill_tokens_per_step")
    return f, extras, notes


def derive_sglang(c: Counters) -> Derived:
    """SGLang (approximate): the step from the ITL histogram, occupancy from sampled gauges."""
    f: dict[str, float | None] = dict.fromkeys(FIGURES)
    notes: list[str] = []
    f["decode_tokens"] = c.d.get("generation_tokens")
    f["decode_step_ms"] = _ratio(c.d.get("inter_token_latency_sum"), c.d.get("inter_token_latency_count"), 1000.0)
    running = _mean(s.get("num_running_reqs") for s in c.gauge_samples)
    if running is not None:
        f["occupancy"] = running
        if f["decode_step_ms"] is not None:
            f["raw_step_ms"] = running * f["decode_step_ms"]
        f["per_stream_tok_s"] = _ratio(_mean(s.get("gen_throughput") for s in c.gauge_samples), running)
        notes.append(f"SGLang (approximate): occupancy = mean of {len(c.gauge_samples)} sampled "
                     "num_running_reqs; raw_step_ms = occupancy × decode_step_ms; per_stream_tok_s = "
                     "mean gen_throughput / mean num_running_reqs")
    else:
        notes.append("SGLang: occupancy needs num_running_reqs sampled during the level (gauge_samples=); "
                     "occupancy, raw_step_ms and per_stream_tok_s n/a")
    notes.append("SGLang: decode_step_ms = 1000·Δinter_token_latency_seconds_sum/Δ_count; no step counter, "
                 "no per-request decode-time counter: decode_steps, tokens_predicted_seconds, mixed_steps, "
                 "prefill_chunks n/a")
    return f, {}, notes


def derive_figures(derive: Callable[[Counters], Derived], d: Mapping[str, float | None], v1: Mapping[str, float],
                   v2: Mapping[str, float], requests: int | None,
                   gauge_samples: Sequence[Mapping[str, float]] | None) -> Derived:
    """The SERVERS.md §5 figures by one dialect's `derive` (`perflib.metrics.dialects`) from canonical
    deltas; notes say which formula. Every figure is a count, a time or a rate: one that comes out
    negative is impossible, and is None with a note that says so (`IMPOSSIBLE`), never a number."""
    figures, extras, notes = derive(Counters(d, v1, v2, requests, tuple(gauge_samples or ())))
    for table in (figures, extras):
        for name, value in table.items():
            if value is not None and value < 0:
                table[name] = None
                notes.append(f"IMPOSSIBLE: {name} came out {value:g} (below 0) from these counters: n/a")
    return figures, extras, notes
