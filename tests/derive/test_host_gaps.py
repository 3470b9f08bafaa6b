"""The derived `host_gaps` table and the step table's parts (docs/SCHEMA.md §4): built from the committed
H200 Kineto traces (their cuda_runtime and cuda_driver events), the four parts add up to each run's host
gap and each step's, the gap is the trace table's, they are stored with the rest of a run's tables
(`perflib.runcache`) and read back from the CSV files as written; a cut's API file keys the stored
tables as its dispatches do."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support import REPO

from perflib import derive, runcache, traces
from perflib.attribution import HOST_GAP_PARTS
from perflib.campaign import load_campaign
from perflib.config import replace_data_dir

PARTS_MS = [f"{p}_ms" for p in HOST_GAP_PARTS]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[derive.DerivedTables, Path]:
    tmp = tmp_path_factory.mktemp("h200-pytorch")
    shutil.copytree(REPO / "data" / "raw" / "h200-pytorch", tmp / "data" / "raw" / "h200-pytorch")
    campaign = replace_data_dir(load_campaign(REPO / "campaigns" / "h200-pytorch.yaml"), tmp / "data", None)
    tables = derive.rebuild(campaign)
    return tables, campaign.derived_dir()


def test_each_runs_gap_is_split_into_parts_that_add_up(built) -> None:
    tables, _ = built
    hg, tr = tables.host_gaps, tables.trace_runs
    assert len(hg) == len(tr) == 4 and list(hg.columns[:6]) == derive.KEYS
    assert (hg["note"].fillna("") == "").all() and (hg["threads_by"] == "correlation").all()
    joined = hg.merge(tr, on=derive.KEYS, suffixes=("", "_trace"))
    assert np.allclose(joined[PARTS_MS].sum(axis=1), joined["gap_ms"], rtol=0, atol=1e-6)
    assert np.allclose(joined["gap_ms"], joined["gap_ms_trace"], rtol=0, atol=1e-9)
    assert (joined["steps"] == joined["steps_trace"]).all() and (joined["launch_calls"] > 0).all()
    for part in HOST_GAP_PARTS:
        assert np.allclose(joined[f"{part}_ms_per_step"], joined[f"{part}_ms"] / joined["steps"])
        assert np.allclose(joined[f"{part}_gap_share"], joined[f"{part}_ms"] / joined["gap_ms"])


def test_each_steps_gap_is_split_too(built) -> None:
    tables, _ = built
    steps = tables.steps
    assert len(steps) and steps[PARTS_MS].notna().all().all()
    assert np.allclose(steps[PARTS_MS].sum(axis=1), steps["gap_ms"], rtol=0, atol=1e-6)


def test_the_tables_read_back_as_written(built) -> None:
    tables, out = built
    back = derive.read(out)
    assert (out / "host_gaps.csv").is_file()
    pd.testing.assert_frame_equal(back.host_gaps.drop(columns="note").reset_index(drop=True),
                                  tables.host_gaps.drop(columns="note").reset_index(drop=True), check_dtype=False)


def test_a_cuts_api_file_keys_its_stored_tables(tmp_path: Path) -> None:
    """A changed `trace.api.parquet` beside an unchanged cut is a new key: its split is attributed again."""
    run = tmp_path / "run"
    shutil.copytree(REPO / "data/raw/cuda-h200/after-cupti/llamacpp-cuda/b1_c1024_r1", run)
    trace = traces.read_trace(REPO / "data/raw/h200-pytorch/cupti_decode_window_excerpt.txt.gz")
    cut = traces.write_trace_parquet(trace, run / "trace.parquet")
    first = runcache.key(cut, run, 12, None, "decode", None)
    assert list(first["companions"]) == ["trace.api.parquet"]
    traces.write_api_parquet(trace, traces.api_path(cut), int(trace.api["start_ns"].min()) + 1)  # one call fewer
    assert runcache.key(cut, run, 12, None, "decode", None) != first


def test_the_notebooks_front_object_shows_them(built) -> None:
    from perflib.explore import CampaignView  # the notebook's face, layer 5: only here

    tables, out = built
    view = CampaignView(replace_data_dir(load_campaign(REPO / "campaigns" / "h200-pytorch.yaml"),
                                         out.parent.parent, None))
    pd.testing.assert_frame_equal(view.host_gaps, tables.host_gaps)
    split = view.host_gap_split()
    assert len(split) == 4 and (split["measured"] == 1).all() and (split["note"] == "").all()
