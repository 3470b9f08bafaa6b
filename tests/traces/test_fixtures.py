"""Every public rocprofv3 and Kineto fixture parses with the right reader; counts are derived
independently here (csv module, plain json), so each assertion can fail."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from support import fixtures_dir

from perflib.traces import read_csv_table, read_stats, read_trace, schema

FIXTURES = fixtures_dir()
ROCPROF_CSVS = sorted((FIXTURES / "rocprofv3").glob("*/*.csv")) if FIXTURES.is_dir() else []
KINETO = sorted((FIXTURES / "kineto").glob("*.json*")) if FIXTURES.is_dir() else []


def csv_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as fh:
        rows = [r for r in csv.reader(fh) if r]
    return rows[0], rows[1:]


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


@pytest.mark.parametrize("path", ROCPROF_CSVS, ids=_id)
def test_rocprofv3_csv_parses_with_its_reader(path: Path, fixtures: Path) -> None:
    header, rows = csv_rows(path)
    lower = {h.lower() for h in header}
    if "totaldurationns" in lower:
        stats = read_stats(path)
        assert len(stats) == len(rows)
        assert stats["name"].tolist() == [r[0] for r in rows]
        assert stats["total_ns"].tolist() == [int(r[header.index("TotalDurationNs")]) for r in rows]
    elif "kernel_name" in lower and "counter_name" not in lower or "direction" in lower:
        trace = read_trace(path)
        assert len(trace.dispatches) == len(rows)
        schema.validate(trace.dispatches, schema.DISPATCH_COLUMNS)
        s = header.index("Start_Timestamp")
        assert sorted(trace.dispatches["start_ns"]) == sorted(int(r[s]) for r in rows)
    elif "function" in lower:
        trace = read_trace(path)
        markers = sum(r[header.index("Domain")].startswith("MARKER") for r in rows)
        assert len(trace.markers) == markers
        assert len(trace.api) == len(rows) - markers
        assert set(trace.api["name"]) | set(trace.markers["name"]) == {
            r[header.index("Function")] for r in rows
        }
    else:
        kind, table = read_csv_table(path)
        assert len(table) == len(rows)
        assert kind in ("counter_collection", "memory_allocation_trace", "scratch_memory_trace")


def test_readme_excerpts_are_complete_csvs(fixtures: Path) -> None:
    """The README excerpts are verbatim but cut to a few rows at row boundaries: every row has the
    header's column count, so they are complete small CSVs and parse (not the truncated-file case)."""
    for path in sorted((fixtures / "rocprofv3" / "readme-excerpts").glob("*.csv")):
        header, rows = csv_rows(path)
        assert rows and all(len(r) == len(header) for r in rows), path


def test_rocm70_agent_strings_become_ints(fixtures: Path) -> None:
    path = fixtures / "rocprofv3" / "rocm7.0-docs" / "kernel_trace.csv"
    _, rows = csv_rows(path)
    assert {r[1] for r in rows} == {"Agent 4"}
    trace = read_trace(path)
    assert trace.dispatches["device"].dtype == np.int64
    assert set(trace.dispatches["device"]) == {4}
    assert trace.meta["header_version"] == "D"
    assert set(trace.dispatches["stream"]) == {int(r[3]) for r in rows}


def test_rocm62_memory_copies_without_stream(fixtures: Path) -> None:
    trace = read_trace(fixtures / "rocprofv3" / "rocm6.2-docs" / "memory_copy_trace.csv")
    d = trace.dispatches
    assert list(d["kind"].astype(str)) == ["memcpy", "memcpy"]
    assert set(d["stream"]) == {-1}
    # HOST_TO_DEVICE 0 -> 1 and DEVICE_TO_HOST 1 -> 0: the GPU end is agent 1 both times
    assert set(d["device"]) == {1}


def test_header_versions_of_fixtures(fixtures: Path) -> None:
    base = fixtures / "rocprofv3"
    expect = {
        "readme-excerpts/Rocprofv3_OpenMP__omp_kernel_trace.csv": ("A", 16),
        "rocm6.2-docs/kernel_trace.csv": ("B", 18),
        "rocm7.0-docs/kernel_trace.csv": ("D", 22),
        "readme-excerpts/Rocprofv3_rocpd__out_kernel_trace.csv": ("E", 23),
    }
    for rel, (version, ncols) in expect.items():
        header, rows = csv_rows(base / rel)
        assert len(header) == ncols
        trace = read_trace(base / rel)
        assert trace.meta["header_version"] == version
        name_col = next(i for i, h in enumerate(header) if h.lower() == "kernel_name")
        assert sorted(trace.dispatches["kernel"]) == sorted(r[name_col] for r in rows)


def test_rocpd_convert_guid_api_trace(fixtures: Path) -> None:
    path = fixtures / "rocprofv3" / "rocm7.0-docs" / "rocpd-to-csv.csv"
    header, rows = csv_rows(path)
    assert header[0] == "Guid"
    trace = read_trace(path)
    assert len(trace.api) == len(rows)
    assert trace.api["correlation_id"].tolist() == sorted(int(r[5]) for r in rows)


