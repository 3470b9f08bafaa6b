"""A cut keeps the host API calls of its window beside its dispatches (`trace.api.parquet`), so what fills
the host gaps reads the same from the cut as from the whole capture; a cut written again without calls
leaves no stale file, and a failed write leaves both files as they were.

The capture is perflib's committed CUPTI activity text of an H200 decode window (RUNTIME and DRIVER
records); the run folder is a committed one with its level clocks moved inside that capture."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from support import REPO

from perflib import attribution
from perflib.cut import cut_into_runs
from perflib.traces import ReadMode, api_path, read_trace, schema

CUPTI = REPO / "data/raw/h200-pytorch/cupti_decode_window_excerpt.txt.gz"
RUN = REPO / "data/raw/cuda-h200/after-cupti/llamacpp-cuda/b1_c1024_r1"


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    """A run folder without a trace whose level is the capture's busy end (its last tenth, realtime clock)."""
    folder = tmp_path / "sweep" / RUN.name
    shutil.copytree(RUN, folder, ignore=shutil.ignore_patterns("trace.parquet"))
    d = read_trace(CUPTI).dispatches
    first, last = int(d["start_ns"].min()), int(d["end_ns"].max())
    start, end = last - (last - first) // 10, last - 1_000_000
    manifest = json.loads((folder / "manifest.json").read_text())
    for key in ("trace_path", "trace_cut"):
        manifest.pop(key, None)
    clocks = manifest["clocks"]
    length = end - start
    clocks["start"]["realtime_ns"], clocks["end"]["realtime_ns"] = start, end
    for other in ("monotonic_ns", "boottime_ns"):  # the same level length on every clock
        clocks["end"][other] = clocks["start"][other] + length
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_the_cut_keeps_its_windows_api_calls_and_the_split_reads_the_same(run: Path) -> None:
    capture = read_trace(CUPTI, ReadMode.LEAN_IDS)
    (done,) = cut_into_runs(capture, run.parent, margin_ns=1_000_000)
    assert done.status == "written" and done.kernels > 0 and api_path(done.path).is_file()
    bounds = json.loads((run / "manifest.json").read_text())["trace_cut"]
    full = read_trace(CUPTI).api
    want = full[(full["end_ns"] > bounds["start_ns"]) & (full["start_ns"] < bounds["end_ns"])].reset_index(drop=True)
    assert 0 < len(want) < len(full)
    cut = read_trace(done.path, ReadMode.LEAN)
    pd.testing.assert_frame_equal(cut.api.assign(name=cut.api["name"].astype(str)),
                                  want.assign(name=want["name"].astype(str)))
    level = attribution.window_from_manifest(cut, run)
    from_cut, from_capture = attribution.host_gaps(cut, level), attribution.host_gaps(capture, level)
    assert from_cut.measured and from_cut.calls["launch"] > 0
    assert from_cut.to_dict() == from_capture.to_dict()


def test_a_cut_again_without_api_calls_leaves_no_stale_file(run: Path) -> None:
    capture = read_trace(CUPTI, ReadMode.LEAN_IDS)
    (first,) = cut_into_runs(capture, run.parent)
    assert api_path(first.path).is_file()
    (again,) = cut_into_runs(replace(capture, api=schema.empty_api("cupti-text")), run.parent, replace=True)
    assert again.status == "written" and not api_path(again.path).exists()
    split = attribution.host_gaps(read_trace(again.path))
    assert not split.measured and "PERFLIB_CUPTI_KINDS" in split.note


def test_a_failed_write_leaves_the_cut_and_its_api_calls_as_they_were(run: Path, monkeypatch) -> None:
    from perflib import cut

    capture = read_trace(CUPTI, ReadMode.LEAN_IDS)
    cut_into_runs(capture, run.parent)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    assert "trace.api.parquet" in before

    def half_then_fail(trace, out, start, end, **sides):  # noqa: ANN001, ANN003
        Path(out).write_bytes(b"PAR1 half a file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cut, "write_trace_parquet", half_then_fail)
    moved = replace(capture, api=capture.api.assign(start_ns=capture.api["start_ns"] - 1))  # another sidecar
    with pytest.raises(OSError, match="No space left"):
        cut_into_runs(moved, run.parent, replace=True)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
