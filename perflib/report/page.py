"""The results page: the derived tables, verdicts and figures rendered to Markdown with jinja2.

It renders data, reads no file and decides nothing: the six derived tables (`perflib.derive`), the page's
other inputs (`perflib.pageinputs`: run folders, environment, references, question, notes, see-also, the
reports folder's pages) and the verdicts, gates and checks decided over them once (`perflib.verdicts.Decisions`)
are resolved before `write_report` is called (`perflib.publish`), which only writes the page and its PNGs
(tests/test_architecture.py checks that no read creeps in).

Everything is deterministic so `perflib campaign report` rebuilds the same bytes: rows are
sorted, numbers have fixed formats, PNGs carry no software/date metadata, and the page date
(the day the campaign's last run ended, from the manifests) appears in one line and the page's
file names only. Kernel names and other free text pass through `escape_md`.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from perflib import atomic, checks, metrics, rundir
from perflib import verdicts as v
from perflib.config import Campaign, RunSpec
from perflib.derive import DerivedTables
from perflib.errors import PerflibError
from perflib.pageinputs import DERIVED_NOTE, PageInputs, device_lines, ran_on
from perflib.report import agreement as agr
from perflib.report import evidence as ev
from perflib.report import figures as fig
from perflib.report import markdown as mdt
from perflib.report import sections as sec
from perflib.report.tables import absent_counters, counter_problems
from perflib.report.text import escape_md, fmt
from perflib.verdicts.agreement import Agreement

TEMPLATES = Path(__file__).parent / "templates"


def _ends(inputs: PageInputs) -> list[int]:
    """When each run folder's run ended (realtime ns), where its manifest says."""
    return [int(e) for e in inputs.folders["end_ns"] if pd.notna(e)]


def page_date(inputs: PageInputs) -> str:
    """UTC day on which the campaign's last run ended (from manifests), or 'undated'."""
    ends = _ends(inputs)
    if not ends:
        return "undated"
    return dt.datetime.fromtimestamp(max(ends) / 1e9, tz=dt.UTC).strftime("%Y-%m-%d")


STAMPED = re.compile(r"\d{4}-\d{2}-\d{2}T\d{6}Z")
"""A data folder named by the UTC time it was started, as `make demo`'s `data/demo/<time>`."""


def page_stem(campaign: Campaign, inputs: PageInputs, date: str) -> str:
    """The page's file name without `.md`, never that of a page another data folder wrote.

    `<campaign>-<date>`, or `<campaign>-<folder>` where the data folder is named by its UTC time
    (`data/demo/2026-12-03T101530Z`, one per `make demo`). Where a page of that name exists and its
    Raw data section names another data folder's derived tables (`inputs.pages`), the time the last run
    ended, to the second, tells the two apart (`<campaign>-2026-12-03T101530Z`), then a count."""
    name = rundir.safe_name(campaign.name, "campaign")
    data_dir = inputs.data_dir
    label = Path(data_dir).name if STAMPED.fullmatch(Path(data_dir).name) else rundir.safe_name(date, "page date")
    derived = _derived_dir(campaign, inputs, inputs.reports_dir)
    candidates = [f"{name}-{label}"]
    ends = _ends(inputs)
    if ends:
        candidates.append(f"{name}-{dt.datetime.fromtimestamp(max(ends) / 1e9, tz=dt.UTC):%Y-%m-%dT%H%M%SZ}")
    candidates += [f"{candidates[-1]}-{n}" for n in range(2, 100)]
    for stem in candidates:
        named = inputs.pages.get(f"{stem}.md")
        if named is None or derived in named:
            return stem
    raise PerflibError(f"{inputs.reports_dir}: 100 pages named {candidates[0]}* from other data folders; expected "
                       "fewer (give --reports another folder)")


def _derived_dir(campaign: Campaign, inputs: PageInputs, page_dir: Path) -> str:
    """The data folder's derived tables as the Raw data section names them (`DERIVED_NOTE`)."""
    return os.path.relpath(campaign.derived_dir(inputs.data_dir), page_dir).replace(os.sep, "/") + "/"


def _rel(path: Path | str, page_dir: Path) -> str:
    return os.path.relpath(path, page_dir).replace(os.sep, "/")


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


def environment_facts(inputs: PageInputs, page_dir: Path) -> list[dict[str, str]]:
    """The facts of the campaign's `environment_files`, each with its file relative to the page."""
    out = []
    for f in inputs.facts.itertuples(index=False):
        rel = _rel(f.file, page_dir)
        out.append({"file": rel, "label": f.label or rel, "key": f.key, "value": f.value})
    return out


