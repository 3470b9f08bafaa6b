"""Bad input is an InputError naming the file, the line/column or record, and what was expected."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest

from perflib.errors import InputError
from perflib.traces import read_stats, read_trace

HEADER_D = (
    '"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name",'
    '"Correlation_Id","Start_Timestamp","End_Timestamp","LDS_Block_Size","Scratch_Size","VGPR_Count",'
    '"Accum_VGPR_Count","SGPR_Count","Workgroup_Size_X","Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X",'
    '"Grid_Size_Y","Grid_Size_Z"\n'
)
ROW = '"KERNEL_DISPATCH","Agent 4",1,1,834304,{d},10,"void k<float>(float*, int)",{d},{s},{e},0,0,8,0,16,64,1,1,1024,1024,1\n'


def kernel_csv(tmp_path: Path, rows: list[tuple[int, int]], name: str = "x_kernel_trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(HEADER_D + "".join(ROW.format(d=i + 1, s=s, e=e) for i, (s, e) in enumerate(rows)))
    return path


def raises(path: Path, *fragments: str) -> InputError:
    with pytest.raises(InputError) as info:
        read_trace(path)
    message = str(info.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, message
    return info.value


def test_good_file_parses(tmp_path: Path) -> None:
    trace = read_trace(kernel_csv(tmp_path, [(100, 200), (150, 300)]))
    assert len(trace.dispatches) == 2


def test_csv_cut_mid_row(tmp_path: Path) -> None:
    path = kernel_csv(tmp_path, [(100, 200), (150, 300), (400, 500)])
    text = path.read_text()
    path.write_text(text[: len(text) - 40])  # cut inside the last row
    raises(path, "line 4", "22 columns", "truncated")


def test_csv_cut_inside_quoted_name(tmp_path: Path) -> None:
    path = kernel_csv(tmp_path, [(100, 200), (150, 300)])
    text = path.read_text()
    path.write_text(text[: text.rindex("void k") + 8])
    raises(path, "line 3")


def test_unknown_header(tmp_path: Path) -> None:
    path = tmp_path / "mystery.csv"
    path.write_text('"Foo","Bar"\n1,2\n')
    raises(path, "line 1", "header")


def test_missing_required_column(tmp_path: Path) -> None:
    path = tmp_path / "x_kernel_trace.csv"
    header = HEADER_D.replace(',"End_Timestamp"', "")
    row = ROW.format(d=1, s=100, e=200).replace(",200,", ",", 1)
    path.write_text(header + row)
    raises(path, "line 1", "end_timestamp")


def test_non_numeric_timestamp_names_line_and_column(tmp_path: Path) -> None:
    path = kernel_csv(tmp_path, [(100, 200), (150, 300)])
    path.write_text(path.read_text().replace(",150,300,", ",15O,300,"))
    raises(path, "line 3", "column Start_Timestamp", "15O")


def test_end_before_start_names_row(tmp_path: Path) -> None:
    raises(kernel_csv(tmp_path, [(100, 200), (150, 300), (500, 400)]), "line 4", "end timestamp >= its start")


def test_gz_that_is_not_gzip(tmp_path: Path) -> None:
    src = kernel_csv(tmp_path, [(100, 200)])
    path = tmp_path / "x_kernel_trace.csv.gz"
    path.write_bytes(src.read_bytes())
    raises(path, "gzip")


def test_gzip_cut(tmp_path: Path) -> None:
    data = gzip.compress(
        json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur": 1}] * 500}).encode()
    )
    path = tmp_path / "trace.json.gz"
    path.write_bytes(data[: len(data) // 2])
    raises(path, "gzip", "ends early")


def test_json_cut(tmp_path: Path) -> None:
    text = json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1.5, "dur": 2.0}] * 3})
    path = tmp_path / "trace.json"
    path.write_text(text[:-30])
    raises(path, "line 1, column", "complete JSON")


def test_kineto_negative_duration_names_event(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 1.5, "dur": 2.0},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 5.0, "dur": -1.0},
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "M", "name": "process_name"}, *events]}))
    raises(path, "traceEvents[2]", "end timestamp >= its start")


def test_kineto_non_numeric_ts(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_text(
        json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "soon", "dur": 1}]})
    )
    raises(path, "traceEvents[0].ts", "number")


def test_sqlite_neither_rocpd_nor_nsys(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE people (id INTEGER, name TEXT)")
    raises(path, "rocpd", "Nsight", "people")


def test_rocprof_json_record_missing_field(tmp_path: Path) -> None:
    from perflib.traces import schema, writers

    table = schema.dispatch_frame(
        {
            "kernel": ["a", "b", "c", "d", "e"],
            "start_ns": [1, 2, 3, 4, 5],
            "end_ns": [2, 3, 4, 5, 6],
            "device": 1,
        },
        "rocprofv3-csv",
        "made here",
    )
    path = writers.write_rocprof_json(table, tmp_path / "x_results.json")
    doc = json.loads(path.read_text())
    del doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"][2]["end_timestamp"]
    path.write_text(json.dumps(doc))
    raises(path, "kernel_dispatch[2]", "end_ns")


def test_stats_reader_rejects_trace(tmp_path: Path) -> None:
    path = kernel_csv(tmp_path, [(1, 2)])
    with pytest.raises(InputError, match="stats header"):
        read_stats(path)


def test_cupti_text_cut_record(tmp_path: Path) -> None:
    path = tmp_path / "cupti.txt"
    path.write_text(
        'RUNTIME [ 10, 20 ] duration 10, "cudaLaunchKernel_v7000", cbid 211, processId 1, threadId 1, correlationId 1\n'
        "CONCURRENT_KERNEL [ 1764410000000010000, 17644100"
    )
    raises(path, "line 2", "truncated")


def test_unknown_file(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    raises(path, "known trace format")
