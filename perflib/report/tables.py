"""The page's tables as DataFrames: per level, before/after, ratios, floor, profile, classes, gaps.

Each is a pure function of the derived tables (medians over complete repeats); `perflib.open_campaign`
shows the same frames in a notebook.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from typing import Any

import pandas as pd

from perflib import checks
from perflib.attribution import HOST_GAP_PARTS, WORK_GPU, WORK_WORDS
from perflib.config import Campaign, RunSpec
from perflib.derive import GAP_ORDER, DerivedTables
from perflib.pageinputs import Reference
from perflib.verdicts import compare, floor_ms

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


REASONS = ("steady_step", "decode_tok_s")
"""Figures whose runs.csv row says why it is n/a (`steady_step_reason`, `decode_tok_s_reason`)."""


def _first_reasons(runs: pd.DataFrame, levels: pd.DataFrame, column: str) -> list[str]:
    """Per level row: the first non-empty `column` of its runs ('' where none has one)."""
    if not len(levels):
        return []
    if runs is None or not len(runs) or column not in runs.columns:
        return [""] * len(levels)
    texts = runs.assign(_r=checks.text(runs[column]))
    texts = texts[texts["_r"] != ""]
    first = {tuple(str(k) for k in key): at["_r"].iloc[0] for key, at in texts.groupby(LEVEL_KEYS, sort=False)}
    return [first.get(tuple(str(getattr(r, k)) for k in LEVEL_KEYS), "") for r in levels.itertuples(index=False)]


_LEVEL_TABLES: dict[int, tuple[weakref.ref, pd.DataFrame]] = {}
"""`level_table` per `DerivedTables` object alive (frozen, its frames never written in place): a page asks for
it from ten places (sections, figures, ratio and floor tables), and each median pass costs ~0.1 s."""


def level_table(tables: DerivedTables) -> pd.DataFrame:
    """One row per level: medians over complete repeats of the client, counter and trace figures (a copy,
    computed once per tables object)."""
    key = id(tables)
    held = _LEVEL_TABLES.get(key)
    if held is None or held[0]() is not tables:
        held = (weakref.ref(tables, lambda _, k=key: _LEVEL_TABLES.pop(k, None)), _level_table(tables))
        _LEVEL_TABLES[key] = held
    return held[1].copy()


def _level_table(tables: DerivedTables) -> pd.DataFrame:
    runs = tables.runs
    if len(runs) and "status" in runs.columns:
        runs = checks.usable(runs)
    cols = ["decode_tok_s", "decode_step_ms", "steady_step_ms", "raw_step_ms", "occupancy", "prefill_chunks",
            "mixed_steps", "ttft_ms", "aggregate_tok_s", "own_step_share", "prefill_share", "other_share",
            "overlap_share"]
    levels = _median_levels(runs, cols)
    for col in REASONS:  # why a figure is n/a at a level, said beside it
        levels[f"{col}_reason"] = _first_reasons(runs, levels, f"{col}_reason")
    trace = _median_levels(decode_runs(tables, figures=PER_STEP), ["busy_ms_per_step", "gap_ms_per_step",
                                                                   "busy_share", "window_ms", "dispatches"])
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
    """Per pair of arms, level and column: each arm's mean over its repeats against its baseline's, with
    the % change and its 95% interval (`perflib.verdicts.compare`).

    `arms` is (baseline, arm) pairs (`Campaign.comparisons`: each arm against its baseline), or a list of
    names read as each against the first."""
    pairs = [p for p in arms if isinstance(p, tuple)] or [(str(arms[0]), str(a)) for a in list(arms)[1:]]
    cols = ["backend", "batch", "context", "measure", "baseline", "arm", "pair", "before", "after", "runs_before",
            "runs_after", "change_pct", "ci_low_pct", "ci_high_pct"]
    return pd.DataFrame(compare.comparisons(tables.runs, pairs, columns), columns=cols)


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


def phased(tables: DerivedTables) -> bool:
    """Whether any trace run's steps have phases the engine names (its `decode_steps` is a count)."""
    tr = tables.trace_runs
    return bool(tr is not None and len(tr) and "decode_steps" in tr.columns
                and pd.to_numeric(tr["decode_steps"], errors="coerce").notna().any())


