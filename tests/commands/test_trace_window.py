"""`perflib trace summary --window` over a host stall: an empty window inside the trace is a result
(busy 0, gap = window), printed and in `--json`; one outside the trace's dispatches stays an error."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from support import REPO, fixture


def perflib(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perflib", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_a_window_inside_the_longest_host_stall_is_busy_0_and_all_gap() -> None:
    from perflib.traces import read_trace

    path = fixture("rocprofv3", "rocm7.0-docs", "kernel_trace.csv")
    d = read_trace(path).dispatches.sort_values("start_ns")
    ends = np.maximum.accumulate(d["end_ns"].to_numpy(np.int64))
    starts = d["start_ns"].to_numpy(np.int64)
    idle = starts[1:] - ends[:-1]  # the stretch before each dispatch where nothing ran
    k = int(np.argmax(idle))
    assert idle[k] > 2_000, "the fixture has a host stall of more than 2 us"
    lo, hi = int(ends[k]) + 500, int(starts[k + 1]) - 500  # strictly inside the stall
    done = perflib("trace", "summary", str(path), "--window", f"{lo}:{hi}", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["dispatches"] == 0 and out["busy_ms"] == 0 and out["busy_share"] == 0
    assert out["gap_ms"] == out["window_ms"] == pytest.approx((hi - lo) / 1e6)
    assert out["steps"] is None and out["busy_ms_per_step"] is None and out["steps_guessed"] is False
    text = perflib("trace", "summary", str(path), "--window", f"{lo}:{hi}")
    assert text.returncode == 0, text.stderr
    assert "dispatches 0" in text.stdout and "GPU busy 0.000 ms" in text.stdout
    outside = perflib("trace", "summary", str(path), "--window", f"{int(ends.max()) + 10}:{int(ends.max()) + 20}")
    assert outside.returncode == 2 and outside.stderr.startswith("perflib: error: empty window")
    assert "reaches outside the trace" in outside.stderr and len(outside.stderr.strip().splitlines()) == 1
