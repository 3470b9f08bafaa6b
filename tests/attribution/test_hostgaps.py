"""What fills the host gaps (`perflib.attribution.hostgaps`): the four parts add up to the gap to the ns,
over the window and each step, and equal an independent sweep over every elementary time segment, on
random stand-ins and on real traces of every format that carries host API calls; the launching threads,
the device-to-host copies and a trace without API calls are each told apart as DESIGN.md says."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support import REPO, fixture

from perflib import attribution
from perflib.attribution import apicalls
from perflib.attribution.hostgaps import PARTS, host_gaps, no_api_note
from perflib.traces import ReadMode, read_trace, schema

REAL = [("kineto", "a100_event_sync_trace.json.gz"), ("kineto", "a100_simple_add_trace.json.gz"),
        ("kineto", "mi250_minitoy_train_ROCm6_2_kineto.json.gz"),
        ("external", "kineto", "tracelens_sglang_Qwen3-8B_decode_mi300x.json.gz"),
        ("external", "kineto", "tracelens_vllm_decode_full_graph_execution_mi300x.json.gz"),
        ("external", "kineto", "tracelens_h100_Qwen1.5-0.5B-Chat__1016005.json.gz"),
        ("external", "nsys", "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite")]
COMMITTED = ["data/raw/h200-pytorch/cupti_decode_window_excerpt.txt.gz",
             "data/raw/h200-pytorch/llama1b_decode_b4_c1024.json.gz"]


def _covering(starts: np.ndarray, ends: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Whether some [start, end) covers each point: the starts at or before it minus the ends at or before it."""
    return (np.searchsorted(np.sort(starts), points, side="right")
            - np.searchsorted(np.sort(ends), points, side="right")) > 0


def reference(trace, window, steps: pd.DataFrame) -> list[dict[str, int]]:
    """The split by a sweep over every elementary segment between two consecutive times (no union, no
    coverage function): [window, each step] -> {gap, sync, launch, other_api, host_compute} in ns."""
    d, api = trace.dispatches, trace.api
    w0, w1 = window.start_ns, window.end_ns
    ds, de = d["start_ns"].to_numpy(np.int64), d["end_ns"].to_numpy(np.int64)
    inside = (de > w0) & (ds < w1)
    ids = set(d["correlation_id"][inside & (d["correlation_id"].to_numpy() >= 0)].tolist())
    corr = api["correlation_id"].to_numpy(np.int64)
    pairs = list(zip(api["pid"].tolist(), api["tid"].tolist(), strict=True))
    cats = np.array([apicalls.category(n) for n in api["name"].astype(str)], dtype=object)
    if ids and any(c in ids for c in corr.tolist()):
        threads = {p for p, c in zip(pairs, corr.tolist(), strict=True) if c in ids}
    else:
        threads = {p for p, c, s, e in zip(pairs, cats, api["start_ns"], api["end_ns"], strict=True)
                   if c == apicalls.LAUNCH and e > w0 and s < w1}
    copies = d[d["kind"].astype(str) == "memcpy"]
    to_host = {c for c, n in zip(copies["correlation_id"], copies["kernel"].astype(str), strict=True)
               if c >= 0 and ("DtoH" in n or "Device-to-Host" in n or "DEVICE_TO_HOST" in n)}
    cats = np.where([c in to_host for c in corr.tolist()], apicalls.SYNC, cats)
    mine = np.array([p in threads for p in pairs], dtype=bool)
    s, e = api["start_ns"].to_numpy(np.int64), api["end_ns"].to_numpy(np.int64)
    ranges = [(w0, w1)] + list(zip(steps["start_ns"].tolist(), steps["end_ns"].tolist(), strict=True))
    points = np.unique(np.clip(np.concatenate([ds, de, s, e, [w0, w1], *(np.array(r) for r in ranges)]), w0, w1))
    left, length = points[:-1], np.diff(points)
    busy = _covering(ds, de, left)
    flight = {c: _covering(s[mine & (cats == c)], e[mine & (cats == c)], left) for c in apicalls.CATEGORIES}
    gap = ~busy
    part = {"sync": gap & flight["sync"], "launch": gap & ~flight["sync"] & flight["launch"],
            "other_api": gap & ~flight["sync"] & ~flight["launch"] & flight["other"]}
    part["host_compute"] = gap & ~flight["sync"] & ~flight["launch"] & ~flight["other"]
    out = []
    for a, b in ranges:
        within = (left >= a) & (left < b)
        out.append({"gap": int(length[within & gap].sum()), **{p: int(length[within & m].sum()) for p, m in part.items()}})
    return out


