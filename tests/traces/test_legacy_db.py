"""Formats a user hands perflib (issue 27, item 8): legacy rocprof's `results.db` is read, and an Nsight
Systems report gets the command that makes what perflib reads.

`results.csv` is rocprof's kernel table dumped (`tblextr.py`, `sqlitedb.dump_csv`), so the real
`results.csv` of ../shared/fixtures/external/rocprof-legacy loaded back into a `KERN` table the way
`sqlitedb.add_table` creates it and `tblextr.fill_kernel_db` fills it is that run's `results.db`: it must
read as the CSV reads, row for row, in every mode.
"""

from __future__ import annotations

import csv
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from support import fixture

from perflib.errors import InputError
from perflib.traces import FORMATS, ReadMode, detect_format, read_trace, schema

LEGACY_CSV = ("external", "rocprof-legacy", "hpctraining_finite-difference_results.csv")
COMPARED = ["kernel", "start_ns", "end_ns", "device", "queue", "kind"]


def results_db_of_csv(csv_path: Path, db: Path, table: str = "KERN") -> Path:
    """The `results.db` whose dump is `csv_path`: every column INTEGER but KernelName TEXT, values inserted
    as text as tblextr.py inserts them (SQLite's INTEGER affinity makes the numbers integers), the name
    inside double quotes as tblextr.py stores it, then DurationNs added as dform.post_process_data does."""
    with open(csv_path, newline="") as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], rows[1:]
    fields = [c for c in header if c != "DurationNs"]
    con = sqlite3.connect(db)
    types = ", ".join(f'"{c}" ' + ("TEXT" if c == "KernelName" else "INTEGER") for c in fields)
    con.execute(f"CREATE TABLE {table} ({types})")
    keep = [header.index(c) for c in fields]
    values = [[f'"{r[i]}"' if header[i] == "KernelName" else r[i] for i in keep] for r in body]
    quoted = ",".join(f'"{c}"' for c in fields)
    con.executemany(f"INSERT INTO {table}({quoted}) VALUES({','.join('?' * len(fields))});", values)
    con.execute(f'ALTER TABLE {table} ADD COLUMN "DurationNs" INTEGER')
    con.execute(f"UPDATE {table} SET DurationNs = (EndNs - BeginNs);")
    con.commit()
    con.close()
    return db


