"""Windows of a trace: its span, markers, level clocks, explicit ranges, and an empty window named."""

from __future__ import annotations

import pandas as pd
import pytest
from synthetic import decode_trace, dispatch_frame, trace_of

from perflib import attribution as attr
from perflib.errors import PerflibError


def test_default_window_is_trace_span_and_counts_copies() -> None:
    kernels = dispatch_frame([("a", 100, 200), ("b", 400, 500)])
    copy = dispatch_frame([("Memcpy HtoD", 0, 50), ("Memcpy DtoH", 550, 600)], kind="memcpy")
    frame = pd.concat([kernels, copy]).sort_values("start_ns").reset_index(drop=True)
    s = attr.summarize(frame, classes="pytorch-cuda")
    assert (s.window.start_ns, s.window.end_ns) == (0, 600)
    assert s.busy_ms == pytest.approx(300 / 1e6)  # 50 + 100 + 100 + 50 ns
    assert s.gap_ms == pytest.approx(300 / 1e6)
    assert set(s.classes["kernel_class"]) >= {"memcpy"}


def test_window_from_marker_span_and_index() -> None:
    markers = pd.DataFrame(
        {
            "name": ["decode", "other", "decode"],
            "start_ns": [100, 150, 500],
            "end_ns": [300, 160, 900],
            "pid": 1,
            "tid": 1,
            "domain": "roctx",
            "source": "synthetic",
        }
    )
    assert attr.window_from_marker(markers, "decode") == attr.Window(100, 900, "marker decode")
    assert attr.window_from_marker(markers, "decode", 1).start_ns == 500
    assert attr.window_from_marker(markers, "decode", -1).end_ns == 900
    with pytest.raises(PerflibError, match="'missing' not found"):
        attr.window_from_marker(markers, "missing")
    with pytest.raises(PerflibError, match="occurs 2 times"):
        attr.window_from_marker(markers, "decode", 5)


def test_window_from_clocks_picks_the_clock_holding_most_dispatches() -> None:
    # The trace was stamped on CLOCK_BOOTTIME, which runs 5 s ahead of CLOCK_MONOTONIC after a suspend.
    offset = 5_000_000_000
    frame, _ = decode_trace(steps=5, prefill=False)
    lo, hi = int(frame["start_ns"].min()) - 1000, int(frame["end_ns"].max()) + 1000
    clocks = {
        "start": {"monotonic_ns": lo - offset, "boottime_ns": lo, "realtime_ns": lo + 10**18},
        "end": {"monotonic_ns": hi - offset, "boottime_ns": hi, "realtime_ns": hi + 10**18},
    }
    # the reader says "monotonic" (rocprofv3 cannot tell): boottime must still win
    w = attr.window_from_clocks(trace_of(frame, "monotonic"), clocks)
    assert (w.start_ns, w.end_ns) == (lo, hi) and "boottime" in w.label
    w = attr.window_from_clocks(trace_of(frame, "unknown"), clocks)
    assert "boottime" in w.label
    # a realtime trace uses realtime only, even though it then holds nothing here
    w = attr.window_from_clocks(trace_of(frame, "realtime"), clocks)
    assert w.start_ns == lo + 10**18
    w = attr.window_from_manifest(trace_of(frame, "boottime"), {"clocks": clocks, "batch": 4, "context": 1024, "repeat": 1})
    assert w.label.startswith("level b4_c1024_r1")


def test_empty_window_names_window_and_span() -> None:
    frame = dispatch_frame([("a", 1000, 2000), ("b", 3000, 4000)])
    with pytest.raises(PerflibError) as err:
        attr.summarize(frame, attr.Window(5000, 9000, "late"), classes="mlx-rocm")
    msg = str(err.value)
    assert "'late'" in msg and "[5000, 9000)" in msg and "[1000, 4000)" in msg
    with pytest.raises(PerflibError, match="end <= start"):
        attr.summarize(frame, attr.Window(3000, 3000, "zero"), classes="mlx-rocm")


def test_parse_window_ns_and_relative_units() -> None:
    frame = dispatch_frame([("a", 1_000_000, 2_000_000), ("b", 300_000_000, 400_000_000)])
    assert attr.parse_window("5:10", frame) == attr.Window(5, 10, "5:10")
    w = attr.parse_window("100ms:250ms", frame)
    assert (w.start_ns, w.end_ns) == (101_000_000, 251_000_000)
    w = attr.parse_window("1.5us:", frame)
    assert (w.start_ns, w.end_ns) == (1_001_500, 400_000_000)
    with pytest.raises(PerflibError, match="START:END"):
        attr.parse_window("100ms", frame)
    with pytest.raises(PerflibError, match="neither integer ns"):
        attr.parse_window("1h:2h", frame)


