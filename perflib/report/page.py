"""The results page: the derived tables, verdicts and figures rendered to Markdown with jinja2.

Everything is deterministic so `perflib campaign report` rebuilds the same bytes: rows are
sorted, numbers have fixed formats, PNGs carry no software/date metadata, and the page date
(the day the campaign's last run ended, from the manifests) appears in one line and the page's
file names only. Kernel names and other free text pass through `escape_md`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from perflib import derive, rundir
from perflib import verdicts as v
from perflib.config import Campaign
from perflib.derive import DerivedTables
from perflib.errors import InputError
from perflib.report import figures as fig
from perflib.report.tables import (
    LEVEL_KEYS,
    absent_counters,
    batch_class_table,
    batch_step_table,
    before_after_table,
    class_level_table,
    floor_table,
    gap_level_table,
    level_table,
    ratio_table,
    reference_tables,
    trace_level_table,
    traced_overhead_table,
)
from perflib.report.text import escape_md, fmt, int_or_na, pct

TEMPLATES = Path(__file__).parent / "templates"


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


def _manifests(campaign: Campaign, data_dir: Path) -> list[tuple[rundir.RunFolder, dict[str, Any]]]:
    """Every run folder with its manifest ({} where it has none or it is unreadable)."""
    out = []
    for found in campaign.run_folders(data_dir):
        try:
            manifest = rundir.read_manifest(found.path, missing_ok=True) or {}
        except InputError:
            manifest = {}
        out.append((found, manifest))
    return out


def environment_rows(campaign: Campaign, data_dir: Path) -> list[dict[str, str]]:
    """Per (arm, backend): host/platform, server kind, version, flags, model and tool versions."""
    seen: dict[tuple[str, str], dict] = {}
    for found, manifest in _manifests(campaign, data_dir):
        key = (found.arm, found.backend)
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
    links = []
    for found, manifest in _manifests(campaign, data_dir):
        rel = os.path.relpath(found.path, page_dir).replace(os.sep, "/")
        errors = "; ".join(manifest.get("errors") or [])
        links.append({"label": f"{found.arm}/{found.backend}/{found.path.name}", "href": rel + "/",
                      "status": manifest.get("status", "no manifest"), "errors": errors})
    for run, path in campaign.trace_only_runs(data_dir):
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


def see_also_links(entries: Sequence[str], reports_dir: Path, own: str = "") -> list[dict[str, str]]:
    """Other pages to link: URLs as given; paths relative to the reports folder, where a glob
    (`h200-pytorch-*.md`) picks the newest match that is not a page of this campaign (`own`: its
    name); a page not there yet is listed without a link."""
    out = []
    for entry in entries:
        if "://" in entry:
            out.append({"href": entry, "label": escape_md(entry), "note": ""})
            continue
        matches = sorted(p for p in Path(reports_dir).glob(entry) if p.is_file()
                         and not (own and re.fullmatch(rf"{re.escape(own)}-\d{{4}}-\d{{2}}-\d{{2}}\.md", p.name)))
        if matches:
            rel = os.path.relpath(matches[-1], reports_dir).replace(os.sep, "/")
            out.append({"href": rel, "label": escape_md(rel), "note": ""})
        else:
            out.append({"href": "", "label": escape_md(entry), "note": "not present yet"})
    return out


def _unit(measure: str) -> str:
    return " ms" if measure.endswith("_ms") else " tok/s"


def _change(value: Any) -> str:
    return "n/a" if value is None or value != value else f"{value:+.1f}%"


def _level_rows(levels: pd.DataFrame) -> list[dict[str, Any]]:
    return [{
        "arm": escape_md(r.arm), "backend": escape_md(r.backend), "batch": int(r.batch), "context": int(r.context),
        "runs": int(r.runs), "decode_tok_s": fmt(r.decode_tok_s, ".1f", " tok/s"),
        "decode_step_ms": fmt(r.decode_step_ms, ".2f", " ms"), "steady_step_ms": fmt(r.steady_step_ms, ".2f", " ms"),
        "occupancy": fmt(r.occupancy, ".2f"), "prefill_chunks": fmt(r.prefill_chunks, ".0f"),
        "ttft_ms": fmt(r.ttft_ms, ".1f", " ms"),
        "busy": fmt(r.busy_ms_per_step, ".2f", " ms"), "gap": fmt(r.gap_ms_per_step, ".2f", " ms"),
        "busy_share": pct(r.busy_share), "top_classes": escape_md(r.top_classes) or "no trace",
        "own": pct(r.own_step_share), "prefill": pct(r.prefill_share), "other": pct(r.other_share),
    } for r in levels.itertuples(index=False)]


def _floor_section(tables: DerivedTables, campaign: Campaign) -> dict[str, Any]:
    rows = [{"arm": escape_md(r.arm), "backend": escape_md(r.backend), "batch": int(r.batch),
             "context": int(r.context), "step": fmt(r.decode_step_ms, ".2f", " ms"),
             "floor": fmt(r.floor_ms, ".3f", " ms"), "ratio": fmt(r.step_over_floor, ".1f", "x")}
            for r in floor_table(tables, campaign).itertuples(index=False)]
    missing = [name for name, val in (("model.weight_bytes", campaign.model.weight_bytes),
                                      ("model.kv_bytes_per_token", campaign.model.kv_bytes_per_token))
               if val is None] + [f"backends[{b.name}].peak_bandwidth_gbs" for b in campaign.backends
                                  if b.peak_bandwidth_gbs is None]
    return {"floor_rows": rows, "missing_floor": ", ".join(missing)}


def _comparison_sections(tables: DerivedTables, campaign: Campaign, arms: list[str]) -> dict[str, Any]:
    """Before/after (each compared arm against the one before it) and the traced arms' overhead."""
    ba_rows = [{"backend": escape_md(r.backend), "batch": int(r.batch), "context": int(r.context),
                "measure": escape_md(r.measure), "arms": f"{escape_md(r.baseline)} → {escape_md(r.arm)}",
                "before": fmt(r.before, ".2f", _unit(r.measure)), "after": fmt(r.after, ".2f", _unit(r.measure)),
                "n": f"{r.runs_before} / {r.runs_after}", "change": _change(r.change_pct)}
               for r in before_after_table(tables, arms).itertuples(index=False)]
    traced_rows = [{"arm": escape_md(r.arm), "of": escape_md(r.of), "backend": escape_md(r.backend),
                    "batch": int(r.batch), "context": int(r.context), "measure": escape_md(r.measure),
                    "plain": fmt(r.plain, ".2f", _unit(r.measure)), "traced": fmt(r.traced, ".2f", _unit(r.measure)),
                    "n": r.runs, "change": _change(r.change_pct)}
                   for r in traced_overhead_table(tables, campaign).itertuples(index=False)]
    traced_arms = [{"name": escape_md(a.name), "of": escape_md(a.of or ""), "description": escape_md(a.description)}
                   for a in campaign.arms if a.role == "traced"]
    return {"before_after": ba_rows, "traced_rows": traced_rows, "traced_arms": traced_arms}