def check(trace, window=None, steps=None, step_table: pd.DataFrame | None = None) -> attribution.HostGaps:
    """The split against `reference`, over the window and each step (the summary's, or `step_table`);
    and the parts add up exactly."""
    summary = attribution.summarize(trace, window=window, steps=steps)
    table = summary.step_table if step_table is None else step_table
    split = host_gaps(trace, summary.window, table)
    assert split.measured, split.note
    want = reference(trace, summary.window, table)
    got = [{"gap": split.gap_ns, **{p: split.part_ns(p) for p in PARTS}}]
    got += [{"gap": int(r.gap_ns), **{p: int(getattr(r, f"{p}_ns")) for p in PARTS}}
            for r in split.steps.itertuples(index=False)]
    assert got == want
    assert split.gap_ns == sum(split.part_ns(p) for p in PARTS)
    assert round(summary.gap_ms * 1e6) == split.gap_ns
    if step_table is None and len(summary.step_table):
        assert np.allclose(split.steps["gap_ns"] / 1e6, summary.step_table["gap_ms"], rtol=0, atol=1e-9)
    assert (split.steps[[f"{p}_ns" for p in PARTS]].sum(axis=1) == split.steps["gap_ns"]).all()
    return split


def stand_in(seed: int, correlated: bool = True) -> tuple[attribution.HostGaps, object]:
    """A random trace: kernels and copies on [0, 2000) ns, calls of two launching threads and one that
    launches nothing, names drawn from real ones; a few copies device to host."""
    rng = np.random.default_rng(seed)
    n = 40
    start = np.sort(rng.integers(0, 1900, n))
    kind = rng.choice(["kernel", "kernel", "kernel", "memcpy"], n)
    names = [("Memcpy DtoH (Device -> Pageable)" if rng.random() < 0.5 else "Memcpy HtoD (Pageable -> Device)")
             if k == "memcpy" else f"k{i % 5}" for i, k in enumerate(kind)]
    dispatches = schema.dispatch_frame({"kernel": names, "start_ns": start, "end_ns": start + rng.integers(0, 60, n),
                                        "correlation_id": np.arange(n) if correlated else None, "kind": list(kind)},
                                       "kineto", "stand-in")
    pool = ["cudaLaunchKernel", "cudaStreamSynchronize_v3020", "cudaMemcpyAsync", "cudaGetDevice_v3020",
            "cuLaunchKernelEx", "cudaEventQuery", "cudaGraphLaunch_v10000", "cudaDeviceSynchronize"]
    m = 120
    api_start = rng.integers(-100, 2100, m)
    tid = rng.choice([7, 8, 9], m)
    api = schema.api_frame({"name": list(rng.choice(pool, m)), "start_ns": api_start,
                            "end_ns": api_start + rng.integers(0, 80, m), "pid": 1, "tid": tid,
                            "correlation_id": np.where(tid == 9, 10_000 + np.arange(m),
                                                       rng.integers(0, n, m) if correlated else -1),
                            "domain": "cuda_runtime"}, "kineto", "stand-in")
    trace = read_trace(fixture("kineto", "a100_event_sync_trace.json.gz"))
    trace = replace(trace, dispatches=dispatches, api=api, markers=schema.empty_markers("kineto"))
    bounds = np.sort(rng.choice(np.arange(1, 2000), 6, replace=False))
    steps = pd.DataFrame({"step": np.arange(1, 6), "start_ns": bounds[:-1], "end_ns": bounds[1:]})
    return check(trace, attribution.window_from_range(0, 2000), step_table=steps), trace


@pytest.mark.parametrize("seed", range(12))
def test_the_parts_add_up_to_the_gap_and_match_a_sweep_on_stand_ins(seed: int) -> None:
    split, trace = stand_in(seed)
    assert split.threads_by == "correlation" and split.threads >= 1


def test_calls_of_a_thread_that_launched_nothing_fill_nothing() -> None:
    """A sync on a thread that launched none of the window's kernels is host compute of the launcher."""
    split, trace = stand_in(3)
    window = attribution.window_from_range(0, 2000)
    without_nine = host_gaps(replace(trace, api=trace.api[trace.api["tid"] != 9].reset_index(drop=True)), window)
    assert {p: split.part_ns(p) for p in PARTS} == {p: without_nine.part_ns(p) for p in PARTS}
    as_launcher = host_gaps(replace(trace, api=trace.api.assign(tid=np.where(trace.api["tid"] == 9, 7,
                                                                             trace.api["tid"]))), window)
    assert as_launcher.host_compute_ns < split.host_compute_ns  # the same calls on a launching thread count


def test_without_correlation_the_threads_are_those_that_launch_in_the_window() -> None:
    split, trace = stand_in(5, correlated=False)
    assert split.threads_by == "launch calls in the window"


def test_a_call_whose_copy_runs_device_to_host_is_a_copy_wait() -> None:
    """cudaMemcpyAsync is an other call by name; its DtoH copy makes it a wait (the a100 trace's own)."""
    trace = read_trace(fixture("kineto", "a100_event_sync_trace.json.gz"))
    copy = trace.dispatches[trace.dispatches["kind"].astype(str) == "memcpy"].iloc[0]
    assert "DtoH" in copy["kernel"]
    call = trace.api[trace.api["correlation_id"] == copy["correlation_id"]]
    assert list(call["name"]) == ["cudaMemcpyAsync"]
    renamed = trace.dispatches.assign(kernel=trace.dispatches["kernel"].astype(str).replace(
        copy["kernel"], "Memcpy HtoD (Pageable -> Device)"))
    window = attribution.trace_span(trace.dispatches)
    as_wait, as_enqueue = host_gaps(trace, window), host_gaps(replace(trace, dispatches=renamed), window)
    assert as_wait.calls["sync"] == as_enqueue.calls["sync"] + 1
    assert as_wait.sync_ns >= as_enqueue.sync_ns and as_wait.gap_ns == as_enqueue.gap_ns


