"""The page's tables as DataFrames: per level, before/after, ratios, floor, profile, classes, gaps.

Each is a pure function of the derived tables (medians over complete repeats); `perflib.open_campaign`
shows the same frames in a notebook.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from perflib import checks
from perflib.attribution import WORK_GPU, WORK_WORDS
from perflib.config import Campaign
from perflib.derive import GAP_ORDER, DerivedTables
from perflib.pageinputs import Reference
from perflib.verdicts import floor_ms

LEVEL_KEYS = ["arm", "backend", "batch", "context"]


def _median_levels(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Median over repeats of `columns` per level (arm, backend, batch, context), with the count of
    runs, and per column its min, max and how many repeats had a value (`f_min`, `f_max`, `f_n`)."""
    spread = [f"{c}_{s}" for c in columns for s in ("min", "max", "n")]
    if frame is None or not len(frame):
        return pd.DataFrame(columns=[*LEVEL_KEYS, "runs", *columns, *spread])
    frame = frame.copy()
    for col in columns:
        frame[col] = pd.to_numeric(frame[col], errors="coerce") if col in frame.columns else float("nan")
    grouped = frame.groupby(LEVEL_KEYS, sort=True, dropna=False)
    out = grouped[list(columns)].median()
    for col in columns:
        out[f"{col}_min"] = grouped[col].min()
        out[f"{col}_max"] = grouped[col].max()
        out[f"{col}_n"] = grouped[col].count()
    out.insert(0, "runs", grouped.size())
    return out.reset_index()


def level_table(tables: DerivedTables) -> pd.DataFrame:
    """One row per level: medians over complete repeats of the client, counter and trace figures."""
    runs = tables.runs
    if len(runs) and "status" in runs.columns:
        runs = checks.usable(runs)
    cols = ["decode_tok_s", "decode_step_ms", "steady_step_ms", "raw_step_ms", "occupancy", "prefill_chunks",
            "mixed_steps", "ttft_ms", "aggregate_tok_s", "own_step_share", "prefill_share", "other_share",
            "overlap_share"]
    levels = _median_levels(runs, cols)
    trace = _median_levels(tables.trace_runs, ["busy_ms_per_step", "gap_ms_per_step", "busy_share", "window_ms",
                                               "dispatches"])
    trace = trace.rename(columns={"window_ms": "trace_window_ms", "runs": "traced"})
    if len(trace) and len(levels):  # traced levels with no request runs (a trace-only backend) stay in
        for key in ("batch", "context"):
            trace[key] = trace[key].astype(levels[key].dtype)
    if len(trace):
        levels = levels.merge(trace, on=LEVEL_KEYS, how="outer")
        levels["runs"] = levels["runs"].fillna(levels["traced"]).astype(int)
        levels = levels.drop(columns=["traced"])
    if len(levels):
        levels = levels if len(trace) else levels.assign(
            busy_ms_per_step=float("nan"), gap_ms_per_step=float("nan"), busy_share=float("nan"),
            trace_window_ms=float("nan"), dispatches=float("nan"))
        per_class = class_level_table(tables)
        levels["top_classes"] = [top_classes(per_class, row) for row in levels.itertuples(index=False)]
    return levels.sort_values(LEVEL_KEYS, kind="stable").reset_index(drop=True)


def top_classes(per_class: pd.DataFrame, level: Any, n: int = 3) -> str:
    """'qmv 77.5%, sdpa 8.1%' for a level from `class_level_table` (median share over repeats), or ''
    with no trace."""
    if per_class is None or not len(per_class):
        return ""
    sel = per_class
    for key in LEVEL_KEYS:
        sel = sel[sel[key].astype(str) == str(getattr(level, key))]
    if not len(sel):
        return ""
    share = sel.set_index("kernel_class")["share"].astype(float)
    share = share.sort_values(ascending=False, kind="stable").head(n)
    return ", ".join(f"{name} {100 * v:.1f}%" for name, v in share.items())


RATIO_COLUMNS = ["backend", "source", "arm", "context", "batch", "step_1_ms", "step_b_ms", "ratio", "note"]


