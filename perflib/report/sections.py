"""The page's sections as Markdown, ordered from the answer to the evidence.

The summary comes first and stays short: each candidate's answer across levels in one line, the
levels the campaign's question names first, with the deciding numbers and thresholds
(`perflib.verdicts.answer`), the before/after headline per pair of arms with its interval and the
gates, what was not measured and why, which decode window was used where the client's was empty, and
the levels that failed a check. Every later section
puts its bulk in a collapsible block, leaves out columns that are n/a on every row (saying why),
and leaves out tables with no rows. Medians carry their min–max over repeats, and the count of
repeats where fewer than all had a value.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from typing import Any

import pandas as pd

from perflib import verdicts as v
from perflib.attribution import DECODE_ONLY
from perflib.config import RunSpec
from perflib.report.markdown import Column, details, join, table
from perflib.report.text import escape_md, fmt
from perflib.runs import MIN_DECODE_ONLY_STEPS, REQUEST_SPAN
from perflib.verdicts.answer import format_value, level_label, level_rank, levels_text

ORDER = ("Verdicts", "Before / after", "Per level", "Checks", "Agreement", "Profile", "Decode-window decomposition",
         "Step over floor", "Cross-backend reference ratio", "Environment", "Notes", "Raw data")


def anchor(title: str) -> str:
    """GitHub's anchor for a heading."""
    keep = "".join(ch for ch in title.lower() if ch.isalnum() or ch in " -_")
    return keep.replace(" ", "-")


def spread(row: Any, col: str, spec: str, unit: str = "", runs: int | None = None, scale: float = 1.0) -> str:
    """'1.49 ms (1.45–1.52)' from a level row's median and its `_min`/`_max`/`_n`; '[2 of 3]' where
    fewer repeats than `runs` had a value."""
    med = getattr(row, col, None)
    if med is None or med != med:
        return "n/a"
    lo, hi, n = (getattr(row, f"{col}_{s}", None) for s in ("min", "max", "n"))
    text = fmt(med * scale, spec, unit)
    if n is not None and n == n and n >= 2 and lo == lo and hi == hi and lo != hi:
        text += f" ({fmt(lo * scale, spec)}–{fmt(hi * scale, spec)})"
    if runs is not None and n is not None and n == n and 0 < n < runs:
        text += f" [{int(n)} of {runs}]"
    return text


# ------------------------------------------------------------------------------------------ summary


def verdict_rows(answers: Sequence[v.Answer]) -> list[dict[str, str]]:
    """One row per candidate measured somewhere: its answer across levels (`perflib.verdicts.answer`)."""
    return [{"cause": escape_md(a.label), "answer": _bold_outcomes(escape_md(a.line))} for a in answers if a.measured]


def _bold_outcomes(line: str) -> str:
    """The outcome words of an answer line in bold: '**confirmed** at ~16K ...; **ruled out** at ~1K'."""
    parts = []
    for part in line.split("; "):
        for outcome in v.OUTCOMES:
            if part.startswith(outcome + " "):
                part = f"**{outcome}**{part[len(outcome):]}"
                break
        parts.append(part)
    return "; ".join(parts)


