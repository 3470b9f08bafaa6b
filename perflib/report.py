"""The results page: derived tables, verdicts and figures rendered to Markdown with jinja2.

Everything is deterministic so `perflib campaign report` rebuilds the same bytes: rows are
sorted, numbers have fixed formats, PNGs carry no software/date metadata, and the page date
(the day the campaign's last run ended, from the manifests) appears in one line and the page's
file names only. Kernel names and other free text pass through `escape_md`.
"""

from __future__ import annotations

import datetime as dt
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
    trace = trace.drop(columns=["runs"]).rename(columns={"window_ms": "trace_window_ms"})
    if len(levels):
        levels = levels.merge(trace, on=LEVEL_KEYS, how="left") if len(trace) else levels.assign(
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


def ratio_table(tables: DerivedTables, backends: Sequence[str], other_backends: Sequence[str],
                batch: int, arms: Sequence[str]) -> pd.DataFrame:
    """Cross-backend reference ratio: decode step at batch B over batch 1, per backend and context.

    Backends named in the campaign come first, then known others; a backend with no runs says why.
    """
    levels = level_table(tables)
    arm = arms[-1] if arms else None
    rows = []
    for backend in list(backends) + [b for b in other_backends if b not in backends]:
        sel = levels[(levels["backend"].astype(str) == backend) & (levels["arm"].astype(str) == str(arm))] \
            if len(levels) else levels
        if not len(sel):
            why = ("not measured: no complete run in this campaign" if backend in backends
                   else "not measured: not part of this campaign")
            rows.append({"backend": backend, "arm": arm, "context": None, "step_1_ms": None, "step_b_ms": None,
                         "ratio": None, "note": why})
            continue
        for context in sorted(sel["context"].unique()):
            at = sel[sel["context"] == context]
            one = at[at["batch"] == 1]["decode_step_ms"]
            big = at[at["batch"] == batch]["decode_step_ms"]
            s1 = float(one.iloc[0]) if len(one) else None
            sb = float(big.iloc[0]) if len(big) else None
            ratio = sb / s1 if s1 and sb and not (math.isnan(s1) or math.isnan(sb)) else None
            rows.append({"backend": backend, "arm": arm, "context": int(context), "step_1_ms": s1, "step_b_ms": sb,
                         "ratio": ratio, "note": "" if ratio is not None else f"not measured: no batch 1 and "
                                                                              f"batch {batch} step"})
    return pd.DataFrame(rows)


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
        "decode_step_ms", "decode_tok_s")) -> pd.DataFrame:
    """Per level and column: the baseline (first) arm's and each other arm's median with % change."""
    levels = level_table(tables)
    if len(arms) < 2 or not len(levels):
        return pd.DataFrame(columns=["backend", "batch", "context", "measure", "baseline", "arm", "before",
                                     "after", "runs_before", "runs_after", "change_pct"])
    base = arms[0]
    rows = []
    for arm in arms[1:]:
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


def _figure(width: float = 6.4, height: float = 3.6):
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height), dpi=100)
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


def plot_decomposition(tables: DerivedTables):
    """Stacked shares of the decode window per level: own steps, others' prefill, other."""
    levels = level_table(tables)
    fig, ax = _figure(max(6.4, 0.5 * len(levels) + 2), 3.8)
    if len(levels):
        labels = [f"{r.arm}/{r.backend}\nb{r.batch} c{r.context}" if levels["arm"].nunique() > 1
                  or levels["backend"].nunique() > 1 else f"b{r.batch} c{r.context}"
                  for r in levels.itertuples(index=False)]
        bottom = [0.0] * len(levels)
        for col, name in (("own_step_share", "own decode steps"), ("prefill_share", "others' prefill"),
                          ("other_share", "gaps / other")):
            values = [0.0 if v != v else 100 * float(v) for v in levels[col]]
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
    """Decode step ms per level, one bar per arm (medians over repeats)."""
    levels = level_table(tables)
    fig, ax = _figure(max(6.4, 0.6 * levels[["backend", "batch", "context"]].drop_duplicates().shape[0] + 2)
                      if len(levels) else 6.4)
    if len(levels) and len(arms) > 1:
        keys = levels[["backend", "batch", "context"]].drop_duplicates().sort_values(["backend", "batch", "context"])
        width = 0.8 / len(arms)
        for i, arm in enumerate(arms):
            values = []
            for k in keys.itertuples(index=False):
                at = levels[(levels["arm"].astype(str) == arm) & (levels["backend"] == k.backend)
                            & (levels["batch"] == k.batch) & (levels["context"] == k.context)]
                values.append(float(at["decode_step_ms"].iloc[0]) if len(at) else 0.0)
            ax.bar([j + i * width for j in range(len(keys))], values, width=width, label=arm)
        ax.set_xticks([j + width * (len(arms) - 1) / 2 for j in range(len(keys))])
        ax.set_xticklabels([f"b{k.batch} c{k.context}" for k in keys.itertuples(index=False)], fontsize=7)
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "one arm: no before/after", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("decode step (ms)")
    ax.set_title("Before / after")
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
    from perflib.campaign import read_manifest, run_folders

    ctx = v.Context.of(campaign)
    verdict_list = v.evaluate(campaign.candidates, tables, ctx)
    gates = [g for gate in campaign.gates for g in v.evaluate_gate(gate, tables, ctx)]
    levels = level_table(tables)
    arms = [a.name for a in campaign.arms]
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
    ratio_rows = [{"backend": escape_md(r.backend), "context": _int_or_na(r.context),
                   "step_1": fmt(r.step_1_ms, ".2f", " ms"), "step_b": fmt(r.step_b_ms, ".2f", " ms"),
                   "ratio": fmt(r.ratio, ".2f", "x"), "note": escape_md(r.note)}
                  for r in ratio_table(tables, [b.name for b in campaign.backends], campaign.other_backends, batch_b,
                                       arms).itertuples(index=False)]
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
        "notes": [escape_md(n) for n in tables.notes],
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
    date = date or page_date(manifests)
    stem = f"{campaign.name}-{date}"
    fig_dir = reports / stem
    figures = {
        "batch_scaling": save_figure(plot_batch_scaling(tables), fig_dir / "batch_scaling.png"),
        "decomposition": save_figure(plot_decomposition(tables), fig_dir / "decomposition.png"),
        "step_over_floor": save_figure(plot_step_over_floor(tables, campaign), fig_dir / "step_over_floor.png"),
    }
    if len(campaign.arms) > 1:
        figures["before_after"] = save_figure(plot_before_after(tables, [a.name for a in campaign.arms]),
                                              fig_dir / "before_after.png")
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
