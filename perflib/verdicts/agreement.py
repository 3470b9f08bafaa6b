"""Two runs of one campaign held against each other: where their answers agree, and beside each place where
they do not, the measured facts of both runs.

A campaign run twice (one arm per GPU in parallel through `--cluster`, then on one GPU in sequence: issue 30)
should give one answer. `of` pairs the two runs' verdicts (candidate x level, each run decided once by
`Decisions.of` over its own derived tables) and their before/after changes (`compare.comparisons`, each with
its 95% interval). A verdict agrees where both runs reached the same outcome. A change agrees by `RULE`
(`changes_agree`, docs/reference/COMPARE.md): each run's change lies within the other run's interval.

Beside each disagreement stand the facts the two runs measured at the levels it rests on, side by side and
not weighed: the device each arm's run folders recorded and whether the compared arms shared one, every
repeat's contention record (other processes' share of its CPUs, PSI, run-queue wait, steal: `perflib.load`),
the repeats' decode steps and their spread, the counter step over the client's steady step, and the level
checks that failed (`perflib.checks`). The page (`perflib.report.agreement`) and `--json` show them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from perflib import checks
from perflib.config import Campaign
from perflib.derive import DerivedTables
from perflib.verdicts import compare
from perflib.verdicts.answer import format_value
from perflib.verdicts.decisions import Decisions
from perflib.verdicts.evaluate import NOT_MEASURED, Verdict
from perflib.verdicts.measures import MEASUREMENTS, number

RULE = ("each run's change lies within the other run's 95% interval (Welch t), both ways; where only one run "
        "has an interval, the other run's change lies within it; where neither has one, not judged")
"""When two runs' before/after changes agree (`changes_agree`)."""



def changes_agree(pct: Any, lo: Any, hi: Any, other_pct: Any, other_lo: Any, other_hi: Any) -> bool | None:
    """`RULE`: True where each change (in %) lies within the other's 95% interval [lo, hi] (bounds included),
    False where one does not, None where no interval is there to judge by or a change is missing."""
    pct, other_pct = number(pct), number(other_pct)
    if pct is None or other_pct is None:
        return None
    within = []
    bounds = tuple(number(x) for x in (lo, hi, other_lo, other_hi))
    if bounds[2] is not None and bounds[3] is not None:
        within.append(bounds[2] <= pct <= bounds[3])
    if bounds[0] is not None and bounds[1] is not None:
        within.append(bounds[0] <= other_pct <= bounds[1])
    return all(within) if within else None


@dataclass(frozen=True)
class RunSide:
    """One of the two runs: its label, derived tables, what was decided over them, and its run folders'
    devices and contention records (`perflib.pageinputs.SIGNALS`)."""

    label: str
    tables: DerivedTables
    decisions: Decisions
    signals: pd.DataFrame


@dataclass(frozen=True)
class VerdictPair:
    """One candidate at one level in both runs (None: that run has no such verdict)."""

    ours: Verdict | None
    theirs: Verdict | None

    @property
    def any(self) -> Verdict:
        return self.ours or self.theirs  # type: ignore[return-value]

    @property
    def agree(self) -> bool:
        return self.ours is not None and self.theirs is not None and self.ours.outcome == self.theirs.outcome

    def to_dict(self) -> dict[str, Any]:
        x = self.any

        def side(v: Verdict | None) -> dict[str, Any] | None:
            return None if v is None else {"outcome": v.outcome, "value": v.value, "evidence": v.evidence}

        return {"candidate": x.candidate, "label": x.label, "scope": x.scope, "arm": x.arm, "baseline": x.baseline,
                "backend": x.backend, "batch": x.batch, "context": x.context, "measure": x.measure,
                "this": side(self.ours), "other": side(self.theirs), "agree": self.agree}


@dataclass(frozen=True)
class ChangePair:
    """One before/after change (a `compare.comparisons` row: pair, level, figure) in both runs, and whether it
    agrees by `RULE` (None: not judged)."""

    ours: dict[str, Any] | None
    theirs: dict[str, Any] | None

    @property
    def any(self) -> dict[str, Any]:
        return self.ours or self.theirs or {}

    @property
    def agree(self) -> bool | None:
        if self.ours is None or self.theirs is None:
            return None
        a, b = self.ours, self.theirs
        return changes_agree(a["change_pct"], a["ci_low_pct"], a["ci_high_pct"],
                             b["change_pct"], b["ci_low_pct"], b["ci_high_pct"])

    def to_dict(self) -> dict[str, Any]:
        keys = ("before", "after", "runs_before", "runs_after", "change_pct", "ci_low_pct", "ci_high_pct")
        x = self.any
        return {**{k: x.get(k) for k in ("pair", "baseline", "arm", "backend", "batch", "context", "measure")},
                "this": {k: self.ours.get(k) for k in keys} if self.ours else None,
                "other": {k: self.theirs.get(k) for k in keys} if self.theirs else None, "agree": self.agree}