def _ratio_rows(levels: pd.DataFrame, backend: str, arm: str | None, batches: Sequence[int], source: str,
                why_empty: str, runs: pd.DataFrame | None = None) -> list[dict[str, Any]]:
    sel = levels[(levels["backend"].astype(str) == backend) & (levels["arm"].astype(str) == str(arm))] \
        if len(levels) else levels
    if not len(sel):
        left = checks.left_out_text(runs, f"of {backend}", backend=backend, arm=arm)
        return [{"backend": backend, "source": source, "arm": arm, "context": None, "batch": None, "step_1_ms": None,
                 "step_b_ms": None, "ratio": None, "note": f"not measured: {left}" if left else why_empty}]
    rows = []
    for context in sorted(sel["context"].unique()):
        at = sel[sel["context"] == context]
        one = at[at["batch"] == 1]["decode_step_ms"]
        s1 = float(one.iloc[0]) if len(one) else None
        for batch in batches:
            big = at[at["batch"] == batch]["decode_step_ms"]
            sb = float(big.iloc[0]) if len(big) else None
            ratio = sb / s1 if s1 and sb and not (math.isnan(s1) or math.isnan(sb)) else None
            left = "; ".join(t for t in (checks.left_out_text(runs, f"at batch {b}", backend=backend, arm=arm,
                                                               context=context, batch=b)
                                         for b in (1, batch) if (s1 if b == 1 else sb) is None) if t)
            note = "" if ratio is not None else (why_empty if why_empty.startswith("not measured: trace-only") else
                                                 f"not measured: {left}" if left else
                                                 f"not measured: no batch 1 and batch {batch} decode step from counters")
            rows.append({"backend": backend, "source": source, "arm": arm, "context": int(context), "batch": int(batch),
                         "step_1_ms": s1, "step_b_ms": sb, "ratio": ratio, "note": note})
    return rows


def ratio_table(tables: DerivedTables, backends: Sequence[str], other_backends: Sequence[str],
                batch: int | Sequence[int], arms: Sequence[str], source: str = "this campaign",
                references: Sequence[Reference] = (),
                other_note: str = "", no_counters: dict[str, str] | None = None) -> pd.DataFrame:
    """Cross-backend reference ratio: decode step at batch B over batch 1, per backend, context and B.

    Backends named in the campaign come first, then the reference campaigns' rows (`perflib.pageinputs`:
    their derived runs at their backend, batches and last compared arm), then known others; a backend
    with no runs says why (`other_note` for those that are not part of the campaign).
    """
    batches = [batch] if isinstance(batch, int) else [b for b in batch if b != 1]
    no_counters = no_counters or {}
    levels = level_table(tables)
    arm = arms[-1] if arms else None
    rows: list[dict[str, Any]] = []
    for backend in backends:
        why = (f"not measured: trace-only {no_counters[backend]}" if backend in no_counters
               else "not measured: no complete run in this campaign")
        rows += _ratio_rows(levels, backend, arm, batches, source, why, tables.runs)
    named = set(backends)
    for ref in references:
        rows += _ratio_rows(level_table(ref.tables()), ref.backend, ref.arm, [b for b in ref.batches if b != 1],
                            ref.label, f"not measured: no complete run in {ref.label}", ref.runs)
        named.add(ref.backend)
    why = "not measured: " + (other_note or "not part of this campaign")
    for backend in other_backends:
        if backend not in named:
            rows.append({"backend": backend, "source": "", "arm": None, "context": None, "batch": None,
                         "step_1_ms": None, "step_b_ms": None, "ratio": None, "note": why})
    return pd.DataFrame(rows, columns=RATIO_COLUMNS)


def floor_table(tables: DerivedTables, campaign: Campaign) -> pd.DataFrame:
    """Per level: decode step, its memory floor and step over floor (None where unknown)."""
    levels = level_table(tables)
    model = campaign.model
    rows = []
    for row in levels.itertuples(index=False):
        bandwidth = next((b.peak_bandwidth_gbs for b in campaign.backends if b.name == row.backend), None)
        floor = None
        if model.weight_bytes is not None and model.kv_bytes_per_token is not None and bandwidth:
            floor = floor_ms(model.weight_bytes, model.kv_bytes_per_token, int(row.context), int(row.batch), bandwidth)
        step = row.decode_step_ms
        rows.append({"arm": row.arm, "backend": row.backend, "batch": row.batch, "context": row.context,
                     "decode_step_ms": step, "floor_ms": floor,
                     "step_over_floor": step / floor if floor and step == step else None})
    return pd.DataFrame(rows, columns=["arm", "backend", "batch", "context", "decode_step_ms", "floor_ms",
                                       "step_over_floor"])


