"""Steps of a window: the dispatch rhythm, a gap split, counts from counters, markers of real traces."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from support import REPO, fixture
from synthetic import decode_trace, dispatch_frame, trace_of

from perflib import attribution as attr
from perflib.errors import PerflibError


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_step_rhythm_found_with_jitter_and_prefill(seed: int) -> None:
    n_steps = 37
    frame, truth = decode_trace(steps=n_steps, seed=seed)
    s = attr.summarize(frame, classes="mlx-rocm", top=5)
    assert s.steps == n_steps
    assert s.step_method == f"dispatch rhythm, a guess (period {truth['per_step']} dispatches, opened by gather_rows_kernel)"
    table = s.step_table
    assert table["start_ns"].tolist() == truth["starts"]
    assert table["end_ns"].tolist() == truth["ends"]
    assert (table["dispatches"] == truth["per_step"]).all()
    # per-step figures are window figures over the step count (docs/reference/SERVERS.md §5.2)
    assert s.busy_ms_per_step == pytest.approx(s.busy_ms / n_steps)
    assert s.gap_ms_per_step == pytest.approx(s.gap_ms / n_steps)
    # each step's busy time = the union of its own dispatches (no overlap inside a step here)
    steps_only = frame[frame["start_ns"] >= truth["starts"][0]]
    step_of = np.searchsorted(np.array(truth["starts"]), steps_only["start_ns"].to_numpy(), side="right") - 1
    busy_by_step = (steps_only["end_ns"] - steps_only["start_ns"]).groupby(step_of).sum().to_numpy() / 1e6
    assert table["busy_ms"].to_numpy() == pytest.approx(busy_by_step)


def test_step_gap_split_when_no_kernel_repeats() -> None:
    """Every dispatch has its own name: no period, so the large inter-step gaps delimit the steps."""
    rng = np.random.default_rng(7)
    rows, t, starts = [], 0, []
    for step in range(12):
        t += 2_000_000
        starts.append(t)
        for j in range(30):
            rows.append((f"kernel_{step}_{j}", t, t + 50_000))
            t += 50_000 + int(rng.integers(1000, 9000))
    s = attr.summarize(dispatch_frame(rows), classes="mlx-rocm")
    assert s.steps == 12
    assert s.step_method.startswith("dispatch rhythm, a guess (gap split")
    assert s.step_table["start_ns"].tolist() == starts
    assert s.steps_guessed and s.to_dict()["steps_guessed"] is True


def test_only_the_rhythm_is_a_guess() -> None:
    """A count from the request records, or one given outright, is a count: only the rhythm is labelled."""
    frame, truth = decode_trace(steps=20, seed=3)
    guessed = attr.summarize(frame, classes="mlx-rocm")
    assert guessed.steps == 20 and guessed.steps_guessed and "a guess" in guessed.step_method
    counted = attr.summarize(frame, classes="mlx-rocm", steps=attr.StepCount(20, "request records (decode window)"))
    assert counted.steps == 20 and not counted.steps_guessed and counted.to_dict()["steps_guessed"] is False
    assert not attr.summarize(frame, classes="mlx-rocm", steps=20).steps_guessed


def test_an_empty_window_inside_the_trace_is_a_host_stall_not_an_error() -> None:
    """A window between two dispatches (a host stall) holds nothing: busy 0, gap = window, no steps; one
    that reaches past the trace's dispatches is still an error (the trace does not cover it)."""
    frame = dispatch_frame([("gemm", 1_000, 2_000), ("norm", 2_500, 3_000), ("gemm", 90_000, 91_000)])
    s = attr.summarize(frame, attr.Window(10_000, 60_000, "stall"), classes="mlx-rocm")
    assert (s.dispatches, s.busy_ms, s.busy_share) == (0, 0.0, 0.0)
    assert s.gap_ms == s.window_ms == pytest.approx(0.05) and s.steps is None and s.busy_ms_per_step is None
    assert s.largest_gaps.to_dict("records") == [{"offset_ms": 0.0, "gap_ms": pytest.approx(0.05), "kernel": "tail"}]
    buckets = s.gap_buckets.set_index("bucket")["count"]
    assert buckets["50-200us"] == 1 and buckets.sum() == 1 and len(s.kernels) == 0  # one gap, 50 us: [50, 200)
    with pytest.raises(PerflibError, match="reaches outside the trace"):
        attr.summarize(frame, attr.Window(92_000, 95_000, "after"), classes="mlx-rocm")


