"""The host API table (docs/SCHEMA.md §1) in every `ReadMode`: every reader whose format carries API
records gives the same calls lean, lean with ids and full, so that a summary and a campaign's cut see
what fills the host gaps; perflib's own cut keeps them beside it (`trace.api.parquet`), and a cut that
keeps none says why."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from support import REPO, fixture

from perflib.errors import InputError
from perflib.traces import ReadMode, api_path, companion_files, read_trace, schema, write_trace_parquet

WITH_API = [("kineto", "a100_event_sync_trace.json.gz"), ("kineto", "a100_simple_add_trace.json.gz"),
            ("kineto", "mi250_minitoy_train_ROCm6_2_kineto.json.gz"),
            ("external", "kineto", "tracelens_sglang_Qwen3-8B_decode_mi300x.json.gz"),
            ("external", "kineto", "tracelens_h100_Qwen1.5-0.5B-Chat__1016005.json.gz"),
            ("external", "nsys", "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite"),
            ("rocprofv3", "rocm7.0-docs", "hip_trace.csv"), ("rocprofv3", "rocm6.2-docs", "hip_runtime_trace.csv")]
CUPTI = REPO / "data/raw/h200-pytorch/cupti_decode_window_excerpt.txt.gz"
OLD_CUT = REPO / "data/raw/cuda-h200/after-cupti/llamacpp-cuda/b1_c1024_r1/trace.parquet"


def as_text(api: pd.DataFrame) -> pd.DataFrame:
    """The API table with names and domains as text (a lean read keeps them as categoricals)."""
    return api.assign(name=api["name"].astype(str), domain=api["domain"].astype(str))


def same_in_every_mode(path: Path) -> pd.DataFrame:
    full = read_trace(path).api
    assert len(full) > 0
    for mode in (ReadMode.LEAN, ReadMode.LEAN_IDS):
        pd.testing.assert_frame_equal(as_text(read_trace(path, mode).api), as_text(full))
    return full


@pytest.mark.parametrize("parts", WITH_API, ids=[p[-1] for p in WITH_API])
def test_every_reader_gives_its_api_calls_in_every_mode(parts: tuple[str, ...]) -> None:
    same_in_every_mode(fixture(*parts))


def test_cupti_runtime_and_driver_records_in_every_mode() -> None:
    api = same_in_every_mode(CUPTI)
    assert set(api["domain"].astype(str)) == {"cuda_runtime", "cuda_driver"}
    assert (api["tid"] > 0).all() and (api["correlation_id"] > 0).all()


def test_a_rocprofv3_output_folder_merges_its_hip_calls_in_every_mode(tmp_path: Path) -> None:
    docs = fixture("rocprofv3", "rocm7.0-docs")
    out = tmp_path / "out" / "host" / "trace"
    out.mkdir(parents=True)
    shutil.copy(docs / "kernel_trace.csv", out.parent / "1_kernel_trace.csv")
    shutil.copy(docs / "hip_trace.csv", out.parent / "1_hip_api_trace.csv")
    api = same_in_every_mode(tmp_path / "out")
    pd.testing.assert_frame_equal(as_text(api).drop(columns="source"),
                                  as_text(read_trace(docs / "hip_trace.csv").api).drop(columns="source"))


def test_nsys_lean_read_keeps_the_runtime_calls_and_says_nothing_of_them() -> None:
    lean = read_trace(fixture("external", "nsys", "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite"), ReadMode.LEAN)
    assert len(lean.api) and "api" not in lean.meta


@pytest.mark.parametrize("mode", [ReadMode.FULL, ReadMode.LEAN_IDS])  # what a notebook and a cut read
def test_a_cut_keeps_the_api_calls_of_its_window_beside_it(tmp_path: Path, mode: ReadMode) -> None:
    trace = read_trace(CUPTI, mode)
    full = read_trace(CUPTI).api
    start, end = int(full["start_ns"].quantile(0.25)), int(full["end_ns"].quantile(0.75))
    cut = write_trace_parquet(trace, tmp_path / "trace.parquet", start, end)
    side = api_path(cut)
    assert side.name == "trace.api.parquet" and side.is_file() and companion_files(cut) == [side]
    want = full[(full["end_ns"] > start) & (full["start_ns"] < end)].reset_index(drop=True)
    assert 0 < len(want) < len(full)
    for read_mode in ReadMode:
        back = read_trace(cut, read_mode)
        assert "api_note" not in back.meta
        pd.testing.assert_frame_equal(as_text(back.api), as_text(want))
    described = json.loads(pq.read_schema(cut).metadata[b"perflib.trace"])["api"]
    assert described == {"file": "trace.api.parquet", "rows": len(want), "capture_rows": len(full), "why": ""}


def test_a_cut_of_a_window_or_capture_without_api_calls_says_why(tmp_path: Path) -> None:
    trace = read_trace(CUPTI)
    first = int(trace.api["start_ns"].min())
    empty_window = write_trace_parquet(trace, tmp_path / "a.parquet", first - 10**9, first - 1)
    back = read_trace(empty_window)
    assert not len(back.api) and not api_path(empty_window).exists() and companion_files(empty_window) == []
    assert "no host API call of the capture overlaps" in back.meta["api_note"]
    none = write_trace_parquet(replace(trace, api=schema.empty_api("cupti-text")), tmp_path / "b.parquet")
    assert not len(read_trace(none).api) and "api_note" not in read_trace(none).meta  # the source says why
    old = read_trace(OLD_CUT)
    assert not len(old.api) and "before perflib kept" in old.meta["api_note"]
    again = write_trace_parquet(old, tmp_path / "c.parquet")  # a cut of a cut says what the first one said
    assert read_trace(again).meta["api_note"] == old.meta["api_note"]


def test_a_missing_or_other_api_file_is_an_error_naming_it(tmp_path: Path) -> None:
    cut = write_trace_parquet(read_trace(CUPTI), tmp_path / "trace.parquet")
    side = api_path(cut)
    kept = side.read_bytes()
    other = write_trace_parquet(read_trace(fixture("kineto", "a100_event_sync_trace.json.gz")), tmp_path / "o.parquet")
    shutil.copy(api_path(other), side)
    with pytest.raises(InputError, match=r"trace\.api\.parquet.*host API calls that trace\.parquet names"):
        read_trace(cut)
    side.unlink()
    with pytest.raises(InputError, match=r"trace\.api\.parquet"):
        read_trace(cut, ReadMode.LEAN)
    side.write_bytes(kept)
    assert len(read_trace(cut).api)


@pytest.mark.parametrize("file", ["../x.api.parquet", "/tmp/x.api.parquet", "", None])
def test_the_api_file_a_cut_names_is_a_plain_name_beside_it(tmp_path: Path, file: str | None) -> None:
    cut = write_trace_parquet(read_trace(CUPTI), tmp_path / "trace.parquet")
    table = pq.read_table(cut)
    info = json.loads(table.schema.metadata[b"perflib.trace"])
    info["api"]["file"] = file  # None with rows > 0: the counts disagree
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata,
                                                  b"perflib.trace": json.dumps(info).encode()}), cut)
    with pytest.raises(InputError, match="key api"):
        read_trace(cut)
