"""A sampling profile's samples at a scope, pooled over repeats (a CPU backend's `perf` samples).

The trace rows of a sampling profile carry counts, not times (`perflib.attribution.samples`): the trace
measurements sum them over the repeats into one estimate and say how they were sampled.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from perflib.attribution.samples import sampled_label
from perflib.derive import DerivedTables
from perflib.verdicts.measures import Scope, _select


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