def before_after_table(tables: DerivedTables, arms: Sequence[str] | Sequence[tuple[str, str]], columns: Sequence[str] = (
        "decode_step_ms", "steady_step_ms", "decode_tok_s")) -> pd.DataFrame:
    """Per level and column: each arm's median against its baseline, with % change.

    `arms` is a chain of changes (before → after → after-kvu: each against the one before it, "did this
    change help against the configuration it changed"), or explicit (baseline, arm) pairs
    (`Campaign.comparisons`)."""
    levels = level_table(tables)
    pairs = [p for p in arms if isinstance(p, tuple)] or list(itertools.pairwise(arms))
    if not pairs or not len(levels):
        return pd.DataFrame(columns=["backend", "batch", "context", "measure", "baseline", "arm", "before",
                                     "after", "runs_before", "runs_after", "change_pct"])
    rows = []
    for base, arm in pairs:
        for (backend, batch, context), at in levels.groupby(["backend", "batch", "context"], sort=True):
            b = at[at["arm"].astype(str) == base]
            a = at[at["arm"].astype(str) == arm]
            for col in columns:
                before = float(b[col].iloc[0]) if len(b) else None
                after = float(a[col].iloc[0]) if len(a) else None
                change = (100 * (after - before) / before if before and after is not None
                          and not math.isnan(before) and not math.isnan(after) else None)
                rows.append({"backend": backend, "batch": batch, "context": context, "measure": col, "baseline": base,
                             "arm": arm, "before": before, "after": after,
                             "runs_before": int(b["runs"].iloc[0]) if len(b) else 0,
                             "runs_after": int(a["runs"].iloc[0]) if len(a) else 0, "change_pct": change})
    return pd.DataFrame(rows)


def traced_overhead_table(tables: DerivedTables, campaign: Campaign, batch: int = 1) -> pd.DataFrame:
    """Traced arms against the arm whose configuration they trace, at `batch`: decode step and tok/s
    medians and the % change (the profiler's overhead)."""
    levels = level_table(tables)
    rows = []
    for arm in campaign.arms:
        if arm.role != "traced" or not arm.of or not len(levels):
            continue
        for (backend, context), at in levels[levels["batch"] == batch].groupby(["backend", "context"], sort=True):
            t, o = at[at["arm"].astype(str) == arm.name], at[at["arm"].astype(str) == arm.of]
            for col in ("decode_step_ms", "decode_tok_s"):
                traced = float(t[col].iloc[0]) if len(t) else None
                plain = float(o[col].iloc[0]) if len(o) else None
                ok = traced is not None and plain and not (math.isnan(traced) or math.isnan(plain))
                rows.append({"arm": arm.name, "of": arm.of, "backend": backend, "batch": batch, "context": int(context),
                             "measure": col, "plain": plain, "traced": traced,
                             "runs": f"{int(o['runs'].iloc[0]) if len(o) else 0} / {int(t['runs'].iloc[0]) if len(t) else 0}",
                             "change_pct": 100 * (traced - plain) / plain if ok else None})
    return pd.DataFrame(rows, columns=["arm", "of", "backend", "batch", "context", "measure", "plain", "traced",
                                       "runs", "change_pct"])


def trace_level_table(tables: DerivedTables) -> pd.DataFrame:
    """Per traced level: steps, step ms from the trace (window / steps), GPU busy and host gap per step."""
    tr = tables.trace_runs
    if tr is None or not len(tr):
        return pd.DataFrame(columns=[*LEVEL_KEYS, "runs", "steps", "step_ms", "busy_ms_per_step", "gap_ms_per_step",
                                     "busy_share", "dispatches_per_step", "step_method", "steps_guessed"])
    tr = tr.copy()
    for col in ("window_ms", "steps", "dispatches"):
        tr[col] = pd.to_numeric(tr[col], errors="coerce")
    tr["step_ms"] = tr["window_ms"] / tr["steps"]
    tr["dispatches_per_step"] = tr["dispatches"] / tr["steps"]
    out = _median_levels(tr, ["steps", "step_ms", "busy_ms_per_step", "gap_ms_per_step", "busy_share",
                              "dispatches_per_step"])
    methods = tr.groupby(LEVEL_KEYS, sort=True)["step_method"].first().reset_index()
    guessed = tr.assign(steps_guessed=_truthy(tr, "steps_guessed")).groupby(LEVEL_KEYS, sort=True)[
        "steps_guessed"].any().reset_index()
    return out.merge(methods, on=LEVEL_KEYS, how="left").merge(guessed, on=LEVEL_KEYS, how="left")


