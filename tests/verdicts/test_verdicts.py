"""Verdicts: thresholds, every outcome, and the seed investigation's verdicts from its raw files.

The seed test builds derived rows from the public mlxcel gfx1151 outputs (harness prints s1/s3/s5,
trace analysis s6) and checks that the default playbook reaches the seed's conclusions; every
number is computed from those files here, none is typed in.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from perflib import checks
from perflib import verdicts as v
from perflib.config import CandidateSpec, FallbackSpec, GateSpec, read_playbook
from perflib.derive import DerivedTables, normalize

# ------------------------------------------------------------------------------ thresholds


def test_parse_threshold_forms():
    t = v.parse_threshold("< 15%")
    assert (t.op, t.number, t.percent) == ("<", 15.0, True)
    assert t.value("fraction") == pytest.approx(0.15)
    assert t.value("pct") == 15.0  # a change in % is already in percent
    assert v.parse_threshold(">=0.75").holds(0.75, "ratio")
    assert not v.parse_threshold("> 0.75").holds(0.75, "ratio")
    assert v.parse_threshold("<= -10").holds(-60.5, "pct")
    for bad in ("15%", "about 3", "=> 2", "", None):
        with pytest.raises(ValueError):
            v.parse_threshold(bad)


def test_decide_every_outcome():
    assert v.decide(0.40, ">= 30%", "< 15%", "fraction") == (v.CONFIRMED, ">= 30%")
    assert v.decide(0.05, ">= 30%", "< 15%", "fraction") == (v.RULED_OUT, "< 15%")
    outcome, text = v.decide(0.20, ">= 30%", "< 15%", "fraction")
    assert outcome == v.INCONCLUSIVE and "< 15%" in text and ">= 30%" in text
    assert v.decide(None, ">= 30%", "< 15%", "fraction")[0] == v.NOT_MEASURED


# ------------------------------------------------------------------------------ small tables


def _runs(rows: list[dict]) -> pd.DataFrame:
    base = {"campaign": "t", "arm": "a", "backend": "cpu", "context": 256, "repeat": 1, "status": "complete"}
    return normalize("runs", pd.DataFrame([{**base, **r} for r in rows]))


def _ctx(**kw) -> v.Context:
    args = {"arms": ("a",), "backends": ("cpu",), "batches": (1, 4), "contexts": (256,),
            "profilers": {"cpu": "none"}}
    args.update(kw)
    return v.Context(**args)


def _cand(measure: str, confirmed: str, ruled_out: str, **kw) -> CandidateSpec:
    return CandidateSpec(id=measure, measure=measure, confirmed=confirmed, ruled_out=ruled_out, **kw)


@pytest.mark.parametrize("step_b, expected", [(40.0, v.CONFIRMED), (12.0, v.RULED_OUT), (20.0, v.INCONCLUSIVE)])
def test_step_ratio_outcomes_carry_number_and_threshold(step_b, expected):
    step_1 = 10.0
    tables = DerivedTables(runs=_runs([{"batch": 1, "decode_step_ms": step_1}, {"batch": 4, "decode_step_ms": step_b}]))
    (verdict,) = v.evaluate([_cand("step_ratio", ">= 3", "< 1.5")], tables, _ctx())
    assert verdict.outcome == expected
    assert verdict.value == pytest.approx(step_b / step_1)
    assert f"{step_b / step_1:.2f}x" in verdict.line
    assert f"{step_b:.1f} ms" in verdict.line
    if expected != v.INCONCLUSIVE:
        assert verdict.threshold in verdict.line


def test_not_measured_says_why():
    tables = DerivedTables(runs=_runs([{"batch": 1, "decode_step_ms": 10.0}, {"batch": 4, "decode_step_ms": 30.0}]))
    verdicts = v.evaluate([_cand("gap_share", ">= 30%", "< 15%"), _cand("step_over_floor", ">= 10", "< 2")],
                          tables, _ctx())
    # gap_share once (no trace anywhere: at the largest batch), step_over_floor at each batch
    assert [(x.measure, x.batch, x.outcome) for x in verdicts] == [
        ("gap_share", 4, v.NOT_MEASURED), ("step_over_floor", 1, v.NOT_MEASURED), ("step_over_floor", 4, v.NOT_MEASURED)]
    assert "no kernel trace for backend cpu" in verdicts[0].line
    assert all("peak_bandwidth_gbs" in x.line and "weight_bytes" in x.line for x in verdicts[1:])


@pytest.mark.parametrize("guessed", [True, False])
def test_a_per_step_verdict_on_guessed_steps_says_so(guessed):
    """Steps from the dispatch rhythm are a guess: a verdict per step says it rests on one."""
    base = {"campaign": "t", "arm": "a", "backend": "cpu", "batch": 4, "context": 256, "repeat": 1}
    trace = normalize("trace_runs", pd.DataFrame([{**base, "dispatches": 900, "window_ms": 100.0, "busy_ms": 60.0,
                                                   "gap_ms": 40.0, "busy_share": 0.6, "steps": 10,
                                                   "busy_ms_per_step": 6.0, "gap_ms_per_step": 4.0,
                                                   "step_method": "x", "steps_guessed": guessed}]))
    tables = DerivedTables(runs=_runs([{"batch": 4, "decode_step_ms": 10.0}]), trace_runs=trace)
    share, per_step = v.evaluate([_cand("gap_share", ">= 30%", "< 15%"), _cand("gap_ms_per_step", ">= 3", "< 1")],
                                 tables, _ctx())
    assert (share.value, per_step.value) == (pytest.approx(0.4), pytest.approx(4.0))
    for verdict in (share, per_step):
        assert ("a guess from the dispatch rhythm" in verdict.text) is guessed, verdict.text


def test_incomplete_runs_do_not_count():
    rows = [{"batch": 1, "decode_step_ms": 10.0}, {"batch": 4, "decode_step_ms": 50.0, "status": "incomplete"}]
    (verdict,) = v.evaluate([_cand("step_ratio", ">= 3", "< 1.5")], DerivedTables(runs=_runs(rows)), _ctx())
    assert verdict.outcome == v.NOT_MEASURED and "batch 4" in verdict.why


def test_contended_runs_never_decide_and_a_suspect_level_says_so():
    """The demo on a loaded machine: the contended batch-4 repeat (6x faster) is left out; batch 1's
    repeats spread 30x, so the verdict stands but says it rests on a suspect level."""
    why = "contended: other processes used 90% of the 2 CPUs"
    rows = [{"batch": 1, "repeat": 1, "decode_step_ms": 4.7}, {"batch": 1, "repeat": 2, "decode_step_ms": 143.5},
            {"batch": 4, "repeat": 1, "decode_step_ms": 20.0},
            {"batch": 4, "repeat": 2, "decode_step_ms": 0.8, "contended": True, "contention_why": why}]
    frame = _runs(rows)
    frame["left_out"] = checks.left_out(frame)
    (verdict,) = v.evaluate([_cand("step_ratio", ">= 2", "< 1.5")], DerivedTables(runs=frame), _ctx())
    assert "20.0 ms at batch 4" in verdict.text  # the 0.8 ms contended repeat did not enter the median
    assert "spread: repeats' decode step 4.70-143.50 ms" in verdict.suspect
    assert "a b4 c256: 1 of 2 runs used, 1 left out (contended" in verdict.suspect
    assert "SUSPECT:" in verdict.evidence
    only = _runs([{"batch": 1, "decode_step_ms": 5.0}, {"batch": 4, "decode_step_ms": 0.8, "contended": True,
                                                       "contention_why": why}])
    only["left_out"] = checks.left_out(only)
    (verdict,) = v.evaluate([_cand("step_ratio", ">= 2", "< 1.5")], DerivedTables(runs=only), _ctx())
    assert verdict.outcome == v.NOT_MEASURED and "0 of 1 runs used, 1 left out (contended" in verdict.evidence


def test_step_over_floor_uses_bytes_and_bandwidth():
    weight, kv, bw = 1_000_000_000, 1000, 100.0
    step = 40.0
    ctx = _ctx(weight_bytes=weight, kv_bytes_per_token=kv, bandwidth={"cpu": bw})
    tables = DerivedTables(runs=_runs([{"batch": 4, "decode_step_ms": step}]))
    (verdict,) = v.evaluate([_cand("step_over_floor", ">= 3", "< 1.5", batch=4)], tables, ctx)
    floor = (weight + kv * 256 * 4) / (bw * 1e9) * 1e3
    assert verdict.value == pytest.approx(step / floor)
    assert verdict.outcome == v.CONFIRMED


def test_every_registered_measurement_is_documented():
    for name in ("step_ratio", "own_step_share", "gap_share", "gap_ms_per_step", "gap_scaling", "class_share",
                 "class_ms_per_step", "class_scaling", "class_dispatches", "step_over_floor", "change_pct"):
        assert name in v.MEASUREMENTS and v.MEASUREMENTS[name].doc


# ------------------------------------------------------------------------------ the seed's data

_COUNTERS = re.compile(r"decode_steps=\+(\d+)\s+decode_tokens=\+(\d+)\s+mixed_steps=\+(\d+)\s+prefill_chunks=\+(\d+)"
                       r"\s+tokens_predicted_seconds=\+([\d.]+)")
_TABLE = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", re.M)
_NAME = re.compile(r"^\w+_c(\d+)_p(\d+)_r(\d+)\.txt$")


def _counter_row(match: re.Match) -> dict:
    """Counter figures as SERVERS.md §5 defines them, from the printed Δs."""
    steps, tokens, mixed, chunks, pred_s = match.groups()
    steps, tokens, pred_s = int(steps), int(tokens), float(pred_s)
    return {"decode_steps": steps, "decode_tokens": tokens, "mixed_steps": int(mixed), "prefill_chunks": int(chunks),
            "decode_step_ms": 1000 * pred_s / tokens, "raw_step_ms": 1000 * pred_s / steps, "occupancy": tokens / steps}


def _harness_run(path: Path, arm: str) -> dict:
    """One runs.csv row from a bench_serving_concurrency.py --metrics output."""
    conc, prompt, repeat = (int(x) for x in _NAME.match(path.name).groups())
    text = path.read_text()
    row = {"campaign": "seed", "arm": arm, "backend": "rocm", "batch": conc, "context": prompt, "repeat": repeat,
           "status": "complete"}
    match = _COUNTERS.search(text)
    if match:
        row.update(_counter_row(match))
    table = _TABLE.search(text)
    if table:
        row.update({"ok": int(table.group(2)), "failed": int(table.group(3)), "ttft_ms": float(table.group(4)),
                    "ttft_p95_ms": float(table.group(5)), "decode_tok_s": float(table.group(6)),
                    "aggregate_tok_s": float(table.group(7))})
    return row


def _profile_runs(path: Path, arm: str) -> list[dict]:
    """s1/profile_prof.txt: blocks of `<conc>` / `<prompt>` / counters."""
    lines = path.read_text().splitlines()
    rows = []
    for i, line in enumerate(lines):
        match = _COUNTERS.search(line)
        if match:
            conc, prompt = int(lines[i - 2]), int(lines[i - 1])
            rows.append({"campaign": "seed", "arm": arm, "backend": "rocm", "batch": conc, "context": prompt,
                         "repeat": 1, "status": "complete", **_counter_row(match)})
    return rows


@pytest.fixture(scope="module")
def seed(fixtures: Path) -> dict:
    root = fixtures / "mlxcel-gfx1151"
    analysis = json.loads((root / "s6" / "analysis.json").read_text())
    before = _profile_runs(root / "s1" / "profile_prof.txt", "before")
    before = [r for r in before if r["batch"] == 1]  # the before build's single-stream step
    before += [_harness_run(p, "before") for p in sorted((root / "s3").glob("before_*.txt"))]
    after = [_harness_run(p, "after") for p in sorted((root / "s5").glob("final_*.txt"))]
    after += [_harness_run(p, "after") for p in sorted((root / "s3").glob("after_c4_p16384_*.txt"))]
    # batch-1 ~16K after the fix: the traced run's own counters (s6 delta)
    for entry in analysis:
        if entry["conc"] == 1 and entry["prompt_tokens"] == 16384:
            d = entry["delta"]
            after.append({"campaign": "seed", "arm": "after", "backend": "rocm", "batch": 1, "context": 16384,
                          "repeat": 1, "status": "complete", "decode_steps": d["decode_steps"],
                          "decode_tokens": d["decode_tokens"], "prefill_chunks": d["prefill_chunks"],
                          "decode_step_ms": 1000 * d["predicted_s"] / d["decode_tokens"]})
    runs = pd.DataFrame(before + after)
    # Own-step share of the decode window, SCHEMA §4: (n - 1) x steady step / window, and the
    # harness window per request is (n - 1) / decode tok/s, so share = steady step x tok/s.
    # The steady step is the level's counter step where no prefill was interleaved (prefill
    # chunks 0), else the batch-1 step of the same arm and context (at ~16K the batch-4 level ran
    # at occupancy 1.22: its steps were mostly single-row).
    def steady(row: pd.Series) -> float | None:
        if row.get("prefill_chunks") == 0 and row["batch"] > 1:
            return row["decode_step_ms"]
        one = runs[(runs["arm"] == row["arm"]) & (runs["batch"] == 1) & (runs["context"] == row["context"])]
        return float(one["decode_step_ms"].median()) if len(one) else None

    runs["steady_step_ms"] = runs.apply(steady, axis=1)
    runs["own_step_share"] = runs["steady_step_ms"] * runs["decode_tok_s"] / 1000
    trace_rows, class_rows = [], []
    for entry in analysis:
        keys = {"campaign": "seed", "arm": "after", "backend": "rocm", "batch": entry["conc"],
                "context": entry["prompt_tokens"], "repeat": 1}
        steps = entry["delta"]["decode_steps"]
        trace_rows.append({**keys, "dispatches": entry["dispatches"], "window_ms": entry["window_ms"],
                           "busy_ms": entry["busy_ms"], "gap_ms": entry["gap_ms"], "busy_share": entry["busy_share"],
                           "steps": steps, "busy_ms_per_step": entry["busy_ms"] / steps,
                           "gap_ms_per_step": entry["gap_ms"] / steps, "step_method": "counters"})
        total = sum(entry["class_ms"].values())
        for name, ms in entry["class_ms"].items():
            class_rows.append({**keys, "kernel_class": name, "time_ms": ms, "count": entry["class_n"][name],
                               "ms_per_step": ms / steps, "share": ms / total})
    tables = DerivedTables(runs=normalize("runs", runs), trace_runs=normalize("trace_runs", pd.DataFrame(trace_rows)),
                           classes=normalize("classes", pd.DataFrame(class_rows)))
    ctx = v.Context(arms=("before", "after"), backends=("rocm",), batches=(1, 4), contexts=(1024, 16384),
                    profilers={"rocm": "rocprofv3"})
    return {"tables": tables, "ctx": ctx, "analysis": analysis, "runs": runs}


def _one(verdicts: list[v.Verdict], arm: str, context: int, batch: int = 4) -> v.Verdict:
    """The verdict at the seed's level: batch 4 (its batch-B), the given arm and context."""
    (found,) = [x for x in verdicts if x.arm == arm and x.context == context and x.batch == batch]
    return found


