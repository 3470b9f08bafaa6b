"""A decode window whenever decode happened (issue 27, DESIGN.md): long prefills staggered so that the first
requests finish before the last starts decoding, and streams that arrive in one chunk, are read over the
run's decode span from the server side, say which window and why, and are never a lost trace."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import synthetic

from perflib import attribution, derive, rundir, runs, traces
from perflib import verdicts as v
from perflib.campaign import load_campaign
from perflib.verdicts import MEASUREMENTS


@pytest.fixture(scope="module")
def staggered(tmp_path_factory):
    campaign = load_campaign(synthetic.shapes_campaign(tmp_path_factory.mktemp("staggered")))
    return campaign, derive.build(campaign)


@pytest.fixture(scope="module")
def coalesced(tmp_path_factory):
    campaign = load_campaign(synthetic.shapes_campaign(tmp_path_factory.mktemp("coalesced"), coalesced=True))
    return campaign, derive.build(campaign)


def test_staggered_levels_say_why_suggest_decode_tokens_and_lose_no_trace(staggered):
    campaign, tables = staggered
    frame = tables.runs
    assert (frame["trace_loss"].fillna("") == "").all()  # the traced arm's traces are whole: nothing lost
    for row in frame.itertuples(index=False):
        run_dir = rundir.campaign_run_dir(campaign.data_dir, campaign.name, row.arm, row.backend, row.batch,
                                          row.context, row.repeat)
        records = rundir.read_requests(run_dir / rundir.REQUESTS)
        stagger = max(r["first_token_ns"] for r in records) - min(r["last_token_ns"] for r in records)
        if stagger < 0:  # ~1K, and every batch 1: a window with every request decoding
            assert row.decode_window == runs.ALL_DECODING and row.steady_step_ms > 0
            continue
        assert (row.batch, row.context) == (4, 16384)
        assert row.decode_window == runs.DECODE_SPAN and pd.isna(row.steady_step_ms)
        why = f"requests staggered: the last first token came {stagger / 1e9:.1f} s after the first request finished"
        assert row.decode_window_why == why and row.steady_step_reason == why
        # the first request must decode through the stagger at the counter step, then 8 steps with all decoding
        expected = campaign.decode_tokens + math.ceil(stagger / 1e6 / row.decode_step_ms) + runs.MIN_STEADY_SAMPLES
        assert row.suggested_decode_tokens == expected
        assert row.prefill_share == pytest.approx(1.0) and pd.isna(row.own_step_share)
    traced = tables.trace_runs.set_index(["batch", "context", "repeat"])
    # the traces are read over the span's decode-only part (no request in prefill), its steps the client's there
    assert set(traced.loc[(4, 16384), "window"]) == {"decode-only part"}
    assert set(traced.loc[(4, 1024), "window"]) == {"decode window"}
    assert all(w.startswith("requests staggered") and "read over the decode-only part" in w
               for w in traced.loc[(4, 16384), "window_why"])
    assert (traced["window_prefill_share"] == 0).all()
    assert set(traced.loc[(4, 16384), "steps"]) == {campaign.decode_tokens - 1}  # the last request's, alone
    assert set(traced.loc[(4, 16384), "step_method"]) == {"request records (decode-only part)"}


def test_staggered_levels_trace_verdicts_are_decided_over_the_decode_only_part(staggered):
    campaign, tables = staggered
    verdicts = v.evaluate(campaign.candidates, tables, v.Context.of(campaign))
    there = [x for x in verdicts if MEASUREMENTS[x.measure].trace and (x.batch, x.context) == (4, 16384)]
    assert there and all(x.window_prefill is None and "not decided" not in x.threshold for x in there)


def test_a_coalesced_streams_trace_verdicts_are_not_decided_saying_how_much_prefill_the_window_holds(coalesced):
    """Every token at one instant: no chunk times a step, so no decode-only part can be counted; the traces are
    read over the span, which the requests' prefill fills, and each trace verdict is measured, shown, and
    inconclusive with that reason, on the first screen and in the grid too."""
    campaign, tables = coalesced
    shares = pd.to_numeric(tables.trace_runs["window_prefill_share"])
    assert (shares > 0).all() and (tables.trace_runs["window"] != "decode-only part").all()
    ctx = v.Context.of(campaign)
    verdicts = v.evaluate(campaign.candidates, tables, ctx)
    traced = [x for x in verdicts if MEASUREMENTS[x.measure].trace and x.outcome != v.NOT_MEASURED]
    assert traced and all(x.outcome == v.INCONCLUSIVE and x.value is not None for x in traced)
    for x in traced:
        at = tables.trace_runs[(tables.trace_runs["batch"] == x.batch) & (tables.trace_runs["context"] == x.context)]
        batches = {x.batch, 1} if MEASUREMENTS[x.measure].rests_on_batch1 else {x.batch}
        held = tables.trace_runs[tables.trace_runs["batch"].isin(batches) & (tables.trace_runs["context"] == x.context)]
        assert len(at) and x.window_prefill == pytest.approx(pd.to_numeric(held["window_prefill_share"]).max())
        assert x.threshold == f"not decided: the window holds requests' prefill ({100 * x.window_prefill:.1f}% of it)"
        assert x.evidence.endswith(f": inconclusive ({x.threshold})")
    lines = [a.line for a in v.answers(verdicts, ctx) if any(MEASUREMENTS[x.measure].trace for x in a.verdicts)]
    assert lines and all(", not decided at " in line and "the window holds requests' prefill (" in line
                         for line in lines if "inconclusive" in line)
    from perflib.report import sections  # the page's grid: layer 4, only here

    grid = sections.level_grid(verdicts, ctx)
    assert f"(window {100 * traced[0].window_prefill:.0f}% prefill)" in grid


def test_a_stream_in_one_chunk_is_said_and_decode_tok_s_is_not_made_up(coalesced):
    campaign, tables = coalesced
    frame = tables.runs
    assert (frame["trace_loss"].fillna("") == "").all()
    for row in frame.itertuples(index=False):
        assert pd.isna(row.steady_step_ms) and pd.isna(row.decode_tok_s)
        tokens = f"stream coalesced: {campaign.decode_tokens} tokens in 1 chunk"
        assert row.steady_step_reason.startswith(tokens) and row.decode_tok_s_reason.startswith(tokens)
        assert row.decode_step_ms > 0  # the server's counters measured the decode
        # each request's tokens at one instant: the reads time nothing of the decode, at any batch
        assert row.decode_window == runs.REQUEST_SPAN
    assert len(tables.trace_runs) == len(frame[frame["arm"] == "slots-traced"])


def test_a_coalesced_level_counts_its_steps_from_the_servers_counters_over_the_request_span(coalesced):
    """No chunk times a step and the trace marks none: the request span holds every step of the level, so the
    server's Δdecode_steps counts them (before the dispatch rhythm's guess), on the page and in `trace summary`."""
    campaign, tables = coalesced
    counted = tables.runs[tables.runs["arm"] == "slots-traced"].set_index(["batch", "context", "repeat"])
    for row in tables.trace_runs.itertuples(index=False):
        assert row.window == runs.REQUEST_SPAN and row.step_method == attribution.level.SPAN_COUNTERS
        assert row.steps == counted.loc[(row.batch, row.context, row.repeat), "decode_steps"] > 0
        assert not row.steps_guessed
        run_dir = rundir.campaign_run_dir(campaign.data_dir, campaign.name, "slots-traced", "gpu", row.batch,
                                          row.context, row.repeat)
        trace = traces.read_trace(run_dir / "trace.parquet")
        level = attribution.manifest_window(trace, run_dir)  # `trace summary --manifest`: the page's count
        assert level.kind == runs.REQUEST_SPAN and level.count.count == row.steps


def test_client_window_kinds():
    ms = synthetic.MS
    overlapping = synthetic.requests_of([10.0, 30.0], 16, 2.0)
    window = runs.client_window(overlapping)
    assert (window.kind, window.why, window.stagger_ns) == (runs.ALL_DECODING, "", None)
    assert (window.start_ns, window.end_ns) == (overlapping[1]["first_token_ns"], overlapping[0]["last_token_ns"])
    apart = synthetic.requests_of([10.0, 500.0], 16, 2.0)
    window = runs.client_window(apart)
    assert window.kind == runs.DECODE_SPAN and window.stagger_ns == 500 * ms - (10 + 15 * 2) * ms
    assert window.why == "requests staggered: the last first token came 460 ms after the first request finished"
    assert runs.overlap_decode_tokens(window, 2.0, 16) == 16 + 230 + runs.MIN_STEADY_SAMPLES
    one = synthetic.requests_of([10.0], 64, 2.0, chunk_tokens=64)
    window = runs.client_window(one)
    assert window.kind == runs.REQUEST_SPAN and window.why.startswith("stream coalesced: 64 tokens in 1 chunk;")
    assert runs.overlap_decode_tokens(window, 2.0, 64) is None  # more tokens would not uncoalesce a stream
    partly = synthetic.requests_of([10.0, 12.0], 64, 2.0, chunk_tokens=16)  # 4 chunks of 16 tokens
    window = runs.client_window(partly)
    assert window.kind == runs.REQUEST_SPAN and not window.client_steps  # reads of 16 tokens time no decode
    assert window.coalesced == "64 tokens in 4 chunks (the median of 2 requests)"
    assert "the token times are when the client read them" in window.why
    assert runs.client_window([{"first_token_ns": None, "last_token_ns": None}]) is None
