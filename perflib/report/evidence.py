"""The page's evidence sections: before/after, per level, the profile, the decode-window split, the
floor and the cross-backend ratio, each from `perflib.report.tables` with units and spread."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from perflib.attribution import HOST_GAP_API_RECORDS, HOST_GAP_BASIS_TEXT, HOST_GAP_LABELS, HOST_GAP_PARTS
from perflib.config import Campaign, question_levels
from perflib.derive import DerivedTables
from perflib.pageinputs import Reference
from perflib.report import tables as tb
from perflib.report.markdown import Column, dropped_line, join, table
from perflib.report.sections import section, spread
from perflib.report.text import escape_md, fmt, int_or_na, pct

KEYS = [Column("arm", "arm", keep=True), Column("backend", "backend", keep=True),
        Column("batch", "batch", True, True), Column("context", "context (tokens)", True, True)]


def _keys(r: Any) -> dict[str, Any]:
    return {"arm": escape_md(r.arm), "backend": escape_md(r.backend), "batch": int(r.batch), "context": int(r.context)}


def _unit(measure: str) -> str:
    return " ms" if measure.endswith("_ms") else " tok/s"


def _no_runs(arm: Any) -> str:
    """The cell of an arm that has no run at a level: not measured (yet), never a number."""
    return f"not measured: no runs of arm {escape_md(arm)} yet"


def _change(value: Any) -> str:
    return "n/a" if value is None or value != value else f"{value:+.1f}%"


def _interval(r: Any) -> str:
    lo, hi = r.ci_low_pct, r.ci_high_pct
    if lo is None or hi is None or lo != lo or hi != hi:
        return "n/a"
    return f"{lo:+.1f}% to {hi:+.1f}%"


def before_after(tables: DerivedTables, campaign: Campaign, arms: Sequence[str], gates: Sequence[Any],
                 figure: dict | None) -> tuple[str, list[str]]:
    """The before/after section (every pair of arms, each level, means over the repeats with the change's
    95% interval) and its headline lines (the decode step at the levels the question names, else at the
    largest batch)."""
    frame = tb.before_after_table(tables, list(campaign.comparisons))
    rows = [{"backend": escape_md(r.backend), "batch": int(r.batch), "context": int(r.context),
             "measure": escape_md(r.measure), "arms": f"{escape_md(r.arm)} vs {escape_md(r.baseline)}",
             "before": fmt(r.before, ".2f", _unit(r.measure)) if r.runs_before else _no_runs(r.baseline),
             "after": fmt(r.after, ".2f", _unit(r.measure)) if r.runs_after else _no_runs(r.arm),
             "n": f"{r.runs_before} / {r.runs_after}", "change": _change(r.change_pct), "interval": _interval(r)}
            for r in frame.itertuples(index=False)]
    text, _ = table(rows, [Column("backend", "backend", keep=True), Column("batch", "batch", True),
                           Column("context", "context (tokens)", True), Column("measure", "measure"),
                           Column("arms", "arm vs baseline"), Column("before", "baseline", True),
                           Column("after", "arm", True), Column("n", "repeats (baseline / arm)"),
                           Column("change", "change", True), Column("interval", "95% interval", True)])
    headline = _headline(frame, campaign)
    traced = _traced(tables, campaign)
    gate_text = "\n".join(f"- Gate: {escape_md(g.gate)}: {escape_md(g.text)}: {g.state}" for g in gates)
    if len(arms) < 2:  # nothing to compare: no section, unless a traced arm's overhead is there to show
        return (section("Before / after", after=traced) if traced else ""), []
    pairs = ", ".join(f"{escape_md(a)} vs {escape_md(b)}" for b, a in campaign.comparisons)
    intro = (f"Each compared arm against its baseline ({pairs}), per level: means over the repeats used, the change "
             "of the mean and its 95% interval (Welch's t interval on the difference of the means, over the "
             "baseline's mean; docs/reference/COMPARE.md). A gate passes or fails only where the whole interval "
             "clears its limit.")
    return section("Before / after", intro, text, f"{len(rows)} comparisons", figure, join(traced, gate_text)), headline


def headline_levels(campaign: Campaign, frame: pd.DataFrame) -> list[tuple[int, int]]:
    """(batch, context) levels the headline shows: those the question names (a named context at the
    largest batch where it names no batch, a named batch at every context where it names no context),
    else the largest batch at every context."""
    contexts, batches = question_levels(campaign.question, campaign.batches, campaign.contexts)
    have = sorted({(int(b), int(c)) for b, c in zip(frame["batch"], frame["context"], strict=False)})
    largest = max(campaign.batches)
    wanted = [(b, c) for c in (contexts or sorted(campaign.contexts)) for b in (batches or [largest])]
    return [lv for lv in wanted if lv in have]


def _headline(frame: pd.DataFrame, campaign: Campaign) -> list[str]:
    if not len(frame):
        return []
    out = []
    levels = headline_levels(campaign, frame)
    step = frame[frame["measure"] == "decode_step_ms"]
    for base, arm in campaign.comparisons:
        for batch, context in levels:
            sel = step[(step["baseline"] == base) & (step["arm"] == arm) & (step["batch"] == batch)
                       & (step["context"] == context)]
            for r in sel.itertuples(index=False):
                if r.change_pct is None or r.change_pct != r.change_pct:
                    continue
                interval = _interval(r)
                out.append(f"{escape_md(r.arm)} vs {escape_md(r.baseline)}: decode step at batch {batch}, "
                           f"context {context}: {fmt(r.before, '.2f')} → {fmt(r.after, '.2f', ' ms')} "
                           f"(**{r.change_pct:+.1f}%**, 95% interval "
                           + (f"{interval})" if interval != "n/a" else "n/a: one repeat)"))
    return out


def _traced(tables: DerivedTables, campaign: Campaign) -> str:
    frame = tb.traced_overhead_table(tables, campaign)
    arms = [a for a in campaign.arms if a.role == "traced"]
    if not arms:
        return ""
    rows = [{"backend": escape_md(r.backend), "context": int(r.context), "measure": escape_md(r.measure),
             "arms": f"{escape_md(r.of)} → {escape_md(r.arm)}", "plain": fmt(r.plain, ".2f", _unit(r.measure)),
             "traced": fmt(r.traced, ".2f", _unit(r.measure)), "n": r.runs, "change": _change(r.change_pct)}
            for r in frame.itertuples(index=False)]
    text, _ = table(rows, [Column("backend", "backend", keep=True), Column("context", "context (tokens)", True),
                           Column("measure", "measure"), Column("arms", "arms"), Column("plain", "plain", True),
                           Column("traced", "traced", True), Column("n", "runs (plain / traced)"),
                           Column("change", "change", True)])
    names = "; ".join(f"{escape_md(a.name)} repeats {escape_md(a.of or '?')} under its profiler"
                      + (f" ({escape_md(a.description)})" if a.description else "") for a in arms)
    return join(f"Traced arms are left out of the comparison: {names}. The profiler's overhead at batch 1:", text)


LEVEL_COLUMNS = [*KEYS, Column("runs", "runs"), Column("decode_tok_s", "decode tok/s", True),
                 Column("decode_step_ms", "decode step", True), Column("steady_step_ms", "steady step", True),
                 Column("occupancy", "occupancy", True), Column("prefill_chunks", "prefill chunks", True),
                 Column("ttft_ms", "mean TTFT", True), Column("busy", "GPU busy / step", True),
                 Column("gap", "host gap / step", True), Column("busy_share", "busy share", True),
                 Column("top_classes", "top classes"), Column("checks", "checks")]


def per_level(tables: DerivedTables, level_checks: pd.DataFrame, occupancy: str, absent: str,
              figure: dict | None) -> str:
    """Long: the per-level table, each median with its min–max over the runs used, and the checks."""
    levels = tb.level_table(tables)
    checks = {(str(r.arm), str(r.backend), int(r.batch), int(r.context)): r for r in level_checks.itertuples()} \
        if len(level_checks) else {}
    rows = []
    for r in levels.itertuples(index=False):
        n = int(r.runs)
        c = checks.get((str(r.arm), str(r.backend), int(r.batch), int(r.context)))
        runs = f"{c.used} of {c.complete}" if c is not None and c.used != c.complete else str(n)
        rows.append({**_keys(r), "runs": runs,
                     "decode_tok_s": _why_na(spread(r, "decode_tok_s", ".1f", " tok/s", n), r, "decode_tok_s"),
                     "decode_step_ms": spread(r, "decode_step_ms", ".2f", " ms", n),
                     "steady_step_ms": _why_na(spread(r, "steady_step_ms", ".2f", " ms", n), r, "steady_step"),
                     "occupancy": spread(r, "occupancy", ".2f", "", n),
                     "prefill_chunks": spread(r, "prefill_chunks", ".0f", "", n),
                     "ttft_ms": spread(r, "ttft_ms", ".1f", " ms", n), "busy": fmt(r.busy_ms_per_step, ".2f", " ms"),
                     "gap": fmt(r.gap_ms_per_step, ".2f", " ms"), "busy_share": pct(r.busy_share),
                     "top_classes": escape_md(r.top_classes) or "n/a",
                     "checks": "n/a" if c is None else ("⚠ " + escape_md(c.checks) if c.suspect else "ok")})
    words = tb.work_words(tables)
    text, dropped = table(rows, [Column(c.key, f"{words[c.key]} / step", True) if c.key in ("busy", "gap") else c
                                 for c in LEVEL_COLUMNS])
    intro = ("Medians over the runs used, with min–max over them. Decode tok/s is per request, (completion "
             "tokens − 1) / (total − TTFT), and it and TTFT (first token-carrying chunk − request sent) are each "
             "run's mean over its requests; the decode step is Δtokens_predicted_seconds / Δdecode_tokens from "
             f"`/metrics`; the steady step is the client's median inter-token gap while all requests decode; "
             f"{occupancy}"
             + (f" {DECODE_ONLY}, GPU busy, host gap and busy share are those of its decode steps alone."
                if tb.phased(tables) else ""))
    after = join(absent, dropped_line(dropped, "no kernel trace, or a counter the server does not export"),
                 _levels_left_out(level_checks))
    return section("Per level", intro, text, f"{len(rows)} levels", figure, after)


def _why_na(cell: str, row: Any, figure: str) -> str:
    """An n/a cell with the reason its runs give (`steady_step_reason`, `decode_tok_s_reason`); a figure
    is never n/a without one where a run said why."""
    why = getattr(row, f"{figure}_reason", "") or ""
    return f"n/a: {escape_md(why)}" if cell == "n/a" and isinstance(why, str) and why else cell


def _levels_left_out(level_checks: pd.DataFrame) -> str:
    """The levels missing from the table because every complete run was left out, and why."""
    if level_checks is None or not len(level_checks):
        return ""
    gone = [r for r in level_checks.itertuples(index=False) if not r.used and r.left_out]
    if not gone:
        return ""
    return "Not in the table, every complete run left out as contended: " + "; ".join(
        f"{escape_md(r.arm)} {escape_md(r.backend)} b{r.batch} c{r.context} ({r.left_out} of {r.complete}: "
        f"{escape_md(r.left_out_why)})" for r in gone) + "."


PROFILE_INTROS = {
    "GPU kernels": "From the kernel traces, windowed to each level's decode window. Step = window / steps; GPU busy "
                   "is the union of kernel, copy and fill intervals; host gap = step − busy. Medians over repeats.",
    "CPU operators": "The backend is the CPU: no GPU kernels, so the model's CPU operators stand for the device's "
                     "work (the top-level operators of its forward, from the PyTorch trace), windowed to each level's "
                     "decode window. Step = window / steps; CPU busy is the union of the model's operator intervals; "
                     "host time = step − busy (scheduling, input preparation, sampling, output processing). Medians "
                     "over repeats.",
    "CPU samples": "The backend is the CPU: no GPU kernels, so its work is read from perf's samples (cpu-clock) of the "
                   "server, windowed to each level's decode window. Compute is the share of the decode threads' "
                   "samples in the model's compute functions (ggml's), sync + host the rest (threads spinning at a "
                   "barrier, and everything else: the HTTP server, sampling, the tokenizer, the scheduler), each "
                   "scaled onto the step; step = window / steps. Every figure is a sampled estimate: the verdicts "
                   "give each share with its sample count and a 95% interval. Medians over repeats.",
}
"""The Profile section's opening, by what the traces' work is (`tables.work_words`)."""


def profile(tables: DerivedTables, figure: dict | None) -> str:
    """GPU busy against host gaps per step, the gap buckets, the kernel classes and batch 1 to B."""
    tr = tb.decode_level_table(tables)
    if not len(tr):
        return section("Profile", "Not measured: no kernel trace in this campaign (see the notes).")
    lost = _lost_traces(tables)
    rows = [{**_keys(r), "runs": _traces(int(r.runs), lost.get((str(r.arm), str(r.backend), int(r.batch),
                                                                   int(r.context)), 0)),
             "steps": spread(r, "steps", ".0f") + (" (a guess)" if str(getattr(r, "steps_guessed", "")) == "True" else ""),
             "step": spread(r, "step_ms", ".2f", " ms"), "busy": spread(r, "busy_ms_per_step", ".2f", " ms"),
             "gap": spread(r, "gap_ms_per_step", ".2f", " ms"), "share": pct(r.busy_share),
             "dispatches": fmt(r.dispatches_per_step, ".0f"), "method": escape_md(r.step_method)}
            for r in tr.itertuples(index=False)]
    words = tb.work_words(tables)
    text, _ = table(rows, [*KEYS, Column("runs", "traces", True), Column("steps", "steps", True),
                           Column("step", "step", True), Column("busy", f"{words['busy']} / step", True),
                           Column("gap", f"{words['gap']} / step", True), Column("share", "busy share", True),
                           Column("dispatches", f"{words['units']} / step", True), Column("method", "steps from")])
    intro = (PROFILE_INTROS.get(words["work"], PROFILE_INTROS["GPU kernels"])
             + (" A step count marked \"a guess\" comes from the dispatch rhythm alone: no step range, request "
                "record or counter gave it, so the per-step figures of that level are estimates."
                if any(r["steps"].endswith("(a guess)") for r in rows) else "")
             + (f" {DECODE_ONLY}: their steps, step, GPU busy, host gap and dispatches are the decode steps' "
                "(\"decode steps only\"), and the steps of every phase are under Steps by phase."
                if tb.phased(tables) else ""))
    intro = join(intro, _phase_lines(tables))
    return join(section("Profile", intro, join(text, _phases(tables), _gaps(tables), _host_gap_split(tables),
                                               _classes(tables),
                                               _batch_classes(tables), _batch_steps(tables)),
                        f"{len(rows)} traced levels", figure))


DECODE_ONLY = "Where the engine names its steps' phases (SGLang, vLLM)"
"""How the page says that a level's per-step figures are its decode steps' alone."""


def _lost_traces(tables: DerivedTables) -> dict[tuple[str, str, int, int], int]:
    """Per level: the runs used whose trace was lost or does not cover its window (no trace row)."""
    runs = tables.runs
    if runs is None or not len(runs) or "trace_loss" not in runs.columns:
        return {}
    lost = runs[runs["trace_loss"].map(lambda t: isinstance(t, str) and bool(t.strip()))]
    have = {(str(r.arm), str(r.backend), int(r.batch), int(r.context), int(r.repeat))
            for r in tables.trace_runs.itertuples(index=False)} if len(tables.trace_runs) else set()
    out: dict[tuple[str, str, int, int], int] = {}
    for r in lost.itertuples(index=False):
        if (str(r.arm), str(r.backend), int(r.batch), int(r.context), int(r.repeat)) not in have:
            key = (str(r.arm), str(r.backend), int(r.batch), int(r.context))
            out[key] = out.get(key, 0) + 1
    return out


def _traces(used: int, lost: int) -> str:
    """'2 of 3' where a level lost traces (see the first screen's Trace lost), else the count."""
    return f"{used} of {used + lost}" if lost else str(used)


def _gaps(tables: DerivedTables) -> str:
    rows = [{**_keys(r), "bucket": escape_md(r.bucket), "ms": fmt(r.gap_ms_per_step, ".2f", " ms"),
             "count": fmt(r.count_per_step, ".1f")} for r in tb.gap_level_table(tables).itertuples(index=False)]
    text, _ = table(rows, [*KEYS, Column("bucket", "gap length"), Column("ms", "gap / step", True),
                           Column("count", "gaps / step", True)])
    return join("**Host gaps by length**, ms and count per step:", text) if text else ""


def _part(r: Any, part: str) -> str:
    """'2.10 ms (12.9%)': a part of the host gap per step and its share of the gap."""
    ms = getattr(r, f"{part}_ms_per_step")
    return "n/a" if ms is None or ms != ms else f"{fmt(ms, '.2f', ' ms')} ({pct(getattr(r, f'{part}_gap_share'))})"


def _host_gap_split(tables: DerivedTables) -> str:
    """What fills the host gaps per level (`tables.host_gap_level_table`), or one line saying why not."""
    frame = tb.host_gap_level_table(tables)
    if not len(frame):
        return ""
    title = "**What fills the host gaps**"
    if not int(frame["measured"].sum()):
        why = "; ".join(escape_md(n) for n in dict.fromkeys(str(n) for n in frame["note"] if n))
        return f"{title}: not measured: {why or 'no host API records'}."
    hg = tables.host_gaps
    bases = list(dict.fromkeys(str(b) for b in hg["basis"] if isinstance(b, str) and b)) \
        if "basis" in hg.columns else []
    rows = [{**_keys(r), "runs": f"{int(r.measured)} of {int(r.runs)}" if r.measured != r.runs else str(int(r.runs)),
             "gap": fmt(r.gap_ms_per_step, ".2f", " ms"), **{p: _part(r, p) for p in HOST_GAP_PARTS},
             "launches": fmt(r.launch_calls_per_step, ".0f"), "why": escape_md(r.note)}
            for r in frame.itertuples(index=False)]
    which = "traces with API records" if bases in ([], [HOST_GAP_API_RECORDS]) else "traces split"
    text, _ = table(rows, [*KEYS, Column("runs", which, True),
                           Column("gap", "host gap / step", True),
                           *(Column(p, HOST_GAP_LABELS[p], True) for p in HOST_GAP_PARTS),
                           Column("launches", "launch calls / step", True), Column("why", "not measured")])
    said = "; ".join((f"{b}: " if len(bases) > 1 else "") + HOST_GAP_BASIS_TEXT.get(b, b)
                     for b in bases or [HOST_GAP_API_RECORDS])
    intro = (f"{title}, per step and as a share of the gap, {said}. The four add up to the gap; medians over "
             "repeats."
             + (f" {DECODE_ONLY}, over its decode steps alone (each from the previous step's end)."
                if tb.phased(tables) else ""))
    return join(intro, text)


def _classes(tables: DerivedTables) -> str:
    frame = tb.class_level_table(tables).sort_values([*tb.LEVEL_KEYS, "ms_per_step", "kernel_class"],
                                                     ascending=[True] * 4 + [False, True], kind="stable")
    rows = [{**_keys(r), "kernel_class": escape_md(r.kernel_class), "ms": fmt(r.ms_per_step, ".3f", " ms"),
             "share": pct(r.share), "count": fmt(r.count_per_step, ".1f")} for r in frame.itertuples(index=False)]
    words = tb.work_words(tables)
    share = "share of compute samples" if words["units"] == "samples" else f"share of {words['unit']} time"
    text, _ = table(rows, [*KEYS, Column("kernel_class", f"{words['unit']} class"), Column("ms", "ms / step", True),
                           Column("share", share, True), Column("count", f"{words['units']} / step", True)])
    decode = f"; {DECODE_ONLY[0].lower()}{DECODE_ONLY[1:]}, of its decode steps alone" if tb.phased(tables) else ""
    return join(f"**{words['unit'].capitalize()} classes** (a class a repeat lacks counts 0 there{decode}):", text) \
        if text else ""


def _batch_classes(tables: DerivedTables) -> str:
    rows = [{"arm": escape_md(r.arm), "backend": escape_md(r.backend), "context": int(r.context), "batch": int(r.batch),
             "kernel_class": escape_md(r.kernel_class), "ms_1": fmt(r.ms_1, ".3f", " ms"),
             "ms_b": fmt(r.ms_b, ".3f", " ms"), "ratio": fmt(r.ratio, ".2f", "x"), "of_linear": fmt(r.of_linear, ".2f")}
            for r in tb.batch_class_table(tables).itertuples(index=False)]
    text, _ = table(rows, [Column("arm", "arm", keep=True), Column("backend", "backend", keep=True),
                           Column("context", "context (tokens)", True), Column("batch", "batch B", True),
                           Column("kernel_class", "kernel class"), Column("ms_1", "ms / step at batch 1", True),
                           Column("ms_b", "ms / step at batch B", True), Column("ratio", "ratio", True),
                           Column("of_linear", "of linear", True)])
    intro = ("**Batch 1 to batch B, by class**: class ms per step at batch B over batch 1; \"of linear\" divides "
             "by B (1.00 = the class time grows like the batch, as when the weights are streamed once per row).")
    return join(intro, text) if text else ""


def _batch_steps(tables: DerivedTables) -> str:
    rows = [{**_keys(r), "phase": escape_md(r.phase), "steps": int(r.steps), "step": fmt(r.step_ms, ".2f", " ms"),
             "range": f"{fmt(r.step_min_ms, '.2f')}–{fmt(r.step_max_ms, '.2f', ' ms')}",
             "busy": fmt(r.busy_ms, ".2f", " ms"), "gap": fmt(r.gap_ms, ".2f", " ms"),
             "dispatches": fmt(r.dispatches, ".0f")} for r in tb.batch_step_table(tables).itertuples(index=False)]
    words = tb.work_words(tables)
    text, _ = table(rows, [*KEYS, Column("phase", "phase"), Column("steps", "steps", True),
                           Column("step", "step (median)", True), Column("range", "step range"),
                           Column("busy", words["busy"], True), Column("gap", words["gap"], True),
                           Column("dispatches", "dispatches", True)])
    if any(r["phase"] for r in rows):
        return join("**Each step** of the traces by the phase its engine names (from the step markers; "
                    "each step its own span):", text)
    return join("**Each decode step** of the traces (from the step markers):", text) if text else ""


def _phases(tables: DerivedTables) -> str:
    """The steps per phase the engine names, per traced level; '' where no trace names a phase."""
    frame = tb.phase_level_table(tables)
    rows = [{**_keys(r), "phase": escape_md(r.phase or "unknown"), "steps": spread(r, "steps", ".0f"),
             "step": spread(r, "step_ms", ".2f", " ms"), "span": spread(r, "span_ms_per_step", ".2f", " ms"),
             "busy": spread(r, "busy_ms_per_step", ".2f", " ms"), "gap": spread(r, "gap_ms_per_step", ".2f", " ms"),
             "dispatches": fmt(r.dispatches_per_step, ".0f")} for r in frame.itertuples(index=False)]
    text, _ = table(rows, [*KEYS, Column("phase", "phase", keep=True), Column("steps", "steps", True),
                           Column("step", "step", True), Column("span", "span", True),
                           Column("busy", "GPU busy / step", True), Column("gap", "host gap / step", True),
                           Column("dispatches", "dispatches / step", True)])
    intro = ("**Steps by phase**, as the engine names them (SGLang `step[EXTEND ...]`/`step[DECODE ...]`, vLLM's "
             "context/generation counts): a step runs from the previous step's end to its own end (its span is "
             "its own start to end), GPU busy and host gap are inside that; medians over repeats. The host-gap "
             "verdicts read the decode steps only.")
    return join(intro, text) if text else ""


def _phase_lines(tables: DerivedTables) -> str:
    """The levels with no decode step, and the batch composition the counters give where the traces name
    no phase: one line each."""
    lines = [*tb.phase_notes(tables), *tb.counted_composition(tables)]
    return "\n".join(f"- {escape_md(line)}" for line in lines)


def decomposition(tables: DerivedTables, figure: dict | None) -> str:
    levels = tb.level_table(tables)
    rows = [{**_keys(r), "own": pct(r.own_step_share), "prefill": pct(r.prefill_share),
             "overlap": pct(getattr(r, "overlap_share", None)), "other": pct(r.other_share)}
            for r in levels.itertuples(index=False)]
    text, dropped = table(rows, [*KEYS, Column("own", "own steps", True), Column("prefill", "others' prefill", True),
                                 Column("overlap", "both (overlap)", True), Column("other", "other", True)])
    intro = ("How much of each request's decode window (first token → last token) its own decode steps explain "
             "((completion tokens − 1) × the steady step), how much other requests' prefill covers, the part that "
             "is both (a step that carried prefill rows beside the decode rows) and the rest (gaps, scheduling); "
             "own + prefill − both + other = 100%. Medians over requests, then over repeats.")
    return section("Decode-window decomposition", intro, join(text, dropped_line(dropped, "no steady step")),
                   f"{len(rows)} levels", figure)


def floor(tables: DerivedTables, campaign: Campaign, figure: dict | None) -> str:
    rows = [{**_keys(r), "step": fmt(r.decode_step_ms, ".2f", " ms"), "floor": fmt(r.floor_ms, ".3f", " ms"),
             "ratio": fmt(r.step_over_floor, ".1f", "x")} for r in tb.floor_table(tables, campaign).itertuples(index=False)]
    missing = [name for name, val in (("model.weight_bytes", campaign.model.weight_bytes),
                                      ("model.kv_bytes_per_token", campaign.model.kv_bytes_per_token))
               if val is None] + [f"backends[{b.name}].peak_bandwidth_gbs" for b in campaign.backends
                                  if b.peak_bandwidth_gbs is None]
    if all(r["floor"] == "n/a" for r in rows):
        why = f"the campaign gives no {', '.join(missing)}" if missing else "no decode step from the counters"
        return section("Step over floor", f"Not measured: {why}.")
    text, _ = table(rows, [*KEYS, Column("step", "decode step", True), Column("floor", "floor", True),
                           Column("ratio", "step / floor", True)])
    intro = "Floor = (weight bytes + KV bytes per token × context × batch) / peak memory bandwidth."
    note = f"Not measured where the campaign gives no {', '.join(missing)}." if missing else ""
    return section("Step over floor", join(intro, note), text, f"{len(rows)} levels", figure)


NOT_RECORDED = "not recorded"
"""What the ratio table says a measured row ran on where its manifests recorded no host or device (and some
other row's did: where none did, the column is left out)."""


def ratio(tables: DerivedTables, campaign: Campaign, arms: Sequence[str], references: Sequence[Reference],
          ran_on: dict[tuple[str, str], str] | None = None) -> str:
    """The cross-backend reference ratio: this campaign's backends, each with the host and device its runs
    recorded (`ran_on`), then each `compare_with` campaign's rows with its own (`Reference.ran_on`): a
    compared campaign was made elsewhere, often long before, so never this campaign's."""
    frame = tb.ratio_table(tables, [b.name for b in campaign.backends], campaign.other_backends, campaign.batches,
                           arms, references=references, other_note=campaign.other_backends_note,
                           no_counters={b.name: "backend (profiler captures, no /metrics)"
                                        for b in campaign.backends if b.trace_only})
    theirs = {ref.label: ref.ran_on for ref in references}  # a compared campaign's: from its own manifests
    where = [None if r.arm is None else theirs[r.source] if r.source in theirs
             else (ran_on or {}).get((str(r.arm), str(r.backend)), "") for r in frame.itertuples(index=False)]
    said = any(where)  # where some row names its host, a measured row that cannot says so
    rows = [{"backend": escape_md(r.backend), "source": escape_md(r.source), "context": int_or_na(r.context),
             "batch": int_or_na(r.batch), "step_1": fmt(r.step_1_ms, ".2f", " ms"),
             "step_b": fmt(r.step_b_ms, ".2f", " ms"), "ratio": fmt(r.ratio, ".2f", "x"), "note": escape_md(r.note),
             "ran_on": escape_md(w or (NOT_RECORDED if said and w is not None else ""))}  # each host named
            for r, w in zip(frame.itertuples(index=False), where, strict=True)]
    text, _ = table(rows, [Column("backend", "backend", keep=True), Column("source", "source"),
                           Column("context", "context (tokens)", True), Column("batch", "batch B", True),
                           Column("step_1", "step at batch 1", True), Column("step_b", "step at batch B", True),
                           Column("ratio", "ratio", True), Column("note", "note"),
                           Column("ran_on", "ran on (host: device)")])
    intro = (f"Decode step (counters) at batch B over the single-stream step, per backend and context (medians "
             f"over repeats; arm {escape_md(arms[-1]) if arms else 'n/a'}, the last compared).")
    where = {b.name: (ran_on or {}).get((arms[-1] if arms else "", b.name), "") for b in campaign.backends}
    where = {b: w for b, w in where.items() if w}  # issue 29: where each ran (the manifest's host first)
    hosts = {b: w.partition(":")[0] for b, w in where.items()}
    if len(set(hosts.values())) > 1:
        intro += " The backends ran on different hosts: " + ", ".join(
            f"{escape_md(b)} on {escape_md(h)}" for b, h in hosts.items()) + "."
    elif len(set(where.values())) > 1:
        intro += f" The backends ran on different devices of host {escape_md(next(iter(hosts.values())))}: " + \
            "; ".join(f"{escape_md(b)} on {escape_md(w.partition(': ')[2])}" for b, w in where.items()) + "."
    return section("Cross-backend reference ratio", intro, text, f"{len(rows)} rows")
