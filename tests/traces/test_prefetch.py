"""The forked Kineto parse of `perflib trace summary`: the same Trace as the plain read, and every
failure falls back to the plain read, whose error names the file and the field."""

from __future__ import annotations

import gzip
import json
import os

import pandas as pd
import pytest
from support import REPO

from perflib.cli import main
from perflib.commands.trace import _read
from perflib.errors import InputError
from perflib.traces import ReadMode, prefetch, read_trace

H200 = REPO / "data/raw/h200-pytorch/llama1b_decode_b1_c1024.json.gz"

needs_fork = pytest.mark.skipif(not hasattr(os, "fork") or (os.cpu_count() or 1) < 2,
                                reason="the prefetch needs os.fork and two cores")


def assert_same_trace(mine, plain) -> None:
    for table in ("dispatches", "api", "markers"):
        pd.testing.assert_frame_equal(getattr(mine, table), getattr(plain, table))
    assert (mine.clock, mine.source, mine.meta) == (plain.clock, plain.source, plain.meta)


@needs_fork
def test_prefetched_trace_equals_the_lean_read():
    pre = prefetch.start(H200)
    assert pre is not None  # 17.6 MB of JSON behind 1.3 MB of gzip: the ISIZE trailer counts
    assert_same_trace(pre.trace(), read_trace(H200, ReadMode.LEAN))


@needs_fork
def test_odd_values_give_the_same_trace(tmp_path):
    """ints among float times, ids that are null, hex text, integral floats or beyond int64, a name
    that is a number: the same Trace from the child's tables as the lean read gives."""
    events = [
        {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 10, "dur": 2.5, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": 42, "ts": 11.125, "dur": 1, "args": {"correlation": None}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 12.5, "dur": 0.001, "args": {"correlation": "0x10"}},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset", "ts": 13, "dur": 0, "args": {"correlation": 2**70}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 9, "dur": 0.5, "pid": 1, "tid": "7",
         "args": {"correlation": 7.0}},
        {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "ts": 10.5, "dur": 0.25, "pid": 1, "tid": 2**64,
         "args": {"correlation": 8}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 8, "dur": 9, "pid": 1, "tid": 1},
        {"ph": "i", "cat": "kernel", "name": "not a slice", "ts": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 9, "dur": 1},
    ]
    path = tmp_path / "odd.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"baseTimeNanoseconds": 10**18, "traceEvents": events}).encode()))
    pre = prefetch.start(path, min_bytes=0)
    assert pre is not None
    assert_same_trace(pre.trace(), read_trace(path, ReadMode.LEAN))
    assert pre.trace().dispatches["correlation_id"].tolist() == [7, -1, 16, -1]


@needs_fork
def test_times_that_need_their_decimal_text_are_exact_from_the_child_too(tmp_path):
    """Unix-epoch µs with a fraction, beyond float64's ns: the child's streamed read parses their
    decimal text, as the lean read does."""
    events = ",".join(f'{{"ph": "X", "cat": "kernel", "name": "k", "ts": 171219549550558{i}.988, "dur": 1.5}}'
                      for i in range(3))
    path = tmp_path / "epoch.json"
    path.write_text('{"traceEvents": [' + events + "]}")
    pre = prefetch.start(path, min_bytes=0)
    assert pre is not None
    mine = pre.trace()
    assert_same_trace(mine, read_trace(path, ReadMode.LEAN))
    assert mine.dispatches["start_ns"].tolist() == [1712195495505580988 + 1000 * i for i in range(3)]
    assert mine.meta["ts_parse"] == "decimal text (floats beyond 2^43 us)"


def test_small_or_other_files_are_read_the_plain_way(tmp_path):
    assert prefetch.start(REPO / "tests/data/traces/cupti_h200_sample.txt.gz", min_bytes=0) is None
    rocprof = tmp_path / "x_results.json"
    rocprof.write_text(json.dumps({"rocprofiler-sdk-tool": [{}]}))
    assert prefetch.start(rocprof, min_bytes=0) is None
    assert prefetch.start(H200, min_bytes=1 << 40) is None  # below the size where a fork pays
    assert prefetch.start(H200, max_bytes=1 << 20) is None  # above the size where it still pays


@needs_fork
def test_a_cut_file_falls_back_to_the_plain_error(tmp_path, capsys):
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(H200.read_bytes()[:200_000])
    pre = prefetch.start(cut, min_bytes=0, max_bytes=1 << 62)  # a cut gzip has no true size trailer
    assert pre is not None and pre.result() is None
    assert main(["trace", "summary", str(cut)]) == 2
    assert "a complete gzip stream" in capsys.readouterr().err


@needs_fork
def test_a_bad_event_falls_back_to_the_plain_error(tmp_path):
    doc = {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1.0, "dur": 2.0},
                           {"ph": "X", "cat": "kernel", "name": "k", "ts": "soon", "dur": 2.0}]}
    path = tmp_path / "bad.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    pre = prefetch.start(path, min_bytes=0)
    assert pre is not None
    with pytest.raises(InputError, match=r"traceEvents\[1\]\.ts.*a number of µs.*'soon'"):
        _read(str(path), pre)
