"""A level's repeats measured one after the other on one real llama-server, sharing what is per level
(`perflib.load.Repeats`): one warm-up, the scrape after repeat r as the scrape before repeat r+1 (byte for
byte, and the counters between them still exactly repeat r+1's own requests), prompts sized ahead, the
server's identity read once; a repeat measured again, or after an interruption, scrapes afresh."""

from __future__ import annotations

import pytest

from perflib import load, rundir, runs, sweep

pytestmark = pytest.mark.server

BATCH, CONTEXT, DECODE = 2, 48, 12


def test_repeats_share_the_warm_up_and_the_scrape_between_them(tmp_path, llama_server_binary, tiny_model):
    from perflib import server

    handle = server.start_local_llama(parallel=BATCH, context=CONTEXT, decode_tokens=DECODE,
                                      log_path=tmp_path / "server.log", model=tiny_model, binary=llama_server_binary,
                                      threads=1)
    try:
        spec = load.LevelSpec(handle.base_url, BATCH, CONTEXT, DECODE, 1, out_dir=tmp_path / "runs",
                              dialect="llamacpp", contention_threshold=None, server=load.ServerInfo.of(handle))
        shared = load.Repeats((1, 2, 3))
        results = [sweep.run_level(spec.at(BATCH, CONTEXT, r), shared) for r in (1, 2, 3)]
        assert [r.status for r in results] == ["complete"] * 3, [r.errors for r in results]
        first, second, third = (r.run_dir for r in results)
        manifests = [rundir.read_manifest(r.run_dir) for r in results]
        # one warm-up, sent by the first repeat; the others name it
        assert (first / rundir.WARMUP).is_file() and not (second / rundir.WARMUP).exists()
        assert [m["warmup_from"] for m in manifests] == [first.name] * 3
        assert all(m["warmup_ok"] for m in manifests)
        # the scrape after r is r+1's scrape before, byte for byte; the first repeat scraped its own
        assert manifests[0]["metrics_before_from"] is None
        assert [m["metrics_before_from"] for m in manifests[1:]] == [first.name, second.name]
        assert (second / rundir.METRICS_BEFORE).read_bytes() == (first / rundir.METRICS_AFTER).read_bytes()
        assert (third / rundir.METRICS_BEFORE).read_bytes() == (second / rundir.METRICS_AFTER).read_bytes()
        # nothing reached the server between: each repeat's counters moved by its own requests alone, as the
        # first repeat's, scraped for it, did (llama.cpp counts the tokens decoded after each first token)
        deltas = []
        for result in results:
            row = runs.summarize_run(result.run_dir)
            records = rundir.read_requests(result.run_dir / rundir.REQUESTS)
            assert row["metrics_problem"] in (None, "")
            assert row["decode_tokens"] == sum(r["completion_tokens"] - 1 for r in records)
            deltas.append((row["decode_tokens"], row["decode_steps"]))
        assert deltas[1][0] == deltas[2][0] == deltas[0][0]
        # prompts distinct per repeat, sized ahead by the first; the identity read once and recorded in each
        assert all(m["prompt_tokens"]["method"] == "tokenize" for m in manifests)
        assert manifests[1]["server"] == manifests[0]["server"]
        # a repeat measured again sizes new prompts, so it scrapes afresh (and the server is still warm)
        rundir.mark_incomplete(third, {}, "measured again on purpose")
        again = sweep.run_level(spec.at(BATCH, CONTEXT, 3), shared)
        manifest = rundir.read_manifest(again.run_dir)
        assert again.status == "complete" and manifest["metrics_before_from"] is None
        assert manifest["warmup_from"] == first.name and again.moved_aside is not None
        # after an interruption (a profiler toggled, a server started again) the next repeat warms up again
        shared.interrupted()
        rundir.mark_incomplete(second, {}, "measured again on purpose")
        after = rundir.read_manifest(sweep.run_level(spec.at(BATCH, CONTEXT, 2), shared).run_dir)
        assert after["warmup_from"] == second.name and after["metrics_before_from"] is None
        assert (second / rundir.WARMUP).is_file()
    finally:
        handle.stop()
