"""Synthetic traces in the canonical dispatch schema (docs/SCHEMA.md §1), built with known structure,
so that every figure a test expects is derived from how the trace was built, not copied from an output."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from perflib.traces import write_trace_parquet
from perflib.traces.trace import Trace


def dispatch_frame(rows: list[tuple[str, int, int]], kind: str = "kernel") -> pd.DataFrame:
    """A dispatch table from (kernel, start_ns, end_ns) rows, sorted by start as readers hand it."""
    frame = pd.DataFrame(rows, columns=["kernel", "start_ns", "end_ns"])
    frame["start_ns"] = frame["start_ns"].astype(np.int64)
    frame["end_ns"] = frame["end_ns"].astype(np.int64)
    for col in ("device", "queue", "stream", "correlation_id"):
        frame[col] = np.int64(-1)
    frame["kind"] = pd.Categorical([kind] * len(frame), categories=["kernel", "memcpy", "memset"])
    frame["source"] = pd.Categorical(["synthetic"] * len(frame))
    return frame.sort_values("start_ns", kind="stable").reset_index(drop=True)


def decode_trace(
    steps: int,
    layers: int = 4,
    seed: int = 0,
    prefill: bool = True,
    step_gap_ns: tuple[int, int] = (1_500_000, 3_000_000),
) -> tuple[pd.DataFrame, dict]:
    """A decode run: an optional long prefill burst, then `steps` decode steps with jittered durations.

    Each decode step: embedding gather, per layer (rms_norm, qmv x3, sdpa, qmv, rms_norm, qmv x2),
    final norm, lm_head qmv, arg_reduce; small launch gaps (1-8 us) inside a step and a host gap of
    1.5-3 ms between steps. The prefill uses other kernels (GEMM, flash SDPA) plus one embedding gather.
    Returns the table and the truth: step starts/ends (first dispatch start, next step's first start).
    """
    rng = np.random.default_rng(seed)
    rows: list[tuple[str, int, int]] = []
    t = 1_000_000_000

    def emit(name: str, dur: int, gap: int) -> None:
        nonlocal t
        t += gap
        rows.append((name, t, t + dur))
        t += dur

    if prefill:
        emit("void mlx::core::rocm::gather_rows_kernel<unsigned int, int>(unsigned int const*, int const*)", 3000, 0)
        for _ in range(layers):
            emit("void mlx::core::rocm::rms_norm_kernel<__half, 256, 4>(__half const*)", 20_000, 2000)
            for _ in range(3):
                emit("Cijk_Alik_Bljk_HHS_BH_Bias_HA_S_SAV_UserArgs_MT96x128x64_MI16x16x1", 4_000_000, 3000)
            emit("void mlx::core::rocm::kernel_sdpa_flash_wmma<__half>(__half const*)", 9_000_000, 3000)
            emit("void mlx::core::rocm::affine_dequantize_packed_kernel<__half, 4>(unsigned char const*)", 600_000, 3000)
        emit("void mlx::core::rocm::arg_reduce_final<ArgMax>(float const*)", 5000, 2000)
        t += 20_000_000
    truth_starts, per_step = [], 0
    for _ in range(steps):
        t += int(rng.integers(*step_gap_ns))
        truth_starts.append(t)
        before = len(rows)
        jit = lambda base: int(base * rng.uniform(0.8, 1.2))  # noqa: E731
        small = lambda: int(rng.integers(1000, 8000))  # noqa: E731
        emit("void mlx::core::rocm::gather_rows_kernel<unsigned int, int>(unsigned int const*, int const*)", jit(3000), 0)
        for _ in range(layers):
            emit("void mlx::core::rocm::rms_norm_kernel<__half, 256, 4>(__half const*)", jit(8000), small())
            for _ in range(3):
                emit("void mlx::core::rocm::qmv_wide_kernel<__half, __half, 64, 4>(__half const*)", jit(160_000), small())
            emit("void mlx::core::rocm::kernel_sdpav_1pass<__half, false, 128>(__half const*)", jit(25_000), small())
            emit("void mlx::core::rocm::qmv_wide_kernel<__half, __half, 64, 4>(__half const*)", jit(160_000), small())
            emit("void mlx::core::rocm::rms_norm_kernel<__half, 256, 4>(__half const*)", jit(8000), small())
            for _ in range(2):
                emit("void mlx::core::rocm::qmv_wide_kernel<__half, __half, 64, 4>(__half const*)", jit(200_000), small())
        emit("void mlx::core::rocm::rms_norm_kernel<__half, 256, 4>(__half const*)", jit(8000), small())
        emit("void mlx::core::rocm::qmv_wide_kernel<__half, __half, 64, 4>(__half const*)", jit(900_000), small())
        emit("void mlx::core::rocm::arg_reduce_final<ArgMax>(float const*)", jit(5000), small())
        per_step = len(rows) - before
    frame = dispatch_frame(rows)
    end = int(frame["end_ns"].max())
    truth = {"starts": truth_starts, "ends": truth_starts[1:] + [end], "per_step": per_step}
    return frame, truth


def trace_of(dispatches: pd.DataFrame, clock: str = "unknown", markers: pd.DataFrame | None = None,
             meta: dict | None = None) -> Trace:
    """A real `Trace` around a synthetic dispatch table (no API calls; markers where given)."""
    empty = pd.DataFrame({c: [] for c in ("name", "start_ns", "end_ns", "pid", "tid", "domain", "source")})
    return Trace(dispatches, empty, markers if markers is not None else empty, clock, "synthetic", "<synthetic>",
                 meta or {})


SGLANG_EXTEND = "step[EXTEND bs=8 toks=4096]"
SGLANG_DECODE = "step[DECODE bs=16]"
"""SGLang's step names as `ModelRunner.forward` writes them (issue 27: an SGLang bs16 capture)."""
VLLM_FRAME = "vllm/v1/worker/gpu_model_runner.py(3380): execute_model"
"""vLLM's engine-step Python frame, copied from the public vLLM MI300X trace."""


def engine_steps(names: list[str], seed: int = 0, cat: str = "user_annotation",
                 long_phase: str = "EXTEND") -> tuple[pd.DataFrame, list[dict], list[dict]]:
    """An engine's capture, one step per name, as a Kineto trace holds it: a host range `name` (`cat`:
    `user_annotation`, or `python_function` for vLLM's frame steps) on thread 7 launching its kernels
    (`cudaLaunchKernel` calls, joined by correlation id) that run from a queue on stream 7; a step whose
    name holds `long_phase` runs 40 kernels of ~0.7 ms (a ~28 ms prefill step), any other 40 of ~0.12 ms
    (a ~5 ms decode step), one of them beside another on stream 8. After each range the host launches a
    sampling kernel outside any range, waits for the GPU, and spends 0.3-3 ms before the next range.

    Returns the dispatch table, the host events (`write_kineto_json(events=...)`), and per step its
    name and the (start, end) ns of the kernels its range launched (the truth a test checks against)."""
    rng = np.random.default_rng(seed)
    rows, events, truth = [], [], []
    t, gpu_free, corr = 10**12, 10**12, 0

    def launch(name: str, at: int, length: int, stream: int = 7, after: int | None = None) -> tuple[int, int]:
        nonlocal corr, gpu_free
        corr += 1
        events.append({"cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 7,
                       "start_ns": at, "end_ns": at + 5_000, "args": {"correlation": corr}})
        start = max(at + 40_000, gpu_free if after is None else after)
        rows.append((name, start, start + length, stream, corr))
        if after is None:
            gpu_free = start + length
        return start, start + length

    for name in names:
        long = long_phase in name
        host_start, launched = t, []
        for j in range(40):
            length = int(rng.integers(600_000, 800_000) if long else rng.integers(100_000, 140_000))
            launched.append(launch("gemm_kernel" if j % 2 else "attention_kernel", t, length))
            t += 20_000
            if j == 20:  # a copy-engine-like kernel beside the main stream
                prev = launched[-1]
                launched.append(launch("reduce_kernel", t, (prev[1] - prev[0]) // 2, stream=8, after=prev[0]))
                t += 20_000
        events.append({"cat": cat, "name": name, "pid": 1, "tid": 7, "start_ns": host_start, "end_ns": t})
        if cat == "python_function":  # a with_stack trace: other frames inside the step's frame
            events.append({"cat": cat, "name": "vllm/v1/worker/gpu_input_batch.py(64): num_tokens", "pid": 1,
                           "tid": 7, "start_ns": host_start + 1_000, "end_ns": host_start + 3_000})
        truth.append({"name": name, "kernels": launched})
        launch("sampling_kernel", t + 10_000, 30_000)
        t = max(t + 50_000, gpu_free) + int(rng.integers(300_000, 3_000_000))
    frame = pd.DataFrame(rows, columns=["kernel", "start_ns", "end_ns", "stream", "correlation_id"])
    frame = frame.assign(device=np.int64(0), queue=np.int64(-1), kind="kernel", source="synthetic")
    return frame.sort_values("start_ns", kind="stable").reset_index(drop=True), events, truth


def union_ns(intervals: list[tuple[int, int]], lo: int, hi: int) -> int:
    """ns covered by the intervals inside [lo, hi): a plain sweep, independent of perflib's union."""
    clipped = sorted((max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo))
    total, run_start, run_end = 0, 0, None
    for s, e in clipped:
        if run_end is None or s > run_end:
            total += 0 if run_end is None else run_end - run_start
            run_start, run_end = s, e
        else:
            run_end = max(run_end, e)
    return total + (0 if run_end is None else run_end - run_start)


# ------------------------------------------------------------------------------ run folders

MS = 1_000_000
T0 = 50 * 10**9
"""CLOCK_MONOTONIC ns at which a synthetic level starts."""
REALTIME = 1_700_000_000 * 10**9
"""realtime − monotonic of a synthetic run folder's clocks."""


def requests_of(first_token_ms: list[float], tokens: int, step_ms: float, start_ms: list[float] | None = None,
                chunk_tokens: int = 1, t0: int = T0) -> list[dict]:
    """Request records (docs/SCHEMA.md §2) of one level: request i sent at `start_ms[i]` (default 0), its first
    token at `first_token_ms[i]`, then a token every `step_ms`, the tokens arriving `chunk_tokens` to a chunk
    (64 to a chunk: a stream that arrives in one chunk, its first token time its last)."""
    out = []
    for i, first in enumerate(first_token_ms):
        times = [t0 + int((first + k * step_ms) * MS) for k in range(tokens)]
        chunks = [times[min(k + chunk_tokens, tokens) - 1] for k in range(0, tokens, chunk_tokens)]
        start = t0 + int((start_ms[i] if start_ms else 0.0) * MS)
        total = (chunks[-1] - chunks[0]) / 1e9
        out.append({"request_id": f"r{i}", "batch": len(first_token_ms), "start_ns": start,
                    "first_token_ns": chunks[0], "last_token_ns": chunks[-1], "end_ns": chunks[-1] + MS,
                    "start_unix_ns": start + REALTIME, "ttft_ms": (chunks[0] - start) / MS,
                    "e2e_ms": (chunks[-1] - start) / MS, "itl_ms": [(b - a) / MS for a, b in zip(chunks, chunks[1:], strict=False)],
                    "chunk_ns": chunks, "completion_tokens": tokens,
                    "decode_tok_s": (tokens - 1) / total if total > 0 else None, "status": 200, "ok": True,
                    "error": None, "timings": None, "attempt": 1})
    return out


def llamacpp_metrics(tokens: int, predicted_s: float, decodes: int) -> str:
    """llama-server's /metrics text with the counters SERVERS.md §5 reads (zero for the 'before' scrape)."""
    return "".join(f"# TYPE llamacpp:{name} counter\nllamacpp:{name} {value}\n" for name, value in (
        ("prompt_tokens_total", 0), ("prompt_seconds_total", 0), ("tokens_predicted_total", tokens),
        ("tokens_predicted_seconds_total", predicted_s), ("n_decode_total", decodes))) + \
        f"# TYPE llamacpp:n_busy_slots_per_decode gauge\nllamacpp:n_busy_slots_per_decode {1.0 if decodes else 0}\n"


def write_run_folder(run_dir, *, campaign: str, arm: str, backend: str, context: int, repeat: int,
                     decode_tokens: int, requests: list[dict], step_ms: float, trace: Trace | None = None) -> None:
    """A complete run folder (docs/SCHEMA.md §2): manifest with the level's clocks (monotonic, boottime,
    realtime), the request records, llama.cpp counters of the decode the server did (each request's n - 1
    steps of `step_ms`, as llama.cpp times a slot's generation, whatever chunks the client saw), and
    `trace.parquet` where given."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    start = min(r["start_ns"] for r in requests) - 10 * MS
    end = max(r["end_ns"] for r in requests) + 10 * MS
    clocks = {k: {"monotonic_ns": t, "boottime_ns": t, "realtime_ns": t + REALTIME}
              for k, t in (("start", start), ("end", end))}
    manifest = {"schema": 1, "campaign": campaign, "arm": arm, "backend": backend, "batch": len(requests),
                "context": context, "decode_tokens": decode_tokens, "repeat": repeat, "status": "complete",
                "errors": [], "clocks": clocks, "metrics": {"dialect": "llamacpp"}}
    if trace is not None:  # cut from a capture of the server's life, as `perflib.cut` records it
        manifest.update(trace_path="trace.parquet", trace_cut={
            "from": "capture", "source": trace.source, "clock": trace.clock, "start_ns": start - 50 * MS,
            "end_ns": end + 50 * MS, "capture_start_ns": start - 60_000 * MS, "capture_end_ns": end + 60_000 * MS})
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    (run_dir / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in requests))
    tokens = sum(r["completion_tokens"] for r in requests)
    seconds = sum((r["completion_tokens"] - 1) * step_ms / 1e3 for r in requests)
    steps = len({r["last_token_ns"] - int(k * step_ms * MS) for r in requests for k in range(r["completion_tokens"])})
    (run_dir / "metrics_before.txt").write_text(llamacpp_metrics(0, 0.0, 0))
    (run_dir / "metrics_after.txt").write_text(llamacpp_metrics(tokens, seconds, steps))
    if trace is not None:
        write_trace_parquet(trace, run_dir / "trace.parquet")


LLAMA_CUDA_STEP = (
    "void rms_norm_f32<1024, true, false, false>(float const*, float*, int, long, long, long, float)",
    "quantize_q8_1(float const*, void*, long, long, long, long, long, unsigned int, uint3)",
    "void mul_mat_vec_q<(ggml_type)2, 4, false, false, false>(void const*, void const*, int const*, float*)",
    "void flash_attn_ext_f16<64, 64, 2, 4, false, false, false>(char const*, char const*, char const*, float*)",
)
"""Kernel names of one llama.cpp CUDA decode step, copied from the committed H200 traces (`data/raw/cuda-h200-fa`)."""


def step_trace(starts_ns: list[int], busy_ns: int) -> Trace:
    """A trace on CLOCK_MONOTONIC of decode steps starting at `starts_ns`: each the `LLAMA_CUDA_STEP` kernels
    back to back, `busy_ns` in all, then idle (a host gap) until the next step."""
    rows = []
    each = busy_ns // len(LLAMA_CUDA_STEP)
    for start in starts_ns:
        for k, name in enumerate(LLAMA_CUDA_STEP):
            rows.append((name, start + k * each, start + (k + 1) * each))
    return trace_of(dispatch_frame(rows), clock="monotonic")


SHAPES_STEP_MS = {"slots": 2.0, "unified": 1.8, "nographs": 3.0, "kvq": 2.0}
"""The decode step (ms at batch 1) of each arm of `shapes_campaign`: unified 10% faster than slots, nographs
50% slower, kvq the same (its repeats alone differ)."""
SHAPES_PREFILL_MS = {1024: 40.0, 16384: 1100.0}
"""One request's prefill (ms) at each context of `shapes_campaign`; the server prefills one request at a time."""
SHAPES_JITTER = (0.98, 1.02)
"""Repeat r's steps are this factor of the arm's step: the spread the intervals see."""


def shapes_campaign(root, coalesced: bool = False) -> Path:
    """The shape a user writes (issue 27): arms slots (the baseline), unified, nographs and kvq, a traced arm
    `of: slots`, batch 1 and 4 at ~1K and ~16K, 64 decode tokens, 2 repeats, a `question:` naming ~16K and
    batch 4, a gate on every pair. At ~16K the prefills (`SHAPES_PREFILL_MS`, one request after the other)
    stagger the requests so that the first finishes long before the last starts decoding; at ~1K they
    overlap. With `coalesced`, every stream arrives in one chunk. Returns the campaign file."""
    root = Path(root)
    tokens, batches, contexts, repeats = 64, (1, 4), (1024, 16384), 2
    (root / "campaign.yaml").write_text(f"""\
name: shapes
question: Does other requests' prefill fill the decode window at ~16K with batch 4, and what does each variant change?
model: {{name: synthetic, weight_bytes: 1000000000, kv_bytes_per_token: 10000}}
backends:
  - {{name: gpu, url: "http://127.0.0.1:9", dialect: llamacpp, kernel_classes: llamacpp-cuda, device: NVIDIA H200,
     peak_bandwidth_gbs: 1000}}
batches: {list(batches)}
contexts: {list(contexts)}
decode_tokens: {tokens}
repeats: {repeats}
baseline: slots
arms:
  - {{name: unified, description: one KV cache for all slots}}
  - {{name: slots, description: the default}}
  - {{name: nographs, description: no CUDA graphs}}
  - {{name: kvq, description: quantized KV cache}}
  - {{name: slots-traced, role: traced, of: slots, profiler: {{kind: cupti}}}}
gate: {{measure: decode_step_ms, batch: 1, max_regression_pct: 5}}
playbook: batched-decode
candidates:
  - {{id: step-change, label: decode step change, measure: change_pct, column: decode_step_ms, confirmed: "<= -5",
     ruled_out: "> -2"}}
data_dir: data
reports_dir: reports
""")
    for arm, step in [*SHAPES_STEP_MS.items(), ("slots-traced", SHAPES_STEP_MS["slots"] * 1.1)]:
        for context in contexts:
            for batch in batches:
                for repeat in range(1, repeats + 1):
                    step_ms = step * SHAPES_JITTER[repeat - 1] * (1 + 0.25 * (batch - 1))
                    prefill = SHAPES_PREFILL_MS[context]
                    firsts = [prefill * (i + 1) for i in range(batch)]  # served one prefill after another
                    records = requests_of(firsts, tokens, step_ms, chunk_tokens=tokens if coalesced else 1)
                    trace = None
                    if arm == "slots-traced":
                        begin = T0 + int(firsts[0] * MS)
                        span = int((firsts[-1] + tokens * step_ms) * MS) - int(firsts[0] * MS)
                        starts = [begin + k * int(step_ms * MS) for k in range(span // int(step_ms * MS))]
                        trace = step_trace(starts, int(step_ms * 0.6 * MS))
                    write_run_folder(root / "data" / "raw" / "shapes" / arm / "gpu" / f"b{batch}_c{context}_r{repeat}",
                                     campaign="shapes", arm=arm, backend="gpu", context=context, repeat=repeat,
                                     decode_tokens=tokens, requests=records, step_ms=step_ms, trace=trace)
    return root / "campaign.yaml"
