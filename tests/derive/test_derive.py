"""The derived tables of a campaign, built from the committed sample capture (no server)."""

from __future__ import annotations

import pandas as pd
import pytest
from support import DATA, REPO

from perflib import derive, runs
from perflib.campaign import load_campaign
from perflib.config import replace_data_dir

SAMPLE = DATA / "campaign-sample"


@pytest.fixture(scope="module")
def sample():
    if not (SAMPLE / "raw").is_dir():
        pytest.skip("committed sample capture tests/data/campaign-sample/raw is missing")
    return load_campaign(SAMPLE / "campaign.yaml")


# ------------------------------------------------------------------------------ derive


def test_derive_from_sample_matches_summarize_run(sample):
    tables = derive.build(sample)
    folders = sample.run_folders()
    assert len(tables.runs) == len(folders) == 8
    assert list(tables.runs.columns[:len(derive.COLUMNS["runs"])]) == derive.COLUMNS["runs"]
    assert set(tables.runs["status"]) == {"complete"}
    # rows sorted by the keys
    keys = tables.runs[derive.KEYS].astype(str).values.tolist()
    assert keys == sorted(keys, key=lambda k: (k[0], k[1], k[2], int(k[3]), int(k[4]), int(k[5])))
    for found in folders:
        arm, run_dir = found.arm, found.path
        row = runs.summarize_run(run_dir)
        mine = tables.runs[(tables.runs["arm"] == arm) & (tables.runs["batch"] == row["batch"])
                           & (tables.runs["repeat"] == row["repeat"])].iloc[0]
        for col in ("decode_step_ms", "occupancy", "decode_tok_s"):
            assert mine[col] == pytest.approx(row[col])
    assert len(tables.trace_runs) == 0
    assert "arm before: no kernel trace for backend cpu (profiler: none)" in tables.notes


def test_derived_csv_bytes_are_stable(sample, tmp_path):
    tables = derive.build(sample)
    derive.write(tables, tmp_path / "a")
    derive.write(derive.build(sample), tmp_path / "b")
    for name in derive.COLUMNS:
        assert (tmp_path / "a" / f"{name}.csv").read_bytes() == (tmp_path / "b" / f"{name}.csv").read_bytes()
    back = derive.read(tmp_path / "a")
    assert back.runs["decode_step_ms"].tolist() == pytest.approx(
        pd.to_numeric(tables.runs["decode_step_ms"]).tolist(), rel=1e-5)



def test_data_dir_override(sample, tmp_path):
    moved = replace_data_dir(sample, tmp_path, None)
    assert derive.build(moved).runs.empty


@pytest.mark.parametrize("name", ["h200-pytorch", "cuda-h200-batch"])
def test_trace_tables_from_the_lean_read_are_the_full_reads(name, monkeypatch):
    """The report reads each trace lean (bounded by its dispatches): every derived table, dtypes included,
    is what the full read gives, on the committed Kineto and CUPTI-cut campaigns."""
    import dataclasses

    from perflib import traces

    campaign = load_campaign(REPO / "campaigns" / f"{name}.yaml")
    derive._read_trace_keyed.cache_clear()
    lean = derive.build(campaign)
    full_read = traces.read_trace
    monkeypatch.setattr(traces, "read_trace", lambda path, **_: full_read(path))
    derive._read_trace_keyed.cache_clear()
    full = derive.build(campaign)
    derive._read_trace_keyed.cache_clear()
    assert len(full.trace_runs) > 0
    for f in dataclasses.fields(full):
        a, b = getattr(full, f.name), getattr(lean, f.name)
        if isinstance(a, pd.DataFrame):
            pd.testing.assert_frame_equal(a, b)
        else:
            assert a == b
