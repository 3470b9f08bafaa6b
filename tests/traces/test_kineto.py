"""Kineto: exact to the nanosecond on every trace, and every hostile value an InputError naming the
event and the value (never a traceback, never a silent wrong number)."""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import REPO, fixture_paths

from perflib.errors import InputError
from perflib.traces import read_trace, schema, writers
from perflib.traces.kineto import us_to_ns

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
API_CATS = ("cuda_runtime", "cuda_driver")
MARKER_CATS = ("user_annotation", "gpu_user_annotation")
REAL = [*fixture_paths("kineto/*.json.gz"), *fixture_paths("external/kineto/*.json.gz"),
        *sorted((REPO / "data" / "raw" / "h200-pytorch").glob("*.json.gz"))]


def text_ns(value: Any) -> int:
    """ns of a µs number by integer arithmetic on its JSON text (`parse_float=str` keeps the text)."""
    if isinstance(value, int):
        return value * 1000
    whole, _, frac = value.partition(".")
    assert "e" not in value.lower() and len(frac) <= 3, value  # Kineto writes at most 3 decimals
    sign = -1 if whole.startswith("-") else 1
    return int(whole) * 1000 + sign * int(frac.ljust(3, "0"))


def step_frame(e: dict) -> bool:
    """vLLM's engine-step Python frame, the one `python_function` event the reader keeps as a marker."""
    return e.get("cat") == "python_function" and re.search(r"gpu_model_runner\.py\(\d+\): execute_model$",
                                                            str(e.get("name"))) is not None


def expected_intervals(doc: dict, cats: tuple[str, ...], frames: bool = False) -> list[tuple[int, int]]:
    base = int(doc.get("baseTimeNanoseconds") or 0)
    out = []
    for e in doc["traceEvents"]:
        if e.get("ph", "X") == "X" and (e.get("cat") in cats or (frames and step_frame(e))):
            start = text_ns(e["ts"]) + base
            out.append((start, start + text_ns(e.get("dur", 0))))
    return sorted(out)


def intervals(frame) -> list[tuple[int, int]]:
    return sorted(zip(frame["start_ns"].tolist(), frame["end_ns"].tolist(), strict=True))


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_traces_are_exact_to_the_nanosecond(path: Path) -> None:
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=str)
    trace = read_trace(path)
    assert intervals(trace.dispatches) == expected_intervals(doc, GPU_CATS)
    assert intervals(trace.api) == expected_intervals(doc, API_CATS)
    assert intervals(trace.markers) == expected_intervals(doc, MARKER_CATS, frames=True)
    assert trace.meta["ts_parse"] == "float64"  # all within 2^43 us: the fast path, no second parse


def epoch_trace(tmp_path: Path, n: int = 3000) -> tuple[Path, np.ndarray, np.ndarray]:
    """A trace whose `ts` are Unix-epoch µs with 3 decimals and no `baseTimeNanoseconds`, as some
    profilers write them; returns (path, start ns, dur ns) that the text holds exactly."""
    rng = np.random.default_rng(3)
    start = 1_712_195_495_505_582_988 + np.cumsum(rng.integers(1, 50_000, n))
    dur = rng.integers(0, 20_000, n)

    def us(ns: int) -> str:
        return f"{ns // 1000}.{ns % 1000:03d}"

    events = [
        f'{{"ph": "X", "cat": "{("kernel", "cuda_runtime", "user_annotation")[i % 3]}", "name": "e{i % 7}", '
        f'"pid": 1, "tid": 2, "ts": {us(s)}, "dur": {us(d)}, "args": {{"device": 0, "stream": 7, "correlation": {i}}}}}'
        for i, (s, d) in enumerate(zip(start.tolist(), dur.tolist(), strict=True))
    ]
    path = tmp_path / "epoch_us.json"
    path.write_text('{"schemaVersion": 1, "traceEvents": [\n' + ",\n".join(events) + "\n]}")
    return path, start, dur


def test_epoch_microseconds_with_a_fraction_are_kept_exactly(tmp_path: Path) -> None:
    path, start, dur = epoch_trace(tmp_path)
    floats = np.array([float(f"{s // 1000}.{s % 1000:03d}") for s in start.tolist()])
    assert (us_to_ns(floats) != start).mean() > 0.5  # float64 alone loses most of them (0.25 us apart)
    trace = read_trace(path)
    assert trace.meta["ts_parse"].startswith("decimal text") and trace.clock == "unknown"
    want = sorted(zip(start.tolist(), (start + dur).tolist(), strict=True))
    got = sorted(intervals(trace.dispatches) + intervals(trace.api) + intervals(trace.markers))
    assert got == want
    doc = json.loads(path.read_text(), parse_float=str)
    assert intervals(trace.dispatches) == expected_intervals(doc, GPU_CATS)


