"""Interleaved prefill read from the engine's own steps: the share of a traced level's decode span spent in
steps that carry prefill, where the engine names its steps' phases (vLLM `execute_context_<n>(...)`,
SGLang `step[EXTEND ...]`: `perflib.attribution.phases`).

It answers the interleaved-prefill question where the client cannot: a stream that reaches the client in
one burst (its first-token times are when it read them, not when the server made them) or requests so
staggered that no request's decode window is seen whole. The steps' periods tile the span (each from the
previous step's end to its own end), so prefill + mixed periods over all periods is the share of the span
the engine spent on steps that were not decode alone.
"""

from __future__ import annotations

import pandas as pd

from perflib.derive import DerivedTables
from perflib.verdicts.measures import Measured, Scope, _no_trace, _pct, _select, _where, measurement

CARRIES_PREFILL = ("prefill", "mixed")
"""The phases whose steps compute some request's prompt (`perflib.attribution.phases`)."""


def _shares(phases: pd.DataFrame) -> list[tuple[float, float, float]]:
    """Per repeat: (prefill-carrying ms, all steps' ms, their share)."""
    out = []
    for _, rows in phases.groupby("repeat", sort=True):
        ms = pd.to_numeric(rows["window_ms"], errors="coerce").fillna(0.0)
        carrying = float(ms[rows["phase"].astype(str).isin(CARRIES_PREFILL)].sum())
        total = float(ms.sum())
        if total > 0:
            out.append((carrying, total, carrying / total))
    return out


@measurement("step_prefill_share", unit="fraction", trace=True, batched=True)
def step_prefill_share(tables: DerivedTables, scope: Scope) -> Measured:
    """Share of the traced decode span in engine steps that carry prefill (the engine's phase names)."""
    phases = _select(tables.phases, scope)
    if phases is None or not len(phases):
        trace = _select(tables.trace_runs, scope)
        if trace is not None and len(trace):
            return Measured(None, "", f"the trace's steps at {_where(scope)} name no phase (vLLM and SGLang "
                                      "name their steps' phases; llama.cpp and ProfilerStep# steps do not)")
        return _no_trace(tables, scope)
    shares = sorted(_shares(phases), key=lambda s: s[2])
    if not shares:
        return Measured(None, "", f"no step time in the traces at {_where(scope)}")
    carrying, total, value = shares[len(shares) // 2]
    return Measured(value, f"steps that carry prefill take {carrying:.1f} of {total:.1f} ms of the traced decode span "
                           f"({_pct(value)}; the engine's own step names), median of {len(shares)}")
