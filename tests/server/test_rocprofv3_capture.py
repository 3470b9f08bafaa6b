"""The rocprofv3 profiler kind traces what a campaign needs beyond the kernels: the HIP runtime API (what
fills the host gaps), copies (a device-to-host copy's wait) and ROCTx markers (the engine's steps), and the
output folder it writes is read, in the mode the campaign's cut reads a capture (`ReadMode.LEAN_IDS`) as in
the full read, into the dispatch, API and marker tables. The folder is laid out as rocprofv3 names its
files (`-d DIR -o trace`: `DIR/<host>/<pid>/trace_<stem>.csv`), filled with the real ROCm 6.2 and 7.0
outputs of ../shared/fixtures/rocprofv3."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from support import fixture

from perflib.server.profilers import ROCPROFV3_TRACES, Capture
from perflib.traces import ReadMode, read_trace

LAYOUT = {"kernel_trace.csv": "kernel_trace.csv", "memory_copy_trace.csv": "memory_copy_trace.csv",
          "hip_runtime_trace.csv": "hip_api_trace.csv", "marker_api_trace.csv": "marker_api_trace.csv",
          "hip_api_stats.csv": "hip_api_stats.csv"}
"""Fixture file -> the stem rocprofv3 writes it under (the docs name the HIP runtime trace after its flag)."""


def test_the_capture_traces_kernels_copies_the_hip_runtime_api_and_markers(tmp_path: Path) -> None:
    argv, env, stdout = Capture("rocprofv3", tmp_path / "capture", binary="/opt/rocm/bin/rocprofv3",
                                args=("--hip-graph-trace",)).wrap(("llama-server", "-m", "x.gguf"), {"KEEP": "1"})
    own, server = argv[: argv.index("--")], argv[argv.index("--") + 1:]
    assert own[0] == "/opt/rocm/bin/rocprofv3" and server == ("llama-server", "-m", "x.gguf")
    for flag in ("--kernel-trace", "--memory-copy-trace", "--hip-runtime-trace", "--marker-trace", "--stats"):
        assert flag in own, flag
    assert ROCPROFV3_TRACES == own[1:5] and own[own.index("-f") + 1] == "csv"
    assert own[own.index("-d") + 1] == str(tmp_path / "capture") and own[own.index("-o") + 1] == "trace"
    assert own[-1] == "--hip-graph-trace" and env == {"KEEP": "1"} and stdout is None
    assert Capture("rocprofv3", tmp_path / "capture").lifetime_capture() == tmp_path / "capture"


def output_folder(tmp_path: Path, release: str) -> Path:
    """A rocprofv3 `-d capture -o trace` folder holding the release's fixture files under rocprofv3's names."""
    docs = fixture("rocprofv3", release)
    folder = tmp_path / "capture" / "gpu-host" / "4242"
    folder.mkdir(parents=True)
    for name, stem in LAYOUT.items():
        shutil.copy(docs / name, folder / f"trace_{stem}")
    return tmp_path / "capture"


def as_text(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(**{c: frame[c].astype(str) for c in ("name", "domain", "source") if c in frame})


@pytest.mark.parametrize("release", ["rocm6.2-docs", "rocm7.0-docs"])
@pytest.mark.parametrize("mode", [ReadMode.LEAN_IDS, ReadMode.FULL])  # the capture's cut, and a notebook
def test_its_output_folder_reads_into_dispatches_api_calls_and_markers(tmp_path: Path, release: str,
                                                                        mode: ReadMode) -> None:
    docs = fixture("rocprofv3", release)
    trace = read_trace(output_folder(tmp_path, release), mode)
    hip, roctx = read_trace(docs / "hip_runtime_trace.csv"), read_trace(docs / "marker_api_trace.csv")
    assert len(hip.api) > 0 and set(hip.api["domain"].astype(str)) <= {"HIP_RUNTIME_API", "HIP_RUNTIME_API_EXT"}
    pd.testing.assert_frame_equal(as_text(trace.api).drop(columns="source"), as_text(hip.api).drop(columns="source"))
    assert len(roctx.markers) > 0 and not len(roctx.api)
    pd.testing.assert_frame_equal(as_text(trace.markers).drop(columns="source"),
                                  as_text(roctx.markers).drop(columns="source"))
    kinds = set(trace.dispatches["kind"].astype(str))
    assert kinds == {"kernel", "memcpy"}
    copies = read_trace(docs / "memory_copy_trace.csv").dispatches
    assert int((trace.dispatches["kind"].astype(str) == "memcpy").sum()) == len(copies) > 0
    assert trace.source == "rocprofv3-csv" and "api_note" not in trace.meta
