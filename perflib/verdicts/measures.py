"""Measurements: named functions over the derived tables, each giving a number and its sentence.

A measurement is registered with `@measurement("name", unit=...)`; it takes the derived tables and
a `Scope` (arm, backend, batch, context, kernel classes, ...) and returns a `Measured`: a value, the
sentence that states it with units ("host gaps 6.7 of 57.0 ms per step (11.7%)"), or `None` with
the reason it could not be measured. Campaign files name them in `candidates[].measure`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from perflib import checks
from perflib.attribution import WORK_CPU_OPS
from perflib.attribution.samples import sampled_label, share_text
from perflib.classes import OTHER
from perflib.derive import DerivedTables
from perflib.verdicts import compare, gapsplit


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


def _num(value: Any) -> float | None:
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


def _window_reason(runs: pd.DataFrame) -> str:
    """Why these runs' client saw no steady step: the first `steady_step_reason` (a staggered or coalesced
    decode window, `perflib.runs.client_window`), or ''."""
    if runs is None or "steady_step_reason" not in runs.columns:
        return ""
    return next((w for w in checks.text(runs["steady_step_reason"]) if w), "")


def _step_of(tables: DerivedTables, scope: Scope, batch: int) -> tuple[float | None, int]:
    return _median(_select(tables.runs, scope, batch), "decode_step_ms")


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


def _pooled(frame: pd.DataFrame | None, column: str) -> float:
    return float(pd.to_numeric(frame[column], errors="coerce").fillna(0).sum()) if frame is not None and \
        column in frame.columns else 0.0


def _sampled(tables: DerivedTables, scope: Scope, batch: int | None = None) -> dict[str, Any] | None:
    """The samples of a sampling profile's trace rows at the scope, pooled over repeats (their counts
    summed: one estimate from all of them), with how they were sampled; None where the rows are no
    samples (`perflib.attribution.samples`)."""
    sel = _select(tables.trace_runs, scope, batch)
    if sel is None or not len(sel) or "samples" not in sel.columns:
        return None
    sel = sel[pd.to_numeric(sel["samples"], errors="coerce").notna()]
    if not len(sel):
        return None
    hz = pd.to_numeric(sel["sample_hz"], errors="coerce").dropna() if "sample_hz" in sel.columns else pd.Series()
    event = next((str(e) for e in sel.get("sample_event", pd.Series(dtype=object)) if isinstance(e, str) and e), None)
    return {"samples": _pooled(sel, "samples"), "compute": _pooled(sel, "compute_samples"),
            "sync": _pooled(sel, "sync_samples"), "host": _pooled(sel, "host_samples"), "repeats": len(sel),
            "label": sampled_label(event, float(hz.median()) if len(hz) else None), "runs": sel}


def _of_samples(pooled: dict[str, Any]) -> str:
    """`of 2,314 samples over 3 repeats (sampled estimate, cpu-clock 999 Hz)`."""
    repeats = f" over {pooled['repeats']} repeats" if pooled["repeats"] > 1 else ""
    return f"of {pooled['samples']:,.0f} samples on the decode threads{repeats} ({pooled['label']})"


def _class_sum(tables: DerivedTables, scope: Scope, batch: int | None = None) -> dict[str, float] | None:
    """Per-repeat sums over `scope.classes` of time_ms, count and ms_per_step, then medians: over the decode
    steps alone (their kernel time, dispatches, summed period and count) where the engine names its steps'
    phases, a repeat without a decode step left out; None where no repeat is left."""
    runs = _select(tables.trace_runs, scope, batch)
    if runs is None or not len(runs):
        return None
    cls = _select(tables.classes, scope, batch)
    wanted = set(scope.classes)
    sums, shown = [], []
    for _, run in runs.iterrows():
        rows = cls[(cls["arm"].astype(str) == str(run["arm"])) & (cls["backend"].astype(str) == str(run["backend"]))
                   & (cls["batch"].astype(str) == str(run["batch"])) & (cls["context"].astype(str) == str(run["context"]))
                   & (cls["repeat"].astype(str) == str(run["repeat"]))] if len(cls) else cls
        mine = rows[rows["kernel_class"].astype(str).isin(wanted)] if len(rows) else rows
        decode, steps = _num(run.get("decode_steps")), _num(run.get("steps"))
        if decode == 0:  # the steps have phases and none decodes: no decode figure
            continue
        time_col, count_col, window = (("decode_time_ms", "decode_count", _num(run.get("decode_window_ms")))
                                       if decode is not None else ("time_ms", "count", _num(run.get("window_ms"))))
        time_ms, count = (float(pd.to_numeric(mine.get(c), errors="coerce").fillna(0).sum()) if len(mine) else 0.0
                          for c in (time_col, count_col))
        if decode is not None:
            shown.append(f" (decode steps only: {decode:.0f} of {steps:.0f} steps)" if steps and steps != decode else "")
            steps = decode
        sums.append({"time_ms": time_ms, "count": count, "window_ms": window,
                     "ms_per_step": time_ms / steps if steps else None, "steps": steps})
    if not sums:
        return None
    frame = pd.DataFrame(sums)
    return {**{col: _median(frame, col)[0] for col in frame.columns}, "decode": bool(shown),
            "guess": shown[0] if shown else _guess(runs)}


UNCLASSIFIED_MAX = 0.01
"""Above this share of kernel time in class `other`, a named class that no trace has is "not measured"."""


def _unknown_classes(tables: DerivedTables, scope: Scope) -> Measured | None:
    """"Not measured" when no trace of the scope (any batch) has a kernel of the named classes and either
    no class table knows them or the traces hold unclassified (`other`) kernel time that could be them.

    A typo or a class the backend's table lacks would otherwise sum to 0 ms and read as ruled out. Where
    the classes are real and (nearly) every kernel is classified, they are truly absent: 0 ms is a
    measurement (llama.cpp's batch-8 decode runs no GEMM, for example).
    """
    cls = _select(tables.classes, replace(scope, batch=None))
    seen = set(cls["kernel_class"].astype(str)) if cls is not None and len(cls) else set()
    if not seen or seen & set(scope.classes):
        return None
    if scope.known_classes is not None and not set(scope.classes) & scope.known_classes:
        return Measured(None, "", f"no class table has class {_classes_label(scope)} (classes seen in the traces "
                                  f"at {_where(scope)}: {', '.join(sorted(seen))})")
    time_ms = pd.to_numeric(cls["time_ms"], errors="coerce").fillna(0)
    total = float(time_ms.sum())
    other = float(time_ms[cls["kernel_class"].astype(str) == OTHER].sum())
    if total > 0 and other / total <= UNCLASSIFIED_MAX:
        return None
    unclassified = f"; {_pct(other / total)} of kernel time is unclassified" if total > 0 else ""
    return Measured(None, "", f"no kernel of class {_classes_label(scope)} in the traces at {_where(scope)} "
                              f"(classes seen: {', '.join(sorted(seen))}{unclassified})")


def _named_classes(func: Callable[[DerivedTables, Scope], Measured]) -> Callable[[DerivedTables, Scope], Measured]:
    """For a class measurement: "not measured" first where no trace has any of the named classes."""

    @functools.wraps(func)
    def measured(tables: DerivedTables, scope: Scope) -> Measured:
        return _unknown_classes(tables, scope) or func(tables, scope)

    return measured


def _classes_label(scope: Scope) -> str:
    return "+".join(scope.classes) or "(no class named)"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


# ----------------------------------------------------------------------------------- measurements


@measurement("step_ratio", unit="ratio", rests_on_batch1=True)
def step_ratio(tables: DerivedTables, scope: Scope) -> Measured:
    """Decode step ms at batch B over batch 1 (same arm, backend, context)."""
    batch = scope.batch
    step_b, n_b = _step_of(tables, scope, batch)
    step_1, n_1 = _step_of(tables, scope, 1)
    if step_b is None:
        return _no_runs(scope, batch, tables)
    if step_1 is None:
        return _no_runs(scope, 1, tables)
    value = step_b / step_1
    return Measured(value, f"decode step {step_b:.1f} ms at batch {batch} over {step_1:.1f} ms at batch 1 "
                           f"(medians of {n_b} and {n_1}): {value:.2f}x")


@measurement("step_scaling", unit="ratio", rests_on_batch1=True)
def step_scaling(tables: DerivedTables, scope: Scope) -> Measured:
    """Step ratio batch B over batch 1, divided by B (1.0 = the step grows like the batch)."""
    base = step_ratio(tables, scope)
    if base.value is None or not scope.batch:
        return base
    value = base.value / scope.batch
    return Measured(value, f"{base.text} for a {scope.batch}x batch ({value:.2f} of linear)")


@measurement("own_step_share", unit="fraction", batched=True)
def own_step_share(tables: DerivedTables, scope: Scope) -> Measured:
    """Share of the decode window that the request's own decode steps explain (median over requests)."""
    sel = _select(tables.runs, scope)
    own, n = _median(sel, "own_step_share")
    if own is None and scope.no_requests:
        return Measured(None, "", scope.no_requests)
    if own is None and not len(sel):
        return _no_runs(scope, None, tables)
    if own is None:
        why = _window_reason(sel) or "no complete run or no steady step"
        return Measured(None, "", f"no own-step share at {_where(scope)} ({why})")
    prefill, _ = _median(sel, "prefill_share")
    other, _ = _median(sel, "other_share")
    rest = ", ".join(f"{name} {_pct(v)}" for name, v in (("prefill", prefill), ("other", other)) if v is not None)
    return Measured(own, f"own decode steps explain {_pct(own)} of the decode window"
                         + (f" ({rest})" if rest else "") + f", median of {n}")


@measurement("prefill_share", unit="fraction", batched=True)
def prefill_share(tables: DerivedTables, scope: Scope) -> Measured:
    """Share of the decode window covered by other requests' prefill."""
    sel = _select(tables.runs, scope)
    value, n = _median(sel, "prefill_share")
    if value is None and len(sel):
        return Measured(None, "", f"no decode window of a request at {_where(scope)} "
                                  f"({_window_reason(sel) or 'no request produced two tokens at two instants'})")
    if value is None:
        return _no_runs(scope, None, tables)
    return Measured(value, f"other requests' prefill covers {_pct(value)} of the decode window, median of {n}")


@measurement("gap_share", unit="fraction", trace=True)
def gap_share(tables: DerivedTables, scope: Scope) -> Measured:
    """Host gaps (window minus GPU busy) as a share of the step, from the trace."""
    row = _trace_row(tables, scope)
    if row is None or not row["window_ms"]:
        return _no_trace(tables, scope)
    pooled = _sampled(tables, scope)
    if pooled is not None and pooled["samples"]:  # CPU samples: sync + host share of the decode threads'
        rest = pooled["sync"] + pooled["host"]
        value = rest / pooled["samples"]
        step = row["window_ms"] / row["steps"] if row["steps"] else None
        per_step = f"; about {value * step:.1f} of {step:.1f} ms per step" if step else ""
        return Measured(value, f"sync + host {share_text(rest, pooled['samples'])} {_of_samples(pooled)}: sync "
                               f"{_pct(pooled['sync'] / pooled['samples'])}, host {_pct(pooled['host'] / pooled['samples'])}"
                               f"{per_step}")
    value = row["gap_ms"] / row["window_ms"]
    split = gapsplit.split_of(_select(tables.host_gaps, scope))
    filled = split.filled_by() if split is not None else ""  # what fills them, where the capture says
    if row["steps"]:
        step = row["window_ms"] / row["steps"]
        return Measured(value, f"host gaps {row['gap_ms'] / row['steps']:.1f} of {step:.1f} ms per step ({_pct(value)})"
                               + row["guess"] + filled)
    return Measured(value, f"host gaps {row['gap_ms']:.1f} of {row['window_ms']:.1f} ms in the window ({_pct(value)})"
                           + filled)


def _gap_part(tables: DerivedTables, scope: Scope, part: str) -> Measured:
    """One part of the host gap as a share of the step (`gapsplit`), or why it was not measured. On a CPU
    backend: from perf samples, the pooled share of the decode threads' samples in sync or host work; from
    CPU operators, the time between them, all host compute; launch (other API, and a CPU operator trace's
    sync) 0, with the reason: the CPU runs the model's operators itself."""
    pooled = _sampled(tables, scope)
    if pooled is not None and pooled["samples"]:
        return _sampled_part(tables, scope, pooled, part)
    split = gapsplit.split_of(_select(tables.host_gaps, scope))
    if split is None or split.no_decode:  # no_decode: the trace rows' phase note says so (`_no_trace`)
        return _no_trace(tables, scope)
    if not split.measured:
        return Measured(None, "", split.note)
    guess = _guess(_select(tables.trace_runs, scope))
    if split.basis == WORK_CPU_OPS:
        return Measured(split.step_share[part], gapsplit.cpu_ops_sentence(split, part, guess))
    return Measured(split.step_share[part], split.sentence(part) + guess)


def _sampled_part(tables: DerivedTables, scope: Scope, pooled: dict[str, Any], part: str) -> Measured:
    """A part of a sampled window's sync + host share (`gapsplit.sampled_part`), pooled over repeats."""
    row = _trace_row(tables, scope)
    step = row["window_ms"] / row["steps"] if row is not None and row["window_ms"] and row["steps"] else None
    value, text = gapsplit.sampled_part(part, pooled, _of_samples(pooled), step)
    return Measured(value, text)


@measurement("launch_share", unit="fraction", trace=True)
def launch_share(tables: DerivedTables, scope: Scope) -> Measured:
    """Host gap with a launch call in flight (and no sync), as a share of the step, from the host API records (0 on a CPU: no launches)."""
    return _gap_part(tables, scope, "launch")


@measurement("sync_share", unit="fraction", trace=True)
def sync_share(tables: DerivedTables, scope: Scope) -> Measured:
    """Host gap with a synchronising call or a device-to-host copy in flight (perf samples: the sync samples), as a share of the step."""
    return _gap_part(tables, scope, "sync")


@measurement("other_api_share", unit="fraction", trace=True)
def other_api_share(tables: DerivedTables, scope: Scope) -> Measured:
    """Host gap with only other API calls in flight (no launch, no sync), as a share of the step (0 on a CPU)."""
    return _gap_part(tables, scope, "other_api")


@measurement("host_compute_share", unit="fraction", trace=True)
def host_compute_share(tables: DerivedTables, scope: Scope) -> Measured:
    """Host gap with no API call in flight on the launching threads (CPU: between operators; perf: host samples), as a share of the step."""
    return _gap_part(tables, scope, "host_compute")


@measurement("gap_ms_per_step", unit="ms", trace=True)
def gap_ms_per_step(tables: DerivedTables, scope: Scope) -> Measured:
    """Host gap ms per decode step, from the trace."""
    row = _trace_row(tables, scope)
    if row is None:
        return _no_trace(tables, scope)
    if row["gap_ms_per_step"] is None:
        if row["steps"] == 0:  # the engine named its steps' phases, and none was a decode step
            return _no_trace(tables, scope)
        return Measured(None, "", f"no step count for the trace at {_where(scope)}")
    return Measured(row["gap_ms_per_step"], f"host gaps {row['gap_ms_per_step']:.2f} ms per step{row['guess']}")


@measurement("gap_scaling", unit="ratio", trace=True, rests_on_batch1=True)
def gap_scaling(tables: DerivedTables, scope: Scope) -> Measured:
    """Gap ms per step at batch B over batch 1 (how host work scales with the batch)."""
    row_b, row_1 = _trace_row(tables, scope), _trace_row(tables, scope, 1)
    if row_b is None or row_b["gap_ms_per_step"] is None:
        return _no_trace(tables, scope)
    if row_1 is None or row_1["gap_ms_per_step"] is None:
        return _no_trace(tables, scope, 1)
    value = row_b["gap_ms_per_step"] / row_1["gap_ms_per_step"]
    return Measured(value, f"host gaps {row_b['gap_ms_per_step']:.2f} ms per step at batch {scope.batch} over "
                           f"{row_1['gap_ms_per_step']:.2f} at batch 1: {value:.2f}x{row_b['guess'] or row_1['guess']}")


@measurement("class_share", unit="fraction", trace=True)
@_named_classes
def class_share(tables: DerivedTables, scope: Scope) -> Measured:
    """Time of the named kernel classes as a share of the trace window (of its decode steps, where the engine names phases)."""
    sums = _class_sum(tables, scope)
    if sums is None or not sums.get("window_ms"):
        return _no_trace(tables, scope)
    value = sums["time_ms"] / sums["window_ms"]
    instead = ""
    if not sums["time_ms"]:  # absent: say what ran instead
        top = _top_class(tables, scope)
        instead = f"; the largest class is {top}" if top else ""
    pooled = _sampled(tables, scope)
    if pooled is not None and pooled["samples"]:  # CPU samples: the classes' share of the decode threads'
        cls = _select(tables.classes, scope)
        k = _pooled(cls[cls["kernel_class"].astype(str).isin(set(scope.classes))], "count") if len(cls) else 0.0
        value = k / pooled["samples"]
        return Measured(value, f"{_classes_label(scope)} {share_text(k, pooled['samples'])} {_of_samples(pooled)}"
                               f"{instead.replace('kernel time', 'compute samples')}")
    where = "the decode steps" if sums["decode"] else "the window"
    return Measured(value, f"{_classes_label(scope)} {sums['time_ms']:.1f} of {sums['window_ms']:.1f} ms "
                           f"in {where} ({_pct(value)}, {sums['count']:.0f} dispatches{instead})"
                           + (sums["guess"] if sums["decode"] else ""))


def _top_class(tables: DerivedTables, scope: Scope) -> str | None:
    """The class with the most kernel time at the scope, with its share of kernel time (median over repeats)."""
    cls = _select(tables.classes, scope)
    if cls is None or not len(cls):
        return None
    share = cls.assign(share=pd.to_numeric(cls["share"], errors="coerce")).groupby("kernel_class")["share"].median()
    if share.dropna().empty:
        return None
    name = str(share.idxmax())
    return f"{name} ({_pct(float(share.max()))} of kernel time)"


@measurement("class_ms_per_step", unit="ms", trace=True)
@_named_classes
def class_ms_per_step(tables: DerivedTables, scope: Scope) -> Measured:
    """Time of the named kernel classes per decode step."""
    sums = _class_sum(tables, scope)
    if sums is None:
        return _no_trace(tables, scope)
    if sums.get("ms_per_step") is None:
        return Measured(None, "", f"no step count for the trace at {_where(scope)}")
    return Measured(sums["ms_per_step"], f"{_classes_label(scope)} {sums['ms_per_step']:.2f} ms per step{sums['guess']}")


@measurement("class_scaling", unit="ratio", trace=True, rests_on_batch1=True)
@_named_classes
def class_scaling(tables: DerivedTables, scope: Scope) -> Measured:
    """Class ms per step at batch B over batch 1, divided by B (1.0 = grows like the batch)."""
    b = scope.batch
    sums_b, sums_1 = _class_sum(tables, scope), _class_sum(tables, scope, 1)
    if sums_b is None:
        return _no_trace(tables, scope)
    if sums_1 is None:
        return _no_trace(tables, scope, 1)
    if sums_b.get("ms_per_step") is None or sums_1.get("ms_per_step") is None or not b:
        which = [f"batch {n}" for n, sums in ((b, sums_b), (1, sums_1)) if sums.get("ms_per_step") is None]
        return Measured(None, "", f"no step count at {' and '.join(which) or 'batch 0'}: no time per step of "
                                  f"{_classes_label(scope)}")
    if not sums_1["ms_per_step"]:
        return Measured(None, "", f"no {_classes_label(scope)} kernel at batch 1 to scale from")
    pooled_b, pooled_1 = _sampled(tables, scope), _sampled(tables, scope, 1)
    sampled = ""
    if pooled_b is not None and pooled_1 is not None:  # CPU samples: each ms per step is a sampled estimate
        cls = _select(tables.classes, replace(scope, batch=None))
        mine = cls[cls["kernel_class"].astype(str).isin(set(scope.classes))] if len(cls) else cls
        k_b = _pooled(mine[mine["batch"].astype(str) == str(b)], "count") if len(mine) else 0.0
        k_1 = _pooled(mine[mine["batch"].astype(str) == "1"], "count") if len(mine) else 0.0
        sampled = (f" ({pooled_b['label']}: {k_b:,.0f} of {pooled_b['samples']:,.0f} samples at batch {b}, "
                   f"{k_1:,.0f} of {pooled_1['samples']:,.0f} at batch 1)")
    if not sums_b["ms_per_step"]:  # the batch-B step runs none of them: they cannot grow with the batch
        top = _top_class(tables, scope)
        instead = f"; its largest class is {top}" if top else ""
        if sampled:
            instead = instead.replace("kernel time", "compute samples")
        return Measured(0.0, f"no {_classes_label(scope)} kernel in the batch-{b} step (0 ms per step, against "
                             f"{sums_1['ms_per_step']:.2f} ms at batch 1{instead}): 0.00 of linear"
                             f"{sums_b['guess'] or sums_1['guess']}{sampled}")
    ratio = sums_b["ms_per_step"] / sums_1["ms_per_step"]
    value = ratio / b
    return Measured(value, f"{_classes_label(scope)} {sums_b['ms_per_step']:.1f} ms per step at batch {b} over "
                           f"{sums_1['ms_per_step']:.1f} at batch 1: {ratio:.2f}x for a {b}x batch "
                           f"({value:.2f} of linear){sums_b['guess'] or sums_1['guess']}{sampled}")


@measurement("class_dispatches", unit="count", trace=True)
@_named_classes
def class_dispatches(tables: DerivedTables, scope: Scope) -> Measured:
    """Dispatch count of the named kernel classes in the window (and per step)."""
    sums = _class_sum(tables, scope)
    if sums is None:
        return _no_trace(tables, scope)
    per_step = f" ({sums['count'] / sums['steps']:.1f} per step{sums['guess']})" if sums.get("steps") else ""
    return Measured(sums["count"], f"{_classes_label(scope)} {sums['count']:.0f} dispatches{per_step}")


def floor_ms(weight_bytes: float, kv_bytes_per_token: float, context: int, batch: int, bandwidth_gbs: float) -> float:
    """Decode-step floor: (weights + KV bytes per token x context x batch) / bandwidth, in ms."""
    return (weight_bytes + kv_bytes_per_token * context * batch) / (bandwidth_gbs * 1e9) * 1e3


@measurement("step_over_floor", unit="ratio")
def step_over_floor(tables: DerivedTables, scope: Scope) -> Measured:
    """Decode step ms over the memory-bandwidth floor of the step."""
    missing = [name for name, v in (("model weight_bytes", scope.weight_bytes),
                                    ("model kv_bytes_per_token", scope.kv_bytes_per_token),
                                    (f"peak_bandwidth_gbs of backend {scope.backend}", scope.peak_bandwidth_gbs))
               if v is None]
    if missing:
        return Measured(None, "", f"no floor: the campaign gives no {', '.join(missing)}")
    if scope.context is None or scope.batch is None:
        return Measured(None, "", "no floor: the candidate names no batch and context for the KV term")
    step, n = _step_of(tables, scope, scope.batch)
    if step is None:
        return _no_runs(scope, None, tables)
    floor = floor_ms(scope.weight_bytes, scope.kv_bytes_per_token, scope.context, scope.batch,
                     scope.peak_bandwidth_gbs)
    value = step / floor
    return Measured(value, f"decode step {step:.2f} ms over a floor of {floor:.3f} ms "
                           f"({scope.peak_bandwidth_gbs:g} GB/s): {value:.1f}x")


def higher_is_better(column: str) -> bool:
    """Whether a larger value of a runs.csv column is an improvement (tok/s, the own-step share)."""
    return column.endswith("tok_s") or column.endswith("share") and column.startswith("own")


@measurement("change_pct", unit="pct", has_baseline=True)
def change_pct(tables: DerivedTables, scope: Scope) -> Measured:
    """Change of a runs.csv column (default decode_step_ms) from the baseline arm to the arm, in %."""
    column = scope.column or "decode_step_ms"
    if not scope.baseline or not scope.arm:
        return Measured(None, "", "no two arms to compare (campaign has one arm)")
    before = _median(_select(tables.runs, scope, arm=scope.baseline), column)[0]
    after = _median(_select(tables.runs, scope, arm=scope.arm), column)[0]
    if before is None:
        return _no_runs(replace(scope, arm=scope.baseline), None, tables)
    if after is None:
        return _no_runs(scope, None, tables)
    found = compare.change_of(*(compare.level_values(tables.runs, column, arm, scope.backend, scope.batch,
                                                     scope.context) for arm in (scope.baseline, scope.arm)))
    if found is None:
        return Measured(None, "", f"{column} is 0 in arm {scope.baseline}")
    unit = " ms" if column.endswith("_ms") else (" tok/s" if column.endswith("tok_s") else "")
    return Measured(found.pct, f"{column} {found.before_mean:.2f}{unit} ({scope.baseline}) to "
                               f"{found.after_mean:.2f}{unit} ({scope.arm}), means of {len(found.before)} and "
                               f"{len(found.after)}: {found.pct:+.1f}%, {found.interval_text()}")
