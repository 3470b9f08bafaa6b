"""Measurements: named functions over the derived tables, each giving a number and its sentence.

A measurement is registered with `@measurement("name", unit=...)`; it takes the derived tables and
a `Scope` (arm, backend, batch, context, kernel classes, ...) and returns a `Measured`: a value, the
sentence that states it with units ("host gaps 6.7 of 57.0 ms per step (11.7%)"), or `None` with
the reason it could not be measured. Campaign files name them in `candidates[].measure`.

This module holds the registry (`MEASUREMENTS`), `Scope` and `Measured`, and what the measurements share:
the rows at a scope, medians over repeats, why a scope has no runs or no trace, a trace row's figures.
The measurements themselves are registered by `runmeasures` (runs.csv: the client and the counters),
`gapmeasures` (the host gaps of the trace), `classmeasures` (the kernel classes of the trace) and
`step_prefill`, each imported by the package in that order.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from perflib import checks
from perflib.derive import DerivedTables


@dataclass(frozen=True)
class Scope:
    """Where a measurement applies, and the campaign facts some measurements need."""

    arm: str | None = None
    backend: str | None = None
    batch: int | None = None
    context: int | None = None
    classes: tuple[str, ...] = ()
    column: str | None = None
    baseline: str | None = None
    weight_bytes: int | None = None
    kv_bytes_per_token: int | None = None
    peak_bandwidth_gbs: float | None = None
    profiler: str | None = None
    trace_note: str | None = None  # why this arm has no trace (a traced arm whose capture was lost)
    known_classes: frozenset[str] | None = None  # classes the class tables can give (None: unchecked)
    no_requests: str | None = None  # why this backend has no request records (a trace-only backend)
    traced_by: tuple[tuple[str, str, str | None], ...] = ()
    """(traced arm, its profiler kind, its `trace_note`) for each arm with `role: traced, of: <this arm>`,
    in file order."""
    trace_from: str | None = None
    """The traced arm whose traces a trace measurement of this arm reads (`trace_scope`), or None."""
    trace_hint: str | None = None
    """The `profiler.kind` to suggest where this arm has no trace and no traced arm (None: none to suggest)."""

    def describe(self) -> str:
        arm = f"{self.arm} (trace from {self.trace_from})" if self.arm and self.trace_from else self.arm
        parts = [f"{k} {v}" for k, v in (("arm", arm), ("backend", self.backend), ("batch", self.batch),
                                          ("context", self.context)) if v is not None]
        return ", ".join(parts)


@dataclass(frozen=True)
class Measured:
    """A measured value and its sentence, or value None with `why` it was not measured."""

    value: float | None
    text: str
    why: str = ""


@dataclass(frozen=True)
class Measurement:
    name: str
    func: Callable[[DerivedTables, Scope], Measured]
    unit: str  # "fraction" (a share; thresholds in % are divided by 100), "ratio", "ms", "pct", "count"
    doc: str
    trace: bool = False
    """Reads the kernel traces (trace_runs, classes, kernels, gaps, steps): an arm without traces of its
    own is measured from its traced arm (`trace_scope`); decided at every traced level."""
    rests_on_batch1: bool = False
    """Divides batch B by batch 1: decided at every batch above 1, and rests on both levels."""
    batched: bool = False
    """Reads other requests of the level (their prefill): decided at every batch above 1."""
    has_baseline: bool = False
    """Compares an arm with its baseline arm (`Scope.baseline`): decided for every compared arm that has one."""


MEASUREMENTS: dict[str, Measurement] = {}


def measurement(name: str, unit: str = "ratio", trace: bool = False, rests_on_batch1: bool = False,
                batched: bool = False, has_baseline: bool = False) -> Callable:
    """Register a measurement under `name` (campaign files refer to it by that name); the flags say
    where it applies (`Measurement`): `trace=True` for one that reads the kernel traces."""

    def register(func: Callable[[DerivedTables, Scope], Measured]) -> Callable:
        MEASUREMENTS[name] = Measurement(name, func, unit, (func.__doc__ or "").strip().splitlines()[0], trace,
                                         rests_on_batch1, batched, has_baseline)
        return func

    return register


def _traced(tables: DerivedTables, arm: str, backend: str | None) -> bool:
    """Whether the trace tables hold any row of `arm` (on `backend`), at any batch or context."""
    frame = tables.trace_runs
    if frame is None or not len(frame):
        return False
    mask = frame["arm"].astype(str) == str(arm)
    if backend is not None:
        mask &= frame["backend"].astype(str) == str(backend)
    return bool(mask.any())


def trace_scope(tables: DerivedTables, scope: Scope) -> Scope:
    """Where a trace measurement of `scope` reads: the arm's own traces where it has any, else those of
    the first traced arm `of` it that has any (else its first traced arm, whose missing trace then says
    why), with `trace_from` naming it; the arm itself where it has no traced arm."""
    if scope.arm is None or not scope.traced_by or _traced(tables, scope.arm, scope.backend):
        return scope
    name, kind, note = next((t for t in scope.traced_by if _traced(tables, t[0], scope.backend)), scope.traced_by[0])
    return replace(scope, trace_from=name, profiler=kind, trace_note=note)


# ---------------------------------------------------------------------------------------- helpers


def number(value: Any) -> float | None:
    """A float, or None for None, NaN and what is not a number (a table cell read back from CSV)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def _select(frame: pd.DataFrame, scope: Scope, batch: int | None = None, arm: str | None = None) -> pd.DataFrame:
    if frame is None or not len(frame):
        return frame.iloc[0:0] if frame is not None else pd.DataFrame()
    mask = pd.Series(True, index=frame.index)
    for key, value in (("arm", arm or scope.arm), ("backend", scope.backend), ("context", scope.context),
                       ("batch", batch if batch is not None else scope.batch)):
        if value is not None and key in frame.columns:
            mask &= frame[key].astype(str) == str(value)
    if "status" in frame.columns:
        mask &= frame["status"].astype(str) == "complete"
    if "left_out" in frame.columns:  # contended runs never decide (perflib.checks)
        mask &= checks.text(frame["left_out"]) == ""
    return frame[mask]