def summary(question: str, decisions: v.Decisions, headline: Sequence[str], sections: Sequence[str],
            runs: pd.DataFrame | None = None, trace_runs: pd.DataFrame | None = None, agreement: str = "") -> str:
    """Long: the page's opening: the question, each candidate's answer across levels (the question's levels
    first), before/after per pair and gates, what was not measured, which decode window was used where it
    was not the client's, what was lost (`loss_lines` of `runs`), the checks, the `agreement` line with another
    run of the campaign where there is one, and the links to the sections; everything decided is `decisions`'
    (`perflib.verdicts.Decisions`), nothing is decided here."""
    verdicts, gates, ctx = decisions.verdicts, decisions.gates, decisions.context
    text, _ = table(verdict_rows(decisions.answers),
                    [Column("cause", "cause", keep=True), Column("answer", "answer per level (deciding numbers, "
                                                                           "threshold)")])
    lines = [f"**Question.** {escape_md(question)}" if question else "",
             text or ("No candidate could be measured." if verdicts else "No candidates in this campaign.")]
    if any(x.suspect for x in verdicts):
        lines.append("⚠ rests on a level that failed a check or lost runs to contention: see [Checks](#checks).")
    bullets = [f"- **Before / after.** {h}" for h in headline]
    bullets += [f"- **Gate.** {escape_md(g.gate)}: {escape_md(g.text)}: **{g.state}**" for g in gates]
    bullets += not_measured_lines(verdicts, ctx)
    bullets += window_lines(runs, trace_runs)
    bullets += loss_lines(runs, trace_runs)
    bullets.append("- **Checks.** " + _checks_line(decisions.level_checks))
    if agreement:
        bullets.append(agreement)
    links = " · ".join(f"[{s}](#{anchor(s)})" for s in sections)
    return join(*lines, "\n".join(bullets), f"Sections: {links}" if links else "")


_LEVEL_WORDS = re.compile(r",? (?:batch|context) \d+\b")


def not_measured_lines(verdicts: Sequence[v.Verdict], ctx: v.Context) -> list[str]:
    """Every level not measured, grouped by why (a why names the arm where it is the arm's): the why once,
    with the level it named taken out and the levels it holds at said after it."""
    by_why: dict[str, tuple[list[str], set[tuple[str | None, int | None, int | None]]]] = {}
    universe = {(x.backend, x.context, x.batch) for x in verdicts}
    for x in verdicts:
        if x.outcome != v.NOT_MEASURED:
            continue
        general = _LEVEL_WORDS.sub("", x.why)
        labels, levels = by_why.setdefault(general, ([], set()))
        if x.label not in labels:
            labels.append(x.label)
        if general != x.why:
            levels.add((x.backend, x.context, x.batch))
    if not by_why:
        return []
    parts = [f"{escape_md(', '.join(labels))}: {escape_md(why)}"
             + (f" (at {escape_md(levels_text(levels, universe, ctx))})" if levels else "")
             for why, (labels, levels) in by_why.items()]
    return ["- **Not measured.** " + "; ".join(parts)]


def _trace_window(trace_runs: pd.DataFrame | None, backend: Any, batch: Any, context: Any) -> str:
    """'; its traces (slots-cupti) read over the decode-only part (no request in prefill): 356 ms, ...' for a
    level whose traces were read over their decode span's decode-only part, or '; its traces (...) read over the
    span, 87.0% of it requests' prefill: their verdicts not decided' where that part held too few steps
    (`perflib.attribution.windows.decode_window_from_run`); '' where the level has no trace."""
    if trace_runs is None or not len(trace_runs) or "window" not in trace_runs.columns:
        return ""
    at = trace_runs[(trace_runs["backend"].astype(str) == str(backend)) & (trace_runs["batch"].astype(str) == str(batch))
                    & (trace_runs["context"].astype(str) == str(context))]
    if not len(at):
        return ""
    arms = ", ".join(escape_md(a) for a in dict.fromkeys(at["arm"].astype(str)))
    held = at
    if "decode_steps" in at.columns:  # steps with phases: their decode figures are the decode steps' alone
        held = at[pd.to_numeric(at["decode_steps"], errors="coerce").isna()]
    prefill = pd.to_numeric(held.get("window_prefill_share"), errors="coerce").dropna() \
        if "window_prefill_share" in held.columns else pd.Series(dtype=float)
    if len(prefill) and prefill.max() > 0:
        arms = ", ".join(escape_md(a) for a in dict.fromkeys(held["arm"].astype(str)))
        return (f"; its traces ({arms}) read over the span, up to {100 * prefill.max():.1f}% of it requests' "
                "prefill: their verdicts are not decided")
    part = [w.split("; read over ", 1)[1] for w, kind in zip(_texts(at, "window_why"), _texts(at, "window"), strict=True)
            if kind == DECODE_ONLY and "; read over " in w]
    if part:
        return f"; its traces ({arms}) read over {escape_md(part[0])}"
    return (f"; its traces ({arms}) read over the span by their engine's own decode steps"
            if len(held) < len(at) else "")


