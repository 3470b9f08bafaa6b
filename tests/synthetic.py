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