def _median(frame: pd.DataFrame, column: str) -> tuple[float | None, int]:
    if frame is None or column not in frame.columns:
        return None, 0
    values = pd.to_numeric(frame[column], errors="coerce").dropna()
    if not len(values):
        return None, 0
    return float(values.median()), int(len(values))


def _where(scope: Scope, batch: int | None = None) -> str:
    return replace(scope, batch=batch if batch is not None else scope.batch).describe()


def _no_runs(scope: Scope, batch: int | None = None, tables: DerivedTables | None = None) -> Measured:
    """Why there is no figure at the scope: no request runs, every complete run left out (and why),
    or no complete run."""
    if scope.no_requests:
        return Measured(None, "", scope.no_requests)
    left = _left_out(tables, scope, batch)
    if left:
        n, why = left
        return Measured(None, "", f"no run used at {_where(scope, batch)}: {'its' if n == 1 else 'all'} {n} "
                                  f"complete run{'s' if n != 1 else ''} left out as contended ({why})")
    if tables is not None and scope.arm and not len(_select(tables.runs, replace(scope, context=None, batch=None))):
        # not reached yet, `--only`, or another runner's share
        return Measured(None, "", f"no runs of arm {scope.arm}" + (f" on backend {scope.backend}" if scope.backend
                                                                   else "") + " yet")
    return Measured(None, "", f"no complete run at {_where(scope, batch)}")


def _left_out(tables: DerivedTables | None, scope: Scope, batch: int | None) -> tuple[int, str] | None:
    """(complete runs left out at the scope, the first reason), or None where none was."""
    runs = tables.runs if tables is not None else None
    if runs is None or not len(runs) or "left_out" not in runs.columns:
        return None
    sel = _select(runs.assign(left_out=""), scope, batch)  # complete runs, left out or not
    why = [w for w in checks.text(runs.loc[sel.index, "left_out"]) if w]
    return (len(why), why[0].removeprefix("contended: ")) if why else None


