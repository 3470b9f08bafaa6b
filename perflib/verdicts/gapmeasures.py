"""The host-gap measurements of the trace: the gap's share of the step and per step, how it scales with
the batch, and its parts (launch, sync, other API, host compute: `perflib.verdicts.gapsplit`). On a CPU
backend they read its operators (all host compute) or its pooled `perf` samples (`samplepool`).
"""

from __future__ import annotations

from typing import Any

from perflib.attribution import WORK_CPU_OPS
from perflib.attribution.samples import share_text
from perflib.derive import DerivedTables
from perflib.verdicts import gapsplit
from perflib.verdicts.measures import (
    Measured,
    Scope,
    _guess,
    _no_trace,
    _pct,
    _select,
    _trace_row,
    _where,
    measurement,
)
from perflib.verdicts.samplepool import _of_samples, _sampled


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