def _playbook(cid: str) -> CandidateSpec:
    (cand,) = [c for c, _ in read_playbook("batched-decode") if c.id == cid]
    return cand


def test_seed_dequant_gemm_route_ruled_out(seed):
    verdicts = v.evaluate_candidate(_playbook("gemm-dequant-route"), seed["tables"], seed["ctx"])
    after = _one(verdicts, "after", 1024)
    entry = next(e for e in seed["analysis"] if e["conc"] == 4 and e["prompt_tokens"] == 1024)
    share = (entry["class_ms"].get("gemm", 0.0) + entry["class_ms"].get("dequantize", 0.0)) / entry["window_ms"]
    assert after.outcome == v.RULED_OUT
    assert after.value == pytest.approx(share)
    # before the fix there is no trace in the fixtures: said, not guessed
    before = _one(verdicts, "before", 1024)
    assert before.outcome == v.NOT_MEASURED and "no kernel trace" in before.why


def test_seed_batched_qmv_confirmed_before_and_gone_after(seed):
    cand = _playbook("batched-gemv-per-row")
    after = _one(v.evaluate_candidate(cand, seed["tables"], seed["ctx"]), "after", 1024)
    by = {(e["conc"], e["prompt_tokens"]): e for e in seed["analysis"]}
    per_step = {b: by[(b, 1024)]["class_ms"]["qmv"] / by[(b, 1024)]["delta"]["decode_steps"] for b in (1, 4)}
    assert after.value == pytest.approx(per_step[4] / per_step[1] / 4)
    assert after.outcome == v.RULED_OUT  # after the fix qmv no longer grows like the batch
    # Before the fix the fixtures hold counters only (the seed's before trace is not public), so
    # the class measurement is not measured and a step-scaling fallback decides.
    with_fallback = CandidateSpec(**{**cand.__dict__, "fallback": (
        FallbackSpec(measure="step_scaling"),)})
    before = _one(v.evaluate_candidate(with_fallback, seed["tables"], seed["ctx"]), "before", 1024)
    runs = seed["runs"]
    sel = runs[(runs["arm"] == "before") & (runs["context"] == 1024)]
    ratio = sel[sel["batch"] == 4]["decode_step_ms"].median() / sel[sel["batch"] == 1]["decode_step_ms"].median()
    assert before.measure == "step_scaling"
    assert before.value == pytest.approx(ratio / 4)
    assert before.outcome == v.CONFIRMED