def window_lines(runs: pd.DataFrame | None, trace_runs: pd.DataFrame | None = None) -> list[str]:
    """The levels whose decode was measured over another window than the client's all-decoding one, and why
    (`perflib.runs.client_window`: requests staggered, a coalesced stream), with the `decode_tokens` that
    would overlap the requests and the window their traces were read over (`_trace_window`): a fact about the
    workload, said on the first screen, never a lost trace."""
    if runs is None or not len(runs) or "decode_window_why" not in runs.columns:
        return []
    used = runs[(runs["status"].astype(str) == "complete") & (_texts(runs, "decode_window_why") != "")]
    if "left_out" in used.columns:
        used = used[_texts(used, "left_out") == ""]
    if not len(used):
        return []
    items = []
    for (backend, batch, context), at in used.groupby(["backend", "batch", "context"], sort=True):
        first = at.iloc[0]
        suggested = pd.to_numeric(at["suggested_decode_tokens"], errors="coerce").dropna() \
            if "suggested_decode_tokens" in at.columns else pd.Series(dtype=float)
        more = f"; decode_tokens of {int(suggested.max()):,} or more would overlap them" if len(suggested) else ""
        arms = ", ".join(escape_md(a) for a in dict.fromkeys(at["arm"].astype(str)))
        items.append(f"{escape_md(backend)} b{int(batch)} c{int(context)} ({arms}; {len(at)} run"
                     f"{'s' if len(at) != 1 else ''}): {escape_md(str(first['decode_window_why']))}{more}"
                     + _trace_window(trace_runs, backend, batch, context))
    span = (" (a coalesced stream's over the requests' span, the one window sure to hold its decode, its steps "
            "the trace's own, else the server's counters)" if (_texts(used, "decode_window") == REQUEST_SPAN).any()
            else "")
    return ["- **Decode window.** No window with every request decoding at " + _some(items) + ". These levels' "
            "decode is measured over the run's decode span" + span + " from the server side (its counters; the "
            "trace's own steps where traced); where other requests' prefill fills it, that is the interleaved-prefill "
            "answer. "
            "Their traces are read over the span's decode-only part (no request in prefill) where it holds at "
            f"least {MIN_DECODE_ONLY_STEPS} steps; where it holds fewer, over the span, and a trace verdict there is "
            "not decided, saying how much of the window the prefill covers."]


def _texts(frame: pd.DataFrame, column: str) -> pd.Series:
    return frame[column].map(_text) if column in frame.columns else pd.Series("", index=frame.index)


SHOWN = 3
"""Runs named one by one in a loss line before the rest are counted."""


def _text(value: Any) -> str:
    """A text cell of runs.csv ('' for empty, NaN or None); a list (errors) joined."""
    if isinstance(value, (list, tuple)):
        return "; ".join(str(x) for x in value)
    return value.strip() if isinstance(value, str) else ""


def _errors(value: Any) -> str:
    """The errors of a run, from a list or from its text as runs.csv holds it (`['a', 'b']`)."""
    if isinstance(value, str) and value.startswith("["):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            pass
    return _text(value)


def _label(row: Any) -> str:
    return escape_md(RunSpec.label_of(row))


def _some(items: list[str]) -> str:
    shown = "; ".join(items[:SHOWN])
    return shown + (f"; and {len(items) - SHOWN} more (see [Checks](#checks) and [Raw data](#raw-data))"
                    if len(items) > SHOWN else "")


