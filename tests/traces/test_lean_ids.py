"""The lean read with its ids (`read_trace(path, ReadMode.LEAN_IDS)`, what a cut reads) holds the full
read's dispatch table exactly: every column, every row, in the same order, the names as a categorical.
On the real fixtures of every format and on generated files in each, cut into many chunks; and the cut
written from it (`perflib.cut`) reads back as the cut written from the full read."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perflib import cut as cutting
from perflib.traces import ReadMode, parquet, read_trace, schema, writers
from tests.support import REPO, fixture_paths
from tests.synthetic import decode_trace


def assert_same_table(path: Path) -> pd.DataFrame:
    """The lean read with ids equals the full read's dispatch table, column by column; returns it."""
    full = read_trace(path).dispatches
    lean = read_trace(path, ReadMode.LEAN_IDS).dispatches
    assert tuple(lean.columns) == schema.DISPATCH_COLUMNS
    assert isinstance(lean["kernel"].dtype, pd.CategoricalDtype)
    pd.testing.assert_frame_equal(lean.assign(kernel=lean["kernel"].astype(full["kernel"].dtype)), full)
    return lean


REAL = (fixture_paths("kineto/*.json.gz") + fixture_paths("external/kineto/*.json.gz")
        + fixture_paths("external/nsys/*.sqlite") + fixture_paths("external/rocprof-legacy/*_results.csv")
        + fixture_paths("rocprofv3/*/*kernel_trace*.csv") + fixture_paths("rocprofv3/*/memory_copy_trace.csv")
        + fixture_paths("rocprofv3/json-mi350/*.json.gz"))
REAL += sorted((REPO / "data" / "raw" / "h200-pytorch").glob("*.json.gz"))[:2]
REAL += [REPO / "data" / "raw" / "h200-pytorch" / "cupti_decode_window_excerpt.txt.gz",
         REPO / "tests" / "data" / "traces" / "cupti_h200_sample.txt.gz",
         REPO / "tests" / "data" / "traces" / "cupti_trace_injection_sample.txt",
         REPO / "tests" / "data" / "traces" / "results.csv"]
REAL += sorted(REPO.glob("data/raw/cuda-h200*/**/trace.parquet"))[:3]


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_fixtures_same_table(path: Path) -> None:
    lean = assert_same_table(path)
    if len(lean):
        assert (lean[list(schema.ID_COLUMNS)] >= 0).any(axis=None) or path.suffix == ".csv"


def test_real_rocprofv3_directory_same_table() -> None:
    dirs = fixture_paths("rocprofv3/rocm7.0-docs")
    if not dirs:
        pytest.skip("no public fixtures")
    assert_same_table(dirs[0])


def _mixed(seed: int) -> pd.DataFrame:
    """A decode trace with copies and fills, ids that vary row to row (some unknown, -1), ties at one ns."""
    frame, _ = decode_trace(steps=10, layers=3, seed=seed)
    frame = frame.copy()
    rng = np.random.default_rng(seed)
    extra = frame.iloc[rng.choice(len(frame), size=40, replace=False)].copy()
    extra["kernel"] = ["MEMORY_COPY_HOST_TO_DEVICE" if i % 2 else "Memset (Device)" for i in range(len(extra))]
    extra["kind"] = pd.Categorical(["memcpy" if i % 2 else "memset" for i in range(len(extra))],
                                   categories=list(schema.DISPATCH_KINDS))
    extra["end_ns"] = extra["start_ns"] + 1500
    out = pd.concat([frame, extra], ignore_index=True).sort_values("start_ns", kind="stable", ignore_index=True)
    n = len(out)
    out["correlation_id"] = np.arange(1, n + 1, dtype=np.int64)
    out["device"] = rng.integers(0, 3, n).astype(np.int64)
    out["queue"] = rng.integers(1, 5, n).astype(np.int64)
    out["stream"] = rng.integers(0, 4, n).astype(np.int64)
    return out


@pytest.mark.parametrize("fmt", ["csv-A", "csv-B", "csv-C", "csv-D", "csv-E", "csv-copy", "json", "rocpd", "kineto"])
def test_generated_formats_same_table(tmp_path: Path, fmt: str) -> None:
    paths = writers.write_all(_mixed(1), tmp_path)
    assert_same_table(paths[fmt])


def test_generated_directory_and_gzip_same_table(tmp_path: Path) -> None:
    frame = _mixed(2)
    run = tmp_path / "run"
    run.mkdir()
    path = writers.write_kernel_trace_csv(frame[frame["kind"] == "kernel"], run / "a_kernel_trace.csv")
    writers.write_memory_copy_trace_csv(frame[frame["kind"] == "memcpy"], run / "a_memory_copy_trace.csv")
    assert set(assert_same_table(run)["kind"].astype(str)) == {"kernel", "memcpy"}
    gz = tmp_path / "b_kernel_trace.csv.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert_same_table(gz)