def test_seed_host_gaps_ruled_out_at_3_to_7_ms_per_step(seed):
    verdicts = v.evaluate_candidate(_playbook("host-gaps"), seed["tables"], seed["ctx"])
    cand = CandidateSpec(id="g1", measure="gap_share", confirmed=">= 30%", ruled_out="< 15%", batch=1)
    verdicts += v.evaluate_candidate(cand, seed["tables"], seed["ctx"])
    measured = [x for x in verdicts if x.outcome != v.NOT_MEASURED]
    assert measured and all(x.outcome == v.RULED_OUT for x in measured)
    per_step = [e["gap_ms"] / e["delta"]["decode_steps"] for e in seed["analysis"] if e["all_decoding_window"]]
    lines = " ".join(x.line for x in measured)
    for gap in per_step:
        assert f"host gaps {gap:.1f} of" in lines
    assert 3.0 <= min(per_step) and max(per_step) < 7.0


def test_seed_interleaved_prefill_ruled_out_at_1k_confirmed_at_16k(seed):
    verdicts = v.evaluate_candidate(_playbook("interleaved-prefill"), seed["tables"], seed["ctx"])
    assert _one(verdicts, "before", 1024).outcome == v.RULED_OUT
    assert _one(verdicts, "after", 1024).outcome == v.RULED_OUT
    at_16k = _one(verdicts, "after", 16384)
    assert at_16k.outcome == v.CONFIRMED
    assert "own decode steps explain" in at_16k.line and "%" in at_16k.line


