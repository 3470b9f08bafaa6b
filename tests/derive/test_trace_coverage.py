"""A trace that does not cover its run's window is never attributed as if it did.

The committed H200 CUPTI capture of cuda-h200 ran out of buffer memory (`CUPTI_ERROR_OUT_OF_MEMORY` in
its server log): its batch-8 ~16K run has no record in the last part of its decode window, which the
page once counted as host gaps (61% of the step). The figures checked here are computed from the raw
files (the cut's Parquet, the request records, the manifest clocks), not from perflib's tables."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest
from support import REPO

from perflib import attribution, derive
from perflib.campaign import load_campaign
from perflib.config import RunSpec

RUN = REPO / "data" / "raw" / "cuda-h200" / "after-cupti" / "llamacpp-cuda" / "b8_c16384_r1"


def decode_window_unix_ns(run_dir) -> tuple[int, int]:
    """SERVERS.md §5.2's decode window (last first token → first last token) on the Unix clock."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    start = manifest["clocks"]["start"]
    offset = int(start["realtime_ns"]) - int(start["monotonic_ns"])
    records = [json.loads(x) for x in (run_dir / "requests.jsonl").read_text().splitlines() if x.strip()]
    ok = [r for r in records if r["ok"]]
    return max(r["first_token_ns"] for r in ok) + offset, min(r["last_token_ns"] for r in ok) + offset


@pytest.fixture(scope="module")
def h200():
    campaign = load_campaign(REPO / "campaigns" / "cuda-h200.yaml")
    return campaign, derive.build(campaign)


def test_the_committed_run_whose_capture_ended_early_is_not_attributed(h200):
    campaign, tables = h200
    last = int(pq.read_table(RUN / "trace.parquet", columns=["end_ns"]).column("end_ns").to_numpy().max())
    lo, hi = decode_window_unix_ns(RUN)
    assert lo < last < hi  # the capture's last record lies inside the window: the rest of it has none
    runs = tables.runs.set_index(["arm", "batch", "context"])
    loss = runs.loc[("after-cupti", 8, 16384), "trace_loss"]
    assert loss.startswith(f"capture ended {(last - lo) / 1e6:.0f} ms into the {(hi - lo) / 1e9:.2f} s decode "
                           f"window (its last {(hi - last) / 1e9:.2f} s has no record)")
    assert "CUPTI_ERROR_OUT_OF_MEMORY in server.log" in loss
    traced = tables.trace_runs
    assert not ((traced["arm"] == "after-cupti") & (traced["batch"] == 8) & (traced["context"] == 16384)).any()
    assert len(traced) == 5  # the other five traced runs cover their windows and stand
    others = tables.runs[(tables.runs["arm"] == "after-cupti") & ~((tables.runs["batch"] == 8)
                                                                   & (tables.runs["context"] == 16384))]
    assert (others["trace_loss"] == "").all()
    assert others["profiler_loss"].str.contains("CUPTI_ERROR_OUT_OF_MEMORY").all()  # shown, per start


def test_every_committed_batch_trace_covers_its_window_and_names_the_servers_exit():
    campaign = load_campaign(REPO / "campaigns" / "cuda-h200-batch.yaml")
    tables = derive.build(campaign)
    traced = tables.runs[tables.runs["arm"] == "default-cupti"]
    assert len(traced) == 15 and (traced["trace_loss"] == "").all() and len(tables.trace_runs) == 15
    assert traced["profiler_loss"].str.startswith("server exited with code 1 when stopped").all()


@pytest.mark.parametrize(("key", "where", "said"), [("capture_end_ns", 0.5, "capture ended"),
                                                     ("capture_start_ns", 0.5, "capture began"),
                                                     ("capture_end_ns", 1.0, "")])
def test_the_capture_reach_a_cut_records_decides(tmp_path, key, where, said):
    """A cut records how far the whole capture reached: a window past it is not covered, whatever the
    cut file holds (here the real cut holds the whole window; only the recorded reach is moved)."""
    campaign = load_campaign(REPO / "campaigns" / "cuda-h200.yaml")
    run_dir = tmp_path / "raw" / "cuda-h200" / "after-cupti" / "llamacpp-cuda" / "b4_c1024_r1"
    shutil.copytree(REPO / "data" / "raw" / "cuda-h200" / "after-cupti" / "llamacpp-cuda" / "b4_c1024_r1", run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    lo, hi = decode_window_unix_ns(run_dir)
    cut = manifest["trace_cut"]
    cut.update(capture_start_ns=cut["start_ns"], capture_end_ns=cut["end_ns"])
    cut[key] = lo + int((hi - lo) * where) if where < 1 else cut[key]
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    from dataclasses import replace

    mine = replace(campaign, data_dir=tmp_path)
    keys = {"campaign": "cuda-h200", "arm": "after-cupti", "backend": "llamacpp-cuda", "batch": 4, "context": 1024,
            "repeat": 1}
    done = derive.attribute_run(mine, "after-cupti", "llamacpp-cuda", run_dir, keys, None)
    assert done.loss.startswith(said) and (done.tables is None) is bool(said)
    assert RunSpec("cuda-h200", "after-cupti", "llamacpp-cuda", 4, 1024, 1, 128).run_dir(tmp_path) == run_dir


def test_coverage_allows_two_steps_at_each_end():
    window = attribution.window_from_range(1_000_000_000, 2_000_000_000)
    ok = attribution.coverage(window, (900_000_000, 1_990_000_000), 20_000_000)
    assert ok.covered and ok.describe() == ""
    short = attribution.coverage(window, (900_000_000, 1_412_000_000), 20_000_000)
    assert not short.covered and short.describe("decode window") == (
        "capture ended 412 ms into the 1.00 s decode window (its last 0.59 s has no record)")
    before = attribution.coverage(window, (100_000_000, 400_000_000), 20_000_000)
    assert before.describe() == "capture ended 600 ms before the 1.00 s window began"