def test_truncated_name_trace(fixtures: Path) -> None:
    trace = read_trace(fixtures / "rocprofv3" / "rocm7.0-docs" / "kernel_trace_truncated.csv")
    assert set(trace.dispatches["kernel"]) == {
        "addition_kernel",
        "divide_kernel",
        "multiply_kernel",
        "subtract_kernel",
    }


def test_marker_marks_have_zero_length(fixtures: Path) -> None:
    trace = read_trace(fixtures / "rocprofv3" / "rocm6.2-docs" / "marker_api_trace.csv")
    m = trace.markers.set_index("name")
    assert m.loc["before hipLaunchKernel", "end_ns"] == m.loc["before hipLaunchKernel", "start_ns"]
    assert m.loc["hipLaunchKernel range", "end_ns"] > m.loc["hipLaunchKernel range", "start_ns"]


def test_rocprofv3_json_mi350(fixtures: Path) -> None:
    path = fixtures / "rocprofv3" / "json-mi350" / "908_results.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    records = doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"]
    assert len(records) == 43915
    trace = read_trace(path)
    assert trace.source == "rocprofv3-json"
    assert len(trace.dispatches) == len(records) == 43915
    assert trace.meta["kernel_name_field"] == "formatted_kernel_name"
    symbols = doc["rocprofiler-sdk-tool"][0]["kernel_symbols"]
    first = min(records, key=lambda r: r["start_timestamp"])
    row = trace.dispatches.iloc[0]
    assert row["kernel"] == symbols[first["dispatch_info"]["kernel_id"]]["formatted_kernel_name"]
    assert row["start_ns"] == first["start_timestamp"]
    gpu = {a["id"]["handle"]: a["logical_node_id"] for a in doc["rocprofiler-sdk-tool"][0]["agents"]}
    assert set(trace.dispatches["device"]) == {gpu[r["dispatch_info"]["agent_id"]["handle"]] for r in records}


@pytest.mark.parametrize("path", KINETO, ids=lambda p: p.name)
def test_kineto_fixture_counts(path: Path, fixtures: Path) -> None:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    count = {c: sum(e.get("cat") == c for e in events) for c in ("kernel", "gpu_memcpy", "gpu_memset")}
    api = sum(e.get("cat") in ("cuda_runtime", "cuda_driver") for e in events)
    marks = sum(e.get("cat") in ("user_annotation", "gpu_user_annotation") for e in events)
    trace = read_trace(path)
    kinds = trace.dispatches["kind"].astype(str).value_counts().to_dict()
    assert kinds.get("kernel", 0) == count["kernel"]
    assert kinds.get("memcpy", 0) == count["gpu_memcpy"]
    assert kinds.get("memset", 0) == count["gpu_memset"]
    assert len(trace.api) == api
    assert len(trace.markers) == marks
    base = doc.get("baseTimeNanoseconds")
    assert trace.clock == ("realtime" if base else "unknown")
    gpu = [e for e in events if e.get("cat") in count]
    first = min(gpu, key=lambda e: e["ts"])
    expect = round(first["ts"] * 1000) + (base or 0)
    assert abs(int(trace.dispatches["start_ns"].iloc[0]) - expect) <= 1


def test_kineto_rocm_streams_and_annotations(fixtures: Path) -> None:
    path = fixtures / "kineto" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    gpu = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy")]
    trace = read_trace(path)
    assert set(trace.dispatches["stream"]) == {e["args"]["stream"] for e in gpu}
    assert set(trace.dispatches["device"]) == {e["args"]["device"] for e in gpu}
    assert "ProfilerStep#1" in set(trace.markers["name"])
    assert trace.meta["base_time_ns"] == doc["baseTimeNanoseconds"]
    assert "hipLaunchKernel" in set(trace.api["name"]) or "hipExtModuleLaunchKernel" in set(trace.api["name"])


def test_directory_of_fixture_copies(tmp_path: Path, fixtures: Path) -> None:
    """A rocprofv3 directory (host/pid layout, prefixed names) merges kernels and copies."""
    import shutil

    sub = tmp_path / "host" / "1234"
    sub.mkdir(parents=True)
    shutil.copy(fixtures / "rocprofv3" / "rocm7.0-docs" / "kernel_trace.csv", sub / "1234_kernel_trace.csv")
    shutil.copy(
        fixtures / "rocprofv3" / "rocm7.0-docs" / "memory_copy_trace.csv", sub / "1234_memory_copy_trace.csv"
    )
    shutil.copy(
        fixtures / "rocprofv3" / "rocm7.0-docs" / "marker_api_trace.csv", sub / "1234_marker_api_trace.csv"
    )
    shutil.copy(fixtures / "rocprofv3" / "rocm7.0-docs" / "hip_api_stats.csv", sub / "1234_hip_api_stats.csv")
    trace = read_trace(tmp_path)
    kinds = trace.dispatches["kind"].astype(str).value_counts().to_dict()
    assert kinds == {"kernel": 9, "memcpy": 4}
    assert len(trace.markers) == 5
    assert trace.dispatches["start_ns"].is_monotonic_increasing
