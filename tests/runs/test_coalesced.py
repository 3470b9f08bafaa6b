"""A stream whose tokens reach the client at one instant is coalesced, however many chunks it was read in:
real vLLM 0.32 records from the loaded 2-core machine (data/raw/vllm-cpu), where each of the 32 tokens came
in its own SSE event but every event of a request was read at once."""

from __future__ import annotations

import json

import pytest
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
    # one request whose tokens span time does not make the reads a decode span: the stream is still coalesced
    later = [{**recs[0], "first_token_ns": recs[0]["first_token_ns"] - 300_000_000}, *recs[1:]]
    window = runs.client_window(later)
    assert window.kind == runs.REQUEST_SPAN and "the token times are when the client read them" in window.why


MS = 1_000_000
T0 = 23_833_905_861_339


def loaded_llama_server() -> list[dict]:
    """A batch-2 level of the real CPU llama-server beside two CPU burners (tests/campaign/test_perf_profiler.py's
    perf arm, 2026-12-04): request 1's 24 tokens read at one instant 154.4 ms after the send, though its own
    timings say it decoded for 94.9 ms; request 2's first 11 tokens read at 154.7 ms, the rest over 144 ms."""
    reads = ([154_400_267] * 24, [154_714_144] * 11 + [166_238_019] * 3 + [
        190_178_016, 237_425_780, 245_105_602, 252_990_510, 261_080_693, 278_565_847, 285_217_612, 298_229_148,
        298_229_148, 298_338_261])
    timings = ({"prompt_n": 33, "prompt_ms": 7.772, "predicted_n": 24, "predicted_ms": 94.901},
               {"prompt_n": 33, "prompt_ms": 7.029, "predicted_n": 24, "predicted_ms": 184.686})
    out = []
    for k, (start, chunks, timing) in enumerate(zip((0, 51_858), reads, timings, strict=True)):
        chunk_ns = [T0 + c for c in chunks]
        out.append({"request_id": f"r{k}", "start_ns": T0 + start, "first_token_ns": chunk_ns[0],
                    "last_token_ns": chunk_ns[-1], "end_ns": chunk_ns[-1] + MS, "chunk_ns": chunk_ns,
                    "completion_tokens": 24, "timings": timing, "ok": True})
    return out


def test_a_coalesced_level_whose_reads_began_after_its_decode_is_read_over_the_request_span():
    recs = loaded_llama_server()
    first_read = min(r["first_token_ns"] for r in recs)
    # request 1 decoded for 94.9 ms by the server's own timings, all before it was read: a decode span from the
    # first read would miss most of it
    assert first_read - int(recs[0]["timings"]["predicted_ms"] * MS) > recs[0]["start_ns"]
    window = runs.client_window(recs)
    assert window.coalesced.startswith("24 tokens in 1 chunk") and window.kind == runs.REQUEST_SPAN
    assert window.start_ns == T0 and window.end_ns == max(r["last_token_ns"] for r in recs) < first_read + 144 * MS
    assert not window.client_steps and window.stagger_ns is None
    assert runs.steady_step(recs).step_ms is None


def test_a_coalesced_streams_prefill_is_the_servers_prompt_time_not_up_to_the_read():
    recs = loaded_llama_server()
    window = runs.client_window(recs)
    part = runs.decode_only(recs, window.start_ns, window.end_ns, coalesced=True)
    # both prompts sent 0.05 ms apart; prefill = send + the server's prompt_ms (7.8 ms the longer), not the
    # 154 ms to the first read
    longest = max(r["start_ns"] + int(r["timings"]["prompt_ms"] * MS) for r in recs) - window.start_ns
    assert part.prefill_share == pytest.approx(longest / (window.end_ns - window.start_ns), rel=1e-6)
    assert part.prefill_share < 0.05 and part.steps == 0 and not part.usable  # no chunk counts a step
    # without the server's timings the client's read is all there is: the prefill runs to it
    bare = [{**r, "timings": None} for r in recs]
    assert runs.decode_only(bare, window.start_ns, window.end_ns, coalesced=True).prefill_share > 0.5
    # a stream that is not coalesced keeps the client's first token: its time is the token's
    assert runs.decode_only(recs, window.start_ns, window.end_ns).prefill_share > 0.5