def change_text(row: dict[str, Any] | None) -> str:
    """'+12.0% (95% interval -3.0% to +27.0%, 2 and 2 repeats)', or what is missing."""
    if row is None or number(row.get("change_pct")) is None:
        return "n/a (no change: an arm has no usable repeat there)"
    lo, hi = number(row.get("ci_low_pct")), number(row.get("ci_high_pct"))
    counts = f"{row.get('runs_before')} and {row.get('runs_after')} repeats"
    interval = f"95% interval {lo:+.1f}% to {hi:+.1f}%, {counts}" if lo is not None and hi is not None else \
        f"no interval, {counts}"
    return f"{row['change_pct']:+.1f}% ({interval})"


@dataclass(frozen=True)
class RepeatSignals:
    """One complete run folder's contention record (None: not sampled, or not said)."""

    repeat: int
    sampled: bool
    contended: bool
    foreign_cpu_share: float | None
    steal_share: float | None
    psi_some_share: float | None
    wait_per_cpu: float | None
    why: str = ""


@dataclass(frozen=True)
class ArmFacts:
    """What one run measured of one arm at one level: the devices its run folders recorded, its complete and
    used repeats, each used repeat's decode step (counter, ms), their spread and the counter step over the
    client's steady step (`perflib.checks`' ratios), each repeat's contention record, and the level's failed
    checks."""

    run: str
    arm: str
    backend: str
    batch: int
    context: int
    devices: tuple[str, ...]
    complete: int
    used: int
    steps: tuple[tuple[int, float], ...]
    spread: float | None
    counter_vs_client: float | None
    repeats: tuple[RepeatSignals, ...]
    checks: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "arm": self.arm, "backend": self.backend, "batch": self.batch,
                "context": self.context, "devices": list(self.devices), "complete": self.complete, "used": self.used,
                "decode_step_ms": {f"r{r}": s for r, s in self.steps}, "spread": self.spread,
                "counter_vs_client": self.counter_vs_client, "checks": self.checks,
                "contention": [{"repeat": s.repeat, "sampled": s.sampled, "contended": s.contended,
                                "foreign_cpu_share": s.foreign_cpu_share, "steal_share": s.steal_share,
                                "psi_some_share": s.psi_some_share, "wait_per_cpu": s.wait_per_cpu, "why": s.why}
                               for s in self.repeats]}


@dataclass(frozen=True)
class Difference:
    """A verdict or a change on which the runs differ: what and where, each run's answer, whether the compared
    arms shared a device in each run, what went over a limit (failed checks, contended repeats), and the
    facts of every arm and level it rests on, in both runs."""

    kind: str
    what: str
    ours: str
    theirs: str
    pairing: tuple[str, ...]
    over: tuple[str, ...]
    facts: tuple[ArmFacts, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "what": self.what, "this": self.ours, "other": self.theirs,
                "pairing": list(self.pairing), "over": list(self.over), "facts": [f.to_dict() for f in self.facts]}


@dataclass(frozen=True)
class Agreement:
    """This run against the other run of the same campaign: every verdict and change paired, and the
    differences with their facts."""

    label: str
    this_label: str
    data: str
    verdicts: tuple[VerdictPair, ...]
    changes: tuple[ChangePair, ...]
    differences: tuple[Difference, ...]

    @property
    def verdicts_agree(self) -> int:
        return sum(p.agree for p in self.verdicts)

    @property
    def changes_judged(self) -> int:
        return sum(p.agree is not None for p in self.changes)

    @property
    def changes_agree(self) -> int:
        return sum(p.agree is True for p in self.changes)

    def to_dict(self) -> dict[str, Any]:
        return {"with": self.label, "this": self.this_label, "data": self.data, "rule": RULE,
                "verdicts_agree": self.verdicts_agree, "verdicts_total": len(self.verdicts),
                "changes_agree": self.changes_agree, "changes_judged": self.changes_judged,
                "changes_total": len(self.changes),
                "verdicts": [p.to_dict() for p in self.verdicts], "changes": [p.to_dict() for p in self.changes],
                "differences": [d.to_dict() for d in self.differences]}


