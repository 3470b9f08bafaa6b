"""The page's Agreement section and its first-screen line: this run against another run of the same campaign.

Rendered from `perflib.verdicts.agreement.Agreement` alone (decided in `perflib.publish`): every verdict
(candidate x level) and every before/after change with both runs' answers, then each disagreement with the
facts both runs measured at the levels it rests on, side by side: the device of each arm and whether the
compared arms shared one, the repeats' decode steps and their spread, the counter step over the client's
steady step, and each repeat's contention record. Numbers only; the page draws no conclusion from them.
"""

from __future__ import annotations

import os
from pathlib import Path

from perflib import checks
from perflib.report.markdown import Column, details, join, table
from perflib.report.sections import section
from perflib.report.text import escape_md, fmt
from perflib.verdicts.agreement import RULE, Agreement, ArmFacts, Difference, change_text, verdict_cell

TITLE = "Agreement"
SHOWN = 5
"""Differences shown open; the rest are folded below them."""


def first_screen(agreement: Agreement, link: bool = True) -> str:
    """'- **Agreement with sequential.** 40 of 42 verdicts agree; 5 of 6 changes agree within their
    intervals; 2 differ, each with the measured facts of both runs ([Agreement](#agreement)).' (`link`:
    with the link to the section, as the page has it)."""
    a = agreement
    parts = [f"{a.verdicts_agree} of {len(a.verdicts)} verdicts agree" if a.verdicts else "no verdicts to compare"]
    if a.changes:
        parts.append(f"{a.changes_agree} of {a.changes_judged} changes agree within their intervals"
                     + (f" ({len(a.changes) - a.changes_judged} not judged: no interval)"
                        if a.changes_judged < len(a.changes) else ""))
    differ, where = len(a.differences), f" ([{TITLE}](#agreement))" if link else ""
    parts.append(f"{differ} differ{'s' if differ == 1 else ''}, each with the measured facts of both runs{where}"
                 if differ else f"nothing differs{where}")
    return f"- **Agreement with {escape_md(a.label)}.** " + "; ".join(parts) + "."


def _verdict_table(agreement: Agreement) -> str:
    rows = [{"cause": escape_md(p.any.label), "where": escape_md(p.any.scope),
             "ours": escape_md(verdict_cell(p.ours)), "theirs": escape_md(verdict_cell(p.theirs)),
             "agree": "yes" if p.agree else "**no**"} for p in agreement.verdicts]
    text, _ = table(rows, [Column("cause", "candidate", keep=True), Column("where", "where", keep=True),
                           Column("ours", escape_md(agreement.this_label), keep=True),
                           Column("theirs", escape_md(agreement.label), keep=True), Column("agree", "agree", keep=True)])
    return text


def _change_table(agreement: Agreement) -> str:
    rows = []
    for p in agreement.changes:
        x = p.any
        rows.append({"pair": escape_md(f"{x['arm']} vs {x['baseline']}"),
                     "level": escape_md(f"{x['backend']} b{x['batch']} c{x['context']}"),
                     "measure": escape_md(x["measure"]), "ours": escape_md(change_text(p.ours)),
                     "theirs": escape_md(change_text(p.theirs)),
                     "agree": {True: "yes", False: "**no**", None: "not judged"}[p.agree]})
    text, _ = table(rows, [Column("pair", "pair", keep=True), Column("level", "level", keep=True),
                           Column("measure", "figure", keep=True),
                           Column("ours", escape_md(agreement.this_label), keep=True),
                           Column("theirs", escape_md(agreement.label), keep=True), Column("agree", "agree", keep=True)])
    return text


def _per_repeat(values: list[tuple[int, float | None]], spec: str, scale: float = 1.0, unit: str = "") -> str:
    """'r1 2.74 · r2 2.90', 'n/s' for a repeat whose value was not sampled; 'n/a' where none was."""
    if not values or all(v is None for _, v in values):
        return "n/a"
    return " · ".join(f"r{r} " + (fmt(v * scale, spec, unit) if v is not None else "n/s") for r, v in values)


