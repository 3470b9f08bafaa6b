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
    assert "\n" not in str(err), "the command line prints an error as one line"
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
    ("agent-index-2-to-63", lambda d: proc(d)["agents"][1].__setitem__("logical_node_id", 2**63),
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


# --- perflib Parquet ------------------------------------------------------------------------------


def parquet_file(tmp_path: Path, meta: Any = None, change=None, name: str = "trace.parquet") -> Path:
    """A cut written by perflib, its `perflib.trace` metadata replaced by `meta` (bytes or JSON-able)
    and its table passed through `change` (a pyarrow Table -> Table)."""
    import pyarrow.parquet as pq

    from perflib.traces.parquet import write_trace_parquet
    from perflib.traces.trace import Trace

    t = table(8)
    trace = Trace(t, schema.empty_api("cupti-text"), schema.empty_markers("cupti-text"), "realtime", "cupti-text",
                  "lifetime.txt", {"devices": ["H200"]})
    path = write_trace_parquet(trace, tmp_path / name)
    data = pq.read_table(path)
    if change is not None:
        data = change(data)
    if meta is not None:
        raw = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
        data = data.replace_schema_metadata({**(data.schema.metadata or {}), b"perflib.trace": raw})
    pq.write_table(data, path)
    return path


GOOD_META = {"clock": "realtime", "source": "cupti-text", "path": "x", "meta": {}, "cut": {"start_ns": 1, "end_ns": 9}}


def with_column(name: str, values: list, type_=None):
    import pyarrow as pa

    def change(t):
        i = t.schema.get_field_index(name)
        return t.set_column(i, name, pa.array(values, type=type_))
    return change


MK = "metadata perflib.trace"
PARQUET: list[tuple[str, dict, str, str]] = [
    ("meta-not-json", {"meta": b"{not json"}, MK, "JSON text"),
    ("meta-not-utf8", {"meta": b"\xff\xfe"}, MK, "JSON text"),
    ("meta-list", {"meta": [1, 2]}, MK, "a JSON object"),
    ("meta-string", {"meta": "realtime"}, MK, "a JSON object"),
    ("clock-number", {"meta": {**GOOD_META, "clock": 5}}, f"{MK}, key clock", "one of"),
    ("clock-unknown-name", {"meta": {**GOOD_META, "clock": "martian"}}, f"{MK}, key clock", "one of"),
    ("source-empty", {"meta": {**GOOD_META, "source": ""}}, f"{MK}, key source", "a format id"),
    ("source-list", {"meta": {**GOOD_META, "source": ["x"]}}, f"{MK}, key source", "a format id"),
    ("meta-meta-list", {"meta": {**GOOD_META, "meta": [1]}}, f"{MK}, key meta", "an object"),
    ("cut-string", {"meta": {**GOOD_META, "cut": "yesterday"}}, f"{MK}, key cut", "null or"),
    ("cut-float", {"meta": {**GOOD_META, "cut": {"start_ns": 1.5, "end_ns": None}}}, f"{MK}, key cut", "integers"),
    ("start-null", {"change": with_column("start_ns", [1, 2, None, 4, 5, 6, 7, 8])}, "row 3, column start_ns",
     "an integer ns"),
    ("end-null", {"change": with_column("end_ns", [None] * 8, __import__("pyarrow").int64())}, "row 1, column end_ns",
     "an integer ns"),
    ("end-null-type", {"change": with_column("end_ns", [None] * 8)}, "column end_ns", "an integer column"),
    ("start-float", {"change": with_column("start_ns", [1.0] * 8)}, "column start_ns", "an integer column"),
    ("start-text", {"change": with_column("start_ns", ["1"] * 8)}, "column start_ns", "an integer column"),
    ("start-uint64-huge", {"change": with_column("start_ns", [2**63 + 1] * 8, __import__("pyarrow").uint64())},
     "row 1, column start_ns", "fits int64"),
    ("device-text", {"change": with_column("device", ["0"] * 8)}, "column device", "an integer column"),
    ("kind-unknown", {"change": with_column("kind", ["kernel"] * 7 + ["gpu"])}, "row 8, column kind", "kind kernel"),
    ("kernel-null", {"change": with_column("kernel", ["a"] * 3 + [None] * 5)}, "row 4, column kernel", "a name"),
    ("kernel-ints", {"change": with_column("kernel", list(range(8)))}, "column kernel", "a text column"),
    ("column-missing", {"change": lambda t: t.drop_columns(["end_ns"])}, "columns", "the dispatch columns"),
    ("column-twice", {"change": lambda t: t.append_column("start_ns", t.column("start_ns"))}, "",
     "a readable Parquet file"),  # pyarrow itself refuses a second start_ns
]


@pytest.mark.parametrize("case", [c[1:] for c in PARQUET], ids=[c[0] for c in PARQUET])
def test_parquet_odd_metadata_and_columns_are_input_errors(tmp_path: Path, case) -> None:
    spec, where, expected = case
    path = parquet_file(tmp_path, spec.get("meta"), spec.get("change"))
    expect_error(path, where, expected)


def test_parquet_null_ids_are_unknown_and_the_times_are_kept(tmp_path: Path) -> None:
    path = parquet_file(tmp_path, change=with_column("device", [None, 1] * 4))
    d = read_trace(path).dispatches
    assert d["device"].tolist() == [-1, 1] * 4
    assert d["start_ns"].tolist() == table(8)["start_ns"].tolist()


def test_parquet_null_start_no_longer_reads_as_a_huge_window(tmp_path: Path) -> None:
    """A null start_ns once read as -1: the dispatch then spanned from 1970, 1.7e12 ms of GPU busy."""
    path = parquet_file(tmp_path, change=with_column("start_ns", [None] + table(8)["start_ns"].tolist()[1:]))
    with pytest.raises(InputError, match=r"row 1, column start_ns: expected an integer ns timestamp, found null"):
        read_trace(path)


def test_a_parquet_that_is_not_perflibs_is_named(tmp_path: Path) -> None:
    import pandas as pd

    path = tmp_path / "other.parquet"
    pd.DataFrame({"start_ns": [1, 2]}).to_parquet(path)
    expect_error(path, "metadata", "a perflib trace")


# --- the canonical tables themselves --------------------------------------------------------------


@pytest.mark.parametrize(("start", "found"), [([1.0, float("nan")], "nan"), ([1.0, 2.5], "2.5"),
                                              ([1.0, float("inf")], "inf"), ([1, None], "None"),
                                              ([True, False], "True"), ([1.0, 1e19], "1e+19")])
def test_dispatch_frame_refuses_times_that_are_not_int64(start: list, found: str) -> None:
    with pytest.raises(InputError, match=r"row \d, column start_ns: expected an int64 integer \(ns\)") as info:
        schema.dispatch_frame({"kernel": ["a", "b"], "start_ns": start, "end_ns": [5, 6]}, "x", "made here")
    assert found in str(info.value)


def test_dispatch_frame_ids_that_are_not_integers_are_unknown() -> None:
    d = schema.dispatch_frame({"kernel": ["a"] * 4, "start_ns": [1, 2, 3, 4], "end_ns": [5, 6, 7, 8],
                               "device": [0.0, float("nan"), 1.5, 3.0], "stream": [1, None, "x", 2]}, "x", "made here")
    assert d["device"].tolist() == [0, -1, -1, 3] and d["stream"].tolist() == [1, -1, -1, 2]


# --- rocpd ----------------------------------------------------------------------------------------


def rocpd_file(tmp_path: Path, *sql: str) -> Path:
    """A rocpd database written by perflib, then changed by `sql` (`{S}` is the tables' UUID suffix)."""
    import sqlite3

    from perflib.traces.writers.common import GUID

    path = writers.write_rocpd(table(), tmp_path / "x_results.db")
    con = sqlite3.connect(path)
    try:
        for statement in sql:
            con.execute(statement.replace("{S}", GUID.replace("-", "_")))
        con.commit()
    finally:
        con.close()
    return path


AS_TABLE = ("CREATE TABLE k2 AS SELECT * FROM kernels", "DROP VIEW kernels", "ALTER TABLE k2 RENAME TO kernels")
"""The kernels view made a plain table (no NOT NULL, no type affinity), so that a cell can hold anything."""
KERNELS_ROW2 = "UPDATE kernels SET {col} = {value} WHERE rowid = 2"
ROCPD: list[tuple[str, tuple[str, ...], str, str]] = [
    ("metadata-other-columns", ("DROP VIEW rocpd_metadata", "CREATE TABLE rocpd_metadata (a, b)"),
     "table rocpd_metadata", "tag and value columns"),
    ("metadata-missing", ("DROP VIEW rocpd_metadata",), "sqlite_master", "rocpd views"),
    ("start-text", (*AS_TABLE, KERNELS_ROW2.format(col="start", value="'soon'")),
     "view kernels, row 2, column start", "an integer ns timestamp"),
    ("end-null", (*AS_TABLE, KERNELS_ROW2.format(col='"end"', value="NULL")), "view kernels, row 2, column end",
     "an integer ns timestamp"),
    ("end-real", (*AS_TABLE, KERNELS_ROW2.format(col='"end"', value="1000.5")), "view kernels, row 2, column end",
     "an integer ns timestamp"),
    ("view-on-a-dropped-table", ("DROP VIEW kernels", "CREATE VIEW kernels AS SELECT * FROM gone"), "table kernels",
     "columns can be read"),
    ("kernels-without-start", ("DROP VIEW kernels", "CREATE VIEW kernels AS SELECT 'k' AS name, 1 AS \"end\""),
     "view kernels", "a column start"),
]


@pytest.mark.parametrize(("sql", "where", "expected"), [c[1:] for c in ROCPD], ids=[c[0] for c in ROCPD])
def test_rocpd_odd_metadata_and_views_are_input_errors(tmp_path: Path, sql, where: str, expected: str) -> None:
    import sqlite3

    try:
        path = rocpd_file(tmp_path, *sql)
    except sqlite3.OperationalError as exc:  # this SQLite refuses to make the odd view at all
        pytest.skip(f"cannot build the case here: {exc}")
    expect_error(path, where, expected)


def test_rocpd_odd_metadata_rows_and_odd_id_cells_are_read(tmp_path: Path) -> None:
    """NULL tags are left out, numbers and blobs kept as values; ids holding text or NULL are -1, and a
    NULL kernel name is empty, not the text "None"."""
    path = rocpd_file(
        tmp_path,
        "DROP VIEW rocpd_metadata",
        "CREATE TABLE rocpd_metadata (tag, value)",
        "INSERT INTO rocpd_metadata VALUES ('schema_version', 3), (NULL, 'x'), ('blob', x'00ff'), ('n', NULL)",
        "UPDATE rocpd_info_kernel_symbol_{S} SET display_name = NULL WHERE id = 1",
        *AS_TABLE,
        KERNELS_ROW2.format(col="queue_id", value="'q7'"),
        KERNELS_ROW2.format(col="stream_id", value="NULL"),
    )
    trace = read_trace(path)
    assert trace.meta["schema_version"] == "3"
    assert trace.meta["rocpd_metadata"] == {"schema_version": 3, "blob": repr(b"\x00\xff"), "n": None}
    kernels = trace.dispatches[trace.dispatches["kind"] == "kernel"].reset_index(drop=True)
    assert kernels.loc[1, "queue"] == -1 and kernels.loc[1, "stream"] == -1 and kernels.loc[0, "queue"] == 1
    assert "None" not in set(kernels["kernel"]) and "" in set(kernels["kernel"])


# --- found by tests/fuzz/test_readers.py ----------------------------------------------------------


def test_stats_with_an_empty_count_names_the_line(tmp_path: Path) -> None:
    """An empty Calls cell was a pandas IntCastingNaNError (fuzz: csv cell edit on a stats file)."""
    from perflib.traces import read_stats

    path = tmp_path / "results.stats.csv"
    path.write_text('"Name","Calls","TotalDurationNs","AverageNs","Percentage"\n"k [clone .kd]",,10,5.0,100.0\n')
    with pytest.raises(InputError, match=r"line 2, column Calls: expected an integer \(a count or ns\), found an empty"):
        read_stats(path)
    path.write_text('"Name","Calls","TotalDurationNs","AverageNs","Percentage","MinNs","MaxNs","StdDev"\n'
                    '"k",2,,5.0,100.0,1,9,0.5\n')
    with pytest.raises(InputError, match="line 2, column TotalDurationNs"):
        read_stats(path)


def test_parquet_column_name_that_is_not_utf8_is_an_input_error(tmp_path: Path) -> None:
    """A flipped byte in a column name was a UnicodeDecodeError from pyarrow (fuzz: byte flip)."""
    path = parquet_file(tmp_path)
    raw = path.read_bytes()
    assert raw.count(b"correlation_id") >= 1
    path.write_bytes(raw.replace(b"correlation_id", b"correlati\xe5n_id"))
    expect_error(path, "", "a readable Parquet file")


def test_parquet_text_values_that_are_not_utf8_are_an_input_error(tmp_path: Path) -> None:
    """Kernel names whose bytes are not UTF-8 were a pyarrow ArrowException on conversion (fuzz: byte flip)."""
    import pyarrow.parquet as pq

    path = parquet_file(tmp_path)
    pq.write_table(pq.read_table(path), path, compression="none", use_dictionary=False)
    raw = path.read_bytes()
    assert b"rmsnorm" in raw
    path.write_bytes(raw.replace(b"rmsnorm", b"rms\xfform"))  # same length: the pages stay where they are
    expect_error(path, "column kernel", "values that can be read")


def test_cupti_numbers_beyond_int64_are_garbled_records_not_overflow(tmp_path: Path) -> None:
    """A record whose times run past int64 (digits of two numbers run together) was a numpy
    OverflowError; it is a garbled record now, skipped and counted, and an id past int64 is -1."""
    good = 'CONCURRENT_KERNEL [ 1000, 2000 ] duration 1000, "k_a", correlationId 1\n\tdeviceId 0, streamId 7\n'
    path = tmp_path / "server.log"
    path.write_text(good * 20 + 'CONCURRENT_KERNEL [ 99999999999999999999, 99999999999999999999 ] duration 0, "k"\n'
                    + 'CONCURRENT_KERNEL [ 3000, 4000 ] duration 1000, "k_b", correlationId 2\n'
                    + "\tdeviceId 0, streamId 99999999999999999999, contextId " + "7" * 5000 + "\n")
    trace = read_trace(path)
    assert len(trace.dispatches) == 21 and trace.meta["malformed_record_lines"] == 1
    assert trace.meta["malformed_record_line_numbers"] == [41]
    assert trace.dispatches["stream"].tolist() == [7] * 20 + [-1]


def test_csv_timestamp_beyond_int64_names_line_and_column(tmp_path: Path) -> None:
    """pyarrow refuses it; the located error once said only 'CSV that pyarrow can parse'."""
    path = writers.write_kernel_trace_csv(table(), tmp_path / "x_kernel_trace.csv", "D")
    lines = path.read_text().splitlines()
    cells = lines[2].split(",")
    header = [h.strip('"') for h in lines[0].split(",")]
    cells[header.index("Start_Timestamp")] = "99999999999999999999"
    lines[2] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    expect_error(path, "line 3, column Start_Timestamp", "fits int64")


def test_csv_agent_id_beyond_int64_is_unknown(tmp_path: Path) -> None:
    """`"Agent 99999999999999999999"` was an OverflowError (fuzz: csv cell edit on every kernel header)."""
    path = writers.write_kernel_trace_csv(table(), tmp_path / "x_kernel_trace.csv", "D")
    text = path.read_text()
    assert text.count('"Agent 2"') == 3 or text.count("Agent 2") == 3
    path.write_text(text.replace("Agent 2", "Agent 99999999999999999999", 1))
    d = read_trace(path).dispatches
    assert d["device"].tolist() == [-1, 2, 2]


def test_csv_header_ending_in_a_vertical_tab_names_line_1(tmp_path: Path) -> None:
    """A flipped bit turned the header's newline into \\v: Python's splitlines() ended the header there,
    pyarrow did not, and pyarrow's ArrowKeyError came through (fuzz: byte flip on a stats file)."""
    from perflib.traces import read_stats

    path = tmp_path / "results.stats.csv"
    path.write_bytes(b'"Name","Calls","TotalDurationNs","AverageNs","Percentage"\x0b"k [clone .kd]",2,10,5,100.0\n')
    with pytest.raises(InputError, match="line 1"):
        read_stats(path)


def test_sqlite_schema_bytes_that_are_not_utf8_are_an_input_error(tmp_path: Path) -> None:
    """A damaged schema whose object names are not UTF-8 made SQLite's error message undecodable: a
    UnicodeDecodeError came out of sqlite3 (fuzz: byte flip on the real nsys export)."""
    path = writers.write_rocpd(table(), tmp_path / "x_results.db")
    raw = path.read_bytes()
    path.write_bytes(raw.replace(b"CREATE VIEW kernels AS", b"CREATE VIEW kernels \xc5\x28")
                     .replace(b"kernels", b"k\xc5\x28nels"))
    expect_error(path, "", "a readable SQLite database")


def test_csv_header_with_a_stray_carriage_return_names_line_1(tmp_path: Path) -> None:
    """A \\r inside the header line was a csv.Error (fuzz: byte insert and cell edit on stats files)."""
    from perflib.traces import read_stats

    path = tmp_path / "results.stats.csv"
    path.write_bytes(b'\r"Name","Calls","TotalDurationNs","AverageNs","Percentage"\n"k",2,10,5,100.0\n')
    with pytest.raises(InputError, match="line 1: expected a CSV header line"):
        read_stats(path)


def test_kineto_warp_size_of_an_odd_type_tells_nothing(tmp_path: Path) -> None:
    """`"warpSize": [64]` was a TypeError (unhashable) while telling the build (fuzz: JSON value wrap)."""
    path = writers.write_kineto_json(table(), tmp_path / "k.json")
    doc = json.loads(path.read_text())
    doc["deviceProperties"] = [{"name": "", "warpSize": [64]}]
    path.write_text(json.dumps(doc))
    assert read_trace(path).meta["build"] == "unknown"