def raw_links(inputs: PageInputs, page_dir: Path) -> list[dict[str, str]]:
    """Relative links from the page to every run folder, with its status."""
    links = []
    for f in inputs.folders.itertuples(index=False):
        links.append({"label": f"{f.arm}/{f.backend}/{f.run}", "href": _rel(f.path, page_dir) + "/",
                      "status": f.status, "errors": f.errors})
    for t in inputs.trace_files.itertuples(index=False):
        label = RunSpec.label_of(t)
        if not isinstance(t.path, str | Path):
            links.append({"label": label, "href": "", "status": "no trace file", "errors": ""})
            continue
        links.append({"label": f"{label}: {Path(t.path).name}", "href": _rel(t.path, page_dir),
                      "status": "trace (trace-only run)", "errors": ""})
    for label, file in inputs.environment_files:
        links.append({"label": label or file.name, "href": _rel(file, page_dir), "status": file.name, "errors": ""})
    return links


def see_also_links(inputs: PageInputs) -> list[dict[str, str]]:
    """Other pages to link (`inputs.see_also`); a page not there yet is listed without a link."""
    out = []
    for entry, target in inputs.see_also:
        if target:
            out.append({"href": target, "label": escape_md(target), "note": ""})
        else:
            out.append({"href": "", "label": escape_md(entry), "note": "not present yet"})
    return out


def _notes(tables: DerivedTables, inputs: PageInputs) -> list[str]:
    """The campaign's own notes (with their links), then what derive noted, repeated notes folded:
    'arm a: no kernel trace …' for three arms is one line naming the three."""
    page_notes = []
    for note, link in inputs.notes:
        text = escape_md(note)
        if link is not None:
            text += f" ([{escape_md(link.name)}]({_rel(link, inputs.reports_dir)}))"
        page_notes.append(text)
    folded: dict[str, list[str]] = {}
    rest = []
    for note in tables.notes:
        match = re.match(r"arm (\S+): (.*)$", note)
        if match:
            folded.setdefault(match.group(2), []).append(match.group(1))
        else:
            rest.append(note)
    lines = [f"{'arms' if len(arms) > 1 else 'arm'} {', '.join(arms)}: {why}" for why, arms in folded.items()]
    return page_notes + [escape_md(n) for n in lines + rest]


def _absent_line(campaign: Campaign, tables: DerivedTables) -> str:
    absent = absent_counters(tables)
    dialects = sorted({b.dialect for b in campaign.backends if not b.trace_only})
    problems = counter_problems(tables)
    unusable = (f"Counters there but not usable, their figures n/a: {escape_md('; '.join(problems[:5]))}"
                + (f" and {len(problems) - 5} more runs" if len(problems) > 5 else "") + "." if problems else "")
    return " ".join(t for t in (
        f"Not exported by the server's /metrics (dialect {', '.join(dialects)}): {', '.join(absent)}." if absent
        else "", unusable) if t)


def occupancy_caption(campaign: Campaign, tables: DerivedTables) -> str:
    """The occupancy formula of the dialects the runs used (the dialect registry's captions, SERVERS.md),
    not a generic one."""
    return metrics.occupancy_caption(sorted({b.dialect for b in campaign.backends if not b.trace_only}))


def environment_section(inputs: PageInputs) -> str:
    rows = [{k: escape_md(val) for k, val in row.items()} for row in inputs.environment.to_dict("records")]
    text, _ = mdt.table(rows, [mdt.Column(k, k, keep=k in ("arm", "backend")) for k in
                              ("arm", "backend", "host", "server", "model", "flags", "tools", "device")])
    facts = environment_facts(inputs, inputs.reports_dir)
    fact_lines = []
    for i, f in enumerate(facts):
        if i == 0 or f["file"] != facts[i - 1]["file"]:
            fact_lines.append(f"\nRecorded in the {escape_md(f['label'])} ([{escape_md(f['file'])}]({f['file']})):\n")
        fact_lines.append(f"- {escape_md(f['key'])}: {escape_md(f['value'])}")
    devices_said = " ".join(escape_md(line) for line in device_lines(inputs.environment))  # issue 29: workers
    return sec.section("Environment", mdt.join("Per arm and backend: the host, the server's identity, its flags and "
                                               "the client's tools, from the run manifests.", devices_said),
                       mdt.join(text, "\n".join(fact_lines)),
                       f"{len(rows)} arm/backend pairs")


