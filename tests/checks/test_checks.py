"""Each level's self-checks on runs built to fail one check each, and contended runs left out."""

from __future__ import annotations

import pandas as pd

from perflib import checks


def run(repeat: int, step: float, batch: int = 1, steady: float | None = None, tokens: int = 127,
        client: int = 127, contended: bool = False, **extra) -> dict:
    return {"arm": "a", "backend": "cpu", "batch": batch, "context": 64, "repeat": repeat, "status": "complete",
            "decode_step_ms": step, "steady_step_ms": steady if steady is not None else step,
            "decode_tokens": tokens, "client_decode_tokens": client, "contended": contended,
            "contention_why": "contended: other processes used 80% of the 2 CPUs" if contended else None, **extra}


def level(rows: list[dict], trace_runs: pd.DataFrame | None = None) -> dict:
    frame = pd.DataFrame(rows)
    frame["left_out"] = checks.left_out(frame)
    (out,) = checks.level_checks(frame, trace_runs).to_dict("records")
    return out


def test_a_quiet_consistent_level_passes_every_check():
    out = level([run(1, 1.50), run(2, 1.52), run(3, 1.49)])
    assert (out["suspect"], out["checks"], out["used"], out["left_out"]) == (False, "", 3, 0)


def test_repeats_far_apart_are_suspect():
    out = level([run(1, 4.7), run(2, 5.1), run(3, 143.5)])
    assert out["suspect"] and "spread: repeats' decode step 4.70-143.50 ms (30.53x" in out["checks"]


def test_counter_step_far_from_the_client_at_batch_1_is_suspect_and_not_at_batch_4():
    assert "counter_vs_client" in level([run(1, 5.5, steady=1.5)])["checks"]
    assert level([run(1, 5.5, batch=4, steady=1.5)])["checks"] == ""  # prefill mixes in at batch > 1


def test_tokens_the_server_counted_must_be_those_the_client_saw():
    out = level([run(1, 1.5, tokens=100, client=127)])
    assert "tokens: r1: the server counted 100 decode tokens, the client saw 127" in out["checks"]


def test_a_trace_that_counted_layers_as_steps_is_suspect():
    trace = pd.DataFrame([{"arm": "a", "backend": "cpu", "batch": 1, "context": 64, "repeat": 1,
                           "steps": 16 * 100, "window_ms": 150.0}])  # 100 steps of 1.5 ms, 16 layers each
    out = level([run(1, 1.5)], trace)
    assert "trace_steps: r1: the trace counts 1600 steps in its 150 ms decode window" in out["checks"]
    good = trace.assign(steps=100)
    assert level([run(1, 1.5)], good)["checks"] == ""


def test_contended_runs_are_left_out_and_counted():
    rows = [run(1, 1.5), run(2, 40.0, contended=True), run(3, 1.6)]
    out = level(rows)
    assert (out["used"], out["complete"], out["left_out"]) == (2, 3, 1)
    assert out["left_out_why"].startswith("contended: other processes used 80%")
    frame = pd.DataFrame(rows)
    frame["left_out"] = checks.left_out(frame)
    assert list(checks.usable(frame)["repeat"]) == [1, 3]
    reasons = checks.suspect_reasons(checks.level_checks(frame), ["a"], "cpu", [1], 64)
    assert reasons == ["a b1 c64: 2 of 3 runs used, 1 left out (contended: other processes used 80% of the 2 CPUs)"]


def _gauges(*answered: bool, every_s: float = 0.5, timeout_s: float = 10.0) -> list[dict]:
    """Gauge samples as the sampler writes them: a scrape that failed took its timeout before the next began."""
    out, t = [], 1_000_000_000
    for ok in answered:
        out.append({"t_ns": t, "gauges": {"requests_processing": 1.0} if ok else None,
                    **({} if ok else {"error": "PerflibError: /metrics: could not scrape (ReadTimeout: timed out)"})})
        t += int((every_s if ok else timeout_s) * 1e9)
    return out


def test_unanswered_is_the_longest_span_from_a_failed_scrape_to_the_next_answered_one():
    from perflib.runs import unanswered

    assert unanswered([]) == {"unanswered_s": None, "unanswered_scrapes": None}
    assert unanswered(_gauges(True, True, True)) == {"unanswered_s": 0.0, "unanswered_scrapes": 0}
    # two stalls: 3 failed scrapes (30 s) and 1 (10 s); the longest counts, every failure is counted
    figures = unanswered(_gauges(True, False, False, False, True, True, False, True))
    assert figures == {"unanswered_s": 30.0, "unanswered_scrapes": 4}
    # a stall lasting to the end of the run: up to the last failed scrape's start, a lower bound
    assert unanswered(_gauges(True, False, False)) == {"unanswered_s": 10.0, "unanswered_scrapes": 2}


def test_a_server_that_left_metrics_unanswered_mid_run_makes_its_level_suspect():
    quiet = level([run(1, 12.4, batch=16, unanswered_s=0.0, unanswered_scrapes=0),
                   run(2, 12.5, batch=16, unanswered_s=0.0, unanswered_scrapes=0)])
    assert quiet["checks"] == ""
    stalled = level([run(1, 13.7, batch=16, unanswered_s=0.0, unanswered_scrapes=0),
                     run(2, 13.6, batch=16, unanswered_s=150.2, unanswered_scrapes=15)])
    assert stalled["suspect"]
    assert ("unanswered: r2: the server left /metrics unanswered for 150.2 s (15 scrapes timed out or failed)"
            in stalled["checks"])
    assert "r1" not in stalled["checks"]
