"""The decode-only part of a staggered level's decode span (`perflib.runs.decode_only`): where no request is
between its start and its first token, the longest such part, its steps as the client counts them, the share
of the window the prefill covers and how many requests decode there on average; checked against a count over
every millisecond of the window."""

from __future__ import annotations

import pytest
import synthetic

from perflib import runs

MS = synthetic.MS


def brute(records: list[dict], lo: int, hi: int) -> tuple[list[tuple[int, int]], int]:
    """(the free parts, ms by ms; the prefill-covered ms) of [lo, hi), from the records alone."""
    free, covered, start = [], 0, None
    for t in range(lo, hi, MS):
        busy = any(r["start_ns"] <= t < r["first_token_ns"] for r in records)
        covered += busy
        if not busy and start is None:
            start = t
        if busy and start is not None:
            free.append((start, t))
            start = None
    if start is not None:
        free.append((start, hi))
    return free, covered


def test_a_staggered_spans_decode_only_part_is_the_last_first_token_to_the_end() -> None:
    records = synthetic.requests_of([10.0, 200.0, 500.0], 16, 2.0)  # sent together, prefills one after another
    span = runs.client_window(records)
    assert span.kind == runs.DECODE_SPAN
    part = runs.decode_only(records, span.start_ns, span.end_ns)
    free, covered = brute(records, span.start_ns, span.end_ns)
    assert (part.start_ns, part.end_ns) == free[-1] == (max(r["first_token_ns"] for r in records), span.end_ns)
    assert part.parts == len(free) == 1 and part.usable
    assert part.prefill_share == pytest.approx(covered / ((span.end_ns - span.start_ns) / MS), abs=0.01)
    last = max(records, key=lambda r: r["last_token_ns"])
    assert part.steps == sum(1 for t in last["chunk_ns"] if part.start_ns < t <= part.end_ns) == 15
    assert part.decoding == pytest.approx(1.0)  # only the last request is still decoding there
    assert "15 steps, 1.0 requests decoding on average" in part.describe()


def test_requests_sent_apart_leave_several_parts_and_the_longest_is_taken() -> None:
    records = synthetic.requests_of([100.0, 400.0], 64, 2.0, start_ms=[0.0, 250.0])
    span = runs.client_window(records)
    part = runs.decode_only(records, span.start_ns, span.end_ns)
    free, _ = brute(records, span.start_ns, span.end_ns)
    assert part.parts == len(free) == 2 and "(the longest of 2)" in part.describe()
    longest = max(free, key=lambda p: p[1] - p[0])
    assert (part.start_ns, part.end_ns) == longest
    ticks = range(part.start_ns, part.end_ns, MS)  # requests decoding, ms by ms
    mean = sum(sum(r["first_token_ns"] <= t < r["last_token_ns"] for r in records) for t in ticks) / len(ticks)
    assert 0 < part.decoding < 1 and part.decoding == pytest.approx(mean, abs=0.01)


def test_too_few_steps_a_coalesced_stream_or_no_send_times_keep_the_span() -> None:
    short = synthetic.requests_of([10.0, 500.0], 6, 2.0)  # the last request decodes 5 steps alone
    span = runs.client_window(short)
    part = runs.decode_only(short, span.start_ns, span.end_ns)
    assert part.steps == 5 < runs.MIN_DECODE_ONLY_STEPS and not part.usable and part.prefill_share > 0.9
    records = synthetic.requests_of([10.0, 500.0], 64, 2.0)
    span = runs.client_window(records)
    assert runs.decode_only(records, span.start_ns, span.end_ns).usable
    assert not runs.decode_only(records, span.start_ns, span.end_ns, coalesced=True).usable  # chunks time no step
    unsent = [{k: v for k, v in r.items() if k != "start_ns"} for r in records]
    assert runs.decode_only(unsent, span.start_ns, span.end_ns) is None
