"""`write_cupti_text`: the text of `cupti_trace_injection`, read back by the CUPTI reader to the same table,
laid out as the real H200 capture (tests/data/traces/cupti_h200_sample.txt.gz) lays its records out."""

from __future__ import annotations

import gzip
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support import DATA
from synthetic import decode_trace, dispatch_frame

from perflib.errors import InputError
from perflib.traces import detect_format, read_trace, schema
from perflib.traces.cupti_text import read_cupti_text
from perflib.traces.writers import cupti_text
from perflib.traces.writers.cupti_text import write_cupti_text

TRACES = DATA / "traces"
H200 = TRACES / "cupti_h200_sample.txt.gz"
HAND_MADE = TRACES / "cupti_trace_injection_sample.txt"


def _shape(line: str) -> str:
    """A record line with its quoted name and its numbers blanked: what the layout is, not the values."""
    return re.sub(r"-?\d+", "0", re.sub(r'"[^"]*"', '"N"', line))


@pytest.mark.parametrize("suffix", [".txt", ".txt.gz"])
def test_round_trip_is_exact(tmp_path: Path, cuda_dispatches: pd.DataFrame, same_rows, suffix: str) -> None:
    path = write_cupti_text(cuda_dispatches, tmp_path / f"server{suffix}")
    assert detect_format(path) == "cupti-text"
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == (suffix == ".txt.gz")
    trace = read_trace(path)
    assert trace.source == "cupti-text" and trace.clock == "realtime"
    same_rows(trace.dispatches, cuda_dispatches)
    assert trace.dispatches["kind"].value_counts().to_dict() == cuda_dispatches["kind"].value_counts().to_dict()
    assert trace.meta["malformed_record_lines"] == 0


def test_each_kernel_has_its_launch_call(tmp_path: Path, cuda_dispatches: pd.DataFrame) -> None:
    """One `cudaLaunchKernel_v7000` per kernel, same correlation id, ending before its kernel starts, on
    one host thread whose calls do not overlap."""
    trace = read_trace(write_cupti_text(cuda_dispatches, tmp_path / "x.txt"))
    kernels = cuda_dispatches[cuda_dispatches["kind"] == "kernel"]
    api = trace.api
    assert len(api) == len(kernels) and set(api["name"]) == {"cudaLaunchKernel_v7000"}
    assert set(api["domain"]) == {"cuda_runtime"}
    assert (set(api["pid"]), set(api["tid"])) == ({cupti_text.PROCESS_ID}, {cupti_text.THREAD_ID})
    launched = kernels.merge(api, on="correlation_id", suffixes=("", "_api"))
    assert len(launched) == len(kernels)
    assert (launched["end_ns_api"] <= launched["start_ns"]).all()
    assert (launched["end_ns_api"] > launched["start_ns_api"]).all()
    assert (api["start_ns"].to_numpy()[1:] >= api["end_ns"].to_numpy()[:-1]).all()


def test_launches_do_not_overlap_across_chunks(tmp_path: Path, cuda_dispatches: pd.DataFrame,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cupti_text, "CHUNK_ROWS", 7)
    api = read_trace(write_cupti_text(cuda_dispatches, tmp_path / "x.txt")).api
    assert (api["start_ns"].to_numpy()[1:] >= api["end_ns"].to_numpy()[:-1]).all()
    assert len(read_trace(tmp_path / "x.txt").dispatches) == len(cuda_dispatches)


def test_header_is_the_samples(tmp_path: Path, cuda_dispatches: pd.DataFrame) -> None:
    real = gzip.decompress(H200.read_bytes()).decode().splitlines()
    first_record = next(i for i, line in enumerate(real) if line.startswith(("DRIVER [", "RUNTIME [")))
    written = write_cupti_text(cuda_dispatches, tmp_path / "x.txt").read_text().splitlines()
    assert written[:first_record] == real[:first_record]
    bare = write_cupti_text(cuda_dispatches, tmp_path / "y.txt", header=False).read_text().splitlines()
    assert bare[0].startswith("CONCURRENT_KERNEL [") and bare == written[first_record:]


