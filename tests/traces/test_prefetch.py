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
from perflib.traces import kineto, prefetch, read_trace

H200 = REPO / "data/raw/h200-pytorch/llama1b_decode_b1_c1024.json.gz"

needs_fork = pytest.mark.skipif(not hasattr(os, "fork") or (os.cpu_count() or 1) < 2,
                                reason="the prefetch needs os.fork and two cores")


@needs_fork
def test_prefetched_trace_equals_the_plain_read():
    pre = prefetch.start(H200)
    assert pre is not None  # 17.6 MB of JSON behind 1.3 MB of gzip: the ISIZE trailer counts
    mine, plain = kineto.build(pre.result(), H200), read_trace(H200)
    for table in ("dispatches", "api", "markers"):
        pd.testing.assert_frame_equal(getattr(mine, table), getattr(plain, table))
    assert (mine.clock, mine.source, mine.meta) == (plain.clock, plain.source, plain.meta)


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