PER_STEP = ("busy_ms_per_step", "gap_ms_per_step", "busy_share")
"""The per-step figures of a trace run (and its busy share) that are its decode steps' where the engine
names its steps' phases (`decode_runs`)."""
DECODE_NOTE = " (decode steps only)"


def decode_runs(tables: DerivedTables, figures: Sequence[str] = (*PER_STEP, "steps", "window_ms", "dispatches")
                ) -> pd.DataFrame:
    """The trace runs with, where the engine names its steps' phases, the decode steps' `figures` in place
    of the whole window's (the `trace_runs` decode columns; the decode row of `phases` for the dispatches):
    a decode-step figure never averages prefill steps in (DESIGN.md). A run with no decode step has none
    (NaN; its `phase_note` says why). Runs whose steps have no phase are as they are."""
    tr = tables.trace_runs
    if tr is None or not len(tr) or "decode_steps" not in tr.columns:
        return tr
    decode = pd.to_numeric(tr["decode_steps"], errors="coerce")
    phased = decode.notna()
    if not phased.any():
        return tr
    tr = tr.copy()
    steps = decode.where(decode > 0)
    window = pd.to_numeric(tr["decode_window_ms"], errors="coerce")
    values = {"steps": steps, "window_ms": window, "busy_ms_per_step": tr["decode_busy_ms_per_step"],
              "gap_ms_per_step": tr["decode_gap_ms_per_step"],
              "busy_share": pd.to_numeric(tr["decode_busy_ms"], errors="coerce") / window.where(window > 0),
              "dispatches": _decode_dispatches(tables, tr)}
    for col in figures:
        tr[col] = pd.to_numeric(tr[col], errors="coerce").where(~phased, pd.to_numeric(values[col], errors="coerce"))
    if "step_method" in tr.columns:
        note = pd.Series(DECODE_NOTE, index=tr.index).where(decode > 0, " (no decode step)")
        tr["step_method"] = tr["step_method"].where(~phased, tr["step_method"].astype(str) + note)
    return tr


def _decode_dispatches(tables: DerivedTables, tr: pd.DataFrame) -> pd.Series:
    """Per trace run, the dispatches starting in its decode steps' periods (`phases`), NaN where none."""
    ph = tables.phases
    if ph is None or not len(ph):
        return pd.Series(float("nan"), index=tr.index)
    keys = [*LEVEL_KEYS, "repeat"]
    mine = ph[_phase_text(ph) == "decode"][[*keys, "dispatches"]].astype({k: str for k in keys})
    joined = tr[keys].astype(str).merge(mine, on=keys, how="left")
    return pd.Series(pd.to_numeric(joined["dispatches"], errors="coerce").to_numpy(), index=tr.index)


def trace_level_table(tables: DerivedTables, decode: bool = False) -> pd.DataFrame:
    """Per traced level: steps, step ms from the trace (window / steps), GPU busy and host gap per step;
    `decode`: those of the decode steps alone where the engine names its steps' phases (`decode_runs`)."""
    tr = decode_runs(tables) if decode else tables.trace_runs
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


def decode_level_table(tables: DerivedTables) -> pd.DataFrame:
    """`trace_level_table` of the decode steps alone where the engine names its steps' phases (NaN at a
    level with no decode step): what a "per decode step" figure shows. Levels whose steps have no phase
    keep the window's."""
    return trace_level_table(tables, decode=True)


def _truthy(frame: pd.DataFrame, column: str) -> pd.Series:
    """A boolean column read back from CSV (True, 'True', 1), False where absent."""
    if column not in frame.columns:
        return pd.Series(False, index=frame.index)
    return frame[column].map(lambda v: str(v).strip().lower() in ("true", "1", "1.0"))