def loss_lines(runs: pd.DataFrame | None, trace_runs: pd.DataFrame | None = None) -> list[str]:
    """The first screen's account of what was lost, from runs.csv (`perflib.derive`): runs that did not
    complete, runs whose trace does not cover their window or was lost (their trace figures are not
    used), and the server starts whose profiler reported a loss (its exit, its loss lines, its dropped
    records), each with why. The same runs `perflib campaign run` and `report` print as failed and partial.
    Where traces were attributed and nothing was lost, one line says so: a page that is silent about its
    traces cannot be told from one that never looked."""
    if runs is None or not len(runs):
        return []
    out = []
    status = runs["status"].astype(str) if "status" in runs.columns else pd.Series("complete", index=runs.index)
    failed = runs[status != "complete"]
    if len(failed):
        items = [_label(r) + (f" ({escape_md(_errors(getattr(r, 'errors', ''))[:200])})"
                              if _errors(getattr(r, "errors", "")) else "") for r in failed.itertuples(index=False)]
        out.append(f"- **Failed runs.** {len(failed)} of {len(runs)} did not complete, their figures are not used: "
                   + _some(items) + ".")
    if "trace_loss" in runs.columns:
        lost = runs[runs["trace_loss"].map(_text) != ""]
        if len(lost):
            items = [f"{_label(r)}: {escape_md(_text(r.trace_loss))}" for r in lost.itertuples(index=False)]
            out.append("- **Trace lost.** " + _some(items) + ". A trace that does not cover its window is not "
                       "attributed: its figures would count the part without records as host gaps.")
    if "profiler_loss" in runs.columns:
        said = runs.assign(_p=runs["profiler_loss"].map(_text),
                           _t=runs["trace_loss"].map(_text) if "trace_loss" in runs.columns else "")
        said = said[said["_p"] != ""]
        for (arm, backend, text), group in said.groupby(["arm", "backend", "_p"], sort=True):
            whole = int((group["_t"] == "").sum())
            out.append(f"- **Profiler losses.** {escape_md(arm)}/{escape_md(backend)} ({len(group)} runs): "
                       f"{escape_md(text)}; the traces of {whole} of these {len(group)} runs cover their windows.")
    traced = 0 if trace_runs is None else len(trace_runs)
    if traced and not out:
        out.append(f"- **Traces.** All {traced} traced runs' traces cover their windows and were attributed whole; "
                   "no run failed and no profiler reported a loss.")
    return out


def _checks_line(level_checks: pd.DataFrame) -> str:
    if level_checks is None or not len(level_checks):
        return "no measured level to check."
    suspect = level_checks[level_checks["suspect"].astype(bool)]
    left = int(pd.to_numeric(level_checks["left_out"]).sum())
    unchecked = level_checks[pd.to_numeric(level_checks["used"]) == 0]  # every run left out: nothing to check
    total = len(level_checks)
    passing = total - len(suspect) - len(unchecked)
    parts = []
    if len(suspect):
        names = ", ".join(f"{r.arm} b{r.batch} c{r.context}" for r in suspect.itertuples(index=False))
        kinds = sorted({c.split(":")[0] for text in suspect["checks"] for c in str(text).split("; ") if c})
        parts.append(f"{len(suspect)} of {total} levels suspect ({', '.join(kinds)}): {names}")
    if passing:
        parts.append(f"all {total} levels pass their checks" if passing == total
                     else f"{passing} of {total} levels pass their checks")
    if len(unchecked):
        names = ", ".join(f"{r.arm} b{r.batch} c{r.context}" for r in unchecked.itertuples(index=False))
        parts.append(f"{len(unchecked)} of {total} levels not checked, every complete run left out as contended: "
                     f"{names}")
    if left:
        runs = sum(int(n) for n in pd.to_numeric(level_checks["complete"]))
        parts.append(f"{left} of {runs} complete run{'s' if runs != 1 else ''} left out of medians and verdicts "
                     "as contended")
    return "; ".join(parts) + " ([Checks](#checks))."


# ------------------------------------------------------------------------------------------ sections


def section(title: str, intro: str = "", body: str = "", summary_line: str = "", figure: dict | None = None,
            after: str = "") -> str:
    """A `## title` section: intro, its figure (always shown), the bulk collapsed, then `after`."""
    image = f"![{figure['alt']}]({figure['path']})" if figure else ""
    folded = details(summary_line or "the table", body) if body else ""
    content = join(intro, image, folded, after)
    return join(f"## {title}", content) if content else ""


