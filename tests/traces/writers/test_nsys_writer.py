"""`write_nsys_sqlite`: an `nsys export --type sqlite` database of each supported generation, read back
by the nsys reader to the same table; the 2022 tables checked column by column against the real export
in the public fixtures (hpcgroup/pipit, Nsight Systems 2022.2, export schema 2.9.1)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support import fixture
from synthetic import decode_trace, dispatch_frame

from perflib.traces import detect_format, read_trace, schema
from perflib.traces.writers import nsys
from perflib.traces.writers.nsys import write_nsys_sqlite

PIPIT = ("external", "nsys", "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite")
SECOND = 1_000_000_000
COPY_NAMES = {version: {"Memcpy HtoD": "Memcpy Host-to-Device", "Memcpy DtoH": "Memcpy Device-to-Host"}
              for version in ("2022", "2024")}
"""How the reader names the fixture's copies: by the export's copy-kind labels, or, in a 2022 export,
which has no `ENUM_CUDA_MEMCPY_OPER`, by CUPTI's copy kinds, which give the same labels."""


def _query(path: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(path)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _tables(path: Path) -> set[str]:
    return {r[0] for r in _query(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}


@pytest.mark.parametrize("version", ["2022", "2024"])
def test_round_trip_is_exact(tmp_path: Path, cuda_dispatches: pd.DataFrame, same_rows, version: str) -> None:
    path = write_nsys_sqlite(cuda_dispatches, tmp_path / "report.sqlite", version=version)
    assert detect_format(path) == "nsys-sqlite"
    trace = read_trace(path)
    assert trace.source == "nsys-sqlite" and trace.clock == "realtime"
    want = cuda_dispatches.assign(kernel=cuda_dispatches["kernel"].replace(COPY_NAMES[version]))
    same_rows(trace.dispatches, want)
    assert trace.dispatches["kind"].value_counts().to_dict() == want["kind"].value_counts().to_dict()
    assert trace.meta["kernel_name_column"] == "demangledName"
    first = int(cuda_dispatches["start_ns"].min()) - 3_000  # the first kernel's launch call
    assert trace.meta["session_start_utc_epoch_ns"] == first - first % SECOND


def test_times_in_the_file_are_session_relative(tmp_path: Path, cuda_dispatches: pd.DataFrame) -> None:
    path = write_nsys_sqlite(cuda_dispatches, tmp_path / "report.sqlite")
    ((epoch, utc),) = _query(path, "SELECT utcEpochNs, utcTime FROM TARGET_INFO_SESSION_START_TIME")
    assert epoch % SECOND == 0 and utc == "2025-11-29T09:53:20"
    ((lo, hi),) = _query(path, "SELECT MIN(start), MAX(end) FROM (SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL "
                               "UNION ALL SELECT start, end FROM CUPTI_ACTIVITY_KIND_RUNTIME)")
    assert 0 <= lo < SECOND  # the first launch call starts within the session's first second
    assert hi == int(cuda_dispatches["end_ns"].max()) - epoch


def test_schema_version_of_the_2024_export(tmp_path: Path, cuda_dispatches: pd.DataFrame) -> None:
    trace = read_trace(write_nsys_sqlite(cuda_dispatches, tmp_path / "r.sqlite", version="2024"))
    assert trace.meta["export_schema_version"] == "3.16.1"


def test_schema_version_of_the_2022_export(tmp_path: Path, cuda_dispatches: pd.DataFrame) -> None:
    trace = read_trace(write_nsys_sqlite(cuda_dispatches, tmp_path / "r.sqlite", version="2022"))
    assert trace.meta["export_schema_version"] == "2.9.1"


def test_the_2022_tables_are_those_of_the_real_2022_export(tmp_path: Path, cuda_dispatches: pd.DataFrame) -> None:
    """Every table written: the same columns in the same order, types, NOT NULL, keys and REFERENCES as
    in the fixture. Its MEMCPY and RUNTIME tables also have a `name TEXT` that pipit added later with
    ALTER TABLE (the statement shows it: `, name TEXT)` after the closing comment); nsys has no such column."""
    marks = pd.DataFrame({"name": ["step"], "start_ns": [cuda_dispatches["start_ns"].iloc[0]],
                          "end_ns": [cuda_dispatches["end_ns"].iloc[5]]})
    path = write_nsys_sqlite(cuda_dispatches, tmp_path / "r.sqlite", version="2022", markers=marks)
    real = sqlite3.connect(f"file:{fixture(*PIPIT)}?mode=ro", uri=True)
    mine = sqlite3.connect(path)
    try:
        written = _tables(path)
        assert written <= {r[0] for r in real.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table in sorted(written):
            theirs = real.execute(f"PRAGMA table_info({table})").fetchall()
            sql = real.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
            if sql.endswith("\n, name TEXT)"):
                assert theirs[-1][1:3] == ("name", "TEXT")
                theirs = theirs[:-1]
            assert mine.execute(f"PRAGMA table_info({table})").fetchall() == theirs, table
            assert (mine.execute(f"PRAGMA foreign_key_list({table})").fetchall()
                    == real.execute(f"PRAGMA foreign_key_list({table})").fetchall()), table
    finally:
        real.close()
        mine.close()


def test_the_2022_fixture_reads_as_the_writers_2022_file_does(cuda_dispatches: pd.DataFrame) -> None:
    """The same reader paths: kernels named by demangledName, copies by CUPTI's copy kind."""
    trace = read_trace(fixture(*PIPIT))
    assert trace.meta["kernel_name_column"] == "demangledName"
    assert set(trace.dispatches.loc[trace.dispatches["kind"] == "memcpy", "kernel"]) == {
        "Memcpy Host-to-Device", "Memcpy Device-to-Host"}


def test_the_2024_tables(tmp_path: Path, cuda_dispatches: pd.DataFrame) -> None:
    path = write_nsys_sqlite(cuda_dispatches, tmp_path / "r.sqlite", version="2024",
                             markers=pd.DataFrame({"name": ["m"], "start_ns": [cuda_dispatches["start_ns"][0]],
                                                   "end_ns": [cuda_dispatches["start_ns"][0]]}))
    tables = _tables(path)
    assert "META_DATA_EXPORT" in tables and "EXPORT_META_DATA" not in tables
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        cols = [r[1] for r in _query(path, f"PRAGMA table_info({table})")]
        assert cols[3:6] == ["contextId", "greenContextId", "streamId"], table
    assert [r[1] for r in _query(path, "PRAGMA table_info(NVTX_EVENTS)")][-1] == "binaryData"
    assert not any(_query(path, f"PRAGMA foreign_key_list({t})") for t in tables)
    assert _query(path, "SELECT COUNT(*) FROM ENUM_CUDA_MEMCPY_OPER") == [(14,)]
    assert _query(path, "SELECT name, label FROM ENUM_CUDA_MEMCPY_OPER WHERE id = 2") == [
        ("CUDA_MEMCPY_KIND_DTOH", "Device-to-Host")]
    assert _query(path, "SELECT label FROM ENUM_CUDA_MEM_KIND WHERE id = 2") == [("Device",)]
    assert _query(path, "SELECT id FROM ENUM_NSYS_EVENT_TYPE ORDER BY id") == [(34,), (59,), (60,)]


def test_copies_carry_their_kind_and_memory_ends(tmp_path: Path, cuda_dispatches: pd.DataFrame) -> None:
    path = write_nsys_sqlite(cuda_dispatches, tmp_path / "r.sqlite")
    rows = set(_query(path, "SELECT copyKind, srcKind, dstKind FROM CUPTI_ACTIVITY_KIND_MEMCPY"))
    assert rows == {(1, 0, 2), (2, 2, 0)}  # HtoD pageable -> device, DtoH device -> pageable


def test_each_kernel_has_its_launch_call(tmp_path: Path, cuda_dispatches: pd.DataFrame) -> None:
    trace = read_trace(write_nsys_sqlite(cuda_dispatches, tmp_path / "r.sqlite"))
    kernels = cuda_dispatches[cuda_dispatches["kind"] == "kernel"]
    assert len(trace.api) == len(kernels) and set(trace.api["name"]) == {"cudaLaunchKernel_v7000"}
    assert (set(trace.api["pid"]), set(trace.api["tid"])) == ({nsys.PROCESS_ID}, {nsys.THREAD_ID})
    launched = kernels.merge(trace.api, on="correlation_id", suffixes=("", "_api"))
    assert len(launched) == len(kernels) and (launched["end_ns_api"] <= launched["start_ns"]).all()
    assert "CUPTI_ACTIVITY_KIND_RUNTIME" not in _tables(
        write_nsys_sqlite(cuda_dispatches, tmp_path / "bare.sqlite", runtime=False))


@pytest.mark.parametrize("version", ["2022", "2024"])
def test_markers_round_trip(tmp_path: Path, cuda_dispatches: pd.DataFrame, version: str) -> None:
    t0 = int(cuda_dispatches["start_ns"].iloc[0])
    marks = pd.DataFrame({"name": ["decode step", "token out", "other thread"],
                          "start_ns": [t0, t0 + 5_000, t0 + 6_000], "end_ns": [t0 + 90_000, t0 + 5_000, t0 + 7_000],
                          "pid": [-1, -1, 77], "tid": [-1, -1, 78]})
    path = write_nsys_sqlite(cuda_dispatches, tmp_path / "r.sqlite", version=version, markers=marks)
    got = read_trace(path).markers
    assert got["name"].tolist() == marks["name"].tolist()
    assert got["start_ns"].tolist() == marks["start_ns"].tolist()
    assert got["end_ns"].tolist() == marks["end_ns"].tolist()
    assert got["pid"].tolist() == [nsys.PROCESS_ID, nsys.PROCESS_ID, 77]
    assert got["tid"].tolist() == [nsys.THREAD_ID, nsys.THREAD_ID, 78]
    assert _query(path, "SELECT eventType, end IS NULL FROM NVTX_EVENTS ORDER BY start") == [
        (59, 0), (34, 1), (59, 0)]


@pytest.mark.parametrize("version", ["2022", "2024"])
@pytest.mark.parametrize(("name", "short"), [
    ('void gemm<"tn", 128>(float const*, int) — 1.5 µs ✓ 名前', "gemm"),
    ('gemm "tn", 128x128', 'gemm "tn", 128x128'),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >(int, float)",
     "vectorized_elementwise_kernel"),
])
def test_awkward_names_survive(tmp_path: Path, version: str, name: str, short: str) -> None:
    df = schema.dispatch_frame({"kernel": [name, "saxpy(double *, double *, double *, double, int)"],
                                "start_ns": [1_000, 5_000], "end_ns": [2_000, 6_000], "correlation_id": [1, 2]},
                               "synthetic", "x")
    path = write_nsys_sqlite(df, tmp_path / "r.sqlite", version=version)
    assert read_trace(path).dispatches["kernel"].tolist() == df["kernel"].tolist()
    shorts = _query(path, "SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
                          "ORDER BY k.start")
    assert shorts == [(short,), ("saxpy",)]  # as the 2022 export names its saxpy


def test_times_on_another_clock_are_kept_with_the_session_start_unknown(tmp_path: Path) -> None:
    """`synthetic.decode_trace` starts at 1 s on no particular clock, with every id -1: it is written as it
    is, and read back the same, clock unknown; no launch call is made up for a kernel without a
    correlation id."""
    df, _ = decode_trace(3, layers=2)
    path = write_nsys_sqlite(df, tmp_path / "r.sqlite")
    assert _query(path, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME") == [(None,)]
    trace = read_trace(path)
    assert trace.clock == "unknown" and not trace.meta["shifted_by_session_start"]
    assert trace.dispatches["start_ns"].tolist() == df["start_ns"].tolist()
    assert trace.dispatches["kernel"].tolist() == df["kernel"].tolist()
    for col in ("device", "stream", "correlation_id"):
        assert set(trace.dispatches[col]) == {-1}, col
    assert "CUPTI_ACTIVITY_KIND_RUNTIME" not in _tables(path) and len(trace.api) == 0


def test_a_given_session_start(tmp_path: Path) -> None:
    """A Unix-ns session start (the reader shifts only by a start after 2000): written as
    session-relative times, read back as the absolute ones."""
    epoch = 1_764_000_000_000_000_000  # 2025-11-24
    df = dispatch_frame([("k(int)", epoch + 1_000_000_000, epoch + 1_000_001_000)])
    path = write_nsys_sqlite(df, tmp_path / "r.sqlite", session_start_ns=epoch, runtime=False)
    assert _query(path, "SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL") == [(1_000_000_000,)]
    trace = read_trace(path)
    assert trace.dispatches["start_ns"].tolist() == [epoch + 1_000_000_000] and trace.clock == "realtime"
    with pytest.raises(ValueError, match="after the first time"):
        write_nsys_sqlite(df, tmp_path / "late.sqlite", session_start_ns=epoch + 2_000_000_000)


def test_tables_are_written_lazily(tmp_path: Path) -> None:
    path = write_nsys_sqlite(dispatch_frame([("k(int)", 10, 20)]), tmp_path / "r.sqlite", version="2022")
    tables = _tables(path)
    assert "CUPTI_ACTIVITY_KIND_KERNEL" in tables
    assert not tables & {"CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "NVTX_EVENTS"}
    assert dict(_query(path, "SELECT name, value FROM EXPORT_META_DATA"))["EXPORT_LAZY"] == "true"


@pytest.mark.parametrize("version", ["2022", "2024"])
def test_empty_table(tmp_path: Path, version: str) -> None:
    """No dispatches: an export with no activity tables at all, as a lazy export of a capture that saw
    no GPU work is; the reader reads it as an empty trace on an unknown clock."""
    path = write_nsys_sqlite(schema.empty_dispatches("synthetic"), tmp_path / "r.sqlite", version=version)
    assert not any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in _tables(path))
    assert detect_format(path) == "nsys-sqlite"
    trace = read_trace(path)
    assert len(trace.dispatches) == 0 and len(trace.api) == 0 and len(trace.markers) == 0
    assert trace.clock == "unknown" and trace.meta["session_start_utc_epoch_ns"] is None
    assert list(trace.dispatches.columns) == list(schema.DISPATCH_COLUMNS)


def test_an_unknown_version_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="2022"):
        write_nsys_sqlite(dispatch_frame([("k", 1, 2)]), tmp_path / "r.sqlite", version="2019")


def test_writing_over_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    write_nsys_sqlite(dispatch_frame([("a(int)", 1, 2), ("b(int)", 3, 4)]), path)
    write_nsys_sqlite(dispatch_frame([("c(int)", 5, 6)]), path)
    assert read_trace(path).dispatches["kernel"].tolist() == ["c(int)"]


def test_a_large_table(tmp_path: Path) -> None:
    n = 200_000
    start = 1_764_410_000_000_000_000 + np.arange(n, dtype=np.int64) * 5_000
    df = schema.dispatch_frame({"kernel": np.where(np.arange(n) % 3 == 0, "a(int)", "b(float)"), "start_ns": start,
                                "end_ns": start + 2_000, "device": 0, "stream": 7,
                                "correlation_id": np.arange(n)}, "synthetic", "x")
    path = write_nsys_sqlite(df, tmp_path / "big.sqlite")
    assert _query(path, "SELECT COUNT(*), COUNT(DISTINCT gridId) FROM CUPTI_ACTIVITY_KIND_KERNEL") == [(n, n)]
    assert _query(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME") == [(n,)]
    # each string once: 2 names, their 2 short names, the launch call, the thread's name
    assert _query(path, "SELECT COUNT(*) FROM StringIds") == [(6,)]