def test_kernel_and_launch_records_are_laid_out_as_in_the_h200_capture(tmp_path: Path,
                                                                       cuda_dispatches: pd.DataFrame) -> None:
    real = gzip.decompress(H200.read_bytes()).decode().splitlines()
    k = next(i for i, line in enumerate(real) if line.startswith("CONCURRENT_KERNEL ["))
    launch = next(line for line in real if '"cudaLaunchKernel_v7000"' in line)
    lines = write_cupti_text(cuda_dispatches, tmp_path / "x.txt", header=False).read_text().splitlines()
    assert [_shape(x) for x in lines[:3]] == [_shape(x) for x in real[k:k + 3]]
    assert _shape(lines[3]) == _shape(launch)


def test_copy_and_fill_records_are_laid_out_as_the_sample_prints_them(tmp_path: Path) -> None:
    """The CUDA sample's MEMCPY and MEMSET layouts (record line, one tab-started id line), here from the
    hand-made sample in the same layout, since the H200 capture has no copies."""
    sample = HAND_MADE.read_text().splitlines()
    df = dispatch_frame([("Memcpy DtoH", 1_000, 2_000)], kind="memcpy")
    df = pd.concat([df, dispatch_frame([("Memset", 3_000, 3_500)], kind="memset")], ignore_index=True)
    lines = write_cupti_text(df, tmp_path / "x.txt", header=False).read_text().splitlines()
    for prefix, at in (("MEMCPY ", 0), ("MEMSET ", 2)):
        i = next(i for i, line in enumerate(sample) if line.startswith(prefix))
        assert [_shape(x) for x in lines[at:at + 2]] == [_shape(x) for x in sample[i:i + 2]]
    assert lines[0].startswith('MEMCPY "DtoH" [ 1000, 2000 ] duration 1000,')
    assert "srcKind DEVICE, dstKind PAGEABLE" in lines[0]


@pytest.mark.parametrize("name", [
    "void flash_attn<__half, 128>(float const*, int, int) — 1.5 µs ✓ 名前",
    'k<"quoted">(int)',
    'gemm "tn", 128x128',  # a name holding `", `: it ends at the last quote before the key-value pairs
    'k", correlationId 5, x',
])
def test_awkward_names_survive(tmp_path: Path, name: str) -> None:
    df = schema.dispatch_frame({"kernel": [name, "plain_kernel"], "start_ns": [1_000, 5_000],
                                "end_ns": [2_000, 6_000], "correlation_id": [1, 2]}, "synthetic", "x")
    trace = read_trace(write_cupti_text(df, tmp_path / "x.txt.gz"))
    assert trace.dispatches["kernel"].tolist() == [name, "plain_kernel"]
    assert trace.dispatches["correlation_id"].tolist() == [1, 2]


def test_mangled_names_come_back_demangled_as_from_a_real_capture(tmp_path: Path) -> None:
    df = dispatch_frame([("_Z5saxpyPdS_S_di", 1_000, 2_000)])
    assert read_trace(write_cupti_text(df, tmp_path / "x.txt")).dispatches["kernel"].tolist() == [
        "saxpy(double*, double*, double*, double, int)"]


def test_a_line_break_in_a_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="line break"):
        write_cupti_text(dispatch_frame([("two\nlines", 1, 2)]), tmp_path / "x.txt")


@pytest.mark.parametrize(("name", "read_as"), [
    ("MEMORY_COPY_HOST_TO_DEVICE", "Memcpy HtoD"),  # rocprofv3
    ("Memcpy Device-to-Host", "Memcpy DtoH"),  # nsys label
    ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD"),  # Kineto
    ("[CUDA memcpy Device-to-Device]", "Memcpy DtoD"),  # nsys stats
    ("Memcpy Unified Device-to-Host", "Memcpy DtoH"),  # nsys-only kind, printed as CUPTI's own
    ("d2h", "Memcpy DtoH"),
    ("Memcpy PtoP", "Memcpy PtoP"),
    ("Memcpy", "Memcpy UNKNOWN"),
])
def test_copies_are_written_by_their_kind(tmp_path: Path, name: str, read_as: str) -> None:
    """A MEMCPY record carries a copy kind, not a name: a copy named in any profiler's words is written as
    its kind, which the reader names `Memcpy <kind>`."""
    trace = read_trace(write_cupti_text(dispatch_frame([(name, 10, 20)], kind="memcpy"), tmp_path / "x.txt"))
    assert trace.dispatches["kernel"].tolist() == [read_as]


