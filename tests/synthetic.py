"""Synthetic traces in the canonical dispatch schema (docs/SCHEMA.md §1), built with known structure,
so that every figure a test expects is derived from how the trace was built, not copied from an output."""

from __future__ import annotations

import numpy as np
import pandas as pd

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