def level_grid(verdicts: Sequence[v.Verdict], ctx: v.Context) -> str:
    """Candidate x level: one row per candidate and arm (with its baseline), one column per level (the
    question's first), each cell the outcome and its number."""
    levels = sorted({(x.context, x.batch) for x in verdicts},
                    key=lambda lv: (level_rank(ctx, lv[0], None)[0], lv[0] or 0, lv[1] or 0))
    if not levels:
        return ""
    backends = len({x.backend for x in verdicts}) > 1
    rows: dict[tuple[str, str, str], dict[str, str]] = {}
    for x in verdicts:
        key = (x.label, x.who + (f" on {x.backend}" if backends else ""), x.candidate)
        row = rows.setdefault(key, {"cause": escape_md(x.label), "who": escape_md(key[1])})
        cell = "n/m" if x.outcome == v.NOT_MEASURED else f"{x.outcome} {format_value(x.value, x.measure)}"
        if x.window_prefill is not None:  # measured over a window holding other requests' prefill: not decided
            cell += f" (window {100 * x.window_prefill:.0f}% prefill)"
        row[f"l{levels.index((x.context, x.batch))}"] = escape_md(cell) + (" ⚠" if x.suspect else "")
    columns = [Column("cause", "candidate", keep=True), Column("who", "arm")]
    columns += [Column(f"l{i}", escape_md(level_label(ctx, c, b))) for i, (c, b) in enumerate(levels)]
    text, _ = table(list(rows.values()), columns)
    return text


def verdict_section(verdicts: Sequence[v.Verdict], ctx: v.Context | None = None) -> str:
    ctx = ctx or v.Context(arms=(), backends=(), batches=(), contexts=())
    rows = [{"label": escape_md(x.label), "scope": escape_md(x.scope), "outcome": x.outcome,
             "evidence": escape_md(x.evidence)} for x in verdicts]
    text, _ = table(rows, [Column("label", "candidate", keep=True), Column("scope", "where"),
                           Column("outcome", "verdict"), Column("evidence", "evidence")])
    questions = {x.label: x.question for x in verdicts if x.question}
    qtext = "\n".join(f"- **{escape_md(k)}**: {escape_md(q)}" for k, q in questions.items())
    intro = ("Every candidate at every level it applies to (n/m: not measured, why below), the levels the "
             "question names first; the table below it gives each verdict's number and threshold.")
    return section("Verdicts", join(intro, level_grid(verdicts, ctx)), join(text, qtext), f"{len(verdicts)} verdicts")


def checks_section(level_checks: pd.DataFrame, limits: dict[str, tuple[float, float]]) -> str:
    if level_checks is None or not len(level_checks):
        return ""
    rows = [{"arm": escape_md(r.arm), "backend": escape_md(r.backend), "batch": r.batch, "context": r.context,
             "runs": f"{r.used} of {r.complete}" + (f", {r.left_out} left out ({escape_md(r.left_out_why)})"
                                                     if r.left_out else ""),
             "checks": escape_md(r.checks) if r.checks else ("ok" if r.used else "not checked: no run used")}
            for r in level_checks.itertuples(index=False)]
    text, _ = table(rows, [Column("arm", "arm", keep=True), Column("backend", "backend"),
                           Column("batch", "batch", True), Column("context", "context (tokens)", True),
                           Column("runs", "runs used"), Column("checks", "checks")])
    limit_text = "; ".join(f"{k} {lo:g}–{hi:g}×" for k, (lo, hi) in limits.items())
    intro = ("Each level's figures against independent measures (perflib.checks): the server's decode tokens "
             "against the client's, the counter step against the client's steady step and the responses' "
             "timings at batch 1, the spread of the repeats, the trace's step count against the client's "
             f"cadence, and each run's trace against its window (trace_loss: a capture that began late, ended early, "
             f"lost records or was not made). Accepted: {limit_text}. Runs that other processes contended are left "
             "out.")
    suspect = int(level_checks["suspect"].astype(bool).sum())
    return section("Checks", intro, text, f"{len(rows)} levels, {suspect} suspect")
