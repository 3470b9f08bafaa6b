"""A stream whose tokens reach the client at one instant is coalesced, however many chunks it was read in:
real vLLM 0.32 records from the loaded 2-core machine (data/raw/vllm-cpu), where each of the 32 tokens came
in its own SSE event but every event of a request was read at once."""

from __future__ import annotations

import json

from support import REPO

from perflib import runs

RUN = REPO / "data" / "raw" / "vllm-cpu" / "compiled" / "vllm-cpu" / "b4_c128_r2"


def records() -> list[dict]:
    return [json.loads(line) for line in (RUN / "requests.jsonl").read_text().splitlines() if line.strip()]


def test_one_event_a_token_read_at_one_instant_is_a_coalesced_stream():
    recs = records()
    assert all(len(r["chunk_ns"]) == r["completion_tokens"] for r in recs)  # one chunk a token...
    assert all(len(set(r["chunk_ns"])) == 1 for r in recs)  # ...all of a request's read at one instant
    window = runs.client_window(recs)
    assert window is not None and window.coalesced.startswith("32 tokens in 1 chunk")
    assert window.why.startswith("stream coalesced") and "staggered" not in window.why


def test_a_coalesced_level_has_no_decode_window_decomposition():
    row = runs.summarize_run(RUN)
    assert row["own_step_share"] is None and row["prefill_share"] is None
    assert row["steady_step_ms"] is None and "coalesced" in row["steady_step_reason"]


def test_tokens_read_at_their_own_instants_are_not_coalesced():
    recs = records()
    step = 7_000_000  # 7 ms a token, each read on its own
    spread = [{**r, "chunk_ns": [r["first_token_ns"] + k * step for k in range(r["completion_tokens"])],
               "last_token_ns": r["first_token_ns"] + (r["completion_tokens"] - 1) * step} for r in recs]
    window = runs.client_window(spread)
    assert window is not None and window.coalesced == ""
    bursts = [{**r, "chunk_ns": [t - (k % 2) * 10_000 for k, t in enumerate(r["chunk_ns"])]} for r in spread]
    assert runs.client_window(bursts).coalesced == ""  # pairs 10 us apart: 2 tokens an instant, under 4


def test_requests_each_read_at_one_instant_are_read_over_the_request_span_not_between_their_reads():
    # The loaded demo's shape: each request's tokens in one chunk, the requests' chunks read 0.5 ms apart.
    # The decode ran before either read: the span between the reads is no decode span.
    recs = records()
    assert all(r["first_token_ns"] == r["last_token_ns"] for r in recs)
    assert len({r["last_token_ns"] for r in recs}) > 1  # read at distinct instants
    window = runs.client_window(recs)
    assert window.kind == runs.REQUEST_SPAN
    assert window.start_ns == min(r["start_ns"] for r in recs)
    assert window.end_ns == max(r["last_token_ns"] for r in recs)
    assert "each request's tokens came at one instant" in window.why
    # one request whose tokens span time keeps the decode span (data/raw/vllm-cpu compiled-torch b4 r2's shape)
    later = [{**recs[0], "first_token_ns": recs[0]["first_token_ns"] - 300_000_000}, *recs[1:]]
    assert runs.client_window(later).kind == runs.DECODE_SPAN
