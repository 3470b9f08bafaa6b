"""The rocpd `regions` view (API calls and markers) is fetched in chunks: the same tables, to the ns
and name for name, whatever the chunk, in the lean read and the full one, and the same errors as a
read of the whole view at once (a bad start anywhere before a bad end in an earlier row)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from synthetic import decode_trace

from perflib.errors import InputError
from perflib.traces import ReadMode, read_trace, rocpd, writers

CATEGORIES = ["HIP_RUNTIME_API_EXT", "MARKER_CORE_API", "marker_core_range_api", None, "HSA_CORE_API", "MARKERS"]
NAMES = ["hipLaunchKernel", "decode step", None, "hipMemcpyAsync", "roctxRangePushA", "step 7", ""]


def regions_db(tmp_path: Path, rows: int = 500, odd: bool = True) -> tuple[Path, pd.DataFrame]:
    """A rocpd file of perflib's writer whose `regions` view is a plain table of `rows` API calls and
    markers (categories of every case and NULL, NULL and repeated names, ids that are NULL or text)."""
    frame, _ = decode_trace(steps=4, layers=2, seed=11)
    frame["correlation_id"] = np.arange(1, len(frame) + 1, dtype=np.int64)
    path = writers.write_rocpd(frame, tmp_path / "x_results.db")
    rng = np.random.default_rng(rows)
    start = rng.integers(0, 10**12, rows)
    table = pd.DataFrame({
        "category": [CATEGORIES[i % len(CATEGORIES)] for i in range(rows)],
        "name": [NAMES[(3 * i) % len(NAMES)] for i in range(rows)],
        "pid": [None if odd and i % 11 == 5 else "p" if odd and i % 13 == 4 else 7 for i in range(rows)],
        "tid": rng.integers(1, 9, rows).tolist(),
        "start": start.tolist(), "end": (start + rng.integers(0, 10**6, rows)).tolist(),
        "corr_id": pd.Series([None if odd and i % 17 == 0 else i for i in range(rows)], dtype=object),
    })
    with sqlite3.connect(path) as con:
        con.execute("DROP VIEW regions")
        con.execute('CREATE TABLE regions (category, name, pid, tid, start, "end", corr_id)')
        con.executemany('INSERT INTO regions VALUES (?, ?, ?, ?, ?, ?, ?)', table.itertuples(index=False))
    return path, table


@pytest.mark.parametrize("lean", [False, True])
def test_regions_the_same_in_any_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lean: bool) -> None:
    path, table = regions_db(tmp_path)
    monkeypatch.setattr(rocpd, "LEAN_CHUNK", 10**9)  # the whole view at once
    whole = rocpd.read_rocpd(path, ReadMode.LEAN if lean else ReadMode.FULL)
    for chunk in (1, 7, 64, 499, 500):
        monkeypatch.setattr(rocpd, "LEAN_CHUNK", chunk)
        got = rocpd.read_rocpd(path, ReadMode.LEAN if lean else ReadMode.FULL)
        pd.testing.assert_frame_equal(got.api, whole.api)
        pd.testing.assert_frame_equal(got.markers, whole.markers)
    markers = table["category"].fillna("").str.upper().str.startswith("MARKER")
    assert len(whole.markers) == int(markers.sum()) and len(whole.api) == int((~markers).sum())
    expected = table[~markers].assign(name=table["name"].fillna(""), domain=table["category"].fillna(""))
    expected = expected.sort_values("start", kind="stable")
    assert whole.api["name"].tolist() == expected["name"].tolist()
    assert whole.api["domain"].tolist() == expected["domain"].tolist()
    assert whole.api["start_ns"].tolist() == expected["start"].tolist()
    assert whole.api["pid"].tolist() == [v if isinstance(v, int) else -1 for v in expected["pid"]]
    assert whole.api["correlation_id"].tolist() == [-1 if pd.isna(v) else int(v) for v in expected["corr_id"]]
    assert set(whole.markers["domain"]) == {"MARKER_CORE_API", "marker_core_range_api", "MARKERS"}


def test_full_and_lean_reads_give_the_same_regions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = regions_db(tmp_path, rows=300, odd=False)
    monkeypatch.setattr(rocpd, "LEAN_CHUNK", 16)
    full, lean = read_trace(path), read_trace(path, ReadMode.LEAN)
    pd.testing.assert_frame_equal(full.api, lean.api)
    pd.testing.assert_frame_equal(full.markers, lean.markers)


@pytest.mark.parametrize("chunk", [3, 10**9])
def test_a_bad_start_later_comes_before_a_bad_end_earlier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          chunk: int) -> None:
    path, _ = regions_db(tmp_path, rows=40)
    with sqlite3.connect(path) as con:
        con.execute('UPDATE regions SET "end" = \'later\' WHERE rowid = 2')
        con.execute("UPDATE regions SET start = 1.5 WHERE rowid = 30")
    monkeypatch.setattr(rocpd, "LEAN_CHUNK", chunk)
    with pytest.raises(InputError, match=r"view regions, row 30, column start"):
        read_trace(path)
    with sqlite3.connect(path) as con:
        con.execute("UPDATE regions SET start = 5 WHERE rowid = 30")
    with pytest.raises(InputError, match=r"view regions, row 2, column end"):
        read_trace(path, ReadMode.LEAN)