def facts_rows(facts: tuple[ArmFacts, ...]) -> list[dict[str, str]]:
    """One table row per run, arm and level of a difference: the numbers side by side."""
    rows = []
    for f in facts:
        contended = [r.repeat for r in f.repeats if r.contended]
        rows.append({
            "run": escape_md(f.run), "arm": escape_md(f.arm), "level": f"b{f.batch} c{f.context}",
            "device": escape_md("; ".join(f.devices)) or "n/a",
            "used": f"{f.used} of {f.complete}" + (f" (r{', r'.join(map(str, contended))} contended)"
                                                   if contended else ""),
            "steps": _per_repeat([(r, s) for r, s in f.steps], ".2f"),
            "spread": fmt(f.spread, ".2f", "x"), "cvc": fmt(f.counter_vs_client, ".2f", "x"),
            "foreign": _per_repeat([(r.repeat, r.foreign_cpu_share) for r in f.repeats], ".0f", 100, "%"),
            "psi": _per_repeat([(r.repeat, r.psi_some_share) for r in f.repeats], ".0f", 100, "%"),
            "wait": _per_repeat([(r.repeat, r.wait_per_cpu) for r in f.repeats], ".2f"),
            "steal": _per_repeat([(r.repeat, r.steal_share) for r in f.repeats], ".0f", 100, "%"),
        })
    return rows


FACT_COLUMNS = [Column("run", "run", keep=True), Column("arm", "arm", keep=True), Column("level", "level", keep=True),
                Column("device", "device"), Column("used", "repeats used"),
                Column("steps", "decode step per repeat (ms, counter)"), Column("spread", "spread", True),
                Column("cvc", "counter / client step", True), Column("foreign", "others' CPU share"),
                Column("psi", "PSI some"), Column("wait", "run-queue wait (s per CPU s)"), Column("steal", "steal")]


def difference_block(n: int, d: Difference, this_label: str, label: str) -> str:
    """One disagreement: what, both answers, the devices, what went over a limit, and the facts table."""
    head = (f"**{n}. {escape_md(d.what)}** ({d.kind}). {escape_md(this_label)}: {escape_md(d.ours)}. "
            f"{escape_md(label)}: {escape_md(d.theirs)}.")
    over = ("; ".join(escape_md(o) for o in d.over) if d.over
            else "nothing in either run: no failed level check, no contended repeat")
    bullets = [f"- Devices: {'; '.join(escape_md(p) for p in d.pairing)}.",
               f"- Over a limit: {over}."]
    text, _ = table(facts_rows(d.facts), FACT_COLUMNS)
    return join(head, "\n".join(bullets), text)


def agreement_section(agreement: Agreement | None, page_dir: Path) -> str:
    """The Agreement section ('' without an `agree_with` run)."""
    if agreement is None:
        return ""
    a = agreement
    where = os.path.relpath(a.data, page_dir).replace(os.sep, "/") if a.data else ""
    limits = "; ".join(f"{k} {lo:g}–{hi:g}×" for k, (lo, hi) in checks.LIMITS.items()
                       if k in ("counter_vs_client", "spread"))
    intro = (f"This run ({escape_md(a.this_label)}) against another run of the same campaign, "
             f"{escape_md(a.label)}" + (f" (data folder `{escape_md(where)}`)" if where else "") + ", each decided "
             "from its own run folders. A verdict agrees where both runs reached the same outcome; a before/after "
             f"change agrees where {escape_md(RULE)} (docs/reference/COMPARE.md). Beside each that differs stand the "
             "facts both runs measured at the levels it rests on, side by side: the device each arm's run folders "
             "recorded and whether the compared arms shared one, the used repeats' decode steps and their spread "
             "(slowest over fastest), the counter step over the client's steady step (medians), and each repeat's "
             "contention record (others' share of its CPUs, PSI some, the server's and client's run-queue wait, "
             f"steal; n/s: not sampled). The checks accept {limits} (the counter check at batch 1); a contended "
             "repeat is left out of medians and verdicts.")
    folds = join(details(f"{len(a.verdicts)} verdicts, {a.verdicts_agree} agree", _verdict_table(a)),
                 details(f"{len(a.changes)} before/after changes, {a.changes_agree} of {a.changes_judged} judged agree",
                         _change_table(a)))
    blocks = [difference_block(i, d, a.this_label, a.label) for i, d in enumerate(a.differences, 1)]
    more = details(f"{len(blocks) - SHOWN} more differences", join(*blocks[SHOWN:])) if len(blocks) > SHOWN else ""
    after = join("### Where they differ", *blocks[:SHOWN], more) if blocks else \
        "The two runs agree on every verdict and on every change judged."
    return join(f"## {TITLE}", intro, folds, after) if folds or blocks else section(TITLE, intro)