def raw_section(campaign: Campaign, inputs: PageInputs, page_dir: Path) -> str:
    """Every run folder linked, one row per arm and backend, with its status where it is not complete."""
    groups: dict[str, list[str]] = {}
    for link in raw_links(inputs, page_dir):
        arm_backend, _, name = link["label"].rpartition("/")
        state = "" if link["status"] in ("complete", "trace (trace-only run)") else f" ({escape_md(link['status'])}"
        state += f": {escape_md(link['errors'][:160])})" if state and link["errors"] else (")" if state else "")
        target = f"[{escape_md(name or link['label'])}]({link['href']})" if link["href"] else escape_md(link["label"])
        groups.setdefault(arm_backend or "files", []).append(target + state)
    rows = [{"where": escape_md(k), "n": len(v), "runs": " · ".join(v)} for k, v in groups.items()]
    text, _ = mdt.table(rows, [mdt.Column("where", "arm/backend", keep=True), mdt.Column("n", "folders", True),
                               mdt.Column("runs", "run folders")])
    # data/derived/ is rebuildable and not committed, so it is named, not linked: a link would break on GitHub.
    # The sentence also tells `page_stem` which data folder a page was written from.
    source = f"{campaign.path.parent.name}/{campaign.path.name}"  # the same on every checkout
    note = (f"{DERIVED_NOTE.format(_derived_dir(campaign, inputs, page_dir))}, rebuilt from these folders by "
            f"`perflib campaign report {source}`.")
    return sec.section("Raw data", note, text,
                       f"{sum(r['n'] for r in rows)} run folders and files")


def see_also_section(inputs: PageInputs) -> str:
    items = []
    for s in see_also_links(inputs):
        items.append(f"- [{s['label']}]({s['href']})" if s["href"] else f"- {s['label']} ({s['note']})")
    return mdt.join("## See also", "\n".join(items)) if items else ""


def summary_markdown(campaign: Campaign, tables: DerivedTables, decisions: v.Decisions, question: str,
                     sections: Sequence[str] = ()) -> str:
    """The page's opening summary on its own (a notebook shows it; the page links `sections`), opened by
    `question` (`perflib.config.opening_question`), from the campaign's `decisions`."""
    headline = ev.before_after(tables, campaign, [a.name for a in campaign.compared_arms], decisions.gates, None)[1]
    return sec.summary(question, decisions, headline, sections, tables.runs, tables.trace_runs)


def build_page_data(campaign: Campaign, tables: DerivedTables, inputs: PageInputs, decisions: v.Decisions, date: str,
                    figures: dict[str, dict[str, str]], agreement: Agreement | None = None) -> dict[str, Any]:
    """Long: everything the template shows: the head, the summary and the sections in order, the verdicts,
    gates and checks as `decisions` decided them, and this run against another run of the campaign
    (`agreement`) where there is one."""
    arms = [a.name for a in campaign.compared_arms]
    level_checks = decisions.level_checks
    before_after, headline = ev.before_after(tables, campaign, arms, decisions.gates, figures.get("before_after"))
    notes = _notes(tables, inputs)
    parts = {
        "Verdicts": sec.verdict_section(decisions.verdicts, decisions.context),
        "Before / after": before_after,
        "Per level": ev.per_level(tables, level_checks, occupancy_caption(campaign, tables),
                                  _absent_line(campaign, tables), figures.get("batch_scaling")),
        "Checks": sec.checks_section(level_checks, checks.LIMITS),
        "Agreement": agr.agreement_section(agreement, inputs.reports_dir),
        "Profile": ev.profile(tables, figures.get("profile")),
        "Decode-window decomposition": ev.decomposition(tables, figures.get("decomposition")),
        "Step over floor": ev.floor(tables, campaign, figures.get("step_over_floor")),
        "Cross-backend reference ratio": ev.ratio(tables, campaign, arms, inputs.references,
                                                  ran_on(inputs.environment)),
        "Environment": environment_section(inputs),
        "Notes": mdt.join("## Notes", "\n".join(f"- {n}" for n in notes)) if notes else "",
        "Raw data": raw_section(campaign, inputs, inputs.reports_dir),
    }
    present = [name for name in sec.ORDER if parts.get(name)]
    question, source = inputs.question, inputs.question_from
    return {
        **_header(campaign, inputs, date, tables),
        # the campaign's own question opens the page, above its description; a description opens it itself
        "question": f"**Question.** {escape_md(question)}" if question and source != "description" else "",
        "summary": sec.summary("", decisions, headline, present, tables.runs, tables.trace_runs,
                               agr.first_screen(agreement) if agreement is not None else ""),
        "sections": [parts[name] for name in present] + [see_also_section(inputs)],
    }