def test_seed_before_after_and_gate(seed):
    """The change is of the means over the repeats, with Welch's 95% interval; a gate passes or fails only
    where that interval clears its limit."""
    runs = seed["runs"]
    cand = CandidateSpec(id="fix", measure="change_pct", confirmed="<= -30", ruled_out="> -5", batch=4, context=1024,
                         baseline="before", arm="after")
    (verdict,) = v.evaluate_candidate(cand, seed["tables"], seed["ctx"])
    b4 = runs[(runs["batch"] == 4) & (runs["context"] == 1024)]
    before = b4[b4["arm"] == "before"]["decode_step_ms"]
    after = b4[b4["arm"] == "after"]["decode_step_ms"]
    assert verdict.value == pytest.approx(100 * (after.mean() - before.mean()) / before.mean())
    assert verdict.outcome == v.CONFIRMED
    assert f"means of {len(before)} and {len(after)}" in verdict.text and "95% interval" in verdict.text
    # batch 1 at ~1K: one run of the before build (its profile), so no interval: undecided, and the after
    # build's spread says how many repeats would decide
    assert len(runs[(runs["batch"] == 1) & (runs["context"] == 1024) & (runs["arm"] == "before")]) == 1
    (gate,) = v.evaluate_gate(GateSpec("decode_step_ms", batch=1, max_regression_pct=3, context=1024,
                                       baseline="before", arm="after"), seed["tables"], seed["ctx"])
    assert gate.passed is None and gate.state == v.UNDECIDED and gate.interval is None
    assert gate.repeats_needed is not None and gate.repeats_needed >= 2
    assert f"about {gate.repeats_needed} repeats per arm would decide it" in gate.line
    assert "no interval (1 repeat of the baseline)" in gate.line
    # and a gate that must fail: batch 4 at ~1K went from ~166 ms (before) to ~66 ms (after), so
    # reading "before" as the new arm against "after" is a regression far past 3%, interval and all
    regression = 100 * (before.mean() / after.mean() - 1)
    assert regression > 100
    (fails,) = v.evaluate_gate(GateSpec("decode_step_ms", batch=4, max_regression_pct=3, context=1024,
                                        baseline="after", arm="before"), seed["tables"], seed["ctx"])
    assert fails.passed is False and fails.state == v.FAIL
    assert fails.interval is not None and min(fails.interval) > 3
    assert "FAIL" in fails.line
    assert f"{regression:+.1f}%" in fails.line
    (passes,) = v.evaluate_gate(GateSpec("decode_step_ms", batch=4, max_regression_pct=3, context=1024,
                                         baseline="before", arm="after"), seed["tables"], seed["ctx"])
    assert passes.state == v.PASS and passes.passed is True and max(passes.interval) <= 3