# ------------------------------------------------------------------------------------------ pairing


def _verdict_key(v: Verdict) -> tuple[Any, ...]:
    return (v.candidate, v.arm, v.baseline, v.backend, v.batch, v.context)


def _change_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(str(row[k]) for k in ("baseline", "arm", "backend", "batch", "context", "measure"))


def _paired(ours: Sequence[Any], theirs: Sequence[Any], key: Any) -> list[tuple[Any, Any]]:
    """Items of both sequences matched by `key`: this run's order, then those only the other has."""
    by_key = {key(x): x for x in theirs}
    mine = {key(x) for x in ours}
    return [(x, by_key.get(key(x))) for x in ours] + [(None, x) for x in theirs if key(x) not in mine]


# ------------------------------------------------------------------------------------------ facts


def _at(frame: pd.DataFrame | None, arm: str, backend: str | None, batch: int, context: int) -> pd.DataFrame:
    if frame is None or not len(frame):
        return pd.DataFrame()
    mask = pd.Series(True, index=frame.index)
    for column, value in (("arm", arm), ("backend", backend), ("batch", batch), ("context", context)):
        if value is not None and column in frame.columns:
            mask &= frame[column].astype(str) == str(value)
    return frame[mask]


def arm_facts(side: RunSide, arm: str, backend: str, batch: int, context: int) -> ArmFacts:
    """What `side` measured of `arm` at one level (`ArmFacts`)."""
    runs = _at(side.tables.runs, arm, backend, batch, context)
    complete = runs[runs["status"].astype(str) == "complete"] if len(runs) else runs
    used = checks.usable(complete) if len(complete) else complete
    steps = tuple((int(r), float(s)) for r, s in zip(used["repeat"], pd.to_numeric(used["decode_step_ms"],
                                                                                  errors="coerce"), strict=True)
                  if s == s) if len(used) and "decode_step_ms" in used.columns else ()
    signals = _at(side.signals, arm, backend, batch, context)
    if len(signals):
        signals = signals[signals["status"].astype(str) == "complete"].sort_values("repeat")
    repeats = tuple(RepeatSignals(int(s.repeat), bool(s.sampled), bool(s.contended), number(s.foreign_cpu_share),
                                  number(s.steal_share), number(s.psi_some_share), number(s.wait_per_cpu),
                                  str(s.contention_why or "") if isinstance(s.contention_why, str) else "")
                    for s in signals.itertuples(index=False)) if len(signals) else ()
    devices = tuple(dict.fromkeys(str(d) for d in signals["device"] if isinstance(d, str) and d)) \
        if len(signals) else ()
    level = _at(side.decisions.level_checks, arm, backend, batch, context)
    failed = "; ".join(str(c) for c in level["checks"] if isinstance(c, str) and c) if len(level) else ""
    return ArmFacts(side.label, arm, str(backend), int(batch), int(context), devices, len(complete), len(used), steps,
                    checks.step_spread(used) if len(used) else None,
                    checks.counter_over_client(used) if len(used) else None, repeats, failed)


def _levels(ctx_batches: Sequence[int], ctx_contexts: Sequence[int], batch: int | None, context: int | None,
            batch1: bool) -> list[tuple[int, int]]:
    batches = sorted(ctx_batches) if batch is None else sorted({batch, *([1] if batch1 else [])})
    contexts = sorted(ctx_contexts) if context is None else [context]
    return [(b, c) for c in contexts for b in batches]


def _pairing(side: RunSide, arms: Sequence[str], backend: str, levels: Sequence[tuple[int, int]]) -> str:
    """Where the arms ran in one run, and whether on one device: 'parallel: t1 and t2 paired on one device
    (h-a: no GPU, CPUs 0)' or 'parallel: t1 on …; t2 on …'."""
    where = {}
    for arm in arms:
        seen: dict[str, None] = {}
        for batch, context in levels:
            seen.update(dict.fromkeys(arm_facts(side, arm, backend, batch, context).devices))
        where[arm] = tuple(seen)
    if not any(where.values()):
        return f"{side.label}: no device recorded"
    if len(arms) > 1 and len(set(where.values())) == 1 and len(next(iter(where.values()))) == 1:
        return f"{side.label}: {' and '.join(arms)} paired on one device ({where[arms[0]][0]})"
    parts = [f"{arm} on {', '.join(d) or 'no device recorded'}" for arm, d in where.items()]
    return f"{side.label}: {'; '.join(parts)}" + ("; not paired on one device" if len(arms) > 1 else "")