@pytest.mark.parametrize("parts", REAL, ids=[p[-1] for p in REAL])
def test_real_traces_of_every_format_with_api_calls(parts: tuple[str, ...]) -> None:
    path = fixture(*parts)
    splits = [check(read_trace(path, mode)) for mode in ReadMode]
    assert all(s.to_dict() == splits[0].to_dict() for s in splits)
    assert len({len(s.steps) for s in splits}) == 1


@pytest.mark.parametrize("path", COMMITTED)
def test_perflibs_committed_cupti_and_kineto_captures(path: str) -> None:
    """The CUPTI activity text (RUNTIME and DRIVER records, versioned names) and an H200 Kineto trace."""
    trace = read_trace(REPO / path, ReadMode.LEAN)
    split = check(trace)
    assert split.calls["launch"] > 0 and split.threads_by == "correlation"


def test_a_window_of_a_real_trace_and_its_steps() -> None:
    trace = read_trace(fixture("external", "nsys", "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite"))
    span = attribution.trace_span(trace.dispatches)
    window = attribution.window_from_range(span.start_ns + 1_000_000, span.end_ns - 1_000_000)
    bounds = np.linspace(window.start_ns, window.end_ns, 6).astype(np.int64)
    split = check(trace, window, step_table=pd.DataFrame({"step": np.arange(1, 6), "start_ns": bounds[:-1],
                                                          "end_ns": bounds[1:]}))
    assert len(split.steps) == 5 and split.steps["gap_ns"].sum() == split.gap_ns


def test_no_api_calls_is_not_measured_with_why_never_zeros(tmp_path: Path) -> None:
    csv = read_trace(fixture("rocprofv3", "rocm7.0-docs", "kernel_trace.csv"))
    split = host_gaps(csv)
    assert not split.measured and "holds no host API records" in split.note and "--hip-trace" in split.note
    assert all(split.part_ns(p) is None for p in PARTS) and split.gap_ns > 0
    row = split.row(steps=3)
    assert all(row[f"{p}_ms"] is None and row[f"{p}_gap_share"] is None for p in PARTS) and row["note"] == split.note
    old = read_trace(REPO / "data/raw/cuda-h200/after-cupti/llamacpp-cuda/b1_c1024_r1/trace.parquet")
    assert not len(old.api) and no_api_note(old) == old.meta["api_note"] and "before perflib kept" in old.meta["api_note"]
    cupti = replace(read_trace(REPO / COMMITTED[0]), api=schema.empty_api("cupti-text"))
    assert "PERFLIB_CUPTI_KINDS" in host_gaps(cupti).note
    steps = attribution.summarize(old).step_table
    unmeasured = host_gaps(old, steps=steps)
    assert unmeasured.with_steps(steps)["launch_ms"].isna().all() and len(unmeasured.steps) == len(steps)


@pytest.mark.parametrize("seed", range(6))
def test_the_split_over_given_periods_is_the_sweep_summed_over_them(seed: int) -> None:
    """The decode steps' periods (`periods`): each part summed over them equals the sweep's over each
    period, added up; the parts add up to their gap, and the window's and steps' split is unchanged."""
    _, trace = stand_in(seed)
    rng = np.random.default_rng(100 + seed)
    bounds = np.sort(rng.choice(np.arange(1, 2000), 8, replace=False))
    starts, ends = bounds[0::2], bounds[1::2]  # four periods, gaps between them
    window = attribution.window_from_range(0, 2000)
    steps = pd.DataFrame({"step": np.arange(1, 5), "start_ns": starts, "end_ns": ends})
    split = host_gaps(trace, window, steps, periods=(starts, ends))
    want = reference(trace, window, steps)[1:]
    over = split.periods
    assert over["steps"] == 4 and over["window_ns"] == int((ends - starts).sum())
    assert over["gap_ns"] == sum(r["gap"] for r in want)
    assert {p: over[f"{p}_ns"] for p in PARTS} == {p: sum(r[p] for r in want) for p in PARTS}
    alone = host_gaps(trace, window, steps)
    assert alone.periods is None and alone.to_dict() == split.to_dict()
    row = split.row(2.0e-3, 4)
    assert row["decode_steps"] == 4 and row["decode_gap_ms"] == pytest.approx(over["gap_ns"] / 1e6)
    assert sum(row[f"decode_{p}_ms"] for p in PARTS) == pytest.approx(row["decode_gap_ms"], abs=1e-12)
    assert all(np.isnan(alone.row()[c]) for c in attribution.HOST_GAP_DECODE_COLUMNS)
