"""Write the `/metrics` exposition texts the metrics tests read, each in its server's real format.

Run `python tests/data/metrics/generate.py` to rebuild them; the scenarios are in README.md beside it.

- mlxcel 08e09036 (`src/server/routes/metrics.rs`): `llamacpp:` families first, values as Rust f64
  Display (`512`, not `512.0`), then native `mlxcel_*` integers (`mlxcel_generation_time_seconds_total`
  with 3 decimals), the two request histograms (`_sum` 3 decimals, bounds like `le="5"`), `mlxcel_pp_*`.
- llama-server: `# HELP`/`# TYPE`/sample per family, values streamed as C++ doubles (`%g`: 6 significant
  digits), no labels. b10621 layout (cached tokens, spec counters, busy slots typed gauge) and an older
  layout (busy slots typed `counter`, as the handler declared it before).
- vLLM V1 and SGLang: written by prometheus_client itself with the servers' metric names and labels
  (vLLM `model_name`, `engine`; SGLang `model_name`, `engine_type`, `tp_rank`, `pp_rank`).
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

HERE = Path(__file__).resolve().parent

LLAMACPP_501 = (
    '{"error":{"code":501,"message":"This server does not support metrics endpoint. '
    'Start it with `--metrics`","type":"not_supported_error"}}'
)


def rust_f64(value: float) -> str:
    """Rust `{}` for f64: shortest round-trip digits, no exponent, no trailing `.0`."""
    text = format(Decimal(repr(float(value))), "f")
    return text[:-2] if text.endswith(".0") else text


def cpp_double(value: float) -> str:
    """`std::ostream << double` with the default precision: printf `%g`, 6 significant digits."""
    return format(value, "g")


def f32(value: float) -> float:
    """Round through float32, as llama.cpp computes `(float) busy / (float) n_decode`."""
    import struct

    return struct.unpack("f", struct.pack("f", value))[0]


# ---------------------------------------------------------------------------------------------- mlxcel

MLXCEL_LLAMACPP_COUNTERS = (
    ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens"),
    ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache"),
    ("prompt_seconds_total", "Total time spent processing prompts"),
    ("tokens_predicted_total", "Number of generation tokens processed"),
    ("tokens_predicted_seconds_total", "Total time spent generating tokens"),
    ("n_decode_total", "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding"),
    ("n_tokens_max", "Largest observed sequence length (prompt + generation)"),
    ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated"),
    ("spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens accepted by the target model"),
    ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps"),
)
MLXCEL_LLAMACPP_GAUGES = (
    ("prompt_tokens_seconds", "Average prompt throughput in tokens/s"),
    ("predicted_tokens_seconds", "Average generation throughput in tokens/s"),
    ("requests_processing", "Number of requests processing"),
    ("requests_deferred", "Number of requests deferred"),
    ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call"),
)
# (name, help, type) in the order metrics.rs writes them; the value comes from the state dict.
MLXCEL_NATIVE = (
    ("mlxcel_requests_total", "Total number of generation requests", "counter"),
    ("mlxcel_prompt_tokens_total", "Total prompt tokens processed", "counter"),
    ("mlxcel_completion_tokens_total", "Total completion tokens generated", "counter"),
    ("mlxcel_generation_time_seconds_total", "Total generation time in seconds", "counter"),
    ("mlxcel_slots_total", "Total number of parallel slots", "gauge"),
    ("mlxcel_slots_available", "Available parallel slots", "gauge"),
    ("mlxcel_queue_depth", "Current prefill queue depth", "gauge"),
    ("mlxcel_batch_sequences_started", "Total sequences that entered prefill", "counter"),
    ("mlxcel_batch_sequences_completed", "Total sequences that completed generation", "counter"),
    ("mlxcel_batch_prefill_tokens_total", "Cumulative prefill tokens processed", "counter"),
    ("mlxcel_batch_decode_tokens_total", "Cumulative decode tokens generated", "counter"),
    ("mlxcel_batch_decode_steps_total", "Total decode steps executed", "counter"),
    ("mlxcel_batch_decode_lookahead_steps_total", "Decode steps served by the lookahead async_eval pipeline",
     "counter"),
    ("mlxcel_batch_prefill_chunks_total", "Total prefill chunks processed", "counter"),
    ("mlxcel_batch_mixed_steps_total",
     "Mixed prefill/decode ticks (issue #908 prototype; zero unless MLXCEL_MIXED_STEP is set)", "counter"),
    ("mlxcel_batch_prefill_grants_total",
     "Fairness grants handed to a parked chunked prefill (issue #1011; zero when --prefill-grant-interval is 0)",
     "counter"),
    ("mlxcel_batch_current_size", "Current active batch size", "gauge"),
    ("mlxcel_cache_pool_active", "Active cache entries", "gauge"),
    ("mlxcel_cache_pool_paged_block_size", "Paged decode block size in tokens", "gauge"),
    ("mlxcel_cache_pool_paged_blocks_allocated", "Total paged KV blocks tracked by the allocator", "gauge"),
    ("mlxcel_cache_pool_paged_blocks_live", "Paged KV blocks currently in live use", "gauge"),
    ("mlxcel_cache_pool_paged_blocks_free", "Paged KV blocks currently free for reuse", "gauge"),
    ("mlxcel_cache_pool_paged_bytes_reserved",
     "Real bytes of allocated paged pool slabs (capacity, including grow slack)", "gauge"),
    ("mlxcel_cache_pool_paged_bytes_in_use",
     "Real bytes of pool rows mapped to live blocks (active sequences plus parked prompt-cache pins)", "gauge"),
    ("mlxcel_cache_pool_paged_block_budget", "Configured paged KV block-budget cap (0 = unbounded)", "gauge"),
    ("mlxcel_decode_storage_fallbacks_total", "Number of paged decode fallback events", "counter"),
    ("mlxcel_paged_decode_launches_total", "Layer decode steps by attention path", "counter"),
    ("mlxcel_cascade_shared_tokens_total", "Cumulative KV tokens hoisted into a shared-span cascade launch",
     "counter"),
    ("mlxcel_cascade_member_sequences_total", "Cumulative sequences sharing a cascade span", "counter"),
    ("mlxcel_cascade_failures_total", "Planned cascade launches that fell back to the flat v2 launch", "counter"),
    ("mlxcel_prompt_cache_hits_total", "Successful prompt-prefix cache adoptions", "counter"),
    ("mlxcel_prompt_cache_misses_total", "Prompt-prefix cache lookups that produced no match", "counter"),
    ("mlxcel_prompt_cache_prefix_tokens_reused_total", "Total prompt tokens reused from prefix cache", "counter"),
)
PATHS = ("fused_v2", "gather", "cascade")
TTFT_BOUNDS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
DECODE_RATE_BOUNDS = (1, 5, 10, 25, 50, 75, 100, 150, 200, 300, 500, 1000)


def mlxcel_text(state: dict) -> str:
    """One mlxcel 08e09036 `/metrics` body for `state` (counters by name, histograms as observation lists)."""
    out: list[str] = []
    for kind, items in (("counter", MLXCEL_LLAMACPP_COUNTERS), ("gauge", MLXCEL_LLAMACPP_GAUGES)):
        for name, help_text in items:
            out += [f"# HELP llamacpp:{name} {help_text}", f"# TYPE llamacpp:{name} {kind}",
                    f"llamacpp:{name} {rust_f64(state['llamacpp:' + name])}"]
    for name, help_text, kind in MLXCEL_NATIVE:
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        if name == "mlxcel_paged_decode_launches_total":
            out += [f'{name}{{path="{p}"}} {state[name][p]}' for p in PATHS]
        elif name == "mlxcel_generation_time_seconds_total":
            out.append(f"{name} {state[name]:.3f}")
        else:
            out.append(f"{name} {state[name]}")
    for name, help_text, bounds in (
        ("mlxcel_request_ttft_ms", "Per-request time to first token (prefill latency) in milliseconds", TTFT_BOUNDS),
        ("mlxcel_request_decode_tok_s", "Per-request decode throughput in tokens per second", DECODE_RATE_BOUNDS),
    ):
        obs = state[name]
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
        out += [f'{name}_bucket{{le="{b}"}} {sum(1 for v in obs if v <= b)}' for b in bounds]
        out += [f'{name}_bucket{{le="+Inf"}} {len(obs)}', f"{name}_sum {sum(obs):.3f}", f"{name}_count {len(obs)}"]
    # Pipeline parallel off: families with no stage, as the handler prints them.
    out += [
        "# HELP mlxcel_pp_stage_busy_fraction Fraction of stage time spent on compute/transfer",
        "# TYPE mlxcel_pp_stage_busy_fraction gauge",
        "# HELP mlxcel_pp_stage_bubble_fraction Fraction of stage time spent idle (bubble)",
        "# TYPE mlxcel_pp_stage_bubble_fraction gauge",
        "# HELP mlxcel_pp_mean_bubble_ratio Rolling mean bubble ratio across recorded steps",
        "# TYPE mlxcel_pp_mean_bubble_ratio gauge",
        "mlxcel_pp_mean_bubble_ratio 0.000000",
        "# HELP mlxcel_pp_activation_latency_microseconds Activation transfer latency between adjacent stages",
        "# TYPE mlxcel_pp_activation_latency_microseconds summary",
        "# HELP mlxcel_pp_admission_rejections_total Total KV cache admission rejections",
        "# TYPE mlxcel_pp_admission_rejections_total counter",
        "# HELP mlxcel_pp_repartition_events_total Total elastic pipeline repartition events",
        "# TYPE mlxcel_pp_repartition_events_total counter",
        "# HELP mlxcel_pp_repartition_drain_microseconds Drain duration histogram for completed repartitions",
        "# TYPE mlxcel_pp_repartition_drain_microseconds summary",
        "mlxcel_pp_repartition_drain_microseconds_sum 0",
        "mlxcel_pp_repartition_drain_microseconds_count 0",
        "mlxcel_pp_repartition_drain_microseconds_max 0",
    ]
    return "\n".join(out) + "\n"


def mlxcel_states() -> tuple[dict, dict]:
    """Before: after one batch-1 ~1K warm-up request. After: + the s5 final r1 batch-4 ~1K level (§5.1)."""
    busy_before, n_before = 128, 128
    before = {
        "llamacpp:prompt_tokens_total": 1031, "llamacpp:prompt_tokens_cached_total": 0,
        "llamacpp:prompt_seconds_total": 0.768912, "llamacpp:tokens_predicted_total": 128,
        "llamacpp:tokens_predicted_seconds_total": 3.944112, "llamacpp:n_decode_total": n_before,
        "llamacpp:n_tokens_max": 1159, "llamacpp:spec_decode_num_draft_tokens_total": 0,
        "llamacpp:spec_decode_num_accepted_tokens_total": 0, "llamacpp:spec_decode_num_drafts_total": 0,
        "llamacpp:prompt_tokens_seconds": 1340.849, "llamacpp:predicted_tokens_seconds": 32.45344,
        "llamacpp:requests_processing": 0, "llamacpp:requests_deferred": 0,
        "llamacpp:n_busy_slots_per_decode": busy_before / n_before,
        "mlxcel_requests_total": 1, "mlxcel_prompt_tokens_total": 1031, "mlxcel_completion_tokens_total": 128,
        "mlxcel_generation_time_seconds_total": 4.713, "mlxcel_slots_total": 4, "mlxcel_slots_available": 4,
        "mlxcel_queue_depth": 0, "mlxcel_batch_sequences_started": 1, "mlxcel_batch_sequences_completed": 1,
        "mlxcel_batch_prefill_tokens_total": 1031, "mlxcel_batch_decode_tokens_total": 127,
        "mlxcel_batch_decode_steps_total": 127, "mlxcel_batch_decode_lookahead_steps_total": 0,
        "mlxcel_batch_prefill_chunks_total": 0, "mlxcel_batch_mixed_steps_total": 0,
        "mlxcel_batch_prefill_grants_total": 0, "mlxcel_batch_current_size": 0, "mlxcel_cache_pool_active": 0,
        "mlxcel_cache_pool_paged_block_size": 16, "mlxcel_cache_pool_paged_blocks_allocated": 73,
        "mlxcel_cache_pool_paged_blocks_live": 0, "mlxcel_cache_pool_paged_blocks_free": 73,
        "mlxcel_cache_pool_paged_bytes_reserved": 9568256, "mlxcel_cache_pool_paged_bytes_in_use": 0,
        "mlxcel_cache_pool_paged_block_budget": 0, "mlxcel_decode_storage_fallbacks_total": 0,
        "mlxcel_paged_decode_launches_total": {"fused_v2": 0, "gather": 4064, "cascade": 0},
        "mlxcel_cascade_shared_tokens_total": 0, "mlxcel_cascade_member_sequences_total": 0,
        "mlxcel_cascade_failures_total": 0, "mlxcel_prompt_cache_hits_total": 0,
        "mlxcel_prompt_cache_misses_total": 0, "mlxcel_prompt_cache_prefix_tokens_reused_total": 0,
        "mlxcel_request_ttft_ms": [768.912], "mlxcel_request_decode_tok_s": [32.2],
    }
    after = json.loads(json.dumps(before))
    # The level: 4 requests x (1031 prompt + 128 generated); 4 prefill calls (1..4 busy) + 127 decode steps of 4.
    level_busy, level_decodes = 1 + 2 + 3 + 4 + 127 * 4, 4 + 127
    after.update({
        "llamacpp:prompt_tokens_total": 1031 * 5, "llamacpp:prompt_seconds_total": 0.768912 + 9.636915,
        "llamacpp:tokens_predicted_total": 128 + 512,
        "llamacpp:tokens_predicted_seconds_total": round(3.944112 + 33.465, 6),
        "llamacpp:n_decode_total": n_before + level_decodes, "llamacpp:n_tokens_max": 1159,
        "llamacpp:prompt_tokens_seconds": 427.85, "llamacpp:predicted_tokens_seconds": 15.29957,
        "llamacpp:n_busy_slots_per_decode": (busy_before + level_busy) / (n_before + level_decodes),
        "mlxcel_requests_total": 5, "mlxcel_prompt_tokens_total": 1031 * 5, "mlxcel_completion_tokens_total": 640,
        "mlxcel_generation_time_seconds_total": 4.713 + 43.102, "mlxcel_batch_sequences_started": 5,
        "mlxcel_batch_sequences_completed": 5, "mlxcel_batch_prefill_tokens_total": 1031 * 5,
        "mlxcel_batch_decode_tokens_total": 127 + 508, "mlxcel_batch_decode_steps_total": 127 + 127,
        "mlxcel_batch_decode_lookahead_steps_total": 0,
        "mlxcel_paged_decode_launches_total": {"fused_v2": 4064, "gather": 4064, "cascade": 0},
        "mlxcel_prompt_cache_misses_total": 0,
        "mlxcel_request_ttft_ms": [768.912, 1587.3, 2110.9, 2731.4, 3206.6],
        "mlxcel_request_decode_tok_s": [32.2, 15.4, 15.3, 15.3, 15.2],
    })
    return before, after


# -------------------------------------------------------------------------------------------- llama.cpp

# llama-server b10621 prints the same families and help texts that mlxcel mirrors (checked against a live
# llama-server built by perflib.server).
LLAMACPP_B10621_COUNTERS = MLXCEL_LLAMACPP_COUNTERS
LLAMACPP_B10621_GAUGES = MLXCEL_LLAMACPP_GAUGES
# Before b10621 the handler listed n_busy_slots_per_decode among its counters and had no cached/spec counters.
LLAMACPP_OLD_COUNTERS = (
    ("prompt_tokens_total", "Number of prompt tokens processed."),
    ("prompt_seconds_total", "Prompt process time"),
    ("tokens_predicted_total", "Number of generation tokens processed."),
    ("tokens_predicted_seconds_total", "Predict process time"),
    ("n_decode_total", "Total number of llama_decode() calls"),
    ("n_tokens_max", "Largest observed n_tokens."),
    ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call"),
)
LLAMACPP_OLD_GAUGES = (
    ("prompt_tokens_seconds", "Average prompt throughput in tokens/s."),
    ("predicted_tokens_seconds", "Average generation throughput in tokens/s."),
    ("requests_processing", "Number of requests processing."),
    ("requests_deferred", "Number of requests deferred."),
)


def llamacpp_text(state: dict, counters: tuple, gauges: tuple) -> str:
    out: list[str] = []
    for kind, items in (("counter", counters), ("gauge", gauges)):
        for name, help_text in items:
            out += [f"# HELP llamacpp:{name} {help_text}", f"# TYPE llamacpp:{name} {kind}",
                    f"llamacpp:{name} {cpp_double(state[name])}"]
    return "\n".join(out) + "\n"


def llamacpp_states() -> tuple[dict, dict]:
    """Before: one warm-up request (12 prompt, 8 generated). After: + 4 requests x (1024 prompt, 128 tokens)
    on --parallel 4: 4 prompt decodes (1..4 busy slots) + 127 decodes of 4 slots, 30 ms per token."""
    before = {
        "prompt_tokens_total": 12, "prompt_tokens_cached_total": 0, "prompt_seconds_total": 0.047,
        "tokens_predicted_total": 8, "tokens_predicted_seconds_total": 0.112, "n_decode_total": 8,
        "n_tokens_max": 20, "spec_decode_num_draft_tokens_total": 0, "spec_decode_num_accepted_tokens_total": 0,
        "spec_decode_num_drafts_total": 0, "prompt_tokens_seconds": 255.319, "predicted_tokens_seconds": 71.4286,
        "requests_processing": 0, "requests_deferred": 0, "n_busy_slots_per_decode": f32(8 / 8),
    }
    after = dict(before)
    after.update({
        "prompt_tokens_total": 12 + 4 * 1024, "prompt_seconds_total": 0.047 + 4 * 0.35,
        "tokens_predicted_total": 8 + 4 * 128, "tokens_predicted_seconds_total": 0.112 + 4 * 127 * 0.030,
        "n_decode_total": 8 + 4 + 127, "n_tokens_max": 1152, "prompt_tokens_seconds": 2925.71,
        "predicted_tokens_seconds": 33.5958,
        "n_busy_slots_per_decode": f32((8 + (1 + 2 + 3 + 4) + 127 * 4) / (8 + 4 + 127)),
    })
    return before, after


# ----------------------------------------------------------------------------------------- vLLM, SGLang

VLLM_LABELS = ("model_name", "engine")
VLLM_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                   240.0, 480.0, 960.0, 1920.0, 7680.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0]


def vllm_text(levels: list[dict], old_names: bool = False, iteration: bool = True) -> str:
    """A vLLM V1 registry after the given levels; each level: requests, prompt, gen, itl_s, finish reason."""
    import prometheus_client as pc

    reg = pc.CollectorRegistry()
    labels = (VLLM_MODEL, "0")
    running = pc.Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                       VLLM_LABELS, registry=reg).labels(*labels)
    waiting = pc.Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                       VLLM_LABELS, registry=reg).labels(*labels)
    kv_name = "vllm:gpu_cache_usage_perc" if old_names else "vllm:kv_cache_usage_perc"
    kv = pc.Gauge(kv_name, "KV-cache usage. 1 means 100 percent usage.", VLLM_LABELS, registry=reg).labels(*labels)
    pq = "vllm:gpu_prefix_cache_queries" if old_names else "vllm:prefix_cache_queries"
    ph = "vllm:gpu_prefix_cache_hits" if old_names else "vllm:prefix_cache_hits"
    prefix_queries = pc.Counter(pq, "Prefix cache queries, in terms of number of queried tokens.",
                                VLLM_LABELS, registry=reg).labels(*labels)
    prefix_hits = pc.Counter(ph, "Prefix cache hits, in terms of number of cached tokens.",
                             VLLM_LABELS, registry=reg).labels(*labels)
    preempt = pc.Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                         VLLM_LABELS, registry=reg).labels(*labels)
    prompt = pc.Counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                        VLLM_LABELS, registry=reg).labels(*labels)
    gen = pc.Counter("vllm:generation_tokens", "Number of generation tokens processed.",
                     VLLM_LABELS, registry=reg).labels(*labels)
    success = pc.Counter("vllm:request_success", "Count of successfully processed requests.",
                         [*VLLM_LABELS, "finished_reason"], registry=reg)
    iteration_h = None
    if iteration:
        iteration_h = pc.Histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                                   VLLM_LABELS, registry=reg,
                                   buckets=[1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
                                   ).labels(*labels)
    itl_name = "vllm:time_per_output_token_seconds" if old_names else "vllm:inter_token_latency_seconds"
    itl = pc.Histogram(itl_name, "Histogram of inter-token latency in seconds.", VLLM_LABELS, registry=reg,
                       buckets=ITL_BUCKETS).labels(*labels)
    tpot = None
    if not old_names:
        tpot = pc.Histogram("vllm:request_time_per_output_token_seconds",
                            "Histogram of time_per_output_token_seconds per request.", VLLM_LABELS, registry=reg,
                            buckets=ITL_BUCKETS).labels(*labels)
    ttft = pc.Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                        VLLM_LABELS, registry=reg, buckets=[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25,
                                                            0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]).labels(*labels)
    phases = {}
    for name, doc in (("e2e_request_latency", "Histogram of e2e request latency in seconds."),
                      ("request_queue_time", "Histogram of time spent in WAITING phase for request."),
                      ("request_prefill_time", "Histogram of time spent in PREFILL phase for request."),
                      ("request_decode_time", "Histogram of time spent in DECODE phase for request."),
                      ("request_inference_time", "Histogram of time spent in RUNNING phase for request.")):
        phases[name] = pc.Histogram(f"vllm:{name}_seconds", doc, VLLM_LABELS, registry=reg,
                                    buckets=LATENCY_BUCKETS).labels(*labels)
    for lv in levels:
        n, p, g, itl_s, ttft_s = lv["requests"], lv["prompt"], lv["gen"], lv["itl_s"], lv["ttft_s"]
        prompt.inc(n * p)
        gen.inc(n * g)
        prefix_queries.inc(n * p)
        if iteration_h is not None:
            iteration_h.observe(n * p + n)  # one prefill step for the whole batch, first tokens included
            for _ in range(g - 1):
                iteration_h.observe(n)
        for _ in range(n * (g - 1)):
            itl.observe(itl_s)
        for _ in range(n):
            ttft.observe(ttft_s)
            decode_s = (g - 1) * itl_s
            if tpot is not None:
                tpot.observe(decode_s / (g - 1))
            phases["request_decode_time"].observe(decode_s)
            phases["request_prefill_time"].observe(ttft_s)
            phases["request_queue_time"].observe(0.002)
            phases["request_inference_time"].observe(ttft_s + decode_s)
            phases["e2e_request_latency"].observe(ttft_s + decode_s + 0.003)
            success.labels(VLLM_MODEL, "0", lv["finished_reason"]).inc()
    running.set(0)
    waiting.set(0)
    kv.set(0.0)
    preempt.inc(0)
    prefix_hits.inc(0)
    return fixed_created(pc.generate_latest(reg).decode())


CREATED = "1.7643852e+09"  # one server start for every series, so before and after agree as on a live server


def fixed_created(text: str) -> str:
    """Give every `*_created` series the same stamp (prometheus_client stamps the generation time)."""
    import re

    return re.sub(r"^(\S+_created(?:\{[^}]*\})?) \S+$", rf"\1 {CREATED}", text, flags=re.M)


VLLM_WARMUP = {"requests": 1, "prompt": 16, "gen": 8, "itl_s": 0.02, "ttft_s": 0.03, "finished_reason": "stop"}
VLLM_LEVEL = {"requests": 4, "prompt": 1024, "gen": 128, "itl_s": 0.025, "ttft_s": 0.4, "finished_reason": "length"}

SGLANG_LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank")


def sglang_text(levels: list[dict], running: int = 0, gen_throughput: float = 0.0, token_usage: float = 0.0,
                old_names: bool = False) -> str:
    """An SGLang `--enable-metrics` registry (multiprocess mode: no `_created` series)."""
    import prometheus_client as pc

    reg = pc.CollectorRegistry()
    labels = (VLLM_MODEL, "unified", "0", "0")

    def gauge(name: str, doc: str, value: float) -> None:
        pc.Gauge(f"sglang:{name}", doc, SGLANG_LABELS, registry=reg).labels(*labels).set(value)

    gauge("num_running_reqs", "The number of running requests.", running)
    gauge("num_used_tokens", "The number of used tokens.", running * 1100)
    gauge("token_usage", "The token usage.", token_usage)
    gauge("gen_throughput", "The generation throughput (token/s).", gen_throughput)
    gauge("num_queue_reqs", "The number of requests in the waiting queue.", 0)
    gauge("cache_hit_rate", "The prefix cache hit rate.", 0.0)
    prompt = pc.Counter("sglang:prompt_tokens", "Number of prefill tokens processed.", SGLANG_LABELS,
                        registry=reg).labels(*labels)
    gen = pc.Counter("sglang:generation_tokens", "Number of generation tokens processed.", SGLANG_LABELS,
                     registry=reg).labels(*labels)
    cached = pc.Counter("sglang:cached_tokens", "Number of cached prompt tokens.", SGLANG_LABELS,
                        registry=reg).labels(*labels)
    nreq = pc.Counter("sglang:num_requests", "Number of requests processed.", SGLANG_LABELS,
                      registry=reg).labels(*labels)
    ttft = pc.Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                        SGLANG_LABELS, registry=reg, buckets=[0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20,
                                                              40, 60, 80, 100, 200, 400]).labels(*labels)
    itl_name = "sglang:time_per_output_token_seconds" if old_names else "sglang:inter_token_latency_seconds"
    itl = pc.Histogram(itl_name, "Histogram of inter-token latency in seconds.", SGLANG_LABELS, registry=reg,
                       buckets=[0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
                                0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0]).labels(*labels)
    e2e = pc.Histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                       SGLANG_LABELS, registry=reg, buckets=LATENCY_BUCKETS).labels(*labels)
    for lv in levels:
        n, g = lv["requests"], lv["gen"]
        prompt.inc(n * lv["prompt"])
        gen.inc(n * g)
        cached.inc(0)
        nreq.inc(n)
        for _ in range(n):
            ttft.observe(lv["ttft_s"])
            e2e.observe(lv["ttft_s"] + (g - 1) * lv["itl_s"])
        for _ in range(n * (g - 1)):
            itl.observe(lv["itl_s"])
    return pc.generate_latest(reg).decode()


SGLANG_WARMUP = {"requests": 1, "prompt": 16, "gen": 8, "itl_s": 0.018, "ttft_s": 0.03}
SGLANG_LEVEL = {"requests": 4, "prompt": 1024, "gen": 128, "itl_s": 0.02, "ttft_s": 0.35}


def main() -> None:
    files: dict[str, str] = {}
    before, after = mlxcel_states()
    files["mlxcel_before.txt"] = mlxcel_text(before)
    files["mlxcel_after.txt"] = mlxcel_text(after)

    before, after = llamacpp_states()
    files["llamacpp_before.txt"] = llamacpp_text(before, LLAMACPP_B10621_COUNTERS, LLAMACPP_B10621_GAUGES)
    files["llamacpp_after.txt"] = llamacpp_text(after, LLAMACPP_B10621_COUNTERS, LLAMACPP_B10621_GAUGES)
    # SERVERS.md §1 window-average example (1.5 at 10 decodes, 2.5 at 30), in the older layout.
    busy_before = {"prompt_tokens_total": 40, "prompt_seconds_total": 0.2, "tokens_predicted_total": 10,
                   "tokens_predicted_seconds_total": 0.3, "n_decode_total": 10, "n_tokens_max": 25,
                   "n_busy_slots_per_decode": 1.5, "prompt_tokens_seconds": 200, "predicted_tokens_seconds": 33.3333,
                   "requests_processing": 2, "requests_deferred": 0}
    busy_after = dict(busy_before, prompt_tokens_total=80, prompt_seconds_total=0.4, tokens_predicted_total=70,
                      tokens_predicted_seconds_total=1.5, n_decode_total=30, n_tokens_max=45,
                      n_busy_slots_per_decode=2.5, requests_processing=0)
    files["llamacpp_old_busy_before.txt"] = llamacpp_text(busy_before, LLAMACPP_OLD_COUNTERS, LLAMACPP_OLD_GAUGES)
    files["llamacpp_old_busy_after.txt"] = llamacpp_text(busy_after, LLAMACPP_OLD_COUNTERS, LLAMACPP_OLD_GAUGES)
    files["llamacpp_501.json"] = LLAMACPP_501 + "\n"

    files["vllm_before.txt"] = vllm_text([VLLM_WARMUP])
    files["vllm_after.txt"] = vllm_text([VLLM_WARMUP, VLLM_LEVEL])
    files["vllm_after_no_iteration.txt"] = vllm_text([VLLM_WARMUP, VLLM_LEVEL], iteration=False)
    files["vllm_old_before.txt"] = vllm_text([VLLM_WARMUP], old_names=True)
    files["vllm_old_after.txt"] = vllm_text([VLLM_WARMUP, VLLM_LEVEL], old_names=True)

    import prometheus_client as pc

    pc.disable_created_metrics()
    files["sglang_before.txt"] = sglang_text([SGLANG_WARMUP])
    files["sglang_during.txt"] = sglang_text([SGLANG_WARMUP], running=4, gen_throughput=199.5, token_usage=0.05)
    files["sglang_after.txt"] = sglang_text([SGLANG_WARMUP, SGLANG_LEVEL])
    for name, text in files.items():
        (HERE / name).write_text(text)
        print(f"wrote {HERE / name} ({len(text)} bytes)")


if __name__ == "__main__":
    main()