def _decode_classes(cls: pd.DataFrame, tr: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(class rows, trace runs) with, for a run whose steps have phases, its decode steps' figures in place
    of the window's (`decode_ms_per_step`, `decode_count` over the decode steps, the share of the decode
    steps' kernel time) and `steps` its decode steps; a run with no decode step, and a class its decode
    steps did not run, left out."""
    keys = [*LEVEL_KEYS, "repeat"]
    cls = cls.merge(tr[[*keys, "steps", *(["decode_steps"] if "decode_steps" in tr.columns else [])]], on=keys,
                    how="left")
    cls["steps"] = pd.to_numeric(cls["steps"], errors="coerce")
    for col in ("ms_per_step", "share", "count"):
        cls[col] = pd.to_numeric(cls[col], errors="coerce")
    if "decode_steps" not in cls.columns or "decode_time_ms" not in cls.columns:
        return cls, tr
    decode = pd.to_numeric(cls["decode_steps"], errors="coerce")
    phased = decode.notna()
    if not phased.any():
        return cls, tr
    time_ms = pd.to_numeric(cls["decode_time_ms"], errors="coerce")
    total = time_ms.groupby([cls[k] for k in keys]).transform("sum")
    cls = cls.assign(ms_per_step=cls["ms_per_step"].where(~phased, pd.to_numeric(cls["decode_ms_per_step"],
                                                                                  errors="coerce")),
                     share=cls["share"].where(~phased, time_ms / total.where(total > 0)),
                     count=cls["count"].where(~phased, pd.to_numeric(cls["decode_count"], errors="coerce")),
                     steps=cls["steps"].where(~phased, decode))
    kept = pd.to_numeric(tr["decode_steps"], errors="coerce")
    ran = (time_ms > 0) | (cls["count"] > 0)  # a class the decode steps did not run (prefill's own) is not listed
    return cls[~phased | ((decode > 0) & ran)], tr[kept.isna() | (kept > 0)]


def class_level_table(tables: DerivedTables) -> pd.DataFrame:
    """Per traced level and kernel class: medians over repeats of ms per step, share and dispatches per
    step, of the decode steps alone where the engine names its steps' phases (`_decode_classes`). A class
    that a repeat does not have counts as 0 in that repeat (else the shares of a level whose repeats took
    different kernels add up to more than 100%)."""
    cls, tr = tables.classes, tables.trace_runs
    cols = [*LEVEL_KEYS, "kernel_class", "ms_per_step", "share", "count_per_step"]
    if cls is None or not len(cls):
        return pd.DataFrame(columns=cols)
    cls, tr = _decode_classes(cls, tr)
    cls["count_per_step"] = cls["count"] / cls["steps"]
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


def _phase_text(frame: pd.DataFrame) -> pd.Series:
    """A `phase` column read back from CSV as text ('' where the steps have none)."""
    if "phase" not in frame.columns:
        return pd.Series("", index=frame.index, dtype=object)
    return checks.text(frame["phase"]).replace("unknown", "")


def batch_step_table(tables: DerivedTables) -> pd.DataFrame:
    """Batch 1 to batch B per step: median and range of step, GPU busy and host gap ms per step
    (from the steps table, repeat by repeat pooled), per (arm, backend, context, batch) and, where the
    engine names them, per phase (`phase`, '' where none): decode steps are never pooled with prefill."""
    st = tables.steps
    if st is None or not len(st):
        return pd.DataFrame(columns=[*LEVEL_KEYS, "phase", "steps", "step_ms", "step_min_ms", "step_max_ms",
                                     "busy_ms", "gap_ms", "dispatches"])
    st = st.copy()
    st["step_ms"] = (pd.to_numeric(st["end_ns"]) - pd.to_numeric(st["start_ns"])) / 1e6
    st["phase"] = _phase_text(st)
    st["_o"] = st["phase"].map({p: i for i, p in enumerate(PHASE_ORDER)}).fillna(len(PHASE_ORDER))
    rows = []
    for key, at in st.groupby([*LEVEL_KEYS, "_o", "phase"], sort=True):
        rows.append({**dict(zip(LEVEL_KEYS, key, strict=False)), "phase": key[-1], "steps": len(at),
                     "step_ms": at["step_ms"].median(),
                     "step_min_ms": at["step_ms"].min(), "step_max_ms": at["step_ms"].max(),
                     "busy_ms": pd.to_numeric(at["busy_ms"]).median(), "gap_ms": pd.to_numeric(at["gap_ms"]).median(),
                     "dispatches": pd.to_numeric(at["dispatches"]).median()})
    return pd.DataFrame(rows)


PHASE_ORDER = ["prefill", "mixed", "decode", "empty", ""]
PHASE_FIGURES = ["steps", "step_ms", "span_ms_per_step", "busy_ms_per_step", "gap_ms_per_step", "dispatches_per_step"]


def phase_level_table(tables: DerivedTables) -> pd.DataFrame:
    """Per traced level and step phase the engine names (`perflib.attribution.phases`): medians over
    repeats of the phase's steps and, per step, its period, span, GPU busy, host gap and dispatches,
    with their spread (`_median_levels`). Empty where no trace names a phase."""
    ph = tables.phases
    if ph is None or not len(ph):
        return pd.DataFrame(columns=[*LEVEL_KEYS, "phase", "runs", *PHASE_FIGURES])
    ph = ph.assign(phase=_phase_text(ph))
    parts = [_median_levels(at, PHASE_FIGURES).assign(phase=phase, _o=PHASE_ORDER.index(phase)
                                                     if phase in PHASE_ORDER else len(PHASE_ORDER))
             for phase, at in ph.groupby("phase", sort=False)]
    out = pd.concat(parts, ignore_index=True).sort_values([*LEVEL_KEYS, "_o"], kind="stable")
    return out.drop(columns="_o").reset_index(drop=True)


def phase_notes(tables: DerivedTables) -> list[str]:
    """'arm backend b32 c1024: no decode step in this capture: 8 prefill steps' per traced level whose
    traces name their steps' phases and hold no decode step (with how many of its traces say so)."""
    tr = tables.trace_runs
    if tr is None or not len(tr) or "phase_note" not in tr.columns:
        return []
    tr = tr.assign(phase_note=checks.text(tr["phase_note"]))
    out = []
    for key, at in tr.groupby(LEVEL_KEYS, sort=True):
        notes = [n for n in at["phase_note"] if n]
        if notes:
            level = dict(zip(LEVEL_KEYS, key, strict=True))
            some = f" ({len(notes)} of {len(at)} traces)" if len(notes) < len(at) else ""
            out.append(f"{level['arm']} {level['backend']} b{level['batch']} c{level['context']}: {notes[0]}{some}")
    return out


def counted_composition(tables: DerivedTables) -> list[str]:
    """Per traced level whose traces name no step phase (llama.cpp's name no step at all), the batch
    composition its server's counters give, where they count it (mixed prefill/decode steps, prefill
    chunks: mlxcel; llama.cpp and vLLM have no such counter, and nothing is said for them)."""
    tr = trace_level_table(tables)
    if not len(tr):
        return []
    phased = set()
    if tables.phases is not None and len(tables.phases):
        phased = {tuple(str(v) for v in k) for k in tables.phases[LEVEL_KEYS].itertuples(index=False)}
    levels = level_table(tables)
    out = []
    for r in tr.itertuples(index=False):
        if tuple(str(getattr(r, k)) for k in LEVEL_KEYS) in phased:
            continue
        sel = levels
        for key in LEVEL_KEYS:
            sel = sel[sel[key].astype(str) == str(getattr(r, key))]
        if not len(sel):
            continue
        row = sel.iloc[0]
        said = [f"{row[c]:.0f} {what}" for c, what in (("mixed_steps", "mixed prefill/decode steps"),
                                                          ("prefill_chunks", "prefill chunks"))
                if c in sel.columns and row[c] == row[c] and row[c] is not None]
        if said:
            out.append(f"{r.arm} {r.backend} b{r.batch} c{r.context}: the trace names no step phase; the server "
                       f"counted {' and '.join(said)} in the level (median over repeats)")
    return out


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


HOST_GAP_LEVEL = ["gap_ms_per_step", *(f"{p}_ms_per_step" for p in HOST_GAP_PARTS),
                  *(f"{p}_gap_share" for p in HOST_GAP_PARTS), "launch_calls_per_step"]


def _decode_host_gaps(hg: pd.DataFrame) -> pd.DataFrame:
    """`host_gaps` rows with, where the steps have phases, the split of the decode steps' periods in place of
    the window's (the `decode_*` columns: steps, host gap, each part, its share and per step; the launch
    calls, counted over the window, left out); a run with no decode step is not measured and says so."""
    decode = pd.to_numeric(hg["decode_steps"], errors="coerce") if "decode_steps" in hg.columns else None
    if decode is None or decode.isna().all():
        return hg
    phased = decode.notna()
    steps = decode.where(decode > 0)
    gap = pd.to_numeric(hg["decode_gap_ms"], errors="coerce")
    swap = {"steps": steps, "gap_ms": gap, "launch_calls": float("nan")}
    for part in HOST_GAP_PARTS:
        ms = pd.to_numeric(hg[f"decode_{part}_ms"], errors="coerce")
        swap.update({f"{part}_ms": ms, f"{part}_gap_share": ms / gap.where(gap > 0), f"{part}_ms_per_step": ms / steps})
    for col, value in swap.items():
        hg[col] = pd.to_numeric(hg[col], errors="coerce").where(~phased, value)
    hg["note"] = hg["note"].where(~(phased & (decode == 0)), "no decode step in this capture")
    return hg


def host_gap_level_table(tables: DerivedTables) -> pd.DataFrame:
    """Per traced level: what fills the host gap (`perflib.attribution.hostgaps`), ms per step of each part
    and its share of the gap, medians over the repeats whose capture held host API calls (`measured` of
    `runs`); `note` says why where none did. Over the decode steps alone where the engine names its
    steps' phases (`_decode_host_gaps`)."""
    hg = tables.host_gaps
    if hg is None or not len(hg):
        return pd.DataFrame(columns=[*LEVEL_KEYS, "runs", "measured", *HOST_GAP_LEVEL, "note"])
    hg = _decode_host_gaps(hg.copy())
    steps = pd.to_numeric(hg["steps"], errors="coerce")
    hg["gap_ms_per_step"] = pd.to_numeric(hg["gap_ms"], errors="coerce") / steps
    hg["launch_calls_per_step"] = pd.to_numeric(hg["launch_calls"], errors="coerce") / steps
    done = pd.to_numeric(hg["launch_ms"], errors="coerce").notna()
    out = _median_levels(hg[done], HOST_GAP_LEVEL).drop(columns="runs")
    levels = hg.assign(_done=done).groupby(LEVEL_KEYS, sort=True).agg(
        runs=("_done", "size"), measured=("_done", "sum"),
        note=("note", lambda n: next((str(x) for x in n if isinstance(x, str) and x), ""))).reset_index()
    if len(out):
        for key in ("batch", "context"):
            out[key] = out[key].astype(levels[key].dtype)
    out = levels.merge(out, on=LEVEL_KEYS, how="left") if len(out) else levels.assign(
        **{c: float("nan") for c in HOST_GAP_LEVEL})
    out["note"] = out["note"].where(out["measured"] == 0, "")
    return out[[*LEVEL_KEYS, "runs", "measured", *HOST_GAP_LEVEL, "note"]].reset_index(drop=True)


def counter_problems(tables: DerivedTables) -> list[str]:
    """`arm/backend/b1_c128_r1: reset: ...` for each run whose counters were there but not usable
    (`perflib.metrics.MetricsDelta.problem`): their figures are n/a for that reason."""
    runs = tables.runs
    if runs is None or not len(runs) or "metrics_problem" not in runs.columns:
        return []
    bad = runs[checks.text(runs["metrics_problem"]) != ""]
    return [f"{RunSpec.label_of(r)}: {r.metrics_problem}"
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
