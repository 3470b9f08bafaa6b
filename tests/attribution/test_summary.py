"""A window attributed: gaps by size, the largest gaps, kernel and class tables, the same from every format."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from synthetic import decode_trace, dispatch_frame

from perflib import attribution as attr


def test_gap_buckets_edges() -> None:
    # gaps exactly at each bucket edge and just below it
    edges = [9_999, 10_000, 49_999, 50_000, 199_999, 200_000, 999_999, 1_000_000, 4_999_999, 5_000_000]
    rows, t = [], 0
    for g in edges:
        rows.append(("k", t, t + 100))
        t += 100 + g
    rows.append(("k", t, t + 100))
    s = attr.summarize(dispatch_frame(rows), classes="mlx-rocm", steps=1)
    got = dict(zip(s.gap_buckets["bucket"], s.gap_buckets["count"], strict=True))
    assert got == {"<10us": 1, "10-50us": 2, "50-200us": 2, "0.2-1ms": 2, "1-5ms": 2, ">=5ms": 1}
    ms = dict(zip(s.gap_buckets["bucket"], s.gap_buckets["gap_ms"], strict=True))
    assert ms["10-50us"] == pytest.approx((10_000 + 49_999) / 1e6)
    assert s.gap_buckets["gap_ms"].sum() == pytest.approx(s.gap_ms)


def test_largest_gaps_offset_and_the_dispatch_that_ends_them() -> None:
    rows = [("first", 0, 10), ("second", 110, 120), ("third", 1120, 1130), ("fourth", 1140, 1150)]
    frame = dispatch_frame(rows)
    s = attr.summarize(frame, attr.Window(-50, 1300, "w"), classes="mlx-rocm", steps=1, top=3)
    top = s.largest_gaps
    assert top["gap_ms"].tolist() == pytest.approx([1000e-6, 150e-6, 100e-6])
    assert top["kernel"].tolist() == ["third", "tail", "second"]
    assert top["offset_ms"].tolist() == pytest.approx([170e-6, 1200e-6, 60e-6])
    # the leading gap (window start -> first dispatch) is charged to the first dispatch
    s = attr.summarize(frame, attr.Window(-50, 1300, "w"), classes="mlx-rocm", steps=1, top=10)
    lead = s.largest_gaps[s.largest_gaps["offset_ms"] == 0]
    assert lead["kernel"].tolist() == ["first"] and lead["gap_ms"].tolist() == pytest.approx([50e-6])


def test_kernel_and_class_tables_sum_clipped_time() -> None:
    frame, _ = decode_trace(steps=8, prefill=True)
    s = attr.summarize(frame, classes="mlx-rocm", top=3)
    dur = (frame["end_ns"] - frame["start_ns"]) / 1e6
    assert s.kernels["time_ms"].sum() == pytest.approx(dur.sum())
    assert s.kernels["count"].sum() == len(frame) == s.dispatches
    by_class = dict(zip(s.classes["kernel_class"], s.classes["time_ms"], strict=True))
    qmv = dur[frame["kernel"].str.contains("qmv_wide_kernel")].sum()
    assert by_class["qmv"] == pytest.approx(qmv)
    assert {"qmv", "gemm", "sdpa", "rms_norm", "gather_scatter", "arg_reduce", "dequantize"} == set(by_class)
    assert s.classes["share"].sum() == pytest.approx(1.0)
    assert s.kernels["time_ms"].is_monotonic_decreasing
    d = s.to_dict()
    assert len(d["kernels"]) == 3 and d["kernels_total"] == len(s.kernels)
    # a window cutting a dispatch counts only the part inside
    k = frame.iloc[10]
    mid = int((k.start_ns + k.end_ns) // 2)
    cut = attr.summarize(frame, attr.Window(mid, int(frame["end_ns"].max())), classes="mlx-rocm")
    inside = frame[frame["end_ns"] > mid]
    assert cut.kernels["time_ms"].sum() * 1e6 == pytest.approx((inside["end_ns"] - np.maximum(inside["start_ns"], mid)).sum())


def test_summary_on_mlxcel_like_trace_reproduces_its_own_decomposition() -> None:
    """busy + gap = window, busy share = busy / window, buckets partition the gap."""
    frame, _ = decode_trace(steps=20, prefill=False, seed=3)
    s = attr.summarize(frame, classes="mlx-rocm")
    assert s.busy_ms + s.gap_ms == pytest.approx(s.window_ms)
    assert s.busy_share == pytest.approx(s.busy_ms / s.window_ms)
    assert s.gap_buckets["gap_ms"].sum() == pytest.approx(s.gap_ms)
    counts = dict(zip(s.gap_buckets["bucket"], s.gap_buckets["count"], strict=True))
    # launch gaps inside a step are 1-8 us, the 19 host gaps between 20 steps 1.5-3 ms
    assert counts == {"<10us": len(frame) - 20, "10-50us": 0, "50-200us": 0, "0.2-1ms": 0, "1-5ms": 19, ">=5ms": 0}


@pytest.fixture(scope="module")
def small_decode() -> pd.DataFrame:
    frame, _ = decode_trace(steps=6, layers=2, prefill=True, seed=11)
    frame["device"] = np.int64(0)
    frame["queue"] = np.int64(1)
    frame["stream"] = np.int64(0)
    frame["correlation_id"] = np.arange(1, len(frame) + 1, dtype=np.int64)
    return frame


def test_same_summary_from_every_rocprof_format(tmp_path, small_decode: pd.DataFrame) -> None:
    """CSV (header versions A-E), rocprofv3 JSON and rocpd SQLite of one dispatch table summarise alike."""
    from perflib.traces import read_trace, writers

    written = []
    for version in ("A", "B", "C", "D", "E"):
        path = tmp_path / f"v{version}_kernel_trace.csv"
        writers.write_kernel_trace_csv(small_decode, path, version=version)
        written.append(path)
    written.append(writers.write_rocprof_json(small_decode, tmp_path / "run_results.json"))
    written.append(writers.write_rocpd(small_decode, tmp_path / "run_results.db"))
    summaries = {}
    for path in written:
        trace = read_trace(path)
        d = attr.summarize(trace, classes="mlx-rocm").to_dict()
        summaries[path.name] = d
    first = next(iter(summaries.values()))
    assert first["dispatches"] == len(small_decode) and first["steps"] == 6
    for name, d in summaries.items():
        assert d == first, name