def test_steps_given_from_counters_and_markers() -> None:
    frame, _ = decode_trace(steps=10, prefill=False)
    s = attr.summarize(frame, classes="mlx-rocm", steps=127)
    assert s.steps == 127 and s.step_method == "given"
    assert s.busy_ms_per_step == pytest.approx(s.busy_ms / 127)
    assert s.classes["ms_per_step"].to_numpy() == pytest.approx(s.classes["time_ms"].to_numpy() / 127)

    t0 = int(frame["start_ns"].min())
    bounds = [t0 + i * 10_000_000 for i in range(5)]
    trace = trace_of(frame, "unknown", markers=pd.DataFrame(
        {
            "name": [f"ProfilerStep#{i}" for i in range(4)] * 2,
            "start_ns": bounds[:4] * 2,
            "end_ns": bounds[1:] * 2,
            "pid": 0,
            "tid": 0,
            "domain": ["gpu_user_annotation"] * 4 + ["user_annotation"] * 4,
            "source": "synthetic",
        }
    ))
    s = attr.summarize(trace, classes="mlx-rocm")
    assert s.steps == 4 and s.step_method == "ProfilerStep# markers (GPU ranges)"
    assert s.step_table["start_ns"].tolist() == bounds[:4]
    assert (s.step_table["busy_ms"] + s.step_table["gap_ms"]).to_numpy() == pytest.approx([10.0] * 4)


def test_no_steps_is_none_not_zero() -> None:
    s = attr.summarize(dispatch_frame([("a", 0, 10), ("b", 20, 30)]), classes="mlx-rocm")
    assert s.steps is None and s.busy_ms_per_step is None and s.step_method is None
    d = s.to_dict()
    assert d["steps"] is None and d["busy_ms_per_step"] is None
    assert all(r["ms_per_step"] is None for r in d["classes"])


def test_profiler_steps_of_a_real_kineto_trace() -> None:
    """MI250 ROCm 6.2 trace: ProfilerStep#1 has a GPU annotation; #2 is a host range that starts after
    the last GPU event (the profiler stopped), so it holds no GPU time and is not a step of the window."""
    from perflib.traces import read_trace

    path = fixture("kineto", "mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    trace = read_trace(path)
    markers = trace.markers
    steps = markers[markers["name"].str.startswith("ProfilerStep#")]
    last_gpu_end = int(trace.dispatches["end_ns"].max())
    assert set(steps["name"]) == {"ProfilerStep#1", "ProfilerStep#2"}
    assert int(steps.loc[steps["name"] == "ProfilerStep#2", "start_ns"].min()) > last_gpu_end
    s = attr.summarize(trace, classes="pytorch-rocm")
    assert s.steps == 1
    assert s.step_method == "ProfilerStep# markers (GPU ranges)"
    gpu1 = steps[(steps["name"] == "ProfilerStep#1") & (steps["domain"] == "gpu_user_annotation")].iloc[0]
    first = s.step_table.iloc[0]
    assert first["start_ns"] == max(int(gpu1["start_ns"]), s.window.start_ns)
    assert first["end_ns"] == min(int(gpu1["end_ns"]), s.window.end_ns)
    d = trace.dispatches
    inside = d[(d["start_ns"] >= first["start_ns"]) & (d["start_ns"] < first["end_ns"])]
    assert first["dispatches"] == len(inside) > 0
    # per step = window figure / steps; one step: the whole window
    assert s.busy_ms_per_step == pytest.approx(s.busy_ms)


def test_h200_kineto_traces_steps_and_level_clocks() -> None:
    """The project's own H200 PyTorch decode traces: the ProfilerStep count equals the decode steps the
    capture recorded, and the level window from its recorded clocks (realtime for Kineto) holds every
    dispatch of the trace."""
    import json

    from perflib.traces import read_trace

    folder = REPO / "data" / "raw" / "h200-pytorch"
    if not (folder / "manifest.json").is_file():
        pytest.skip(f"{folder} holds no captured H200 traces")
    entries = [e for e in json.loads((folder / "manifest.json").read_text())["traces"] if e.get("status") == "ok"]
    assert entries
    for entry in entries:
        trace = read_trace(folder / entry["file"])
        s = attr.summarize(trace)
        assert s.steps == entry["decode_steps"], entry["file"]
        assert s.step_method == "ProfilerStep# markers (GPU ranges)"
        assert s.class_table == "pytorch-cuda"
        level = attr.window_from_clocks(trace, entry["clocks"], entry["file"])
        assert "realtime" in level.label
        d = trace.dispatches
        assert level.start_ns <= d["start_ns"].min() and d["end_ns"].max() <= level.end_ns
        in_level = attr.summarize(trace, level)
        assert in_level.dispatches == len(d) and in_level.busy_ms == pytest.approx(s.busy_ms)
        assert in_level.window_ms == pytest.approx((entry["clocks"]["end"]["realtime_ns"] - entry["clocks"]["start"]["realtime_ns"]) / 1e6)