def _class_tables(rows: list[tuple[str, float]]) -> DerivedTables:
    keys = {"campaign": "c", "arm": "a", "backend": "b", "batch": 4, "context": 1, "repeat": 1}
    return DerivedTables(
        runs=pd.DataFrame([{**keys, "status": "complete"}]),
        trace_runs=pd.DataFrame([{**keys, "window_ms": 50.0, "steps": 5, "busy_ms": 40.0, "gap_ms": 10.0}]),
        classes=pd.DataFrame([{**keys, "kernel_class": c, "time_ms": t, "count": 10, "ms_per_step": t / 5,
                               "share": t / 40.0} for c, t in rows]),
        kernels=pd.DataFrame(), gaps=pd.DataFrame(), steps=pd.DataFrame())


def test_a_class_no_trace_has_is_not_measured_rather_than_ruled_out():
    """A typo or a class missing from the backend's table must not sum to 0 ms and read as ruled out."""
    from perflib.classes import builtin_class_names

    tables = _class_tables([("gemm", 30.0), ("norm", 10.0)])
    known = builtin_class_names()
    typo = v.MEASUREMENTS["class_share"].func(tables, v.Scope(arm="a", backend="b", batch=4, classes=("gemmm",),
                                                              known_classes=known))
    assert typo.value is None and "gemmm" in typo.why and "gemm" in typo.why
    real = v.MEASUREMENTS["class_share"].func(tables, v.Scope(arm="a", backend="b", batch=4, classes=("gemm",),
                                                              known_classes=known))
    assert real.value == pytest.approx(30.0 / 50.0)


