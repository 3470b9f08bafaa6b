"""Client-side arithmetic: the steady step and the decode-window decomposition (docs/SCHEMA.md §4)."""

from __future__ import annotations

import statistics

import pytest

from perflib import runs


def _rec(rid: str, start: int, chunks: list[int]) -> dict:
    return {"request_id": rid, "start_ns": start, "first_token_ns": chunks[0], "last_token_ns": chunks[-1],
            "chunk_ns": chunks, "completion_tokens": len(chunks)}


def test_steady_step_uses_only_the_span_where_all_decode():
    ms = 1_000_000
    # request a decodes alone every 5 ms until b's first token at 100 ms, then both step at 10 ms;
    # b finishes at 200 ms, a continues alone at 5 ms.
    a = _rec("a", 0, [*range(0, 100 * ms, 5 * ms), *range(100 * ms, 200 * ms + 1, 10 * ms),
                      *range(205 * ms, 300 * ms, 5 * ms)])
    b = _rec("b", 50 * ms, list(range(100 * ms, 200 * ms + 1, 10 * ms)))
    steady = runs.steady_step([a, b])
    assert steady.span_start_ns == 100 * ms and steady.span_end_ns == 200 * ms
    assert steady.step_ms == pytest.approx(10.0)  # the 5 ms solo steps are outside the span
    assert steady.samples == 20


def test_steady_step_none_with_reason():
    ms = 1_000_000
    a = _rec("a", 0, list(range(0, 50 * ms, 5 * ms)))
    b = _rec("b", 0, list(range(60 * ms, 100 * ms, 5 * ms)))  # starts decoding after a finished
    assert runs.steady_step([a, b]).step_ms is None
    # the words the page prints: a's last token at 45 ms, b's first at 60 ms
    assert runs.steady_step([a, b]).reason == ("requests staggered: the last first token came 15 ms after the "
                                               "first request finished")
    few = runs.steady_step([_rec("c", 0, [0, ms, 2 * ms])])
    assert few.step_ms is None and "only 2" in few.reason
    failed = {"request_id": "d", "start_ns": 0, "first_token_ns": None, "last_token_ns": None}
    assert "produced no token" in runs.steady_step([a, failed]).reason


def test_steady_step_refuses_bursty_delivery():
    ms, us = 1_000_000, 1_000
    # 30 steps of 3 ms, but the client read them in bursts of 3: two of every three gaps are 20 us
    chunks, t = [], 0
    for _ in range(10):
        chunks += [t, t + 20 * us, t + 40 * us]
        t += 9 * ms
    steady = runs.steady_step([_rec("a", 0, chunks)])
    assert steady.step_ms is None and "bursts" in steady.reason
    assert steady.burst_share == pytest.approx(20 / 29)
    # a few bunched pairs among regular steps are tolerated and reported
    regular = list(range(0, 60 * ms, 3 * ms))
    regular.insert(5, regular[4] + 30 * us)
    ok = runs.steady_step([_rec("b", 0, regular)])
    assert ok.step_ms == pytest.approx(3.0) and ok.burst_share == pytest.approx(1 / 20)


def test_decomposition_matches_hand_computed_overlaps():
    ms = 1_000_000
    # a: prefill [0, 10], decodes 11 tokens over [10, 110]; b: prefill [0, 40] overlaps a's window
    # by 30 ms; c: prefill [0, 60] overlaps it by 50 ms; union of the others' prefill = 50 ms.
    a = {"request_id": "a", "start_ns": 0, "first_token_ns": 10 * ms, "last_token_ns": 110 * ms,
         "completion_tokens": 11}
    b = {"request_id": "b", "start_ns": 0, "first_token_ns": 40 * ms, "last_token_ns": 140 * ms,
         "completion_tokens": 11}
    c = {"request_id": "c", "start_ns": 0, "first_token_ns": 60 * ms, "last_token_ns": 160 * ms,
         "completion_tokens": 11}
    parts = runs.decode_window_decomposition([a, b, c], step_ms=4.0)
    by_id = {p["request_id"]: p for p in parts.per_request}
    assert by_id["a"]["prefill_ms"] == pytest.approx(50.0)
    assert by_id["b"]["prefill_ms"] == pytest.approx(20.0)  # c's prefill [0, 60] ∩ [40, 140]
    assert by_id["c"]["prefill_ms"] == pytest.approx(0.0)
    assert by_id["a"]["own_ms"] == pytest.approx(40.0)  # (11 − 1) × 4 ms
    assert by_id["a"]["other_ms"] == pytest.approx(100.0 - 40.0 - 50.0)
    assert parts.own_step_share == pytest.approx(0.4)  # each window is 100 ms, own 40 ms
    assert parts.prefill_share == pytest.approx(statistics.median([0.5, 0.2, 0.0]))
    assert parts.window_ms == pytest.approx(100.0)
    no_step = runs.decode_window_decomposition([a, b, c], step_ms=None)
    assert no_step.own_step_share is None and no_step.prefill_share == parts.prefill_share


def test_decomposition_shows_the_overlap_of_own_steps_and_prefill_and_adds_up():
    """llama.cpp puts other requests' prefill rows into the same steps as the decode rows: own steps
    and prefill together exceed the window, and the excess is the overlap, not a negative rest."""
    ms = 1_000_000
    a = {"request_id": "a", "start_ns": 0, "first_token_ns": 10 * ms, "last_token_ns": 110 * ms,
         "completion_tokens": 21}  # 20 steps of 4.5 ms = 90 ms of a 100 ms window
    b = {"request_id": "b", "start_ns": 0, "first_token_ns": 40 * ms, "last_token_ns": 140 * ms,
         "completion_tokens": 21}  # its prefill covers [10, 40] of a's window: 30 ms
    parts = runs.decode_window_decomposition([a, b], step_ms=4.5)
    p = {r["request_id"]: r for r in parts.per_request}["a"]
    assert (p["own_ms"], p["prefill_ms"]) == (pytest.approx(90.0), pytest.approx(30.0))
    assert p["overlap_ms"] == pytest.approx(20.0)  # 90 + 30 − 100
    assert p["other_ms"] == pytest.approx(0.0)
    for r in parts.per_request:  # every request's terms add up to its window, none negative
        assert r["own_ms"] + r["prefill_ms"] - r["overlap_ms"] + r["other_ms"] == pytest.approx(r["window_ms"])
        assert min(r["own_ms"], r["prefill_ms"], r["overlap_ms"], r["other_ms"]) >= -1e-9


# ---------------------------------------------------------------------------------------------
# Prompt fitting (the sizing arithmetic; the server's real /tokenize is exercised in
