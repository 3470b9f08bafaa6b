"""A level's streams from several worker processes: same records, one clock, one file."""

from __future__ import annotations

import asyncio

import pytest

from perflib import load, rundir, safeinput, sweep
from perflib.load import workers
from perflib.server import start_llama_server


def test_split_deals_requests_round_robin_to_non_empty_shares():
    assert workers.split(5, 2) == [[0, 2, 4], [1, 3]]
    assert workers.split(2, 4) == [[0], [1]]
    assert workers.split(3, 1) == [[0, 1, 2]]


def test_a_worker_that_dies_is_reported_with_its_message():
    job = [load.RequestSpec("http://127.0.0.1:9", "p", 2, "x", 1, 1, 1, endpoint="no such endpoint")]  # a KeyError there
    seen: list = []
    with pytest.raises(workers.WorkerFailed, match=r"ended after 0 of 1 requests: .*KeyError"):
        asyncio.run(workers.run_wave([job], seen.append, lambda: None))
    assert seen == []


@pytest.mark.server
def test_two_workers_give_every_record_in_one_file_on_one_clock(llama_server_binary, tiny_model, tmp_path):
    batch, decode = 6, 24
    with start_llama_server(tiny_model, parallel=batch, ctx_size=batch * (96 + decode + 64), threads=1,
                            binary=llama_server_binary, log_path=tmp_path / "server.log") as handle:
        result = sweep.run_level(load.LevelSpec(handle.base_url, batch, 64, decode, 1, out_dir=tmp_path / "runs",
                                                server=load.ServerInfo.of(handle), workers=2,
                                                contention_threshold=None))
    assert result.status == rundir.COMPLETE, result.errors
    run = result.run_dir
    manifest = rundir.read_manifest(run)
    assert manifest["workers"] == 2
    assert sorted(p.name for p in run.glob("*.jsonl")) == ["gauges.jsonl", "requests.jsonl", "warmup.jsonl"]
    records = safeinput.read_jsonl(run / "requests.jsonl")
    assert sorted(r["request_id"] for r in records) == [f"{run.name}-{i}" for i in range(batch)]
    start, end = manifest["clocks"]["start"]["monotonic_ns"], manifest["clocks"]["end"]["monotonic_ns"]
    for rec in records:
        assert rec["ok"], rec["error"]
        assert rec["completion_tokens"] == decode and 0 < len(rec["chunk_ns"]) <= decode  # UTF-8 may bundle
        assert start < rec["start_ns"] < rec["first_token_ns"] <= rec["last_token_ns"] <= rec["end_ns"] < end
        assert rec["chunk_ns"] == sorted(rec["chunk_ns"])
    # the records of both workers interleave on the one clock: the server decodes them in one batch
    firsts = sorted(r["first_token_ns"] for r in records)
    lasts = sorted(r["last_token_ns"] for r in records)
    assert firsts[-1] < lasts[0]
    assert load.RequestRecord(**records[0]).to_dict() == records[0]  # the schema round-trips
