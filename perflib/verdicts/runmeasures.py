"""The measurements of runs.csv: the client's figures and the server's counters per level (no trace).

The decode step against batch 1 (`step_ratio`, `step_scaling`), the shares of the decode window
(`own_step_share`, `prefill_share`), the step over its memory-bandwidth floor (`step_over_floor`) and an
arm's change against its baseline (`change_pct`, with the 95% interval of `perflib.verdicts.compare`).
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from perflib import checks
from perflib.derive import DerivedTables
from perflib.verdicts import compare
from perflib.verdicts.measures import Measured, Scope, _median, _no_runs, _pct, _select, _where, measurement


def _window_reason(runs: pd.DataFrame) -> str:
    """Why these runs' client saw no steady step: the first `steady_step_reason` (a staggered or coalesced
    decode window, `perflib.runs.client_window`), or ''."""
    if runs is None or "steady_step_reason" not in runs.columns:
        return ""
    return next((w for w in checks.text(runs["steady_step_reason"]) if w), "")


def _step_of(tables: DerivedTables, scope: Scope, batch: int) -> tuple[float | None, int]:
    return _median(_select(tables.runs, scope, batch), "decode_step_ms")


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