@pytest.mark.skipif(not hasattr(os, "fork") or (os.cpu_count() or 1) < 2, reason="the prefetch needs os.fork")
def test_prefetched_columns_of_an_epoch_trace_are_exact_too(tmp_path: Path) -> None:
    from perflib.commands.trace import _read
    from perflib.traces import prefetch

    path, start, _ = epoch_trace(tmp_path)
    pre = prefetch.start(path, min_bytes=0)
    assert pre is not None
    trace = _read(str(path), pre)  # the child's streamed read parses the decimal text
    assert sorted(trace.dispatches["start_ns"].tolist()) == sorted(start[0::3].tolist())


def test_more_than_three_decimals_round_half_even_to_the_ns(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": ['
                    '{"ph": "X", "cat": "kernel", "name": "a", "ts": 1712195495505582.9885, "dur": 1.0},'
                    '{"ph": "X", "cat": "kernel", "name": "b", "ts": 1712195495505583.9895, "dur": 0.0005}]}')
    d = read_trace(path).dispatches
    assert d["start_ns"].tolist() == [1712195495505582988, 1712195495505583990]
    assert (d["end_ns"] - d["start_ns"]).tolist() == [1000, 0]


def test_float64_is_exact_below_two_to_the_43_microseconds_and_not_above() -> None:
    """Why the fast path stops at 2^43 us: below it floats lie 2^-10 us apart, within half a ns."""
    rng = np.random.default_rng(5)
    for lo, hi, exact in ((0, 2**42, True), (2**42, 2**43, True), (2**43, 2**44, False)):
        ns = np.concatenate([rng.integers(lo * 1000, hi * 1000, 200_000), np.arange(hi * 1000 - 2000, hi * 1000)])
        floats = np.array([float(f"{k // 1000}.{k % 1000:03d}") for k in ns.tolist()])
        assert bool((us_to_ns(floats) == ns).all()) is exact, (lo, hi)


# --- hostile input -------------------------------------------------------------------------------


def base_doc() -> dict:
    start = [10_000 + 5_000 * i for i in range(6)]
    table = schema.dispatch_frame({"kernel": ["k"] * 6, "start_ns": start, "end_ns": [s + 2_000 for s in start],
                                   "device": 0, "stream": 7, "correlation_id": list(range(1, 7))}, "kineto", "here")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = writers.write_kineto_json(table, Path(tmp) / "k.json", base_time_ns=1_790_000_000_000_000_000)
        doc = json.loads(path.read_text())
    doc["traceEvents"].append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2,
                               "ts": 9.5, "dur": 1.0, "args": {"correlation": 1}})
    return doc


def event(doc: dict, i: int = 2) -> dict:
    return doc["traceEvents"][i]


