"""The same dispatches through every writer and back through its reader give the same table."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perflib.traces import read_trace, schema, writers


def sample_dispatches(n: int = 400, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    start = np.sort(rng.integers(1_550_151_853_000_000, 1_550_151_953_000_000, n))
    end = start + rng.integers(0, 200_000, n)
    is_copy = rng.random(n) < 0.15
    kernels = np.array(
        ["void addition_kernel<float>(float*, float const*, int)", 'gemm "tn", 128x128', "rmsnorm"]
    )
    copies = np.array(["MEMORY_COPY_HOST_TO_DEVICE", "MEMORY_COPY_DEVICE_TO_HOST"])
    name = np.where(is_copy, copies[rng.integers(0, 2, n)], kernels[rng.integers(0, 3, n)])
    return schema.dispatch_frame(
        {
            "kernel": name,
            "start_ns": start,
            "end_ns": end,
            "device": rng.integers(1, 4, n),
            "queue": np.where(is_copy, -1, rng.integers(0, 3, n)),  # copies have no HSA queue here
            "stream": rng.integers(0, 5, n),
            "correlation_id": np.arange(1, n + 1),
            "kind": np.where(is_copy, "memcpy", "kernel"),
        },
        "rocprofv3-csv",
        "sample",
    )


def _compare(got: pd.DataFrame, want: pd.DataFrame, columns: list[str]) -> None:
    key = ["start_ns", "end_ns", "correlation_id"]
    g = got.sort_values(key, ignore_index=True)
    w = want.sort_values(key, ignore_index=True)
    assert len(g) == len(w)
    for col in columns:
        assert g[col].astype(str).tolist() == w[col].astype(str).tolist(), col


@pytest.mark.parametrize("version", ["A", "B", "C", "D", "E"])
def test_kernel_csv_round_trip(tmp_path: Path, version: str) -> None:
    df = sample_dispatches()
    path = writers.write_kernel_trace_csv(df, tmp_path / "run_kernel_trace.csv", version)
    header = path.read_text().splitlines()[0]
    assert header.count(",") + 1 == len(writers.KERNEL_HEADERS[version])
    assert all(h.startswith('"') and h.endswith('"') for h in header.split(","))
    trace = read_trace(path)
    assert trace.meta["header_version"] == version
    kernels = df[df["kind"] == "kernel"]
    cols = ["kernel", "start_ns", "end_ns", "kind", "device", "queue", "correlation_id"]
    if version in ("C", "D", "E"):
        cols.append("stream")
    else:
        assert set(trace.dispatches["stream"]) == {-1}
    _compare(trace.dispatches, kernels, cols)


def test_agent_id_rendering(tmp_path: Path) -> None:
    df = sample_dispatches(20)
    d = writers.write_kernel_trace_csv(df, tmp_path / "d_kernel_trace.csv", "D").read_text().splitlines()[1]
    b = writers.write_kernel_trace_csv(df, tmp_path / "b_kernel_trace.csv", "B").read_text().splitlines()[1]
    assert d.split(",")[1].startswith('"Agent ')
    assert b.split(",")[1].isdigit()


@pytest.mark.parametrize("with_stream", [True, False])
def test_memory_copy_csv_round_trip(tmp_path: Path, with_stream: bool) -> None:
    df = sample_dispatches()
    path = writers.write_memory_copy_trace_csv(df, tmp_path / "x_memory_copy_trace.csv", with_stream)
    trace = read_trace(path)
    copies = df[df["kind"] == "memcpy"]
    cols = ["kernel", "start_ns", "end_ns", "kind", "device", "correlation_id"] + (
        ["stream"] if with_stream else []
    )
    _compare(trace.dispatches, copies, cols)


def test_json_round_trip(tmp_path: Path) -> None:
    df = sample_dispatches()
    trace = read_trace(writers.write_rocprof_json(df, tmp_path / "x_results.json"))
    assert trace.source == "rocprofv3-json"
    _compare(
        trace.dispatches,
        df,
        ["kernel", "start_ns", "end_ns", "kind", "device", "queue", "stream", "correlation_id"],
    )


def test_rocpd_round_trip(tmp_path: Path) -> None:
    df = sample_dispatches()
    path = writers.write_rocpd(df, tmp_path / "x_results.db")
    with sqlite3.connect(path) as con:
        assert dict(con.execute("SELECT tag, value FROM rocpd_metadata").fetchall())["schema_version"] == "3"
    trace = read_trace(path)
    assert trace.source == "rocpd"
    assert trace.meta["schema_version"] == "3"
    _compare(
        trace.dispatches,
        df,
        ["kernel", "start_ns", "end_ns", "kind", "device", "queue", "stream", "correlation_id"],
    )


@pytest.mark.parametrize("base", [None, 1_550_151_000_000_000])
def test_kineto_round_trip(tmp_path: Path, base: int | None) -> None:
    df = sample_dispatches()
    trace = read_trace(writers.write_kineto_json(df, tmp_path / "x.json.gz", base_time_ns=base))
    assert trace.clock == ("realtime" if base else "unknown")
    _compare(
        trace.dispatches, df, ["kernel", "start_ns", "end_ns", "kind", "device", "stream", "correlation_id"]
    )


def test_directory_merges_kernels_and_copies(tmp_path: Path) -> None:
    df = sample_dispatches()
    writers.write_kernel_trace_csv(df, tmp_path / "run_kernel_trace.csv", "D")
    writers.write_memory_copy_trace_csv(df, tmp_path / "run_memory_copy_trace.csv")
    trace = read_trace(tmp_path)
    _compare(
        trace.dispatches, df, ["kernel", "start_ns", "end_ns", "kind", "device", "stream", "correlation_id"]
    )
    assert trace.dispatches["start_ns"].is_monotonic_increasing


def test_write_all_cross_check(tmp_path: Path) -> None:
    """Every format written from one table reads back to the same kernel intervals."""
    df = sample_dispatches(200, seed=3)
    paths = writers.write_all(df, tmp_path)
    want = sorted(zip(df["start_ns"], df["end_ns"], strict=True))
    for label in ("json", "rocpd", "kineto"):
        got = read_trace(paths[label]).dispatches
        assert sorted(zip(got["start_ns"], got["end_ns"], strict=True)) == want, label
