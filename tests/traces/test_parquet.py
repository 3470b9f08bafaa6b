"""perflib's compact Parquet trace keeps the dispatches, the clock and the source of the original."""

from __future__ import annotations

import pandas as pd
import pytest
from support import DATA

from perflib.errors import InputError
from perflib.traces import read_trace
from perflib.traces.parquet import write_trace_parquet

SAMPLE = DATA / "traces" / "cupti_h200_sample.txt.gz"


def test_round_trip_keeps_dispatches_clock_and_source(tmp_path):
    trace = read_trace(SAMPLE)
    out = write_trace_parquet(trace, tmp_path / "t.parquet")
    back = read_trace(out)
    assert back.clock == trace.clock == "realtime"
    assert back.source == trace.source == "cupti-text"
    pd.testing.assert_frame_equal(back.dispatches.reset_index(drop=True),
                                  trace.dispatches.reset_index(drop=True), check_categorical=False)


def test_cut_keeps_only_dispatches_overlapping_the_window(tmp_path):
    trace = read_trace(SAMPLE)
    d = trace.dispatches
    lo, hi = int(d.start_ns.quantile(0.25)), int(d.start_ns.quantile(0.75))
    back = read_trace(write_trace_parquet(trace, tmp_path / "cut.parquet", lo, hi))
    expected = d[(d.end_ns > lo) & (d.start_ns < hi)]
    assert 0 < len(back.dispatches) == len(expected) < len(d)
    assert back.meta["cut"] == {"start_ns": lo, "end_ns": hi}


def test_a_parquet_file_that_is_not_a_perflib_trace_is_named(tmp_path):
    path = tmp_path / "other.parquet"
    pd.DataFrame({"x": [1, 2]}).to_parquet(path)
    with pytest.raises(InputError, match="perflib trace"):
        read_trace(path)
