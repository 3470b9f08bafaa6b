"""The results page: derived tables, verdicts and figures rendered to Markdown with jinja2.

Everything is deterministic so `perflib campaign report` rebuilds the same bytes: rows are
sorted, numbers have fixed formats, PNGs carry no software/date metadata, and the page date
(the day the campaign's last run ended, from the manifests) appears in one line and the page's
file names only. Kernel names and other free text pass through `escape_md`.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from perflib.campaign import Campaign
    from perflib.derive import DerivedTables

LEVEL_KEYS = ["arm", "backend", "batch", "context"]
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|#])")


def escape_md(text: Any) -> str:
    """Text safe inside a Markdown table cell: `| * _ [ ] # \\ \\`` are backslash-escaped, `< > &`
    become entities, and line breaks become spaces."""
    if text is None:
        return ""
    out = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    out = _MD_SPECIAL.sub(r"\\\1", out)
    return re.sub(r"[\r\n]+", " ", out)


def fmt(value: Any, spec: str = ".1f", unit: str = "") -> str:
    """A number with its unit, or 'n/a' where it is None/NaN (never 0)."""
    if value is None:
        return "n/a"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return escape_md(value)
    if math.isnan(number):
        return "n/a"
    return f"{number:{spec}}{unit}"


def _int_or_na(value: Any) -> str:
    try:
        return str(int(value))
    except (TypeError, ValueError):
        return "n/a"


def pct(value: Any) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * float(value):.1f}%"


# ------------------------------------------------------------------------------------- tables


def _median_levels(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """Median over repeats of `columns` per level (arm, backend, batch, context), with the count."""
    if frame is None or not len(frame):
        return pd.DataFrame(columns=[*LEVEL_KEYS, "runs", *columns])
    frame = frame.copy()
    for col in columns:
        frame[col] = pd.to_numeric(frame[col], errors="coerce") if col in frame.columns else float("nan")
    grouped = frame.groupby(LEVEL_KEYS, sort=True, dropna=False)
    out = grouped[list(columns)].median()
    out.insert(0, "runs", grouped.size())
    return out.reset_index()


def level_table(tables: DerivedTables) -> pd.DataFrame:
    """One row per level: medians over complete repeats of the client, counter and trace figures."""
    runs = tables.runs
    if len(runs) and "status" in runs.columns:
        runs = runs[runs["status"].astype(str) == "complete"]
    cols = ["decode_tok_s", "decode_step_ms", "steady_step_ms", "raw_step_ms", "occupancy", "prefill_chunks",
            "mixed_steps", "ttft_ms", "aggregate_tok_s", "own_step_share", "prefill_share", "other_share"]
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
        levels["top_classes"] = [top_classes(tables.classes, row) for row in levels.itertuples(index=False)]
    return levels.sort_values(LEVEL_KEYS, kind="stable").reset_index(drop=True)


def top_classes(classes: pd.DataFrame, level: Any, n: int = 3) -> str:
    """'qmv 77.5%, sdpa 8.1%' for a level (median share over repeats), or '' with no trace."""
    if classes is None or not len(classes):
        return ""
    sel = classes
    for key in LEVEL_KEYS:
        sel = sel[sel[key].astype(str) == str(getattr(level, key))]
    if not len(sel):
        return ""
    share = sel.assign(share=pd.to_numeric(sel["share"], errors="coerce")).groupby("kernel_class")["share"].median()
    share = share.sort_values(ascending=False, kind="stable").head(n)
    return ", ".join(f"{name} {100 * v:.1f}%" for name, v in share.items())


RATIO_COLUMNS = ["backend", "source", "arm", "context", "batch", "step_1_ms", "step_b_ms", "ratio", "note"]


def _ratio_rows(levels: pd.DataFrame, backend: str, arm: str | None, batches: Sequence[int], source: str,
                why_empty: str) -> list[dict[str, Any]]:
    sel = levels[(levels["backend"].astype(str) == backend) & (levels["arm"].astype(str) == str(arm))] \
        if len(levels) else levels
    if not len(sel):
        return [{"backend": backend, "source": source, "arm": arm, "context": None, "batch": None, "step_1_ms": None,
                 "step_b_ms": None, "ratio": None, "note": why_empty}]
    rows = []
    for context in sorted(sel["context"].unique()):
        at = sel[sel["context"] == context]
        one = at[at["batch"] == 1]["decode_step_ms"]
        s1 = float(one.iloc[0]) if len(one) else None
        for batch in batches:
            big = at[at["batch"] == batch]["decode_step_ms"]
            sb = float(big.iloc[0]) if len(big) else None
            ratio = sb / s1 if s1 and sb and not (math.isnan(s1) or math.isnan(sb)) else None
            note = "" if ratio is not None else (why_empty if why_empty.startswith("not measured: trace-only") else
                                                 f"not measured: no batch 1 and batch {batch} decode step from counters")
            rows.append({"backend": backend, "source": source, "arm": arm, "context": int(context), "batch": int(batch),
                         "step_1_ms": s1, "step_b_ms": sb, "ratio": ratio, "note": note})
    return rows


def ratio_table(tables: DerivedTables, backends: Sequence[str], other_backends: Sequence[str],
                batch: int | Sequence[int], arms: Sequence[str], source: str = "this campaign",
                references: Sequence[tuple[str, DerivedTables, str, Sequence[int], str]] = (),
                other_note: str = "", no_counters: dict[str, str] | None = None) -> pd.DataFrame:
    """Cross-backend reference ratio: decode step at batch B over batch 1, per backend, context and B.

    Backends named in the campaign come first, then the reference campaigns' rows (label, their tables,
    backend, batches, arm), then known others; a backend with no runs says why (`other_note` for those
    that are not part of the campaign).
    """
    batches = [batch] if isinstance(batch, int) else [b for b in batch if b != 1]
    no_counters = no_counters or {}
    levels = level_table(tables)
    arm = arms[-1] if arms else None
    rows: list[dict[str, Any]] = []
    for backend in backends:
        why = (f"not measured: trace-only {no_counters[backend]}" if backend in no_counters
               else "not measured: no complete run in this campaign")
        rows += _ratio_rows(levels, backend, arm, batches, source, why)
    named = set(backends)
    for label, ref_tables, ref_backend, ref_batches, ref_arm in references:
        rows += _ratio_rows(level_table(ref_tables), ref_backend, ref_arm, [b for b in ref_batches if b != 1], label,
                            f"not measured: no complete run in {label}")
        named.add(ref_backend)
    why = "not measured: " + (other_note or "not part of this campaign")
    for backend in other_backends:
        if backend not in named:
            rows.append({"backend": backend, "source": "", "arm": None, "context": None, "batch": None,
                         "step_1_ms": None, "step_b_ms": None, "ratio": None, "note": why})
    return pd.DataFrame(rows, columns=RATIO_COLUMNS)


def reference_tables(campaign: Campaign) -> list[tuple[str, DerivedTables, str, Sequence[int], str]]:
    """The `compare_with` campaigns' derived tables, rebuilt from their own raw data:
    (label, tables, backend, batches, last compared arm) per reference."""
    from dataclasses import replace

    from perflib import derive
    from perflib.campaign import load_campaign

    out = []
    for ref in campaign.compare_with:
        other = load_campaign(ref.campaign)
        if (campaign.data_dir / "raw" / other.name).is_dir():  # a --data override holds the reference's raw data too
            other = replace(other, data_dir=campaign.data_dir)
        backend = ref.backend or other.backends[0].name
        out.append((ref.label or f"campaign {other.name}", derive.build(other), backend, other.batches,
                    other.compared_arms[-1].name))
    return out


def floor_table(tables: DerivedTables, campaign: Campaign) -> pd.DataFrame:
    """Per level: decode step, its memory floor and step over floor (None where unknown)."""
    from perflib.verdicts import floor_ms

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


def before_after_table(tables: DerivedTables, arms: Sequence[str], columns: Sequence[str] = (
        "decode_step_ms", "steady_step_ms", "decode_tok_s")) -> pd.DataFrame:
    """Per level and column: each arm's median against the arm before it in `arms`, with % change.

    Arms form a chain of changes (before → after → after-kvu): each row answers "did this change help"
    against the configuration it changed, not against the first arm."""
    levels = level_table(tables)
    if len(arms) < 2 or not len(levels):
        return pd.DataFrame(columns=["backend", "batch", "context", "measure", "baseline", "arm", "before",
                                     "after", "runs_before", "runs_after", "change_pct"])
    rows = []
    for base, arm in itertools.pairwise(arms):
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


# ------------------------------------------------------------------------------------ figures


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
                                     "busy_share", "dispatches_per_step", "step_method"])
    tr = tr.copy()
    for col in ("window_ms", "steps", "dispatches"):
        tr[col] = pd.to_numeric(tr[col], errors="coerce")
    tr["step_ms"] = tr["window_ms"] / tr["steps"]
    tr["dispatches_per_step"] = tr["dispatches"] / tr["steps"]
    out = _median_levels(tr, ["steps", "step_ms", "busy_ms_per_step", "gap_ms_per_step", "busy_share",
                              "dispatches_per_step"])
    methods = tr.groupby(LEVEL_KEYS, sort=True)["step_method"].first().reset_index()
    return out.merge(methods, on=LEVEL_KEYS, how="left")


def class_level_table(tables: DerivedTables) -> pd.DataFrame:
    """Per traced level and kernel class: medians over repeats of ms per step, share and dispatches per step."""
    cls, tr = tables.classes, tables.trace_runs
    if cls is None or not len(cls):
        return pd.DataFrame(columns=[*LEVEL_KEYS, "kernel_class", "ms_per_step", "share", "count_per_step"])
    steps = tr[[*LEVEL_KEYS, "repeat", "steps"]]
    cls = cls.merge(steps, on=[*LEVEL_KEYS, "repeat"], how="left")
    cls["count_per_step"] = pd.to_numeric(cls["count"], errors="coerce") / pd.to_numeric(cls["steps"], errors="coerce")
    for col in ("ms_per_step", "share"):
        cls[col] = pd.to_numeric(cls[col], errors="coerce")
    out = cls.groupby([*LEVEL_KEYS, "kernel_class"], sort=True)[["ms_per_step", "share", "count_per_step"]].median()
    return out.reset_index()


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
    from perflib.derive import GAP_ORDER

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


def absent_counters(tables: DerivedTables) -> list[str]:
    """Counter columns of runs.csv that no complete run has (the server does not export them)."""
    runs = tables.runs
    if runs is None or not len(runs):
        return []
    runs = runs[runs["status"].astype(str) == "complete"] if "status" in runs.columns else runs
    if not len(runs):
        return []
    return [c for c in ("prefill_chunks", "mixed_steps", "occupancy", "decode_step_ms")
            if c not in runs.columns or pd.to_numeric(runs[c], errors="coerce").isna().all()]


def _figure(width: float = 6.4, height: float = 3.6, ncols: int = 1):
    """A figure on the Agg backend: (fig, ax), or (fig, axes) with `ncols` > 1."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, ncols, figsize=(width, height), dpi=100)
    return fig, ax


def _series_label(arm: str, backend: str, context: Any, arms: int, backends: int) -> str:
    parts = []
    if arms > 1:
        parts.append(str(arm))
    if backends > 1:
        parts.append(str(backend))
    parts.append(f"ctx {context}")
    return " ".join(parts)


def plot_batch_scaling(tables: DerivedTables):
    """Decode step ms against batch size, one line per (arm, backend, context)."""
    levels = level_table(tables)
    fig, ax = _figure()
    if len(levels):
        n_arms, n_backends = levels["arm"].nunique(), levels["backend"].nunique()
        for (arm, backend, context), at in levels.groupby(["arm", "backend", "context"], sort=True):
            at = at.sort_values("batch")
            ax.plot(at["batch"], at["decode_step_ms"], marker="o",
                    label=_series_label(arm, backend, context, n_arms, n_backends))
        ax.set_xticks(sorted(levels["batch"].unique()))
        ax.legend(fontsize=8)
    ax.set_xlabel("batch (concurrent requests)")
    ax.set_ylabel("decode step (ms)")
    ax.set_title("Batch scaling of the decode step")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def _level_labels(frame) -> list[str]:
    """Short x labels for per-level bars: the arm and backend only where the frame has several."""
    parts = [c for c in ("arm", "backend") if frame[c].nunique() > 1]
    return ["\n".join([*(str(getattr(r, c)) for c in parts), f"b{r.batch} c{r.context}"])
            for r in frame.itertuples(index=False)]


def plot_decomposition(tables: DerivedTables):
    """Stacked shares of the decode window per level: own steps, others' prefill, other."""
    levels = level_table(tables)
    fig, ax = _figure(max(6.4, 0.5 * len(levels) + 2), 3.8)
    if len(levels):
        labels = _level_labels(levels)
        bottom = [0.0] * len(levels)
        for col, name in (("own_step_share", "own decode steps"), ("prefill_share", "others' prefill"),
                          ("other_share", "gaps / other")):
            # own steps and others' prefill can overlap (a prefill chunk batched with decode rows):
            # their sum then passes 100% and the negative rest is drawn as nothing, not as a bar
            values = [0.0 if v != v else max(0.0, 100 * float(v)) if col == "other_share" else 100 * float(v)
                      for v in levels[col]]
            ax.bar(range(len(levels)), values, bottom=bottom, label=name)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        ax.set_xticks(range(len(levels)))
        ax.set_xticklabels(labels, fontsize=7)
        ax.legend(fontsize=8)
    ax.set_ylabel("share of the decode window (%)")
    ax.set_title("Decode-window decomposition (median over requests)")
    fig.tight_layout()
    return fig


def plot_step_over_floor(tables: DerivedTables, campaign: Campaign):
    """Measured decode step over its memory-bandwidth floor per level (empty where unknown)."""
    table = floor_table(tables, campaign).dropna(subset=["step_over_floor"])
    fig, ax = _figure()
    if len(table):
        labels = [f"b{r.batch} c{r.context}" for r in table.itertuples(index=False)]
        ax.bar(range(len(table)), table["step_over_floor"].astype(float))
        ax.set_xticks(range(len(table)))
        ax.set_xticklabels(labels, fontsize=7)
        ax.axhline(1.0, color="black", linewidth=0.8)
    else:
        ax.text(0.5, 0.5, "no floor: model bytes or device bandwidth not given", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_ylabel("step / floor (x)")
    ax.set_title("Decode step over the memory floor")
    fig.tight_layout()
    return fig


def plot_before_after(tables: DerivedTables, arms: Sequence[str]):
    """Per level, one bar per arm (medians over repeats): the decode step from the counters, and beside
    it the steady step (all requests decoding). At long context the counter step includes the steps
    shared with other requests' prefill, so a change in how prefill overlaps decode moves the first
    panel alone; the second shows the decode step itself."""
    levels = level_table(tables)
    n_keys = levels[["backend", "batch", "context"]].drop_duplicates().shape[0] if len(levels) else 0
    fig, axes = _figure(max(9.6, 1.0 * n_keys + 3), 3.6, ncols=2)
    panels = (("decode_step_ms", "decode step, counters (ms)"), ("steady_step_ms", "steady step, client (ms)"))
    if len(levels) and len(arms) > 1:
        keys = levels[["backend", "batch", "context"]].drop_duplicates().sort_values(["backend", "batch", "context"])
        width = 0.8 / len(arms)
        for ax, (column, title) in zip(axes, panels, strict=True):
            for i, arm in enumerate(arms):
                values = []
                for k in keys.itertuples(index=False):
                    at = levels[(levels["arm"].astype(str) == arm) & (levels["backend"] == k.backend)
                                & (levels["batch"] == k.batch) & (levels["context"] == k.context)]
                    # a level one arm lacks is a gap in the plot, not a 0 ms step
                    values.append(float(at[column].iloc[0]) if len(at) else float("nan"))
                ax.bar([j + i * width for j in range(len(keys))], values, width=width, label=arm)
            ax.set_xticks([j + width * (len(arms) - 1) / 2 for j in range(len(keys))])
            ax.set_xticklabels([f"b{k.batch} c{k.context}" for k in keys.itertuples(index=False)], fontsize=7)
            ax.set_title(title, fontsize=10)
            ax.set_ylabel("ms")
        axes[0].legend(fontsize=8)
    else:
        for ax in axes:
            ax.text(0.5, 0.5, "one arm: no before/after", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle("Before / after")
    fig.tight_layout()
    return fig


def plot_profile(tables: DerivedTables):
    """GPU busy and host gap ms per step per traced level (stacked; medians over repeats)."""
    table = trace_level_table(tables)
    fig, ax = _figure(max(6.4, 0.6 * len(table) + 2), 3.8)
    if len(table):
        labels = _level_labels(table)
        busy = [float(v) for v in table["busy_ms_per_step"]]
        gap = [float(v) for v in table["gap_ms_per_step"]]
        ax.bar(range(len(table)), busy, label="GPU busy")
        ax.bar(range(len(table)), gap, bottom=busy, label="host gaps")
        ax.set_xticks(range(len(table)))
        ax.set_xticklabels(labels, fontsize=7)
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no kernel trace", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("ms per step")
    ax.set_title("GPU busy vs host gaps per decode step")
    fig.tight_layout()
    return fig


def save_figure(fig, path: Path) -> Path:
    """PNG with no Software/date metadata, so the bytes depend on the data only."""
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path


# --------------------------------------------------------------------------------------- page


def page_date(manifests: Sequence[dict]) -> str:
    """UTC day on which the campaign's last run ended (from manifests), or 'undated'."""
    ends = []
    for m in manifests:
        try:
            ends.append(int(m["clocks"]["end"]["realtime_ns"]))
        except (KeyError, TypeError, ValueError):
            continue
    if not ends:
        return "undated"
    return dt.datetime.fromtimestamp(max(ends) / 1e9, tz=dt.UTC).strftime("%Y-%m-%d")


def trace_date(tables: DerivedTables) -> str | None:
    """UTC day of the last traced step where the trace clock is the Unix epoch (Kineto, CUPTI realtime);
    None where there is no step table or its clock is not plausibly epoch-based (2001 to 2100)."""
    st = tables.steps
    if st is None or not len(st):
        return None
    end = pd.to_numeric(st["end_ns"], errors="coerce").max()
    if not (end == end) or not (1e18 <= end < 4.1e18):
        return None
    return dt.datetime.fromtimestamp(end / 1e9, tz=dt.UTC).strftime("%Y-%m-%d")


def _dotted(doc: Any, key: str) -> Any:
    for part in key.split("."):
        if not isinstance(doc, dict) or part not in doc:
            return None
        doc = doc[part]
    return doc


def _leaves(doc: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(doc, dict):
        return [kv for k, v in doc.items() for kv in _leaves(v, f"{prefix}.{k}" if prefix else str(k))]
    return [] if isinstance(doc, list) else [(prefix, doc)]


def environment_facts(campaign: Campaign, page_dir: Path) -> list[dict[str, str]]:
    """Facts from the campaign's `environment_files` (a capture record, a trace manifest): the named
    dotted keys (or every scalar leaf), each with the file it came from."""
    import json

    out = []
    for spec in campaign.environment_files:
        file = campaign.resolve(spec.file)
        rel = os.path.relpath(file, page_dir).replace(os.sep, "/")
        try:
            doc = json.loads(file.read_text())
        except (OSError, ValueError) as exc:
            out.append({"file": rel, "label": spec.label or rel, "key": "", "value": f"unreadable: {exc}"})
            continue
        pairs = [(k, _dotted(doc, k)) for k in spec.keys] if spec.keys else _leaves(doc)
        for key, value in pairs:
            out.append({"file": rel, "label": spec.label or rel, "key": key,
                        "value": "n/a (not in the file)" if value is None else str(value)})
    return out


def environment_rows(campaign: Campaign, data_dir: Path) -> list[dict[str, str]]:
    """Per (arm, backend): host/platform, server kind, version, flags, model and tool versions."""
    from perflib.campaign import read_manifest, run_folders

    seen: dict[tuple[str, str], dict] = {}
    for arm, backend, run_dir in run_folders(campaign, data_dir):
        manifest = read_manifest(run_dir) or {}
        key = (arm, backend)
        if key not in seen or (seen[key].get("status") != "complete" and manifest.get("status") == "complete"):
            seen[key] = manifest
    rows = []
    for (arm, backend), m in sorted(seen.items()):
        server = m.get("server") or {}
        tools = m.get("tools") or {}
        flags = server.get("flags") or []
        flags = " ".join(str(f) for f in flags) if isinstance(flags, list) else str(flags)
        if not flags and (arm in {a.name for a in campaign.arms} or backend in {b.name for b in campaign.backends}):
            spec_args = [*(campaign.backend(backend).extra_args if backend in {b.name for b in campaign.backends}
                           else ()), *(campaign.arm(arm).extra_args if arm in {a.name for a in campaign.arms} else ())]
            flags = f"{' '.join(spec_args)} (from the campaign file; the run recorded none)" if spec_args else ""
        flags = re.sub(r"(-m|--model) \S*/", r"\1 …/", flags)  # no local paths on the page
        flags = re.sub(r"--port \d+", "--port N", flags)
        tool_text = ", ".join(f"{k} {v}" for k, v in sorted(tools.items()) if k != "platform")
        model = server.get("model")
        rows.append({"arm": arm, "backend": backend, "host": m.get("host") or tools.get("platform") or "n/a",
                     "server": f"{server.get('kind', 'n/a')} {server.get('version') or ''}".strip(),
                     "model": os.path.basename(str(model)) if model else "n/a",
                     "flags": flags or "n/a", "tools": tool_text or "n/a"})
    return rows


def raw_links(campaign: Campaign, data_dir: Path, page_dir: Path) -> list[dict[str, str]]:
    """Relative links from the page to every run folder, with its status."""
    from perflib.campaign import read_manifest, run_folders

    links = []
    for arm, backend, run_dir in run_folders(campaign, data_dir):
        manifest = read_manifest(run_dir) or {}
        rel = os.path.relpath(run_dir, page_dir).replace(os.sep, "/")
        errors = "; ".join(manifest.get("errors") or [])
        links.append({"label": f"{arm}/{backend}/{run_dir.name}", "href": rel + "/",
                      "status": manifest.get("status", "no manifest"), "errors": errors})
    from perflib.campaign import trace_only_runs

    for run, path in trace_only_runs(campaign, data_dir):
        if path is None:
            links.append({"label": f"{run.label}", "href": "", "status": "no trace file", "errors": ""})
            continue
        rel = os.path.relpath(path, page_dir).replace(os.sep, "/")
        links.append({"label": f"{run.label}: {path.name}", "href": rel, "status": "trace (trace-only run)",
                      "errors": ""})
    for spec in campaign.environment_files:
        file = campaign.resolve(spec.file)
        rel = os.path.relpath(file, page_dir).replace(os.sep, "/")
        links.append({"label": spec.label or file.name, "href": rel, "status": file.name, "errors": ""})
    return links


def see_also_links(entries: Sequence[str], reports_dir: Path) -> list[dict[str, str]]:
    """Other pages to link: URLs as given; paths relative to the reports folder, where a glob
    (`h200-pytorch-*.md`) picks the newest match; a page not there yet is listed without a link."""
    out = []
    for entry in entries:
        if "://" in entry:
            out.append({"href": entry, "label": escape_md(entry), "note": ""})
            continue
        matches = sorted(p for p in Path(reports_dir).glob(entry) if p.is_file())
        if matches:
            rel = os.path.relpath(matches[-1], reports_dir).replace(os.sep, "/")
            out.append({"href": rel, "label": escape_md(rel), "note": ""})
        else:
            out.append({"href": "", "label": escape_md(entry), "note": "not present yet"})
    return out


def build_page_data(campaign: Campaign, tables: DerivedTables, data_dir: Path, reports_dir: Path, date: str,
                    figures: dict[str, str]) -> dict[str, Any]:
    """Everything the template shows, as plain strings already formatted with units."""
    from perflib import verdicts as v
    from perflib.campaign import read_manifest, run_folders, trace_only_runs

    ctx = v.Context.of(campaign)
    verdict_list = v.evaluate(campaign.candidates, tables, ctx)
    gates = [g for gate in campaign.gates for g in v.evaluate_gate(gate, tables, ctx)]
    levels = level_table(tables)
    arms = [a.name for a in campaign.compared_arms]
    traced_arms = [a for a in campaign.arms if a.role == "traced"]
    batch_b = max(campaign.batches)
    level_rows = [{
        "arm": escape_md(r.arm), "backend": escape_md(r.backend), "batch": int(r.batch), "context": int(r.context),
        "runs": int(r.runs), "decode_tok_s": fmt(r.decode_tok_s, ".1f", " tok/s"),
        "decode_step_ms": fmt(r.decode_step_ms, ".2f", " ms"), "steady_step_ms": fmt(r.steady_step_ms, ".2f", " ms"),
        "occupancy": fmt(r.occupancy, ".2f"), "prefill_chunks": fmt(r.prefill_chunks, ".0f"),
        "ttft_ms": fmt(r.ttft_ms, ".1f", " ms"),
        "busy": fmt(r.busy_ms_per_step, ".2f", " ms"), "gap": fmt(r.gap_ms_per_step, ".2f", " ms"),
        "busy_share": pct(r.busy_share), "top_classes": escape_md(r.top_classes) or "no trace",
        "own": pct(r.own_step_share), "prefill": pct(r.prefill_share), "other": pct(r.other_share),
    } for r in levels.itertuples(index=False)]
    floor_rows = [{"arm": escape_md(r.arm), "backend": escape_md(r.backend), "batch": int(r.batch),
                   "context": int(r.context), "step": fmt(r.decode_step_ms, ".2f", " ms"),
                   "floor": fmt(r.floor_ms, ".3f", " ms"), "ratio": fmt(r.step_over_floor, ".1f", "x")}
                  for r in floor_table(tables, campaign).itertuples(index=False)]
    missing_floor = [name for name, val in (("model.weight_bytes", campaign.model.weight_bytes),
                                            ("model.kv_bytes_per_token", campaign.model.kv_bytes_per_token))
                     if val is None] + [f"backends[{b.name}].peak_bandwidth_gbs" for b in campaign.backends
                                        if b.peak_bandwidth_gbs is None]
    ba_rows = [{"backend": escape_md(r.backend), "batch": int(r.batch), "context": int(r.context),
                "measure": escape_md(r.measure), "arms": f"{escape_md(r.baseline)} → {escape_md(r.arm)}",
                "before": fmt(r.before, ".2f", " ms" if r.measure.endswith("_ms") else " tok/s"),
                "after": fmt(r.after, ".2f", " ms" if r.measure.endswith("_ms") else " tok/s"),
                "n": f"{r.runs_before} / {r.runs_after}",
                "change": "n/a" if r.change_pct is None or r.change_pct != r.change_pct else f"{r.change_pct:+.1f}%"}
               for r in before_after_table(tables, arms).itertuples(index=False)]
    ratio_rows = [{"backend": escape_md(r.backend), "source": escape_md(r.source), "context": _int_or_na(r.context),
                   "batch": _int_or_na(r.batch),
                   "step_1": fmt(r.step_1_ms, ".2f", " ms"), "step_b": fmt(r.step_b_ms, ".2f", " ms"),
                   "ratio": fmt(r.ratio, ".2f", "x"), "note": escape_md(r.note)}
                  for r in ratio_table(tables, [b.name for b in campaign.backends], campaign.other_backends,
                                       campaign.batches, arms, references=reference_tables(campaign),
                                       other_note=campaign.other_backends_note,
                                       no_counters={b.name: "backend (profiler captures, no /metrics)"
                                                    for b in campaign.backends if b.trace_only}
                                       ).itertuples(index=False)]
    traced_rows = [{"arm": escape_md(r.arm), "of": escape_md(r.of), "backend": escape_md(r.backend),
                    "batch": int(r.batch), "context": int(r.context), "measure": escape_md(r.measure),
                    "plain": fmt(r.plain, ".2f", " ms" if r.measure.endswith("_ms") else " tok/s"),
                    "traced": fmt(r.traced, ".2f", " ms" if r.measure.endswith("_ms") else " tok/s"),
                    "n": r.runs, "change": "n/a" if r.change_pct is None or r.change_pct != r.change_pct
                    else f"{r.change_pct:+.1f}%"}
                   for r in traced_overhead_table(tables, campaign).itertuples(index=False)]
    profile_rows = [{"arm": escape_md(r.arm), "backend": escape_md(r.backend), "batch": int(r.batch),
                     "context": int(r.context), "runs": int(r.runs), "steps": fmt(r.steps, ".0f"),
                     "step": fmt(r.step_ms, ".2f", " ms"), "busy": fmt(r.busy_ms_per_step, ".2f", " ms"),
                     "gap": fmt(r.gap_ms_per_step, ".2f", " ms"), "busy_share": pct(r.busy_share),
                     "dispatches": fmt(r.dispatches_per_step, ".0f"), "method": escape_md(r.step_method)}
                    for r in trace_level_table(tables).itertuples(index=False)]
    gap_rows = [{"arm": escape_md(r.arm), "backend": escape_md(r.backend), "batch": int(r.batch),
                 "context": int(r.context), "bucket": escape_md(r.bucket), "ms": fmt(r.gap_ms_per_step, ".2f", " ms"),
                 "count": fmt(r.count_per_step, ".1f")} for r in gap_level_table(tables).itertuples(index=False)]
    class_rows = [{"arm": escape_md(r.arm), "backend": escape_md(r.backend), "batch": int(r.batch),
                   "context": int(r.context), "kernel_class": escape_md(r.kernel_class),
                   "ms": fmt(r.ms_per_step, ".3f", " ms"), "share": pct(r.share), "count": fmt(r.count_per_step, ".1f")}
                  for r in class_level_table(tables).sort_values([*LEVEL_KEYS, "ms_per_step", "kernel_class"],
                                                                 ascending=[True] * 4 + [False, True],
                                                                 kind="stable").itertuples(index=False)]
    batch_class_rows = [{"arm": escape_md(r.arm), "backend": escape_md(r.backend), "context": int(r.context),
                         "batch": int(r.batch), "kernel_class": escape_md(r.kernel_class),
                         "ms_1": fmt(r.ms_1, ".3f", " ms"), "ms_b": fmt(r.ms_b, ".3f", " ms"),
                         "ratio": fmt(r.ratio, ".2f", "x"), "of_linear": fmt(r.of_linear, ".2f")}
                        for r in batch_class_table(tables).itertuples(index=False)]
    batch_step_rows = [{"arm": escape_md(r.arm), "backend": escape_md(r.backend), "batch": int(r.batch),
                        "context": int(r.context), "steps": int(r.steps), "step": fmt(r.step_ms, ".2f", " ms"),
                        "range": f"{fmt(r.step_min_ms, '.2f')} to {fmt(r.step_max_ms, '.2f', ' ms')}",
                        "busy": fmt(r.busy_ms, ".2f", " ms"), "gap": fmt(r.gap_ms, ".2f", " ms"),
                        "dispatches": fmt(r.dispatches, ".0f")}
                       for r in batch_step_table(tables).itertuples(index=False)]
    absent = absent_counters(tables)
    dialects = sorted({b.dialect for b in campaign.backends if not b.trace_only})
    absent_line = (f"Not exported by the server's /metrics (dialect {', '.join(dialects)}), so n/a above: "
                   f"{', '.join(absent)}." if absent else "")
    page_notes = []
    for note in campaign.notes:
        text = escape_md(note.text)
        if note.link is not None:
            link = campaign.resolve(note.link)
            rel = os.path.relpath(link, reports_dir).replace(os.sep, "/")
            text += f" ([{escape_md(link.name)}]({rel}))"
        page_notes.append(text)
    manifests = [read_manifest(d) or {} for _, _, d in run_folders(campaign, data_dir)]
    page_dir = Path(reports_dir)
    return {
        "name": escape_md(campaign.name), "date": date, "description": escape_md(campaign.description),
        "model": escape_md(campaign.model.name),
        "model_bytes": fmt(campaign.model.weight_bytes, ",.0f", " B"),
        "kv_bytes": fmt(campaign.model.kv_bytes_per_token, ",.0f", " B/token"),
        "matrix": (f"arms {', '.join(arms)}; backends {', '.join(b.name for b in campaign.backends)}; batches "
                   f"{', '.join(map(str, campaign.batches))}; contexts {', '.join(map(str, campaign.contexts))} "
                   f"tokens; {campaign.decode_tokens} decode tokens per request; {campaign.repeats} repeats"),
        "runs_total": len(manifests),
        "runs_complete": sum(1 for m in manifests if m.get("status") == "complete"),
        "environment": [{k: escape_md(val) for k, val in row.items()} for row in environment_rows(campaign, data_dir)],
        "levels": level_rows, "floor_rows": floor_rows, "missing_floor": ", ".join(missing_floor),
        "before_after": ba_rows, "gates": [escape_md(g.line) for g in gates], "ratio_rows": ratio_rows,
        "batch_b": batch_b, "verdicts": [{"label": escape_md(x.label), "scope": escape_md(x.scope),
                                          "outcome": x.outcome, "evidence": escape_md(x.evidence)} for x in verdict_list],
        "notes": page_notes + [escape_md(n) for n in tables.notes],
        "traced_rows": traced_rows, "traced_arms": [{"name": escape_md(a.name), "of": escape_md(a.of or ""),
                                                      "description": escape_md(a.description)} for a in traced_arms],
        "profile_rows": profile_rows, "gap_rows": gap_rows, "class_rows": class_rows,
        "batch_class_rows": batch_class_rows, "batch_step_rows": batch_step_rows, "absent_line": absent_line,
        "facts": [{k: escape_md(v) for k, v in f.items()} for f in environment_facts(campaign, reports_dir)],
        "trace_only": [escape_md(b.name) for b in campaign.backends if b.trace_only],
        "traces_found": sum(1 for _, p in trace_only_runs(campaign, data_dir) if p is not None),
        "traces_expected": len(trace_only_runs(campaign, data_dir)),
        "links": [{**link, "label": escape_md(link["label"]), "errors": escape_md(link["errors"])}
                  for link in raw_links(campaign, data_dir, page_dir)],
        "derived": os.path.relpath(campaign.derived_dir(data_dir), page_dir).replace(os.sep, "/") + "/",
        "see_also": see_also_links(campaign.see_also, page_dir),
        "figures": figures, "has_trace": bool(len(tables.trace_runs)), "arms": arms,
    }


def render(data: dict[str, Any]) -> str:
    """The page text from `build_page_data`'s dictionary and templates/report.md.j2."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
                             autoescape=False, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    text = env.get_template("report.md.j2").render(**data)
    return re.sub(r"\n{3,}", "\n\n", text)


def write_report(campaign: Campaign, data_dir: Path | None = None, reports_dir: Path | None = None,
                 date: str | None = None, tables: DerivedTables | None = None) -> Path:
    """Rebuild `data/derived/<campaign>/`, draw the figures and write `reports/<campaign>-<date>.md`."""
    from perflib import derive
    from perflib.campaign import read_manifest, run_folders

    data = Path(data_dir or campaign.data_dir)
    reports = Path(reports_dir or campaign.reports_dir)
    tables = tables if tables is not None else derive.build_and_write(campaign, data)
    manifests = [read_manifest(d) or {} for _, _, d in run_folders(campaign, data)]
    date = date or (page_date(manifests) if manifests else (trace_date(tables) or "undated"))
    stem = f"{campaign.name}-{date}"
    fig_dir = reports / stem
    figures = {
        "batch_scaling": save_figure(plot_batch_scaling(tables), fig_dir / "batch_scaling.png"),
        "decomposition": save_figure(plot_decomposition(tables), fig_dir / "decomposition.png"),
        "step_over_floor": save_figure(plot_step_over_floor(tables, campaign), fig_dir / "step_over_floor.png"),
    }
    compared = [a.name for a in campaign.compared_arms]
    if len(compared) > 1:
        figures["before_after"] = save_figure(plot_before_after(tables, compared), fig_dir / "before_after.png")
    if len(tables.trace_runs):
        figures["profile"] = save_figure(plot_profile(tables), fig_dir / "profile.png")
    rel = {k: f"{stem}/{p.name}" for k, p in figures.items()}
    text = render(build_page_data(campaign, tables, data, reports, date, rel))
    page = reports / f"{stem}.md"
    page.write_text(text)
    return page


def export_notebook(campaign: Campaign, reports_dir: Path | None = None, kernel_name: str | None = None) -> Path:
    """Execute notebooks/report.ipynb for the campaign and export it with
    `jupyter nbconvert --to markdown --no-input` into the reports folder."""
    import subprocess
    import sys

    from perflib.campaign import NOTEBOOKS, execute_notebook, find_kernel
    from perflib.errors import PerflibError

    reports = Path(reports_dir or campaign.reports_dir)
    reports.mkdir(parents=True, exist_ok=True)
    executed = reports / f"{campaign.name}-report.ipynb"
    error = execute_notebook(NOTEBOOKS / "report.ipynb", executed,
                             {"campaign_file": str(campaign.path), "data_dir": str(campaign.data_dir)},
                             kernel_name or find_kernel(), cwd=reports)
    if error:
        raise PerflibError(error)
    out = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "markdown", "--no-input",
                          str(executed), "--output-dir", str(reports)], capture_output=True, text=True)
    if out.returncode != 0:
        raise PerflibError(f"nbconvert of {executed} failed: {out.stderr.strip()[-500:]}")
    return executed.with_suffix(".md")
