"""Format paths the public fixtures do not cover: legacy rocprof, rocpd regions, rocprofv3 JSON
API/marker records, gzipped CSV, directories of JSON or rocpd, and Kineto's µs -> ns precision."""

from __future__ import annotations

import csv
import gzip
import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
from support import DATA

from perflib.traces import detect_format, read_stats, read_trace, schema, writers
from perflib.traces.kineto import us_to_ns

TRACES = DATA / "traces"


def small_table(n: int = 50) -> pd.DataFrame:
    rng = np.random.default_rng(11)
    start = np.sort(rng.integers(10**12, 10**12 + 10**8, n))
    return schema.dispatch_frame(
        {
            "kernel": np.array(["gemv", "rmsnorm", "rope"])[rng.integers(0, 3, n)],
            "start_ns": start,
            "end_ns": start + rng.integers(0, 10**5, n),
            "device": 2,
            "queue": 1,
            "stream": rng.integers(0, 3, n),
            "correlation_id": np.arange(1, n + 1),
        },
        "rocprofv3-csv",
        "made here",
    )


def test_legacy_results_csv() -> None:
    path = TRACES / "results.csv"
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    trace = read_trace(path)
    assert trace.source == "rocprof-legacy"
    d = trace.dispatches
    assert len(d) == len(rows)
    assert d["start_ns"].tolist() == sorted(int(r["BeginNs"]) for r in rows)
    assert not any(k.endswith("[clone .kd]") for k in d["kernel"])
    assert d["kernel"].iloc[0] == rows[0]["KernelName"].removesuffix(" [clone .kd]")
    assert set(d["device"]) == {int(r["gpu-id"]) for r in rows}
    assert set(d["queue"]) == {int(r["queue-id"]) for r in rows}


def test_legacy_stats_without_min_max() -> None:
    stats = read_stats(TRACES / "results.stats.csv")
    assert stats["calls"].tolist() == [2, 1]
    assert stats["min_ns"].isna().all() and stats["max_ns"].isna().all() and stats["stddev"].isna().all()


def test_gzipped_kernel_csv(tmp_path: Path) -> None:
    plain = writers.write_kernel_trace_csv(small_table(), tmp_path / "a_kernel_trace.csv", "B")
    packed = tmp_path / "b_kernel_trace.csv.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert read_trace(packed).dispatches.equals(read_trace(plain).dispatches)


def test_rocpd_regions_split_into_api_and_markers(tmp_path: Path) -> None:
    path = writers.write_rocpd(small_table(), tmp_path / "x_results.db")
    with sqlite3.connect(path) as con:
        (suffix,) = con.execute(
            "SELECT substr(name, length('rocpd_region_') + 1) FROM sqlite_master "
            "WHERE type = 'table' AND name LIKE 'rocpd_region_%'"
        ).fetchone()
        strings = {
            "hipLaunchKernel": 100,
            "HIP_RUNTIME_API_EXT": 101,
            "decode step": 102,
            "MARKER_CORE_API": 103,
        }
        con.executemany(
            f"INSERT INTO rocpd_string_{suffix} (id, string) VALUES (?, ?)",
            [(v, k) for k, v in strings.items()],
        )
        con.executemany(
            f"INSERT INTO rocpd_event_{suffix} (id, category_id, correlation_id) VALUES (?, ?, ?)",
            [(9001, 101, 7), (9002, 103, 0)],
        )
        con.executemany(
            f'INSERT INTO rocpd_region_{suffix} (nid, pid, tid, start, "end", name_id, event_id) VALUES (1, 1, 5, ?, ?, ?, ?)',
            [(10, 20, 100, 9001), (5, 50, 102, 9002)],
        )
    trace = read_trace(path)
    assert trace.api["name"].tolist() == ["hipLaunchKernel"]
    assert trace.api["correlation_id"].tolist() == [7]
    assert trace.api["domain"].tolist() == ["HIP_RUNTIME_API_EXT"]
    assert trace.markers["name"].tolist() == ["decode step"]
    assert (trace.markers["end_ns"] - trace.markers["start_ns"]).tolist() == [45]


def test_rocprof_json_api_and_markers(tmp_path: Path) -> None:
    path = writers.write_rocprof_json(small_table(), tmp_path / "x_results.json")
    doc = json.loads(path.read_text())
    proc = doc["rocprofiler-sdk-tool"][0]
    proc["strings"]["buffer_records"][5] = {
        "kind": "HIP_RUNTIME_API",
        "operations": ["hipApiName", "hipLaunchKernel"],
    }
    proc["strings"]["buffer_records"][7] = {
        "kind": "MARKER_CORE_API",
        "operations": ["roctxMarkA", "roctxRangePushA"],
    }
    rec = {"size": 1, "thread_id": 77, "correlation_id": {"internal": 3, "external": 0}}
    proc["buffer_records"]["hip_api"] = [
        {**rec, "kind": 5, "operation": 1, "start_timestamp": 10, "end_timestamp": 30}
    ]
    proc["buffer_records"]["marker_api"] = [
        {**rec, "kind": 7, "operation": 0, "start_timestamp": 40, "end_timestamp": 40}
    ]
    path.write_text(json.dumps(doc))
    trace = read_trace(path)
    assert trace.api[["name", "domain", "tid", "pid"]].values.tolist() == [
        ["hipLaunchKernel", "HIP_RUNTIME_API", 77, 1]
    ]
    assert trace.markers[["name", "start_ns", "end_ns"]].values.tolist() == [["roctxMarkA", 40, 40]]


def test_directories_of_json_and_rocpd(tmp_path: Path) -> None:
    table = small_table()
    (tmp_path / "j" / "host").mkdir(parents=True)
    (tmp_path / "d").mkdir()
    writers.write_rocprof_json(table, tmp_path / "j" / "host" / "123_results.json")
    writers.write_rocpd(table, tmp_path / "d" / "123_results.db")
    for sub, source in (("j", "rocprofv3-json"), ("d", "rocpd")):
        trace = read_trace(tmp_path / sub)
        assert trace.source == source
        assert trace.dispatches["start_ns"].tolist() == table["start_ns"].tolist()


def test_detect_format_by_content(tmp_path: Path) -> None:
    table = small_table()
    assert detect_format(writers.write_kineto_json(table, tmp_path / "k.json")) == "kineto"
    assert detect_format(writers.write_rocprof_json(table, tmp_path / "r_results.json")) == "rocprofv3-json"
    assert detect_format(writers.write_rocpd(table, tmp_path / "r_results.db")) == "rocpd"
    assert detect_format(TRACES / "cupti_trace_injection_sample.txt") == "cupti-text"


def test_us_to_ns_is_exact_for_three_decimals() -> None:
    rng = np.random.default_rng(5)
    ns = np.concatenate([rng.integers(0, 2**42 * 1000, 20000), np.array([0, 1, 999, 1000, 4203669603187439])])
    text = [f"{k // 1000}.{k % 1000:03d}" for k in ns.tolist()]
    assert (us_to_ns(np.array([float(t) for t in text])) == ns).all()
    integers = rng.integers(0, 2**50, 1000)  # integer µs (PyTorch < 2.3), e.g. Unix µs
    assert (us_to_ns(integers.astype(np.float64)) == integers * 1000).all()
