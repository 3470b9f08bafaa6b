"""Server-trace attribution uses the decode window of SERVERS.md §5.2, not the whole level."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from perflib import attribution
from perflib.errors import PerflibError

MS = 1_000_000


def _level(tmp_path, first_tokens, last_tokens, step_ns=11 * MS):
    """A run folder: clocks with realtime = monotonic + OFFSET, and requests on CLOCK_MONOTONIC."""
    offset = 1_700_000_000 * 10**9
    t0 = 5 * 10**9
    clocks = {"start": {"monotonic_ns": t0, "boottime_ns": t0 + 7, "realtime_ns": t0 + offset},
              "end": {"monotonic_ns": t0 + 10**10, "boottime_ns": t0 + 10**10 + 7, "realtime_ns": t0 + 10**10 + offset}}
    (tmp_path / "manifest.json").write_text(json.dumps({"batch": len(first_tokens), "context": 1, "repeat": 1,
                                                        "clocks": clocks}))
    with open(tmp_path / "requests.jsonl", "w") as out:
        for i, (f, la) in enumerate(zip(first_tokens, last_tokens, strict=True)):
            chunks = list(range(t0 + f, t0 + la + 1, step_ns))
            out.write(json.dumps({"request_id": i, "ok": True, "first_token_ns": t0 + f, "last_token_ns": chunks[-1],
                                  "chunk_ns": chunks}) + "\n")
    return t0, offset


def _trace(starts_ms, dur_ms, t0, offset):
    s = np.asarray([t0 + offset + int(x * MS) for x in starts_ms], dtype=np.int64)
    d = pd.DataFrame({"kernel": "k", "start_ns": s, "end_ns": s + int(dur_ms * MS), "device": 0, "queue": -1,
                      "stream": 7, "correlation_id": -1, "kind": "kernel", "source": "test"})

    class T:
        dispatches = d
        clock = "realtime"
        meta: dict = {}

    return T()


def test_decode_window_excludes_prefill_and_counts_steps_inside(tmp_path):
    # request 1 starts decoding at 2 s (after a 2 s prefill), request 0 at 0.5 s; both run to ~3.4 s
    t0, offset = _level(tmp_path, [500 * MS, 2000 * MS], [3400 * MS, 3400 * MS])
    prefill = [0.0]  # one 2 s kernel at the level start
    steps = [2000 + 11 * i for i in range(127)]  # 10 ms busy + 1 ms gap per step
    trace = _trace(prefill + steps, 10, t0, offset)
    trace.dispatches.loc[0, "end_ns"] = trace.dispatches.loc[0, "start_ns"] + 2000 * MS
    decode = attribution.decode_window_from_run(trace, tmp_path)
    assert decode.window.start_ns == t0 + offset + 2000 * MS  # the last request's first token
    assert "realtime clock" in decode.window.label
    summary = attribution.summarize(trace, window=decode.window, steps=decode.steps)
    assert decode.steps is not None and abs(decode.steps - 127) <= 1
    assert summary.busy_ms_per_step == pytest.approx(10.0, rel=0.02)
    assert summary.gap_ms_per_step == pytest.approx(1.0, rel=0.1)
    level = attribution.summarize(trace, window=attribution.window_from_manifest(trace, str(tmp_path)), steps=127)
    assert level.busy_ms_per_step > 20  # the whole level counts the 2 s prefill as busy: the bug this guards
    assert summary.to_dict()["straddling_start"] == 0


def test_dispatches_running_into_the_window_are_clipped_and_counted():
    trace = _trace([0.0, 5.0, 20.0], 10, 0, 0)  # [0,10) [5,15) [20,30) ms
    window = attribution.Window(8 * MS, 30 * MS, "w")
    summary = attribution.summarize(trace, window=window)
    assert summary.to_dict()["straddling_start"] == 2
    assert summary.busy_ms == pytest.approx(7.0 + 10.0)  # [8,15) and [20,30)


def test_staggered_requests_are_read_over_the_decode_span_with_the_trace_s_own_steps(tmp_path):
    """No window with both requests decoding (request 0 ends at 2 s, request 1's first token is at 3 s): the
    run's decode span, first first token to last last token, with no client step count, and why."""
    t0, offset = _level(tmp_path, [100 * MS, 3000 * MS], [2000 * MS, 4000 * MS])
    trace = _trace([0, 3000], 1, t0, offset)
    decode = attribution.decode_window_from_run(trace, tmp_path)
    records = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    last = max(r["last_token_ns"] for r in records)
    assert (decode.window.start_ns, decode.window.end_ns) == (t0 + offset + 100 * MS, last + offset)
    assert decode.steps is None and decode.kind == "decode span" and "decode span of" in decode.window.label
    assert decode.why == "requests staggered: the last first token came 1.0 s after the first request finished"
    level = attribution.run_window(trace, tmp_path, "decode")
    assert level.count is None and level.kind == "decode span" and level.why == decode.why


def test_a_stream_in_one_chunk_is_read_over_the_requests_span(tmp_path):
    """One request whose 64 tokens came in one chunk: no decode span at all on the client's clock, so the
    window runs from the request sent to its last token, and the trace counts the steps."""
    _level(tmp_path, [0], [0])
    record = json.loads((tmp_path / "requests.jsonl").read_text())
    t0 = record["first_token_ns"]
    record.update(start_ns=t0 - 500 * MS, completion_tokens=64, chunk_ns=[t0])
    (tmp_path / "requests.jsonl").write_text(json.dumps(record) + "\n")
    trace = _trace([0], 1, t0, 1_700_000_000 * 10**9)
    decode = attribution.decode_window_from_run(trace, tmp_path)
    assert decode.kind == "request span" and decode.steps is None
    assert decode.window.duration_ns == 500 * MS
    assert decode.why.startswith("stream coalesced: 64 tokens in 1 chunk; every token came at one instant")


def test_no_successful_request_is_said(tmp_path):
    _level(tmp_path, [100 * MS], [2000 * MS])
    record = json.loads((tmp_path / "requests.jsonl").read_text())
    (tmp_path / "requests.jsonl").write_text(json.dumps({**record, "ok": False}) + "\n")
    with pytest.raises(PerflibError, match="no successful request"):
        attribution.decode_window_from_run(_trace([0], 1, 0, 0), tmp_path)


def test_a_staggered_real_level_is_read_over_its_decode_only_part(tmp_path):
    """The committed H200 capture at batch 16 ~16K (slots-cupti): no window has every request decoding, and
    over the run's decode span the other requests' prefill ubatches (llama.cpp's mul_mat_q) run among the
    decode steps. The trace is read over the decode-only part instead, from the last first token to the last
    request's last token, its steps the client's chunks there: no prefill kernel is left in it."""
    from support import REPO  # the committed campaign's raw data

    from perflib import rundir, runs
    from perflib.traces import ReadMode, read_trace

    run = next((REPO / "data/raw/cuda-h200-answer/slots-cupti").glob("*/b16_c16384_r1"))
    trace = read_trace(run / "trace.parquet", ReadMode.LEAN)
    records = [r for r in rundir.read_requests(run / rundir.REQUESTS) if r.get("ok")]
    decode = attribution.decode_window_from_run(trace, run)
    clocks = rundir.read_manifest(run)["clocks"]["start"]
    offset = clocks[f"{decode.window.clock}_ns"] - clocks["monotonic_ns"]
    last = max(records, key=lambda r: r["last_token_ns"])
    lo = max(r["first_token_ns"] for r in records)
    assert decode.kind == "decode-only part" and decode.prefill_share == 0.0
    assert (decode.window.start_ns, decode.window.end_ns) == (lo + offset, last["last_token_ns"] + offset)
    assert decode.steps == sum(1 for t in last["chunk_ns"] if lo < t <= last["last_token_ns"]) >= 8
    assert decode.why.startswith("requests staggered") and "requests decoding on average" in decode.why
    span = runs.client_window(records)
    whole = attribution.summarize(trace, window=attribution.Window(span.start_ns + offset, span.end_ns + offset),
                                  classes="llamacpp-cuda")
    part = attribution.summarize(trace, window=decode.window, classes="llamacpp-cuda", steps=decode.steps)
    assert "mul_mat_q" in set(whole.classes["kernel_class"])  # the prefill ubatches' GEMMs, over the span
    assert "mul_mat_q" not in set(part.classes["kernel_class"]) and part.steps == decode.steps
    level = attribution.run_window(trace, run, "decode")
    assert level.kind == "decode-only part" and level.count.source == "request records (decode-only part)"


def test_a_decode_only_part_too_short_keeps_the_span_and_says_how_much_prefill_it_holds(tmp_path):
    """Requests sent together whose last one decodes 5 steps after the others finished: fewer than 8, so the
    span is kept, its share of prefill said (`prefill_share`, `why`)."""
    t0, offset = _level(tmp_path, [100 * MS, 3000 * MS], [2000 * MS, 3044 * MS])
    records = [{**json.loads(line), "start_ns": t0} for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    decode = attribution.decode_window_from_run(_trace([0, 3000], 1, t0, offset), tmp_path)
    span = max(r["last_token_ns"] for r in records) - (t0 + 100 * MS)
    assert decode.kind == "decode span" and decode.steps is None
    assert decode.prefill_share == pytest.approx((3000 - 100) * MS / span)
    assert f"the window holds requests' prefill ({100 * decode.prefill_share:.1f}% of it): its decode-only part " \
           "holds 4 steps, fewer than 8" in decode.why
    level = attribution.run_window(_trace([0, 3000], 1, t0, offset), tmp_path, "decode")
    assert level.prefill_share == decode.prefill_share and level.kind == "decode span"