def _over(facts: Sequence[ArmFacts], sides: Sequence[RunSide]) -> tuple[str, ...]:
    """Each failed level check and each contended repeat among `facts`, named by run, arm and level, this
    run's first."""
    out = []
    for f in sorted(facts, key=lambda f: [s.label for s in sides].index(f.run)):
        where = f"{f.run}: {f.arm} b{f.batch} c{f.context}"
        if f.checks:
            out.append(f"{where}: {f.checks}")
        out += [f"{where} r{r.repeat}: {r.why or 'contended'}" for r in f.repeats if r.contended]
    return tuple(out)


def difference(kind: str, what: str, ours: str, theirs: str, sides: Sequence[RunSide], arms: Sequence[str],
               backend: str, levels: Sequence[tuple[int, int]]) -> Difference:
    """A `Difference` with the facts of `arms` at `levels` in each of `sides`."""
    facts = tuple(arm_facts(side, arm, backend, batch, context)
                  for batch, context in levels for arm in arms for side in sides)
    pairing = tuple(_pairing(side, arms, backend, levels) for side in sides)
    return Difference(kind, what, ours, theirs, pairing, _over(facts, sides), facts)


def _verdict_difference(pair: VerdictPair, sides: Sequence[RunSide], campaign: Campaign) -> Difference:
    x = pair.any
    meas = MEASUREMENTS.get(x.measure)
    arms = list(dict.fromkeys(a for a in (x.baseline, x.arm, x.trace_from) if a))
    backend = x.backend or campaign.backends[0].name
    levels = _levels(campaign.batches, campaign.contexts, x.batch, x.context, bool(meas and meas.rests_on_batch1))

    def said(v: Verdict | None, side: RunSide) -> str:
        """The verdict's number and threshold; its suspect levels stand under `Difference.over`."""
        if v is None:
            return f"not decided in {side.label}"
        return f"not measured ({v.why})" if v.outcome == NOT_MEASURED else f"{v.text}: {v.outcome} ({v.threshold})"

    return difference("verdict", f"{x.label}, {x.scope}", said(pair.ours, sides[0]), said(pair.theirs, sides[1]),
                      sides, arms, backend, levels)


def _change_difference(pair: ChangePair, sides: Sequence[RunSide]) -> Difference:
    x = pair.any
    levels = [(int(x["batch"]), int(x["context"]))]
    what = f"{x['measure']} of {x['arm']} against {x['baseline']}, {x['backend']} batch {x['batch']} context {x['context']}"
    return difference("change", what, change_text(pair.ours), change_text(pair.theirs), sides,
                      [str(x["baseline"]), str(x["arm"])], str(x["backend"]), levels)


def of(campaign: Campaign, ours: RunSide, theirs: RunSide, data: str = "") -> Agreement:
    """`ours` against `theirs`, two runs of `campaign` each decided once: every verdict and before/after change
    paired, and each that differs with the facts of both runs (`data`: where the other run's folder is, as
    the page names it)."""
    verdicts = tuple(VerdictPair(a, b) for a, b in _paired(ours.decisions.verdicts, theirs.decisions.verdicts,
                                                           _verdict_key))
    pairs = list(campaign.comparisons)
    changes = tuple(ChangePair(a, b) for a, b in _paired(compare.comparisons(ours.tables.runs, pairs),
                                                         compare.comparisons(theirs.tables.runs, pairs), _change_key))
    sides = (ours, theirs)
    differences = [_verdict_difference(p, sides, campaign) for p in verdicts if not p.agree]
    differences += [_change_difference(p, sides) for p in changes if p.agree is False]
    return Agreement(theirs.label, ours.label, data, verdicts, changes, tuple(differences))


def verdict_cell(v: Verdict | None) -> str:
    """'confirmed 2.31x', 'n/m' (not measured), or '—' where the run has no such verdict."""
    if v is None:
        return "—"
    return "n/m" if v.outcome == NOT_MEASURED else f"{v.outcome} {format_value(v.value, v.measure)}"