def _ratio_section(tables: DerivedTables, campaign: Campaign, arms: list[str]) -> list[dict[str, Any]]:
    table = ratio_table(tables, [b.name for b in campaign.backends], campaign.other_backends, campaign.batches, arms,
                        references=reference_tables(campaign), other_note=campaign.other_backends_note,
                        no_counters={b.name: "backend (profiler captures, no /metrics)"
                                     for b in campaign.backends if b.trace_only})
    return [{"backend": escape_md(r.backend), "source": escape_md(r.source), "context": int_or_na(r.context),
             "batch": int_or_na(r.batch), "step_1": fmt(r.step_1_ms, ".2f", " ms"),
             "step_b": fmt(r.step_b_ms, ".2f", " ms"), "ratio": fmt(r.ratio, ".2f", "x"), "note": escape_md(r.note)}
            for r in table.itertuples(index=False)]


def _profile_sections(tables: DerivedTables) -> dict[str, Any]:
    """The trace tables of the profile section: per level, gap buckets, classes, batch 1 to B."""
    classes = class_level_table(tables).sort_values([*LEVEL_KEYS, "ms_per_step", "kernel_class"],
                                                    ascending=[True] * 4 + [False, True], kind="stable")
    return {
        "profile_rows": [{"arm": escape_md(r.arm), "backend": escape_md(r.backend), "batch": int(r.batch),
                          "context": int(r.context), "runs": int(r.runs), "steps": fmt(r.steps, ".0f"),
                          "step": fmt(r.step_ms, ".2f", " ms"), "busy": fmt(r.busy_ms_per_step, ".2f", " ms"),
                          "gap": fmt(r.gap_ms_per_step, ".2f", " ms"), "busy_share": pct(r.busy_share),
                          "dispatches": fmt(r.dispatches_per_step, ".0f"), "method": escape_md(r.step_method)}
                         for r in trace_level_table(tables).itertuples(index=False)],
        "gap_rows": [{"arm": escape_md(r.arm), "backend": escape_md(r.backend), "batch": int(r.batch),
                      "context": int(r.context), "bucket": escape_md(r.bucket),
                      "ms": fmt(r.gap_ms_per_step, ".2f", " ms"), "count": fmt(r.count_per_step, ".1f")}
                     for r in gap_level_table(tables).itertuples(index=False)],
        "class_rows": [{"arm": escape_md(r.arm), "backend": escape_md(r.backend), "batch": int(r.batch),
                        "context": int(r.context), "kernel_class": escape_md(r.kernel_class),
                        "ms": fmt(r.ms_per_step, ".3f", " ms"), "share": pct(r.share),
                        "count": fmt(r.count_per_step, ".1f")} for r in classes.itertuples(index=False)],
        "batch_class_rows": [{"arm": escape_md(r.arm), "backend": escape_md(r.backend), "context": int(r.context),
                              "batch": int(r.batch), "kernel_class": escape_md(r.kernel_class),
                              "ms_1": fmt(r.ms_1, ".3f", " ms"), "ms_b": fmt(r.ms_b, ".3f", " ms"),
                              "ratio": fmt(r.ratio, ".2f", "x"), "of_linear": fmt(r.of_linear, ".2f")}
                             for r in batch_class_table(tables).itertuples(index=False)],
        "batch_step_rows": [{"arm": escape_md(r.arm), "backend": escape_md(r.backend), "batch": int(r.batch),
                             "context": int(r.context), "steps": int(r.steps), "step": fmt(r.step_ms, ".2f", " ms"),
                             "range": f"{fmt(r.step_min_ms, '.2f')} to {fmt(r.step_max_ms, '.2f', ' ms')}",
                             "busy": fmt(r.busy_ms, ".2f", " ms"), "gap": fmt(r.gap_ms, ".2f", " ms"),
                             "dispatches": fmt(r.dispatches, ".0f")}
                            for r in batch_step_table(tables).itertuples(index=False)],
    }


