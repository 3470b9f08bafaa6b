"""The lean read of legacy rocprof `results.csv` and of perflib's own Parquet cuts gives every figure of
the full read to the ns, and the same errors for the columns it reads."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from perflib.errors import InputError
from perflib.traces import ReadMode, read_trace
from perflib.traces.parquet import write_trace_parquet
from perflib.traces.schema import LEAN_DISPATCH_COLUMNS
from tests.support import fixture_paths
from tests.synthetic import decode_trace
from tests.traces.test_lean import _mixed, assert_same_summary

LEGACY = fixture_paths("external/rocprof-legacy/*_results.csv")


def _legacy_csv(path: Path, frame: pd.DataFrame) -> Path:
    """A legacy rocprof results.csv of `frame`'s kernels, names ending in both `.kd` forms and none."""
    suffixes = [".kd", " [clone .kd]", ""]
    names = [f'"{k}{suffixes[i % 3]}"' for i, k in enumerate(frame["kernel"].astype(str))]
    lines = ["Index,KernelName,gpu-id,queue-id,queue-index,pid,tid,grd,wgr,lds,scr,arch_vgpr,accum_vgpr,sgpr,"
             "wave_size,sig,obj,DispatchNs,BeginNs,EndNs,CompleteNs"]
    for i, (name, s, e) in enumerate(zip(names, frame["start_ns"], frame["end_ns"], strict=True)):
        lines.append(f"{i},{name},{i % 2},{i % 3},{i},1,1,256,256,0,0,8,0,16,64,0x0,0x0,{s - 10},{s},{e},{e + 5}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("path", LEGACY, ids=lambda p: p.name)
def test_real_legacy_results_same_summary(path: Path) -> None:
    assert_same_summary(path)
    assert read_trace(path, ReadMode.LEAN).meta.get("lean") is True


def test_generated_legacy_results_same_summary_and_suffixes_merge(tmp_path: Path) -> None:
    frame, _ = decode_trace(steps=6, layers=3, seed=5)
    path = _legacy_csv(tmp_path / "results.csv", frame)
    assert_same_summary(path)
    lean = read_trace(path, ReadMode.LEAN).dispatches
    assert tuple(lean.columns) == LEAN_DISPATCH_COLUMNS
    names = list(lean["kernel"].cat.categories)
    assert not any(n.endswith(".kd") for n in names) and len(names) == len(set(names))
    assert len(names) == frame["kernel"].nunique()  # `x.kd`, `x [clone .kd]` and `x` share one code
    gz = tmp_path / "gz" / "results.csv.gz"
    gz.parent.mkdir()
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert_same_summary(gz)
    assert_same_summary(tmp_path / "gz")  # a folder holding only a legacy results.csv


def test_lean_legacy_names_the_line_of_a_missing_time(tmp_path: Path) -> None:
    frame, _ = decode_trace(steps=2, layers=2, seed=6)
    path = _legacy_csv(tmp_path / "results.csv", frame)
    lines = path.read_text().splitlines()
    fields = lines[3].split(",")
    fields[-3] = ""  # BeginNs of the third dispatch
    lines[3] = ",".join(fields)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as lean:
        read_trace(path, ReadMode.LEAN)
    with pytest.raises(InputError) as full:
        read_trace(path)
    assert str(lean.value) == str(full.value) and "line 4" in str(lean.value)


def _cut(tmp_path: Path) -> Path:
    frame = _mixed(7)
    trace = read_trace(write_trace_parquet(_as_trace(frame), tmp_path / "whole.parquet"))
    lo, hi = int(frame["start_ns"].iloc[20]), int(frame["end_ns"].iloc[-30])
    return write_trace_parquet(trace, tmp_path / "cut.parquet", lo, hi)


def _as_trace(frame: pd.DataFrame):
    from perflib.traces import schema
    from perflib.traces.trace import Trace

    data = {c: frame[c] for c in ("kernel", "start_ns", "end_ns", "correlation_id")}
    data["kind"] = frame["kind"].astype(str).to_numpy()
    data["device"] = np.zeros(len(frame), dtype=np.int64)
    dispatches = schema.dispatch_frame(data, "rocprofv3-csv", "t")
    return Trace(dispatches, schema.empty_api("rocprofv3-csv"), schema.empty_markers("rocprofv3-csv"),
                 "boottime", "rocprofv3-csv", "t", {"note": "generated"})


def test_parquet_cut_same_summary_and_metadata(tmp_path: Path) -> None:
    path = _cut(tmp_path)
    assert_same_summary(path)
    full, lean = read_trace(path), read_trace(path, ReadMode.LEAN)
    assert lean.meta == full.meta and lean.source == full.source == "rocprofv3-csv"
    assert tuple(lean.dispatches.columns) == LEAN_DISPATCH_COLUMNS
    assert set(lean.dispatches["kind"].astype(str)) == {"kernel", "memcpy", "memset"}
    assert (lean.dispatches["correlation_id"].to_numpy() == full.dispatches["correlation_id"].to_numpy()).all()


def test_parquet_with_plain_text_names_same_summary(tmp_path: Path) -> None:
    """A Parquet file whose names are not dictionary-encoded (another writer) reads the same."""
    path = _cut(tmp_path)
    table = pq.read_table(path)
    plain = table.set_column(0, "kernel", table.column("kernel").cast(pa.string()))
    out = tmp_path / "plain.parquet"
    pq.write_table(plain, out, use_dictionary=False)
    assert not pa.types.is_dictionary(pq.read_schema(out).field("kernel").type)
    assert_same_summary(out)


@pytest.mark.parametrize("column, value, where", [
    ("kernel", None, "row 3, column kernel"),
    ("start_ns", None, "row 3, column start_ns"),
    ("kind", "copy", "row 3, column kind"),
])
def test_lean_parquet_errors_are_the_full_reads(tmp_path: Path, column: str, value: object, where: str) -> None:
    table = pq.read_table(_cut(tmp_path))
    values = table.column(column).to_pylist()
    values[2] = value
    i = table.column_names.index(column)
    kind = pa.string() if column in ("kernel", "kind") else pa.int64()
    out = tmp_path / "bad.parquet"
    pq.write_table(table.set_column(i, column, pa.array(values, type=kind)), out)
    with pytest.raises(InputError) as lean:
        read_trace(out, ReadMode.LEAN)
    with pytest.raises(InputError) as full:
        read_trace(out)
    assert where in str(lean.value) and where in str(full.value) and str(out) in str(lean.value)


def test_lean_parquet_names_a_missing_column(tmp_path: Path) -> None:
    table = pq.read_table(_cut(tmp_path))
    out = tmp_path / "no_end.parquet"
    pq.write_table(table.drop(["end_ns"]), out)
    with pytest.raises(InputError, match="missing \\['end_ns'\\]"):
        read_trace(out, ReadMode.LEAN)
