"""A dispatch table as a CUDA profiler sees a decode run, shared by the nsys and CUPTI writer tests."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from synthetic import decode_trace

from perflib.traces import schema

UNIX_2025 = 1_764_410_000_000_000_000
"""2025-11-29 in Unix ns: where the CUDA profilers' clocks put a capture."""
COLUMNS = ["kernel", "start_ns", "end_ns", "kind", "device", "stream", "correlation_id"]


def cuda_table(steps: int = 4) -> pd.DataFrame:
    """`synthetic.decode_trace` moved to the Unix clock, with CUDA ids (device 0, kernels on stream 7,
    copies and fills on 15, correlation ids counting from 100) and some rows turned into copies and
    fills, named as CUPTI names them."""
    frame, _ = decode_trace(steps, layers=2)
    i = np.arange(len(frame))
    kind = np.where(i % 17 == 5, "memcpy", np.where(i % 23 == 7, "memset", "kernel"))
    name = np.where(kind == "memcpy", np.where(i % 2 == 0, "Memcpy HtoD", "Memcpy DtoH"),
                    np.where(kind == "memset", "Memset", frame["kernel"].to_numpy()))
    return schema.dispatch_frame({
        "kernel": name, "start_ns": frame["start_ns"] + UNIX_2025, "end_ns": frame["end_ns"] + UNIX_2025,
        "device": 0, "stream": np.where(kind == "kernel", 7, 15), "correlation_id": 100 + i, "kind": kind,
    }, "synthetic", "cuda_table")


@pytest.fixture
def cuda_dispatches() -> pd.DataFrame:
    return cuda_table()


def _same_rows(got: pd.DataFrame, want: pd.DataFrame, columns: list[str] = COLUMNS) -> None:
    """The two tables hold the same rows in the given columns, value for value."""
    key = ["start_ns", "correlation_id"]
    g, w = got.sort_values(key, ignore_index=True), want.sort_values(key, ignore_index=True)
    assert len(g) == len(w)
    for col in columns:
        assert g[col].astype(str).tolist() == w[col].astype(str).tolist(), col


@pytest.fixture
def same_rows():
    """`same_rows(got, want, columns=COLUMNS)`: assert two dispatch tables hold the same rows."""
    return _same_rows