def _truthy(frame: pd.DataFrame, column: str) -> pd.Series:
    """A boolean column read back from CSV (True, 'True', 1), False where absent."""
    if column not in frame.columns:
        return pd.Series(False, index=frame.index)
    return frame[column].map(lambda v: str(v).strip().lower() in ("true", "1", "1.0"))


def class_level_table(tables: DerivedTables) -> pd.DataFrame:
    """Per traced level and kernel class: medians over repeats of ms per step, share and dispatches per
    step. A class that a repeat does not have counts as 0 in that repeat (else the shares of a level
    whose repeats took different kernels add up to more than 100%)."""
    cls, tr = tables.classes, tables.trace_runs
    cols = [*LEVEL_KEYS, "kernel_class", "ms_per_step", "share", "count_per_step"]
    if cls is None or not len(cls):
        return pd.DataFrame(columns=cols)
    steps = tr[[*LEVEL_KEYS, "repeat", "steps"]]
    cls = cls.merge(steps, on=[*LEVEL_KEYS, "repeat"], how="left")
    cls["count_per_step"] = pd.to_numeric(cls["count"], errors="coerce") / pd.to_numeric(cls["steps"], errors="coerce")
    for col in ("ms_per_step", "share"):
        cls[col] = pd.to_numeric(cls[col], errors="coerce")
    grid = (tr[[*LEVEL_KEYS, "repeat"]].drop_duplicates()
            .merge(cls[[*LEVEL_KEYS, "kernel_class"]].drop_duplicates(), on=LEVEL_KEYS))
    full = grid.merge(cls[[*LEVEL_KEYS, "repeat", "kernel_class", "ms_per_step", "share", "count_per_step"]],
                      on=[*LEVEL_KEYS, "repeat", "kernel_class"], how="left")
    full[["ms_per_step", "share", "count_per_step"]] = full[["ms_per_step", "share", "count_per_step"]].fillna(0.0)
    out = full.groupby([*LEVEL_KEYS, "kernel_class"], sort=True)[["ms_per_step", "share", "count_per_step"]].median()
    return out.reset_index()[cols]


def batch_class_table(tables: DerivedTables) -> pd.DataFrame:
    """Batch 1 to batch B by kernel class: ms per step at each batch, the ratio, and the ratio over B
    (1.0 = the class time per step grows like the batch; a correct batched GEMM stays far below)."""
    levels = class_level_table(tables)
    rows = []
    if not len(levels):
        return pd.DataFrame(columns=["arm", "backend", "context", "batch", "kernel_class", "ms_1", "ms_b", "ratio",
                                     "of_linear"])
    for (arm, backend, context), at in levels.groupby(["arm", "backend", "context"], sort=True):
        one = at[at["batch"] == 1].set_index("kernel_class")["ms_per_step"]
        for batch in sorted(b for b in at["batch"].unique() if b != 1):
            big = at[at["batch"] == batch].set_index("kernel_class")["ms_per_step"]
            for name in sorted(set(one.index) | set(big.index), key=lambda n: (-float(big.get(n, 0) or 0), n)):
                m1, mb = one.get(name), big.get(name)
                ratio = mb / m1 if m1 and mb is not None and m1 == m1 and mb == mb else None
                rows.append({"arm": arm, "backend": backend, "context": int(context), "batch": int(batch),
                             "kernel_class": name, "ms_1": m1, "ms_b": mb, "ratio": ratio,
                             "of_linear": ratio / batch if ratio is not None else None})
    return pd.DataFrame(rows)