def _notes(campaign: Campaign, tables: DerivedTables, reports_dir: Path) -> dict[str, Any]:
    """The campaign's own notes (with their links), what derive noted, and the absent counters."""
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
    return {"notes": page_notes + [escape_md(n) for n in tables.notes], "absent_line": absent_line}


def _header(campaign: Campaign, data_dir: Path, reports_dir: Path, date: str, arms: list[str]) -> dict[str, Any]:
    """The page's head: name, date, model, matrix, runs on disk, environment and links."""
    manifests = [m for _, m in _manifests(campaign, data_dir)]
    trace_only = campaign.trace_only_runs(data_dir)
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
        "facts": [{k: escape_md(val) for k, val in f.items()} for f in environment_facts(campaign, reports_dir)],
        "trace_only": [escape_md(b.name) for b in campaign.backends if b.trace_only],
        "traces_found": sum(1 for _, p in trace_only if p is not None),
        "traces_expected": len(trace_only),
        "links": [{**link, "label": escape_md(link["label"]), "errors": escape_md(link["errors"])}
                  for link in raw_links(campaign, data_dir, page_dir)],
        "derived": os.path.relpath(campaign.derived_dir(data_dir), page_dir).replace(os.sep, "/") + "/",
        "see_also": see_also_links(campaign.see_also, page_dir, campaign.name),
    }