def arms_without_runs(campaign: Campaign, inputs: PageInputs) -> list[str]:
    """The arms with no complete run on disk yet (a runner that has not reached them, `--only`, another
    host's share): the page is written without them and says so."""
    if all(b.trace_only for b in campaign.backends):
        return []
    folders = inputs.folders
    done = set(folders[folders["status"] == "complete"]["arm"])
    return [a.name for a in campaign.arms if a.name not in done]


def _header(campaign: Campaign, inputs: PageInputs, date: str, tables: DerivedTables | None = None) -> dict[str, Any]:
    """The page's head: name, date, model, matrix, runs on disk and traces lost."""
    folders, trace_files = inputs.folders, inputs.trace_files
    complete = folders["status"] == "complete"
    arms = [a.name for a in campaign.arms]
    return {
        "name": escape_md(campaign.name), "date": date, "description": escape_md(campaign.description),
        "model": escape_md(campaign.model.name),
        "model_bytes": fmt(campaign.model.weight_bytes, ",.0f", " B"),
        "kv_bytes": fmt(campaign.model.kv_bytes_per_token, ",.0f", " B/token"),
        "matrix": (f"arms {', '.join(arms)}; backends {', '.join(b.name for b in campaign.backends)}; batches "
                   f"{', '.join(map(str, campaign.batches))}; contexts {', '.join(map(str, campaign.contexts))} "
                   f"tokens; {campaign.decode_tokens} decode tokens per request; {campaign.repeats} repeats"),
        "runs_total": len(folders),
        "runs_complete": int(complete.sum()),
        "arms_without_runs": [escape_md(a) for a in arms_without_runs(campaign, inputs)],
        "runs_left_out": int((complete & folders["contended"].astype(bool)).sum()),
        "trace_only": [escape_md(b.name) for b in campaign.backends if b.trace_only],
        "traces_found": sum(1 for p in trace_files["path"] if isinstance(p, str | Path)),
        "traces_expected": len(trace_files),
        "traces_lost": _traces_lost(tables),
    }


def _traces_lost(tables: DerivedTables | None) -> str:
    """' Traces: 1 of 6 traced runs lost or cut short.' for the head line, or '' where none was."""
    runs = tables.runs if tables is not None else None
    if runs is None or not len(runs) or "trace_loss" not in runs.columns:
        return ""
    keys = ["arm", "backend", "batch", "context", "repeat"]
    lost = {tuple(k) for k in runs[runs["trace_loss"].map(lambda t: isinstance(t, str) and bool(t.strip()))][keys]
            .astype(str).itertuples(index=False)}
    if not lost:
        return ""
    traced = {tuple(k) for k in tables.trace_runs[keys].astype(str).itertuples(index=False)}
    return f" Traces: {len(lost)} of {len(traced | lost)} traced runs lost, cut short or incomplete (see below)."


def render(data: dict[str, Any]) -> str:
    """The page text from `build_page_data`'s dictionary and templates/report.md.j2."""
    import jinja2  # late: 20 ms (measured) that open_campaign skips until the page is written

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                             autoescape=False, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    text = env.get_template("report.md.j2").render(**data)
    return re.sub(r"\n{3,}", "\n\n", text)


def write_report(campaign: Campaign, tables: DerivedTables, inputs: PageInputs, decisions: v.Decisions,
                 date: str | None = None, agreement: Agreement | None = None) -> Path:
    """Draw the figures and write `<reports>/<campaign>-<date>.md` from the derived tables, the page's inputs
    and what was decided over them (`perflib.publish`: `perflib.derive`, `perflib.pageinputs`,
    `perflib.verdicts.Decisions`, and `agreement` with another run of the campaign, where it names one):
    nothing is read or decided here."""
    reports = Path(inputs.reports_dir)
    date = date or (page_date(inputs) if len(inputs.folders) else (trace_date(tables) or "undated"))
    stem = page_stem(campaign, inputs, date)
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
    text = render(build_page_data(campaign, tables, inputs, decisions, date, figures, agreement))
    page = reports / f"{stem}.md"
    atomic.write_atomic(page, text)  # another host may be reading it
    return page