def _no_trace(tables: DerivedTables, scope: Scope, batch: int | None = None) -> Measured:
    sel = _select(tables.trace_runs, scope, batch)
    if sel is not None and len(sel):
        notes = [n for n in checks.text(sel["phase_note"]) if n] if "phase_note" in sel.columns else []
        if notes:  # the engine named its steps' phases, and none was a decode step
            return Measured(None, "", f"at {_where(scope, batch)}: {notes[0]}")
        return Measured(None, "", f"no usable trace rows at {_where(scope, batch)}")
    runs = _select(tables.runs, scope, batch)
    lost = [str(t) for t in runs["trace_loss"] if isinstance(t, str) and t.strip()] \
        if runs is not None and "trace_loss" in runs.columns else []
    if lost:  # a trace was made and lost, or does not cover its window: the page's first screen says why
        return Measured(None, "", f"no whole trace at {_where(scope, batch)}: {len(lost)} lost or cut short "
                                  "(see Trace lost)")
    if (runs is None or not len(runs)) and _left_out(tables, scope, batch):  # traced, but never used
        return _no_runs(scope, batch, tables)
    if scope.trace_note:
        return Measured(None, "", scope.trace_note)
    if scope.profiler in (None, "none") and scope.trace_hint and scope.arm:  # the key that would measure it
        return Measured(None, "", f"no kernel trace of arm {scope.arm} on backend {scope.backend} (profiler: none, "
                                  f"no traced arm of it): add an arm with role: traced, of: {scope.arm}, "
                                  f"profiler: {{kind: {scope.trace_hint}}}")
    if scope.profiler in (None, "none"):
        return Measured(None, "", f"no kernel trace for backend {scope.backend} (profiler: none)")
    return Measured(None, "", f"no kernel trace at {_where(scope, batch)}")


def window_prefill(tables: DerivedTables, scope: Scope, batches: tuple[int | None, ...] = (None,)) -> float | None:
    """The largest share of the level's requests' prefill in the trace windows a trace measurement at the
    scope reads (`trace_runs`' `window_prefill_share`, at each of `batches`; None: the scope's), or None
    where none holds any: a staggered level whose decode-only part was too short to attribute over
    (`perflib.attribution.windows.decode_window_from_run`). A trace whose engine names its steps' phases
    holds none that matters: its decode figures are over its decode steps alone."""
    shares = []
    for batch in batches:
        sel = _select(tables.trace_runs, scope, batch)
        if sel is None or not len(sel) or "window_prefill_share" not in sel.columns:
            continue
        if "decode_steps" in sel.columns:  # steps with phases: the decode figures are the decode steps' alone
            sel = sel[pd.to_numeric(sel["decode_steps"], errors="coerce").isna()]
        shares += pd.to_numeric(sel["window_prefill_share"], errors="coerce").dropna().tolist()
    return max(shares) if shares and max(shares) > 0 else None


def _trace_row(tables: DerivedTables, scope: Scope, batch: int | None = None) -> dict[str, float | None] | None:
    """Medians over repeats of the trace_runs columns at the scope, or None."""
    sel = _select(tables.trace_runs, scope, batch)
    if sel is None or not len(sel):
        return None
    out = {}
    for col in ("window_ms", "busy_ms", "gap_ms", "steps", "busy_ms_per_step", "gap_ms_per_step", "dispatches"):
        out[col] = _median(sel, col)[0]
    out["n"] = len(sel)
    out["guess"] = _guess(sel)
    return {**out, **_decode_phase(sel, out["steps"])}


DECODE_FIGURES = {"window_ms": "decode_window_ms", "busy_ms": "decode_busy_ms", "gap_ms": "decode_gap_ms",
                  "steps": "decode_steps", "busy_ms_per_step": "decode_busy_ms_per_step",
                  "gap_ms_per_step": "decode_gap_ms_per_step"}
"""`_trace_row` figures and the `trace_runs` columns of the decode phase that replace them where the engine
names its steps' phases (`perflib.attribution.phases`): a decode-step figure never averages prefill in."""


def _decode_phase(sel: pd.DataFrame, steps: float | None) -> dict[str, Any]:
    """The decode phase's figures (`DECODE_FIGURES`, medians over repeats) where the traces name their
    steps' phases, with the note that says so in place of the rhythm's; {} where they do not. No decode
    step at all leaves the figures None (the trace rows' `phase_note` says why, `_no_trace`)."""
    decode, _ = _median(sel, "decode_steps")
    if decode is None:
        return {}
    out: dict[str, Any] = {key: _median(sel, col)[0] for key, col in DECODE_FIGURES.items()}
    if not decode:
        out = {**dict.fromkeys(out), "steps": 0}
    else:
        out["guess"] = f" (decode steps only: {decode:.0f} of {steps:.0f} steps)" if steps and steps != decode else ""
    return out


GUESS_NOTE = " (steps: a guess from the dispatch rhythm)"


def _guess(trace_runs: pd.DataFrame) -> str:
    """`GUESS_NOTE` where any of these trace rows counted its steps from the dispatch rhythm alone."""
    if trace_runs is None or "steps_guessed" not in trace_runs.columns:
        return ""
    return GUESS_NOTE if trace_runs["steps_guessed"].map(lambda v: str(v).lower() in ("true", "1")).any() else ""


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"