def test_generated_rocpd_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from perflib.traces import rocpd

    monkeypatch.setattr(rocpd, "LEAN_CHUNK", 7)
    frame = _mixed(3)
    assert_same_table(writers.write_rocpd(frame[frame["kind"] != "memset"], tmp_path / "x_results.db"))


@pytest.mark.parametrize("generation", ["2022", "2024"])
def test_generated_nsys_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, generation: str) -> None:
    from perflib.traces import nsys

    monkeypatch.setattr(nsys, "LEAN_CHUNK", 5)
    path = writers.write_nsys_sqlite(_mixed(4), tmp_path / "x.sqlite", version=generation)
    assert_same_table(path)


@pytest.mark.parametrize("block", [257, 1 << 20])
def test_generated_kineto_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    from perflib.traces import kineto_stream

    monkeypatch.setattr(kineto_stream, "BLOCK", block)
    frame = _mixed(5)
    frame["kernel"] = frame["kernel"].astype(str).where(frame.index % 7 != 3, 'a "quoted", [bracketed] {name}\\')
    assert_same_table(writers.write_kineto_json(frame, tmp_path / "t.json.gz"))


@pytest.mark.parametrize("block", [211, 1 << 22])
def test_generated_cupti_text_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    from perflib.traces import cupti_text

    monkeypatch.setattr(cupti_text, "BLOCK", block)
    frame = _mixed(6)
    frame["kernel"] = frame["kernel"].where(frame["kind"] != "memcpy", "Memcpy HtoD")
    frame["start_ns"] += 1_764_410_000_000_000_000
    frame["end_ns"] += 1_764_410_000_000_000_000
    assert_same_table(writers.write_cupti_text(frame, tmp_path / "server.txt.gz"))


def test_generated_rocprof_json_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from perflib.traces import rocprof_json_stream

    monkeypatch.setattr(rocprof_json_stream, "BLOCK", 300)
    assert_same_table(writers.write_rocprof_json(_mixed(7), tmp_path / "x_results.json"))


def test_parquet_cut_same_table(tmp_path: Path) -> None:
    frame = _mixed(8)
    trace = read_trace(writers.write_kineto_json(frame, tmp_path / "t.json"))
    assert_same_table(parquet.write_trace_parquet(trace, tmp_path / "cut.parquet"))


def _runs(root: Path, windows: list[tuple[int, int]]) -> Path:
    """Sweep run folders whose manifests hold level clocks on the monotonic clock."""
    from perflib import atomic, rundir

    for i, (start, end) in enumerate(windows, start=1):
        d = root / f"b{i}_c128_r1"
        d.mkdir(parents=True)
        atomic.write_json_atomic(d / rundir.MANIFEST, {
            "batch": i, "context": 128, "repeat": 1,
            "clocks": {"start": {"monotonic_ns": start, "realtime_ns": start}, "end": {"monotonic_ns": end,
                                                                                       "realtime_ns": end}}})
    return root


@pytest.mark.parametrize("fmt", ["csv-D", "json", "rocpd", "kineto"])
def test_cut_from_the_lean_read_is_the_cut_from_the_full_read(tmp_path: Path, fmt: str) -> None:
    """`cut_into_runs` of the lean read with ids writes the windows the full read writes: the same rows,
    columns, types, clock, source and meta."""
    frame = _mixed(9)
    path = writers.write_all(frame, tmp_path / "src")[fmt]
    lo, hi = int(frame["start_ns"].min()), int(frame["end_ns"].max())
    third = (hi - lo) // 3
    windows = [(lo + third, lo + 2 * third), (lo + 2 * third, hi)]
    full = cutting.cut_into_runs(read_trace(path), _runs(tmp_path / "full", windows), margin_ns=1000)
    lean = cutting.cut_into_runs(read_trace(path, ReadMode.LEAN_IDS), _runs(tmp_path / "lean", windows),
                                 margin_ns=1000)
    assert [c.dispatches for c in full] == [c.dispatches for c in lean] and all(c.dispatches for c in full)
    for a, b in zip(full, lean, strict=True):
        ta, tb = read_trace(a.path), read_trace(b.path)
        pd.testing.assert_frame_equal(ta.dispatches, tb.dispatches)
        assert (ta.clock, ta.source, ta.meta) == (tb.clock, tb.source, tb.meta)
        ma = json.loads((a.run_dir / "manifest.json").read_text())["trace_cut"]
        mb = json.loads((b.run_dir / "manifest.json").read_text())["trace_cut"]
        assert ma == mb
