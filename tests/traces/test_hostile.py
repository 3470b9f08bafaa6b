"""Readers that assumed field types: every odd type or shape is an InputError naming its place (record,
JSON path, table and row, metadata key), never a traceback of another type and never a silent number.

Bad inputs are files written by `perflib.traces.writers` (or pandas/pyarrow) in tmp_path, then mutated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from perflib.errors import InputError
from perflib.traces import read_trace, schema, writers

P0 = "rocprofiler-sdk-tool[0]"


def table(n: int = 6):
    start = [1_000_000 + 10_000 * i for i in range(n)]
    return schema.dispatch_frame(
        {"kernel": ["gemv", "rmsnorm"] * (n // 2), "start_ns": start, "end_ns": [s + 4_000 for s in start],
         "device": 2, "queue": 1, "stream": 3, "correlation_id": list(range(1, n + 1)),
         "kind": ["kernel", "memcpy"] * (n // 2)},
        "rocprofv3-json", "made here")


def expect_error(path: Path, where: str, expected: str) -> InputError:
    with pytest.raises(InputError) as info:
        read_trace(path)
    err = info.value
    assert err.path == str(path)
    assert (err.where or "").startswith(where), str(err)
    assert expected in err.expected, str(err)
    return err


# --- rocprofv3 JSON --------------------------------------------------------------------------------


def proc(doc: dict) -> dict:
    return doc["rocprofiler-sdk-tool"][0]


def kernel_record(doc: dict, i: int = 1) -> dict:
    return proc(doc)["buffer_records"]["kernel_dispatch"][i]


def copy_record(doc: dict, i: int = 0) -> dict:
    return proc(doc)["buffer_records"]["memory_copy"][i]


KD = f"{P0}.buffer_records.kernel_dispatch"
ROCPROF_JSON: list[tuple[str, Any, str, str]] = [
    ("start-string", lambda d: kernel_record(d).__setitem__("start_timestamp", "1000"), f"{KD}[1]", "an integer start_ns"),
    ("start-float", lambda d: kernel_record(d).__setitem__("start_timestamp", 1000.5), f"{KD}[1]", "an integer start_ns"),
    ("end-true", lambda d: kernel_record(d).__setitem__("end_timestamp", True), f"{KD}[1]", "an integer end_ns"),
    ("end-null", lambda d: kernel_record(d).__setitem__("end_timestamp", None), f"{KD}[1]", "an integer end_ns"),
    ("start-2-to-63", lambda d: kernel_record(d).__setitem__("start_timestamp", 2**63 + 5), f"{KD}[1]", "fits int64"),
    ("start-2-to-70", lambda d: kernel_record(d).__setitem__("start_timestamp", 2**70), f"{KD}[1]",
     "an integer start_ns"),  # orjson reads an integer beyond 64 bits as a float
    ("kernel-id-string", lambda d: kernel_record(d)["dispatch_info"].__setitem__("kernel_id", "1"), f"{KD}[1]",
     "an integer kernel_id"),
    ("kernel-id-list", lambda d: kernel_record(d)["dispatch_info"].__setitem__("kernel_id", [1]), f"{KD}[1]",
     "an integer kernel_id"),
    ("queue-handle-float", lambda d: kernel_record(d)["dispatch_info"]["queue_id"].__setitem__("handle", 1.5),
     f"{KD}[1]", "an integer queue"),
    ("stream-id-number", lambda d: kernel_record(d).__setitem__("stream_id", 4), f"{KD}[1]", "its stream field"),
    ("correlation-int", lambda d: kernel_record(d).__setitem__("correlation_id", 4), f"{KD}[1]",
     "its correlation_id field"),
    ("record-not-object", lambda d: proc(d)["buffer_records"]["kernel_dispatch"].__setitem__(0, 7), f"{KD}[0]",
     "a record"),
    ("records-not-list", lambda d: proc(d)["buffer_records"].__setitem__("kernel_dispatch", 5), KD, "a list"),
    ("copy-operation-string", lambda d: copy_record(d).__setitem__("operation", "2"),
     f"{P0}.buffer_records.memory_copy[0]", "an integer operation"),
    ("symbols-entry-string", lambda d: proc(d)["kernel_symbols"].__setitem__(1, "gemv"), f"{P0}.kernel_symbols[1]",
     "a kernel symbol object"),
    ("symbols-not-list", lambda d: proc(d).__setitem__("kernel_symbols", {"1": "gemv"}), f"{P0}.kernel_symbols",
     "a list"),
    ("symbol-id-float", lambda d: proc(d)["kernel_symbols"][1].__setitem__("kernel_id", 1.0),
     f"{P0}.kernel_symbols[1].kernel_id", "an integer"),
    ("agents-object", lambda d: proc(d).__setitem__("agents", {"a": 1}), f"{P0}.agents", "a list of agents"),
    ("agent-string", lambda d: proc(d)["agents"].__setitem__(0, "gpu"), f"{P0}.agents[0]", "an agent object"),
    ("agent-id-int", lambda d: proc(d)["agents"][0].__setitem__("id", 5), f"{P0}.agents[0].id", "an id object"),
    ("agent-handle-list", lambda d: proc(d)["agents"][1]["id"].__setitem__("handle", [1]),
     f"{P0}.agents[1].id.handle", "an integer"),
    ("agent-index-string", lambda d: proc(d)["agents"][1].__setitem__("logical_node_id", "2"),
     f"{P0}.agents[1].logical_node_id", "an integer"),
    ("pid-string", lambda d: proc(d)["metadata"].__setitem__("pid", "12"), f"{P0}.metadata.pid", "an integer"),
    ("pid-float", lambda d: proc(d)["metadata"].__setitem__("pid", 12.5), f"{P0}.metadata.pid", "an integer"),
    ("metadata-list", lambda d: proc(d).__setitem__("metadata", [1]), f"{P0}.metadata", "a metadata object"),
    ("strings-list", lambda d: proc(d).__setitem__("strings", ["x"]), f"{P0}.strings", "a strings object"),
    ("marker-text-key-list", lambda d: proc(d)["strings"].__setitem__("marker_api", [{"key": [1], "value": "x"}]),
     f"{P0}.strings.marker_api[0]", '"key"'),
    ("buffer-records-list", lambda d: proc(d).__setitem__("buffer_records", [1]), f"{P0}.buffer_records",
     "an object of buffers"),
    ("process-string", lambda d: d["rocprofiler-sdk-tool"].__setitem__(0, "p"), P0, "a process object"),
]


@pytest.mark.parametrize(("mutate", "where", "expected"), [c[1:] for c in ROCPROF_JSON],
                         ids=[c[0] for c in ROCPROF_JSON])
def test_rocprof_json_odd_types_are_input_errors(tmp_path: Path, mutate, where: str, expected: str) -> None:
    path = writers.write_rocprof_json(table(), tmp_path / "x_results.json")
    doc = json.loads(path.read_text())
    mutate(doc)
    path.write_text(json.dumps(doc))
    expect_error(path, where, expected)


def test_rocprof_json_without_processes_is_an_empty_trace(tmp_path: Path) -> None:
    path = tmp_path / "x_results.json"
    path.write_text(json.dumps({"rocprofiler-sdk-tool": []}))
    trace = read_trace(path)
    assert len(trace.dispatches) == len(trace.api) == len(trace.markers) == 0
    assert trace.meta["processes"] == 0