HOSTILE: list[tuple[str, Any, str, str]] = [
    # (id, mutation of the document, where, what was expected)
    ("event-not-object", lambda d: d["traceEvents"].__setitem__(3, 5), "traceEvents[3]", "an event object"),
    ("event-is-list", lambda d: d["traceEvents"].__setitem__(1, [1, 2]), "traceEvents[1]", "an event object"),
    ("no-traceEvents", lambda d: d.pop("traceEvents"), "top level", "traceEvents"),
    ("traceEvents-object", lambda d: d.__setitem__("traceEvents", {"a": 1}), "top level", "traceEvents"),
    ("cat-unhashable", lambda d: event(d).__setitem__("cat", ["kernel"]), "traceEvents[2].cat", "a category name"),
    ("args-list", lambda d: event(d).__setitem__("args", [1]), "traceEvents[2].args", "an object"),
    ("args-string", lambda d: event(d).__setitem__("args", "x"), "traceEvents[2].args", "an object"),
    ("api-args-list", lambda d: event(d, 6).__setitem__("args", [7]), "traceEvents[6].args", "an object"),
    ("ts-string", lambda d: event(d).__setitem__("ts", "12.5"), "traceEvents[2].ts", "a number of µs"),
    ("ts-true", lambda d: event(d).__setitem__("ts", True), "traceEvents[2].ts", "a number of µs"),
    ("ts-null", lambda d: event(d).__setitem__("ts", None), "traceEvents[2].ts", "a number of µs"),
    ("ts-missing", lambda d: event(d).pop("ts"), "traceEvents[2].ts", "a number of µs"),
    ("dur-string", lambda d: event(d).__setitem__("dur", "2"), "traceEvents[2].dur", "a number of µs"),
    ("dur-false", lambda d: event(d).__setitem__("dur", False), "traceEvents[2].dur", "a number of µs"),
    ("api-ts-object", lambda d: event(d, 6).__setitem__("ts", {}), "traceEvents[6].ts", "a number of µs"),
    ("ts-nan", lambda d: event(d).__setitem__("ts", float("nan")), "traceEvents[2].ts", "a finite number"),
    ("ts-infinity", lambda d: event(d).__setitem__("ts", float("inf")), "traceEvents[2].ts", "a finite number"),
    ("dur-minus-inf", lambda d: event(d).__setitem__("dur", float("-inf")), "traceEvents[2].dur", "a finite number"),
    ("ts-1e300", lambda d: event(d).__setitem__("ts", 1e300), "traceEvents[2].ts", "fit int64"),
    ("ts-int-1e30", lambda d: event(d).__setitem__("ts", 10**30), "traceEvents[2].ts", "fit int64"),
    ("ts-int-past-int64-ns", lambda d: event(d).__setitem__("ts", 2**63 // 1000 + 1), "traceEvents[2].ts",
     "fit int64"),
    ("ts-plus-dur-overflow", lambda d: event(d).update(ts=9_223_372_036_854_775, dur=9_000_000_000_000_000),
     "traceEvents[2]", "ts + dur whose ns fit int64"),
    ("ts-plus-base-overflow", lambda d: event(d).__setitem__("ts", 9_000_000_000_000_000), "traceEvents[2]",
     "plus baseTimeNanoseconds fit int64"),
    ("base-string", lambda d: d.__setitem__("baseTimeNanoseconds", "1790000000000000000"), "baseTimeNanoseconds",
     "an integer number of ns"),
    ("base-true", lambda d: d.__setitem__("baseTimeNanoseconds", True), "baseTimeNanoseconds", "an integer number"),
    ("base-nan", lambda d: d.__setitem__("baseTimeNanoseconds", float("nan")), "baseTimeNanoseconds", "fit int64"),
    ("base-2-to-64", lambda d: d.__setitem__("baseTimeNanoseconds", 2**64), "baseTimeNanoseconds", "fit int64"),
    ("base-fraction", lambda d: d.__setitem__("baseTimeNanoseconds", 1.5), "baseTimeNanoseconds", "an integer"),
    ("deviceProperties-object", lambda d: d.__setitem__("deviceProperties", {"name": "x"}), "deviceProperties",
     "a list of device objects"),
    ("deviceProperties-number", lambda d: d.__setitem__("deviceProperties", 5), "deviceProperties", "a list"),
    ("device-not-object", lambda d: d.__setitem__("deviceProperties", ["gpu0"]), "deviceProperties[0]",
     "a device object"),
]


@pytest.mark.parametrize(("mutate", "where", "expected"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_hostile_kineto_values_are_input_errors_naming_the_place(tmp_path: Path, mutate, where: str,
                                                                 expected: str) -> None:
    doc = base_doc()
    mutate(doc)
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(doc))  # NaN and Infinity as JSON's non-standard tokens, as Python writes them
    with pytest.raises(InputError) as info:
        read_trace(path)
    assert info.value.where == where or (info.value.where or "").startswith(where), str(info.value)
    assert expected in info.value.expected, str(info.value)


@pytest.mark.parametrize("text", ["1" * 5000, "[" * 100_000 + "]" * 100_000])
def test_numbers_too_long_and_nesting_too_deep_are_input_errors(tmp_path: Path, text: str) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur": 1, "args": {"x": ' + text + "}}]}")
    with pytest.raises(InputError, match="sensible"):
        read_trace(path)


def test_ids_that_are_not_int64_are_unknown_not_wrong(tmp_path: Path) -> None:
    """Ids (device, stream, correlation) that are not integers, or do not fit int64, are -1 (unknown):
    never truncated (1.5 -> 1), never a bool's 1, never a traceback."""
    doc = base_doc()
    for i, value in enumerate([True, 1.5, 2**70, "0x10", None, 3.0]):
        doc["traceEvents"][i]["args"]["correlation"] = value
    path = tmp_path / "ids.json"
    path.write_text(json.dumps(doc))
    d = read_trace(path).dispatches
    assert d["correlation_id"].tolist() == [-1, -1, -1, 16, -1, 3]