def _plain(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    out = frame[columns].assign(**{c: frame[c].astype(str) for c in ("kernel", "kind") if c in columns})
    keys = [c for c in ("start_ns", "end_ns", "device", "queue", "kernel") if c in columns]
    return out.sort_values(keys, ignore_index=True, kind="stable")


@pytest.mark.parametrize("table", ["KERN", "A"])
def test_the_real_results_db_reads_as_its_results_csv_in_every_mode(tmp_path, table):
    legacy_csv = fixture(*LEGACY_CSV)
    db = results_db_of_csv(legacy_csv, tmp_path / "results.db", table)
    assert detect_format(db) == "rocprof-legacy-db"
    from_csv = read_trace(legacy_csv)
    full = read_trace(db)
    assert full.source == "rocprof-legacy-db" and full.meta["table"] == table and len(full.dispatches) == 1004
    pd.testing.assert_frame_equal(_plain(full.dispatches, COMPARED), _plain(from_csv.dispatches, COMPARED))
    assert not full.dispatches["kernel"].str.contains(r'"|\.kd$|\[clone', regex=True).any()
    assert list(full.dispatches.columns) == list(schema.DISPATCH_COLUMNS)
    lean = read_trace(db, ReadMode.LEAN)
    with_ids = read_trace(db, ReadMode.LEAN_IDS)
    for got, columns in ((lean, schema.LEAN_DISPATCH_COLUMNS), (with_ids, schema.DISPATCH_COLUMNS)):
        assert list(got.dispatches.columns) == list(columns)
        pd.testing.assert_frame_equal(_plain(got.dispatches, list(columns)), _plain(full.dispatches, list(columns)))
        assert isinstance(got.dispatches["kernel"].dtype, pd.CategoricalDtype)
    assert full.clock == from_csv.clock and full.meta["clock_candidates"] == from_csv.meta["clock_candidates"]


@pytest.mark.parametrize("table", ["KERN", "A"])
def test_the_writer_makes_the_table_tblextr_makes(tmp_path, table):
    """Column order and types of the written table are those of the real one built from results.csv."""
    from perflib.traces.writers.rocprof_legacy_db import COLUMNS, write_results_db

    legacy_csv = fixture(*LEGACY_CSV)
    real = results_db_of_csv(legacy_csv, tmp_path / "real.db")
    trace = read_trace(legacy_csv)
    written = write_results_db(trace.dispatches, tmp_path / "written.db", table)

    def layout(db: Path, name: str) -> tuple[list, list]:
        con = sqlite3.connect(db)
        info = [(r[1], r[2]) for r in con.execute(f"PRAGMA table_info({name})")]
        stored = con.execute(f'SELECT typeof("KernelName"), substr("KernelName", 1, 1), typeof("sig"), '
                             f'typeof("BeginNs"), "DurationNs" = "EndNs" - "BeginNs" FROM {name} LIMIT 1').fetchone()
        con.close()
        return info, list(stored)

    info, stored = layout(written, table)
    real_info, real_stored = layout(real, "KERN")
    assert stored == real_stored == ["text", '"', "text", "integer", 1]
    if table == "KERN":
        assert info == real_info
    assert [c for c, _ in info] == [*COLUMNS[table], "DurationNs"]
    again = read_trace(written)
    pd.testing.assert_frame_equal(_plain(again.dispatches, COMPARED), _plain(trace.dispatches, COMPARED))


def test_a_results_db_without_the_times_names_its_table_and_columns(tmp_path):
    db = tmp_path / "results.db"
    con = sqlite3.connect(db)
    con.execute('CREATE TABLE KERN ("Index" INTEGER, "KernelName" TEXT, "gpu-id" INTEGER)')
    con.commit()
    con.close()
    with pytest.raises(InputError, match=r"results\.db:table KERN: expected the columns of results\.csv "
                                         r"\(KernelName, BeginNs, EndNs, \.\.\.\), found columns Index, KernelName, gpu-id"):
        read_trace(db)


def test_a_begin_that_is_no_integer_names_its_row(tmp_path):
    from perflib.traces.writers.rocprof_legacy_db import write_results_db

    table = schema.dispatch_frame({"kernel": ["a", "b", "c"], "start_ns": [10, 20, 30], "end_ns": [15, 25, 35],
                                   "kind": "kernel"}, "synthetic", "t")
    db = write_results_db(table, tmp_path / "results.db")
    con = sqlite3.connect(db)
    con.execute("UPDATE KERN SET BeginNs = 'soon' WHERE \"Index\" = 1")
    con.commit()
    con.close()
    for mode in ReadMode:
        with pytest.raises(InputError, match=r"table KERN, row 2, column BeginNs: expected an integer ns timestamp, "
                                             r"found 'soon'"):
            read_trace(db, mode)


@pytest.mark.parametrize("suffix", [".nsys-rep", ".qdrep"])
def test_an_nsight_systems_report_gets_the_export_command(tmp_path, suffix):
    report = tmp_path / f"decode run{suffix}"
    report.write_bytes(b"\x00\x01not a format perflib reads\xff" * 8)
    with pytest.raises(InputError) as err:
        read_trace(report)
    said = str(err.value)
    assert said.startswith(f"{report}: expected an Nsight Systems SQLite export")
    assert f"`nsys export --type sqlite --output '{tmp_path}/decode run.sqlite' '{report}'`" in said
    assert f"found an Nsight Systems report ({suffix})" in said


def test_an_export_named_like_a_report_is_still_read(tmp_path):
    """The SQLite magic decides before the name: an export saved as `.nsys-rep` is read, not refused."""
    export = fixture("external", "nsys", "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite")
    renamed = tmp_path / "saxpy.nsys-rep"
    shutil.copy(export, renamed)
    assert detect_format(renamed) == "nsys-sqlite"
    assert len(read_trace(renamed).dispatches) == len(read_trace(export).dispatches)


def test_the_registry_entry_is_after_the_other_sqlite_formats():
    """rocpd and nsys exports are told by their own tables first; a legacy kernel table is the last SQLite."""
    names = list(FORMATS)
    assert names.index("rocpd") < names.index("rocprof-legacy-db") and names.index("nsys-sqlite") < names.index(
        "rocprof-legacy-db")


HIP_TRACE = ("rocprofv3", "rocm6.2-docs", "hip_runtime_trace.csv")
"""Real HIP runtime API records (ROCm 6.2 docs): what `rocprof --hip-trace` records, as legacy rocprof's
`HIP` table holds them."""


def _calls(api: pd.DataFrame) -> pd.DataFrame:
    cols = ["name", "start_ns", "end_ns", "pid", "tid", "correlation_id"]
    return api[cols].assign(name=api["name"].astype(str)).sort_values(["start_ns", "correlation_id"],
                                                                     ignore_index=True, kind="stable")


@pytest.mark.parametrize("table", ["KERN", "A"])
def test_the_hip_table_reads_into_the_api_table_in_every_mode(tmp_path, table):
    from perflib.traces.writers.rocprof_legacy_db import write_results_db

    hip = read_trace(fixture(*HIP_TRACE)).api
    kernels = read_trace(fixture(*LEGACY_CSV)).dispatches
    db = write_results_db(kernels, tmp_path / "results.db", table, api=hip)
    for mode in ReadMode:
        got = read_trace(db, mode)
        assert len(got.dispatches) == len(kernels) and len(got.api) == len(hip) > 0
        pd.testing.assert_frame_equal(_calls(got.api), _calls(hip))
        assert set(got.api["domain"].astype(str)) == {"HIP_API"} and set(got.api["source"].astype(str)) == {
            "rocprof-legacy-db"}
        assert list(got.api.columns) == list(schema.API_COLUMNS) and "HIP" in got.meta["tables"]
    assert not len(read_trace(write_results_db(kernels, tmp_path / "plain.db", table)).api)


def test_the_writers_hip_table_is_the_one_tblextr_makes(tmp_path):
    """`tblextr.api_table_descr`'s columns and types, values stored as its regex groups make them
    (integers through INTEGER affinity), then `DurationNs` added and computed."""
    from perflib.traces.writers.rocprof_legacy_db import write_results_db

    hip = read_trace(fixture(*HIP_TRACE)).api
    db = write_results_db(read_trace(fixture(*LEGACY_CSV)).dispatches, tmp_path / "results.db", api=hip)
    con = sqlite3.connect(db)
    info = [(r[1], r[2]) for r in con.execute("PRAGMA table_info(HIP)")]
    stored = con.execute('SELECT typeof("BeginNs"), typeof("pid"), typeof("Name"), typeof("Index"), '
                         '"DurationNs" = "EndNs" - "BeginNs", "__section" FROM HIP LIMIT 1').fetchone()
    con.close()
    assert info == [("BeginNs", "INTEGER"), ("EndNs", "INTEGER"), ("pid", "INTEGER"), ("tid", "INTEGER"),
                    ("Name", "TEXT"), ("args", "TEXT"), ("Index", "INTEGER"), ("Data", "TEXT"),
                    ("__section", "INTEGER"), ("__lane", "INTEGER"), ("DurationNs", "INTEGER")]
    assert list(stored) == ["integer", "integer", "text", "integer", 1, 2]


def test_its_hip_calls_split_the_host_gaps(tmp_path):
    """A `hipLaunchKernel` before each of the real run's kernels: the host gaps of its window are split,
    the launching thread found by its launch calls (the kernel table carries no correlation id)."""
    from perflib.attribution import host_gaps
    from perflib.traces.writers.rocprof_legacy_db import write_results_db

    kernels = read_trace(fixture(*LEGACY_CSV)).dispatches
    starts = kernels["start_ns"].to_numpy()
    launches = schema.api_frame({"name": ["hipLaunchKernel"] * len(starts), "start_ns": starts - 30_000,
                                 "end_ns": starts - 25_000, "pid": 2046349, "tid": 2046349,
                                 "correlation_id": range(1, len(starts) + 1), "domain": "HIP_API"}, "t", "t")
    split = host_gaps(read_trace(write_results_db(kernels, tmp_path / "results.db", api=launches), ReadMode.LEAN))
    assert split.measured and split.threads_by == "launch calls in the window" and split.threads == 1
    assert split.calls["launch"] == len(starts) - 1 and split.launch_ns > 0  # the first is before the window
    assert split.sync_ns + split.launch_ns + split.other_api_ns + split.host_compute_ns == split.gap_ns