def test_a_real_class_absent_from_a_fully_classified_trace_measures_zero():
    """llama.cpp's batch-8 decode runs no GEMM: with every kernel classified, that absence is 0%, not a gap."""
    from perflib.classes import builtin_class_names

    scope = v.Scope(arm="a", backend="b", batch=4, classes=("gemm", "dequantize"), known_classes=builtin_class_names())
    absent = v.MEASUREMENTS["class_share"].func(_class_tables([("mul_mat_vec", 30.0), ("norm", 10.0)]), scope)
    assert absent.value == 0.0 and "0.0%" in absent.text
    assert v.decide(absent.value, ">= 20%", "< 5%", "fraction")[0] == v.RULED_OUT
    # but where a tenth of the kernel time is unclassified, the class could hide there: not measured
    hidden = v.MEASUREMENTS["class_share"].func(_class_tables([("mul_mat_vec", 36.0), ("other", 4.0)]), scope)
    assert hidden.value is None and "10.0% of kernel time is unclassified" in hidden.why


def test_a_class_gone_from_the_batch_b_step_scales_as_zero_not_unmeasured():
    """llama.cpp's CUDA build runs the projections as mul_mat_vec up to batch 8 and as mul_mat_q above
    (the H200 fa campaign at batch 32): no GEMV in the batch-B step is a measurement, 0 of linear, and the
    sentence names what runs instead; with no GEMV at batch 1 either there is nothing to scale from."""
    from perflib.classes import builtin_class_names

    def tables(rows_b: list[tuple[str, float]], rows_1: list[tuple[str, float]]) -> DerivedTables:
        b, one = _class_tables(rows_b), _class_tables(rows_1)
        one = DerivedTables(runs=one.runs.assign(batch=1), trace_runs=one.trace_runs.assign(batch=1),
                            classes=one.classes.assign(batch=1), kernels=one.kernels, gaps=one.gaps, steps=one.steps)
        return DerivedTables(runs=pd.concat([b.runs, one.runs]), trace_runs=pd.concat([b.trace_runs, one.trace_runs]),
                             classes=pd.concat([b.classes, one.classes]), kernels=b.kernels, gaps=b.gaps, steps=b.steps)

    scope = v.Scope(arm="a", backend="b", batch=4, classes=("mul_mat_vec",), known_classes=builtin_class_names())
    gone = v.MEASUREMENTS["class_scaling"].func(tables([("mul_mat_q", 30.0), ("norm", 10.0)],
                                                       [("mul_mat_vec", 20.0), ("norm", 10.0)]), scope)
    assert gone.value == 0.0 and "no mul_mat_vec kernel in the batch-4 step" in gone.text
    assert "4.00 ms at batch 1" in gone.text and "mul_mat_q" in gone.text
    assert v.decide(gone.value, ">= 0.75", "<= 0.5", "ratio")[0] == v.RULED_OUT
    never = v.MEASUREMENTS["class_scaling"].func(tables([("mul_mat_q", 30.0), ("norm", 10.0)],
                                                        [("mul_mat_q", 20.0), ("mul_mat_vec", 0.0)]), scope)
    assert never.value is None and "no mul_mat_vec kernel at batch 1" in never.why
    grows = v.MEASUREMENTS["class_scaling"].func(tables([("mul_mat_vec", 40.0)], [("mul_mat_vec", 20.0)]), scope)
    assert grows.value == pytest.approx(2.0 / 4)
