"""A sampled window split into compute, sync and host (`perflib.attribution.samples`): the split of the real
llama-server capture against an independent count, the binomial interval's coverage, and the summary of
samples (counted, not unioned; every figure on the window's scale)."""

from __future__ import annotations

import gzip
import re

import numpy as np
import pytest
from support import DATA

from perflib import attribution
from perflib.attribution import StepCount, Window, interval, samples
from perflib.classes import load_builtin
from perflib.traces import ReadMode, read_trace

SAMPLE = DATA / "traces" / "perf_llama_server_b4.perf-script.txt.gz"
HEAD = re.compile(r"^\S.*?\s+\d+/(?P<tid>\d+)\s+(?P<sec>\d+)\.(?P<ns>\d{9}):")


def plain_count(start_ns: int, end_ns: int) -> dict[str, int]:
    """The split counted from the text alone: each sample's thread and function (its first frame, or the
    first frame outside the kernel), the class table's class, its role; the decode threads are those with
    a compute sample; the counts of their samples by role."""
    rows, current = [], None
    for line in gzip.decompress(SAMPLE.read_bytes()).decode().splitlines():
        found = HEAD.match(line)
        if found:
            current = {"tid": found["tid"], "t": int(found["sec"]) * 10**9 + int(found["ns"]), "frames": []}
            rows.append(current)
        elif line.startswith("\t") and current is not None:
            rest = line.strip().partition(" ")[2]
            sym, _, dso = rest.rpartition(" (")
            current["frames"].append((re.sub(r"(\.(isra|constprop|part|cold)(\.\d+)?)+$", "", sym), dso[:-1]))
    table = load_builtin("llamacpp-cpu")
    counted: dict[tuple[str, str], int] = {}
    for row in rows:
        if not start_ns <= row["t"] < end_ns:
            continue
        user = [f for f in row["frames"] if f[1] != "[kernel.kallsyms]"]
        sym, dso = user[0] if user else row["frames"][0]
        name = f"[unknown] ({dso.rsplit('/', 1)[-1]})" if sym == "[unknown]" else sym
        kernel_class = table.classify(name)
        role = "sync" if kernel_class == "sync" else "host" if kernel_class in ("host", "other") else "compute"
        counted[(row["tid"], role)] = counted.get((row["tid"], role), 0) + 1
    decode = {tid for tid, role in counted if role == "compute"}
    out = {role: sum(n for (tid, r), n in counted.items() if r == role and tid in decode)
           for role in ("compute", "sync", "host")}
    return {**out, "threads": len(decode)}


@pytest.mark.parametrize("mode", [ReadMode.FULL, ReadMode.LEAN])
def test_the_split_of_the_real_capture_is_the_independent_count(mode):
    trace = read_trace(SAMPLE, mode)
    ends = trace.dispatches["end_ns"]
    start, end = int(ends.min()), int(ends.max()) + 1
    third = (end - start) // 3
    for lo, hi in ((start, end), (start + third, end - third)):  # the whole capture and a window inside it
        split = samples.split_window(trace, trace.dispatches, Window(lo, hi), "llamacpp-cpu", None).split
        expected = plain_count(lo, hi)
        assert (split.compute, split.sync, split.host, split.threads) == (
            expected["compute"], expected["sync"], expected["host"], expected["threads"])
        assert split.samples == split.compute + split.sync + split.host and split.compute > 0


def test_the_summary_of_samples_scales_the_shares_onto_the_window():
    trace = read_trace(SAMPLE, ReadMode.LEAN)
    summary = attribution.summarize(trace, classes="llamacpp-cpu", steps=StepCount(40, "request records"))
    s = summary.sampling
    assert summary.work == "CPU samples" and summary.dispatches == s.samples
    assert summary.busy_share == pytest.approx(s.compute / s.samples)
    assert summary.busy_ms == pytest.approx(summary.window_ms * s.compute / s.samples)
    assert summary.busy_ms + summary.gap_ms == pytest.approx(summary.window_ms)
    assert summary.steps == 40 and summary.gap_ms_per_step == pytest.approx(summary.gap_ms / 40)
    assert summary.classes["count"].sum() == s.compute  # only compute is the device's work
    assert summary.classes["time_ms"].sum() == pytest.approx(summary.busy_ms)
    assert summary.kernels["share"].sum() == pytest.approx(1.0)
    assert set(summary.classes["kernel_class"]) <= set(load_builtin("llamacpp-cpu").classify_names(
        summary.kernels["kernel"])) and "sync" not in set(summary.classes["kernel_class"])
    assert not len(summary.gap_buckets) and not len(summary.step_table)  # no gaps to size, no step bounds
    extras = summary.to_dict()
    assert extras["samples"] == s.samples and extras["sample_hz"] == 999.0 and extras["work"] == "CPU samples"


def test_a_profile_marks_no_steps_and_a_sample_rhythm_is_none():
    trace = read_trace(SAMPLE, ReadMode.LEAN)
    summary = attribution.summarize(trace, classes="llamacpp-cpu")
    assert summary.steps is None and summary.busy_ms_per_step is None


def test_the_interval_covers_the_share_about_95_times_in_100():
    rng = np.random.default_rng(7)
    for p, n in ((0.05, 400), (0.3, 200), (0.7, 1500)):
        draws = rng.binomial(n, p, size=4000)
        covered = np.mean([lo <= p <= hi for lo, hi in (interval(k, n) for k in draws)])
        assert 0.93 <= covered <= 0.97, (p, n, covered)
    assert interval(0, 0) is None
    lo, hi = interval(0, 50)
    assert lo == 0.0 and 0 < hi < 0.1
    narrow, wide = interval(300, 1000), interval(30, 100)
    assert narrow[1] - narrow[0] < wide[1] - wide[0]


def test_a_window_with_no_sample_is_an_error_naming_it():
    trace = read_trace(SAMPLE, ReadMode.LEAN)
    start = int(trace.dispatches["end_ns"].min())
    with pytest.raises(Exception, match="no sample taken inside it"):
        attribution.summarize(trace, window=Window(start - 10**9, start - 10**8), classes="llamacpp-cpu")
