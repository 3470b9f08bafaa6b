"""perflib.attribution: exact interval union, windows, gap buckets, largest gaps, steps, kernel tables.

Synthetic traces are built in the canonical dispatch schema (docs/SCHEMA.md §1) with known structure, so
every expected figure below is derived from how the trace was built, not copied from an output.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perflib import attribution as attr
from perflib.errors import PerflibError


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


def brute_union_len(intervals: list[tuple[int, int]], lo: int, hi: int) -> int:
    """Mark every ns of [lo, hi) covered by some [s, e): the independent reference for the union."""
    covered = np.zeros(hi - lo, dtype=bool)
    for s, e in intervals:
        a, b = max(s, lo), min(e, hi)
        if b > a:
            covered[a - lo : b - lo] = True
    return int(covered.sum())


# ------------------------------------------------------------------------------------------------ union


def test_union_nested_touching_identical() -> None:
    starts = np.array([0, 2, 10, 10, 20, 25, 30], dtype=np.int64)
    ends = np.array([10, 5, 15, 15, 25, 28, 30], dtype=np.int64)
    gs, ge, first = attr.union_intervals(starts, ends)
    # [0,10)+[2,5) nested, [10,15) touches and repeats -> [0,15); [20,25)+[25,28) touch -> [20,28); [30,30)
    assert gs.tolist() == [0, 20, 30]
    assert ge.tolist() == [15, 28, 30]
    assert first.tolist() == [0, 4, 6]


def test_union_unsorted_input_reports_original_positions() -> None:
    gs, ge, first = attr.union_intervals(np.array([50, 0, 10]), np.array([60, 5, 20]))
    assert gs.tolist() == [0, 10, 50] and ge.tolist() == [5, 20, 60]
    assert first.tolist() == [1, 2, 0]


interval = st.tuples(st.integers(0, 400), st.integers(0, 60)).map(lambda p: (p[0], p[0] + p[1]))


@settings(max_examples=300, deadline=None)
@given(
    intervals=st.lists(interval, min_size=1, max_size=40).flatmap(
        lambda xs: st.lists(st.sampled_from(xs), max_size=10).map(lambda dup: xs + dup)  # identical copies
    ),
    cut=st.tuples(st.integers(0, 470), st.integers(1, 470)),
)
def test_busy_matches_brute_force(intervals: list[tuple[int, int]], cut: tuple[int, int]) -> None:
    """Fast union == marking every ns, for random sets (nested, touching, identical) and cutting windows."""
    lo, hi = cut[0], cut[0] + cut[1]
    frame = dispatch_frame([(f"k{i % 3}", s, e) for i, (s, e) in enumerate(intervals)])
    assert attr.busy_ns(frame, attr.Window(lo, hi)) == brute_union_len(intervals, lo, hi)
    span_lo = min(s for s, _ in intervals)
    span_hi = max(e for _, e in intervals)
    if span_hi > span_lo:
        assert attr.busy_ns(frame) == brute_union_len(intervals, span_lo, span_hi)
    has_inside = any((e > lo and s < hi) or (s == e and lo <= s < hi) for s, e in intervals)
    if has_inside:
        summary = attr.summarize(frame, attr.Window(lo, hi), classes="mlx-rocm", steps=1)
        busy = brute_union_len(intervals, lo, hi)
        assert summary.busy_ms * 1e6 == pytest.approx(busy, abs=1e-6)
        assert summary.gap_ms * 1e6 == pytest.approx((hi - lo) - busy, abs=1e-6)
        # the buckets partition the gap
        assert summary.gap_buckets["gap_ms"].sum() * 1e6 == pytest.approx((hi - lo) - busy, abs=1e-6)


# ---------------------------------------------------------------------------------------------- windows


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


class _FakeTrace:
    """Just the fields window alignment reads (a real `Trace` is a frozen dataclass with the same)."""

    def __init__(self, dispatches: pd.DataFrame, clock: str, meta: dict | None = None) -> None:
        self.dispatches = dispatches
        self.markers = dispatches.iloc[0:0]
        self.clock = clock
        self.meta = meta or {}


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
    w = attr.window_from_clocks(_FakeTrace(frame, "monotonic"), clocks)
    assert (w.start_ns, w.end_ns) == (lo, hi) and "boottime" in w.label
    w = attr.window_from_clocks(_FakeTrace(frame, "unknown"), clocks)
    assert "boottime" in w.label
    # a realtime trace uses realtime only, even though it then holds nothing here
    w = attr.window_from_clocks(_FakeTrace(frame, "realtime"), clocks)
    assert w.start_ns == lo + 10**18
    w = attr.window_from_manifest(_FakeTrace(frame, "boottime"), {"clocks": clocks, "batch": 4, "context": 1024, "repeat": 1})
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


# -------------------------------------------------------------------------------------- gaps by size


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


# ----------------------------------------------------------------------------------------------- steps


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_step_rhythm_found_with_jitter_and_prefill(seed: int) -> None:
    n_steps = 37
    frame, truth = decode_trace(steps=n_steps, seed=seed)
    s = attr.summarize(frame, classes="mlx-rocm", top=5)
    assert s.steps == n_steps
    assert s.step_method.startswith("kernel period: gather_rows_kernel")
    table = s.step_table
    assert table["start_ns"].tolist() == truth["starts"]
    assert table["end_ns"].tolist() == truth["ends"]
    assert (table["dispatches"] == truth["per_step"]).all()
    # per-step figures are window figures over the step count (reference/SERVERS.md §5.2)
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
    assert s.step_method.startswith("gap split")
    assert s.step_table["start_ns"].tolist() == starts


def test_steps_given_from_counters_and_markers() -> None:
    frame, _ = decode_trace(steps=10, prefill=False)
    s = attr.summarize(frame, classes="mlx-rocm", steps=127)
    assert s.steps == 127 and s.step_method == "given"
    assert s.busy_ms_per_step == pytest.approx(s.busy_ms / 127)
    assert s.classes["ms_per_step"].to_numpy() == pytest.approx(s.classes["time_ms"].to_numpy() / 127)

    class WithMarkers(_FakeTrace):
        pass

    t0 = int(frame["start_ns"].min())
    bounds = [t0 + i * 10_000_000 for i in range(5)]
    trace = WithMarkers(frame, "unknown")
    trace.markers = pd.DataFrame(
        {
            "name": [f"ProfilerStep#{i}" for i in range(4)] * 2,
            "start_ns": bounds[:4] * 2,
            "end_ns": bounds[1:] * 2,
            "pid": 0,
            "tid": 0,
            "domain": ["gpu_user_annotation"] * 4 + ["user_annotation"] * 4,
            "source": "synthetic",
        }
    )
    s = attr.summarize(trace, classes="mlx-rocm")
    assert s.steps == 4 and s.step_method.startswith("gpu markers")
    assert s.step_table["start_ns"].tolist() == bounds[:4]
    assert (s.step_table["busy_ms"] + s.step_table["gap_ms"]).to_numpy() == pytest.approx([10.0] * 4)


def test_no_steps_is_none_not_zero() -> None:
    s = attr.summarize(dispatch_frame([("a", 0, 10), ("b", 20, 30)]), classes="mlx-rocm")
    assert s.steps is None and s.busy_ms_per_step is None and s.step_method is None
    d = s.to_dict()
    assert d["steps"] is None and d["busy_ms_per_step"] is None
    assert all(r["ms_per_step"] is None for r in d["classes"])


# ------------------------------------------------------------------------------------ kernels, classes


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


# ------------------------------------------------------------------------- the same dispatches, any format


def _writers():
    return pytest.importorskip("perflib.traces.writers", reason="the readers colleague's writers are not there yet")


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
    writers = _writers()
    from perflib.traces import read_trace

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


def test_profiler_steps_of_a_real_kineto_trace() -> None:
    """MI250 ROCm 6.2 trace: ProfilerStep#1 has a GPU annotation; #2 is a host range that starts after
    the last GPU event (the profiler stopped), so it holds no GPU time and is not a step of the window."""
    from conftest import fixtures_dir

    from perflib.traces import read_trace

    path = fixtures_dir() / "kineto" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    if not path.is_file():
        pytest.skip(f"public fixture {path} not found (CI lays ../shared/fixtures beside the clone)")
    trace = read_trace(path)
    markers = trace.markers
    steps = markers[markers["name"].str.startswith("ProfilerStep#")]
    last_gpu_end = int(trace.dispatches["end_ns"].max())
    assert set(steps["name"]) == {"ProfilerStep#1", "ProfilerStep#2"}
    assert int(steps.loc[steps["name"] == "ProfilerStep#2", "start_ns"].min()) > last_gpu_end
    s = attr.summarize(trace, classes="pytorch-rocm")
    assert s.steps == 1
    assert s.step_method.startswith("gpu markers")
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
    from pathlib import Path

    from perflib.traces import read_trace

    folder = Path(__file__).resolve().parents[1] / "data" / "raw" / "h200-pytorch"
    if not (folder / "manifest.json").is_file():
        pytest.skip(f"{folder} holds no captured H200 traces")
    entries = [e for e in json.loads((folder / "manifest.json").read_text())["traces"] if e.get("status") == "ok"]
    assert entries
    for entry in entries:
        trace = read_trace(folder / entry["file"])
        s = attr.summarize(trace)
        assert s.steps == entry["decode_steps"], entry["file"]
        assert s.step_method.startswith("gpu markers")
        assert s.class_table == "pytorch-cuda"
        level = attr.window_from_clocks(trace, entry["clocks"], entry["file"])
        assert "realtime" in level.label
        d = trace.dispatches
        assert level.start_ns <= d["start_ns"].min() and d["end_ns"].max() <= level.end_ns
        in_level = attr.summarize(trace, level)
        assert in_level.dispatches == len(d) and in_level.busy_ms == pytest.approx(s.busy_ms)
        assert in_level.window_ms == pytest.approx((entry["clocks"]["end"]["realtime_ns"] - entry["clocks"]["start"]["realtime_ns"]) / 1e6)
