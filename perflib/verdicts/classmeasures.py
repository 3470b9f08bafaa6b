"""The kernel-class measurements of the trace: the named classes' share of the window, their time and
dispatches per step, and how their time scales with the batch; "not measured" first where no trace has
any of the named classes and they could be hiding as unclassified time. On a CPU backend with `perf`
samples, the classes' share of the pooled samples (`samplepool`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

import pandas as pd

from perflib.attribution.samples import share_text
from perflib.classes import OTHER
from perflib.derive import DerivedTables
from perflib.verdicts.measures import (
    Measured,
    Scope,
    _guess,
    _median,
    _no_trace,
    _pct,
    _select,
    _where,
    measurement,
    number,
)
from perflib.verdicts.samplepool import _of_samples, _pooled, _sampled


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
        decode, steps = number(run.get("decode_steps")), number(run.get("steps"))
        if decode == 0:  # the steps have phases and none decodes: no decode figure
            continue
        time_col, count_col, window = (("decode_time_ms", "decode_count", number(run.get("decode_window_ms")))
                                       if decode is not None else ("time_ms", "count", number(run.get("window_ms"))))
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