def build_page_data(campaign: Campaign, tables: DerivedTables, data_dir: Path, reports_dir: Path, date: str,
                    figures: dict[str, dict[str, str]]) -> dict[str, Any]:
    """Everything the template shows, as plain strings already formatted with units."""
    ctx = v.Context.of(campaign)
    verdict_list = v.evaluate(campaign.candidates, tables, ctx)
    gates = [g for gate in campaign.gates for g in v.evaluate_gate(gate, tables, ctx)]
    arms = [a.name for a in campaign.compared_arms]
    return {
        **_header(campaign, data_dir, reports_dir, date, arms),
        "levels": _level_rows(level_table(tables)),
        **_floor_section(tables, campaign),
        **_comparison_sections(tables, campaign, arms),
        "gates": [escape_md(g.line) for g in gates],
        "ratio_rows": _ratio_section(tables, campaign, arms),
        "batch_b": max(campaign.batches),
        "verdicts": [{"label": escape_md(x.label), "scope": escape_md(x.scope), "outcome": x.outcome,
                      "evidence": escape_md(x.evidence)} for x in verdict_list],
        **_notes(campaign, tables, reports_dir),
        **_profile_sections(tables),
        "figures": figures, "has_trace": bool(len(tables.trace_runs)), "arms": arms,
    }


def render(data: dict[str, Any]) -> str:
    """The page text from `build_page_data`'s dictionary and templates/report.md.j2."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                             autoescape=False, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    text = env.get_template("report.md.j2").render(**data)
    return re.sub(r"\n{3,}", "\n\n", text)


def write_report(campaign: Campaign, data_dir: Path | None = None, reports_dir: Path | None = None,
                 date: str | None = None, tables: DerivedTables | None = None) -> Path:
    """Rebuild `data/derived/<campaign>/`, draw the figures and write `reports/<campaign>-<date>.md`."""
    data = Path(data_dir or campaign.data_dir)
    reports = Path(reports_dir or campaign.reports_dir)
    tables = tables if tables is not None else derive.build_and_write(campaign, data)
    manifests = [m for _, m in _manifests(campaign, data)]
    date = date or (page_date(manifests) if manifests else (trace_date(tables) or "undated"))
    stem = f"{campaign.name}-{date}"
    fig_dir = reports / stem
    drawn = {
        "batch_scaling": fig.plot_batch_scaling(tables),
        "profile": fig.plot_profile(tables),
        "decomposition": fig.plot_decomposition(tables),
        "step_over_floor": fig.plot_step_over_floor(tables, campaign),
        "before_after": fig.plot_before_after(tables, [a.name for a in campaign.compared_arms]),
    }
    figures = {}
    reports.mkdir(parents=True, exist_ok=True)  # the page's folder, even when no figure makes it
    for name, plot in drawn.items():
        path = fig_dir / f"{name}.png"
        if plot is None:  # nothing to draw: the page leaves the image out, and no stale PNG stays beside it
            path.unlink(missing_ok=True)
            continue
        fig.save_figure(plot, path)
        figures[name] = {"path": f"{stem}/{path.name}", "alt": escape_md(plot.alt)}
    text = render(build_page_data(campaign, tables, data, reports, date, figures))
    page = reports / f"{stem}.md"
    rundir.write_atomic(page, text)  # another host may be reading it
    return page