def test_unknown_ids_stay_unknown_and_get_no_launch_call(tmp_path: Path) -> None:
    """`synthetic.dispatch_frame` has every id -1: written as given, they read back -1, and a kernel with
    no correlation id gets no RUNTIME record (which would link every such kernel to every such call)."""
    df, _ = decode_trace(2, layers=1)
    trace = read_trace(write_cupti_text(df, tmp_path / "x.txt"))
    for col in ("device", "stream", "correlation_id"):
        assert set(trace.dispatches[col]) == {-1}, col
    assert trace.dispatches["start_ns"].tolist() == df["start_ns"].tolist()
    assert len(trace.api) == 0
    assert "RUNTIME [" not in (tmp_path / "x.txt").read_text()


def test_runtime_off(tmp_path: Path, cuda_dispatches: pd.DataFrame) -> None:
    path = write_cupti_text(cuda_dispatches, tmp_path / "x.txt", runtime=False)
    assert "RUNTIME [" not in path.read_text()
    assert len(read_trace(path).api) == 0 and len(read_trace(path).dispatches) == len(cuda_dispatches)


def test_gzip_output_is_byte_for_byte_reproducible(tmp_path: Path, cuda_dispatches: pd.DataFrame) -> None:
    a = write_cupti_text(cuda_dispatches, tmp_path / "a.txt.gz").read_bytes()
    b = write_cupti_text(cuda_dispatches, tmp_path / "b.txt.gz").read_bytes()
    assert a == b
    assert gzip.decompress(a) == write_cupti_text(cuda_dispatches, tmp_path / "c.txt").read_bytes()


@pytest.mark.parametrize("header", [True, False])
def test_empty_table(tmp_path: Path, header: bool) -> None:
    """No dispatches: the file has the sample's header at most, which format detection cannot tell
    from any other text (it looks for a record line), so `read_trace` refuses it saying what it expected;
    the CUPTI reader itself reads it as an empty capture."""
    path = write_cupti_text(schema.empty_dispatches("synthetic"), tmp_path / "empty.txt", header=header)
    assert path.read_text() == ("\n".join(cupti_text.HEADER) + "\n" if header else "")
    with pytest.raises(InputError, match="CUPTI activity text"):
        read_trace(path)
    trace = read_cupti_text(path)
    assert len(trace.dispatches) == 0 and len(trace.api) == 0


@pytest.mark.slow
def test_a_million_dispatches_well_under_a_minute(tmp_path: Path) -> None:
    n = 1_000_000
    rng = np.random.default_rng(0)
    start = 1_764_410_000_000_000_000 + np.cumsum(rng.integers(2_000, 9_000, n))
    kind = np.where(rng.random(n) < 0.05, "memcpy", np.where(rng.random(n) < 0.03, "memset", "kernel"))
    df = schema.dispatch_frame({
        "kernel": np.select([kind == "kernel", kind == "memcpy"],
                            ["void gemv<__half, 128>(__half const*, float*, int)", "Memcpy HtoD"], "Memset"),
        "start_ns": start, "end_ns": start + rng.integers(500, 4_000, n), "device": 0, "stream": 7,
        "correlation_id": np.arange(1, n + 1), "kind": kind}, "synthetic", "x")
    began = time.perf_counter()
    path = write_cupti_text(df, tmp_path / "big.txt.gz")
    elapsed = time.perf_counter() - began
    assert elapsed < 30, f"{elapsed:.1f} s for {n} dispatches"
    with gzip.open(path, "rb") as fh:
        text = fh.read()
    assert text.count(b"\nCONCURRENT_KERNEL [") == int((kind == "kernel").sum())
    assert text.count(b"\nRUNTIME [") == int((kind == "kernel").sum())
    assert text.count(b"\nMEMCPY ") + text.count(b"\nMEMSET [") == int((kind != "kernel").sum())
