"""Each trace is attributed once: `derive.build` keeps every run's attributed tables under
`data/derived/<campaign>/runs/` (`perflib.runcache`) and a second build takes them from there without
reading a raw trace, giving the same tables; a trace file that changed is read and attributed again,
and only that one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support import REPO

from perflib import derive, runcache, traces
from perflib.campaign import load_campaign
from perflib.config import replace_data_dir

pytestmark = pytest.mark.slow


def copied(name: str, tmp_path: Path):
    """The committed campaign `name` with its raw data copied into `tmp_path/data` (derived/ empty)."""
    shutil.copytree(REPO / "data" / "raw" / name, tmp_path / "data" / "raw" / name)
    return replace_data_dir(load_campaign(REPO / "campaigns" / f"{name}.yaml"), tmp_path / "data", None)


def reads(monkeypatch) -> list[Path]:
    """Every raw trace read from now on (the per-process memory of the last one forgotten)."""
    seen: list[Path] = []
    real = traces.read_trace

    def counting(path, *args, **kwargs):
        seen.append(Path(path))
        return real(path, *args, **kwargs)

    derive._read_trace_keyed.cache_clear()
    monkeypatch.setattr(traces, "read_trace", counting)
    return seen


def same(a: derive.DerivedTables, b: derive.DerivedTables) -> None:
    for name in derive.COLUMNS:
        pd.testing.assert_frame_equal(a.table(name), b.table(name))
    assert a.notes == b.notes


@pytest.mark.parametrize("name", ["cuda-h200", "h200-pytorch"])  # run folders cut from a capture; trace-only runs
def test_a_second_build_reads_no_raw_trace_and_gives_the_same_tables(name, tmp_path, monkeypatch):
    campaign = copied(name, tmp_path)
    first_reads = reads(monkeypatch)
    first = derive.build(campaign)
    assert len(first.trace_runs) >= 4 and len(first_reads) >= len(first.trace_runs)  # and one not covered
    stored = sorted((campaign.derived_dir() / "runs").rglob(runcache.RECORD))
    assert len(stored) == len(first_reads)  # a window its capture does not cover is a result, stored too

    def refuse(path, *args, **kwargs):
        raise AssertionError(f"a raw trace was read again: {path}")

    derive._read_trace_keyed.cache_clear()
    monkeypatch.setattr(traces, "read_trace", refuse)
    same(first, derive.build(campaign))


def test_a_changed_trace_is_read_and_attributed_again_and_only_it(tmp_path, monkeypatch):
    campaign = copied("cuda-h200", tmp_path)
    first = derive.build(campaign)
    changed = sorted(campaign.raw_dir().rglob("trace.parquet"))[0]
    table = pq.read_table(changed)
    frame = table.to_pandas()
    frame["end_ns"] = frame["start_ns"] + (frame["end_ns"] - frame["start_ns"]) // 2  # every kernel half as long
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(table.schema.metadata),
                   changed)
    seen = reads(monkeypatch)
    again = derive.build(campaign)
    assert seen == [changed]
    run = changed.parent.name
    b, c, r = (int(x[1:]) for x in run.split("_"))

    def busy(tables: derive.DerivedTables) -> float:
        rows = tables.trace_runs
        return float(rows[(rows["batch"] == b) & (rows["context"] == c) & (rows["repeat"] == r)]["busy_ms"].iloc[0])

    assert busy(again) < busy(first)  # the new file's figures, not the stored ones
    others = again.trace_runs[~((again.trace_runs["batch"] == b) & (again.trace_runs["context"] == c))]
    pd.testing.assert_frame_equal(others, first.trace_runs.loc[others.index])


def test_a_stored_result_for_another_key_or_a_broken_one_is_not_read(tmp_path):
    frame = pd.DataFrame([{"dispatches": 3, "busy_ms": 1.25, "steps": None, "steps_guessed": False}])
    key = {"trace_sha256": "a" * 64, "window": "decode"}
    assert runcache.save(tmp_path, key, runcache.Attributed("cupti-text", {"trace_runs": frame}))
    back = runcache.load(tmp_path, key)
    assert back is not None and back.source == "cupti-text"
    pd.testing.assert_frame_equal(back.tables["trace_runs"], frame)
    assert runcache.load(tmp_path, {**key, "window": "level"}) is None  # another key
    record = json.loads((tmp_path / runcache.RECORD).read_text())
    other = tmp_path / "other"
    assert runcache.save(other, {**key, "window": "level"}, runcache.Attributed("cupti-text", {"trace_runs": frame}))
    shutil.copy(other / "trace_runs.parquet", tmp_path / "trace_runs.parquet")  # a table written for another key
    assert runcache.load(tmp_path, key) is None
    (tmp_path / runcache.RECORD).write_text("{")
    assert runcache.load(tmp_path, key) is None
    assert record["tables"] == ["trace_runs"]