def batch_step_table(tables: DerivedTables) -> pd.DataFrame:
    """Batch 1 to batch B per step: median and range of step, GPU busy and host gap ms per step
    (from the steps table, repeat by repeat pooled), per (arm, backend, context, batch)."""
    st = tables.steps
    if st is None or not len(st):
        return pd.DataFrame(columns=[*LEVEL_KEYS, "steps", "step_ms", "step_min_ms", "step_max_ms", "busy_ms",
                                     "gap_ms", "dispatches"])
    st = st.copy()
    st["step_ms"] = (pd.to_numeric(st["end_ns"]) - pd.to_numeric(st["start_ns"])) / 1e6
    rows = []
    for key, at in st.groupby(LEVEL_KEYS, sort=True):
        rows.append({**dict(zip(LEVEL_KEYS, key, strict=True)), "steps": len(at), "step_ms": at["step_ms"].median(),
                     "step_min_ms": at["step_ms"].min(), "step_max_ms": at["step_ms"].max(),
                     "busy_ms": pd.to_numeric(at["busy_ms"]).median(), "gap_ms": pd.to_numeric(at["gap_ms"]).median(),
                     "dispatches": pd.to_numeric(at["dispatches"]).median()})
    return pd.DataFrame(rows)


def gap_level_table(tables: DerivedTables) -> pd.DataFrame:
    """Per traced level and gap bucket: host-gap ms per step and count per step (medians over repeats)."""
    gaps, tr = tables.gaps, tables.trace_runs
    if gaps is None or not len(gaps):
        return pd.DataFrame(columns=[*LEVEL_KEYS, "bucket", "gap_ms_per_step", "count_per_step"])
    gaps = gaps.merge(tr[[*LEVEL_KEYS, "repeat", "steps"]], on=[*LEVEL_KEYS, "repeat"], how="left")
    steps = pd.to_numeric(gaps["steps"], errors="coerce")
    gaps["gap_ms_per_step"] = pd.to_numeric(gaps["gap_ms"], errors="coerce") / steps
    gaps["count_per_step"] = pd.to_numeric(gaps["count"], errors="coerce") / steps
    out = gaps.groupby([*LEVEL_KEYS, "bucket"], sort=False)[["gap_ms_per_step", "count_per_step"]].median().reset_index()
    out["_o"] = out["bucket"].map({b: i for i, b in enumerate(GAP_ORDER)})
    return out.sort_values([*LEVEL_KEYS, "_o"], kind="stable").drop(columns="_o").reset_index(drop=True)


def counter_problems(tables: DerivedTables) -> list[str]:
    """`arm/backend/b1_c128_r1: reset: ...` for each run whose counters were there but not usable
    (`perflib.metrics.MetricsDelta.problem`): their figures are n/a for that reason."""
    runs = tables.runs
    if runs is None or not len(runs) or "metrics_problem" not in runs.columns:
        return []
    bad = runs[checks.text(runs["metrics_problem"]) != ""]
    return [f"{r.arm}/{r.backend}/b{r.batch}_c{r.context}_r{r.repeat}: {r.metrics_problem}"
            for r in bad.itertuples(index=False)]


def absent_counters(tables: DerivedTables) -> list[str]:
    """Counter columns of runs.csv that no complete run has (the server does not export them)."""
    runs = tables.runs
    if runs is None or not len(runs):
        return []
    runs = checks.usable(runs) if "status" in runs.columns else runs
    if "metrics_problem" in runs.columns:  # counters there but reset, NaN or impossible: not "not exported"
        runs = runs[checks.text(runs["metrics_problem"]) == ""]
    if not len(runs):
        return []
    return [c for c in ("prefill_chunks", "mixed_steps", "occupancy", "decode_step_ms")
            if c not in runs.columns or pd.to_numeric(runs[c], errors="coerce").isna().all()]


def work_words(tables: DerivedTables) -> dict[str, str]:
    """How the page says what the traces' busy time is (`perflib.attribution.WORK_WORDS`): GPU kernels (also
    where trace_runs has no `work` column), CPU operators or CPU samples; `work` names it. Traces of more
    than one kind get neutral words."""
    tr = tables.trace_runs
    kinds = sorted(set(checks.text(tr["work"])) - {""}) if tr is not None and len(tr) and "work" in tr.columns else []
    if len(kinds) > 1:
        return {"busy": "busy", "gap": "host gap", "unit": "kernel", "units": "dispatches", "work": " and ".join(kinds)}
    kind = kinds[0] if kinds else WORK_GPU
    return {**WORK_WORDS.get(kind, WORK_WORDS[WORK_GPU]), "work": kind}
