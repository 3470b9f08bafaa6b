"""What the results page shows beyond the six derived tables, resolved from the files before it is drawn.

The run folders' manifest facts (status, errors, when each ended, contention), the environment per arm
and backend, the facts of the campaign's `environment_files`, the trace-only runs' files, the
`compare_with` campaigns' derived runs, the `agree_with` run of the same campaign (its derived tables, and
where each run folder of both runs ran and what else used its CPUs), the question the page opens with, the
campaign's notes with their links, the `see_also` pages found in the reports folder, and which of that folder's pages each
data folder wrote. `build` reads them all, so that `perflib.report` renders data and reads nothing;
an input named by the campaign that cannot be read is an `InputError` naming the file and what was
expected, never a blank on the page. `write` puts them beside the derived tables in
`data/derived/<campaign>/` (docs/SCHEMA.md §4) and `read` gives them back, so a page can be drawn from
`data/derived` alone.
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from perflib import atomic, derive, devices, rundir, safeinput
from perflib.config import Campaign, opening_question, read_campaign
from perflib.errors import InputError

FOLDERS = ["arm", "backend", "run", "path", "status", "errors", "end_ns", "contended"]
"""folders.csv: one row per run folder. `status` is the manifest's (`no manifest` without one,
`unreadable manifest` where it cannot be read, `errors` then saying why); `end_ns` the realtime clock
at its end; `contended` True for a complete run the contention check flagged."""
TRACE_FILES = ["arm", "backend", "batch", "context", "repeat", "path"]
"""trace_files.csv: one row per run of a trace-only backend, `path` '' where its file is missing."""
ENVIRONMENT = ["arm", "backend", "host", "server", "model", "flags", "tools", "device", "device_kind"]
"""environment.csv: one row per (arm, backend), from its complete run's manifest; `device` is where it ran
(`perflib.devices.describe_record`: host, GPU name, index, UUID, CPUs) and `device_kind` its kind ('' for
runs that recorded no device)."""
FACTS = ["file", "label", "key", "value"]
"""environment_facts.csv: one row per fact of an `environment_files` entry."""
TEXT_COLUMNS = {"folders.csv": FOLDERS, "trace_files.csv": TRACE_FILES, "environment.csv": ENVIRONMENT,
                "environment_facts.csv": FACTS}
REFERENCE_RUNS = "reference_runs.csv"
"""The `compare_with` campaigns' runs.csv rows, each with the `reference` label it stands under."""
SIGNALS = ["run", "arm", "backend", "batch", "context", "repeat", "status", "device", "sampled", "contended",
           "foreign_cpu_share", "steal_share", "psi_some_share", "wait_per_cpu", "contention_why"]
"""agree_signals.csv: one row per run folder of this run and of the `agree_with` run (`run`: the run's label):
the device it ran on (`perflib.devices.describe_record`, '' where it recorded none) and its manifest's
contention record: whether it was sampled and judged contended, other processes' share of its CPUs, the
hypervisor's steal share, PSI `some` share and the server's and client's run-queue wait per CPU second
(`perflib.load.contention`; empty where not sampled), and the why of a contended run."""
AGREE_SIGNALS = "agree_signals.csv"
AGREE_TABLES = "agree"
"""The `agree_with` run's derived tables, written below `data/derived/<campaign>/` (`perflib.derive.write`)."""
PAGE = "page.json"
"""What is not a table: the question, notes, see-also targets, references, the reports folder's pages."""

DERIVED_NOTE = "Derived tables: `{}`"
"""The sentence by which a page names the data folder it was drawn from (its Raw data section):
`perflib.report` writes it, `build` reads it back from the pages already in the reports folder."""
_DERIVED_NAMED = re.compile(re.escape(DERIVED_NOTE).replace(r"\{\}", "([^`]*)"))


def _empty(columns: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})


@dataclass(frozen=True)
class Reference:
    """A `compare_with` campaign: the label its rows stand under, the backend and arm the ratio table
    reads, its batches, its derived runs (runs.csv rows) and where those ran."""

    label: str
    campaign: str
    backend: str
    arm: str
    batches: tuple[int, ...]
    runs: pd.DataFrame = field(default_factory=lambda: derive.empty("runs"))
    ran_on: str = ""
    """Where its arm and backend ran (host: device, `ran_on`), from its own run folders' manifests: a compared
    campaign was made elsewhere, often long before; '' where they recorded none."""

    def tables(self) -> derive.DerivedTables:
        return derive.DerivedTables(runs=self.runs)


@dataclass(frozen=True)
class OtherRun:
    """The `agree_with` run: another run of this same campaign in a data folder of its own, its derived tables
    (`perflib.derive.build`), and for every run folder of both runs where it ran and what else used its CPUs
    (`SIGNALS`, `run` naming `this_label` or `label`)."""

    label: str
    this_label: str
    data_dir: Path
    tables: derive.DerivedTables
    signals: pd.DataFrame = field(default_factory=lambda: _empty(SIGNALS))

    def signals_of(self, label: str) -> pd.DataFrame:
        """The run folders of one of the two runs."""
        return self.signals[self.signals["run"].astype(str) == label].reset_index(drop=True)


@dataclass(frozen=True)
class PageInputs:
    """Everything the page shows that is not in the six derived tables, read from the files. Paths are
    as found (`data_dir`'s and `reports_dir`'s own form); the page makes them relative to itself."""

    data_dir: Path
    reports_dir: Path
    question: str = ""
    question_from: str = ""
    folders: pd.DataFrame = field(default_factory=lambda: _empty(FOLDERS))
    trace_files: pd.DataFrame = field(default_factory=lambda: _empty(TRACE_FILES))
    environment: pd.DataFrame = field(default_factory=lambda: _empty(ENVIRONMENT))
    facts: pd.DataFrame = field(default_factory=lambda: _empty(FACTS))
    environment_files: tuple[tuple[str, Path], ...] = ()
    """(its label, '' for none; the file) of each `environment_files` entry."""
    references: tuple[Reference, ...] = ()
    notes: tuple[tuple[str, Path | None], ...] = ()
    """The campaign's notes: (text, the file or folder it links, resolved)."""
    see_also: tuple[tuple[str, str], ...] = ()
    """(entry, target): a URL as given, the newest matching page's path relative to the reports folder,
    or '' where none is there yet."""
    pages: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The reports folder's pages of this campaign's name: file name -> the derived folders it names."""
    agree: OtherRun | None = None
    """The `agree_with` run, where the campaign names one."""


# ------------------------------------------------------------------------------------------- build


def build(campaign: Campaign, data_dir: Path | None = None, reports_dir: Path | None = None) -> PageInputs:
    """The page's inputs for the campaign's data under `data_dir` and a page written into `reports_dir`."""
    data = Path(data_dir or campaign.data_dir)
    reports = Path(reports_dir or campaign.reports_dir)
    campaign = replace(campaign, data_dir=data)  # `{data_dir}` in the campaign's paths means this folder
    found = manifests(campaign)
    question, source = opening_question(campaign)
    return PageInputs(
        data_dir=data, reports_dir=reports, question=question, question_from=source,
        folders=_folder_rows(found), trace_files=_trace_file_rows(campaign),
        environment=environment_rows(campaign, found), facts=environment_facts(campaign),
        environment_files=tuple((spec.label, campaign.resolve(spec.file)) for spec in campaign.environment_files),
        references=references(campaign),
        notes=tuple((note.text, campaign.resolve(note.link) if note.link is not None else None)
                    for note in campaign.notes),
        see_also=see_also(campaign.see_also, reports, campaign.name), pages=pages_named(reports, campaign.name),
        agree=other_run(campaign, found))


def manifests(campaign: Campaign) -> list[tuple[rundir.RunFolder, dict[str, Any], str]]:
    """Every run folder with its manifest ({} where it has none) and why it could not be read ('' where
    it could): one damaged folder is shown as such on the page, as `perflib.derive` notes it, and does
    not keep the others' page from being written."""
    out = []
    for found in campaign.run_folders():
        try:
            out.append((found, rundir.read_manifest(found.path, missing_ok=True) or {}, ""))
        except InputError as exc:
            out.append((found, {}, str(exc)))
    return out


def _end_ns(manifest: dict[str, Any]) -> int | None:
    try:
        return int(manifest["clocks"]["end"]["realtime_ns"])
    except (KeyError, TypeError, ValueError):  # a run that never ended: no end clock to date the page by
        return None


def _folder_rows(found: Sequence[tuple[rundir.RunFolder, dict[str, Any], str]]) -> pd.DataFrame:
    rows = []
    for folder, m, unreadable in found:
        status = "unreadable manifest" if unreadable else str(m.get("status", "no manifest"))
        contended = status == "complete" and isinstance(m.get("contention"), dict) and bool(m["contention"].get("contended"))
        rows.append({"arm": folder.arm, "backend": folder.backend, "run": folder.path.name, "path": folder.path,
                     "status": status, "errors": unreadable or "; ".join(m.get("errors") or []),
                     "end_ns": _end_ns(m), "contended": contended})
    if not rows:
        return _empty(FOLDERS)
    frame = pd.DataFrame(rows, columns=FOLDERS)
    return frame.assign(end_ns=pd.array([r["end_ns"] for r in rows], dtype="Int64"))  # exact ns, None kept


def _trace_file_rows(campaign: Campaign) -> pd.DataFrame:
    rows = [{"arm": run.arm, "backend": run.backend, "batch": run.batch, "context": run.context,
             "repeat": run.repeat, "path": path} for run, path in campaign.trace_only_runs()]
    return pd.DataFrame(rows, columns=TRACE_FILES) if rows else _empty(TRACE_FILES)


def environment_rows(campaign: Campaign, found: Sequence[tuple[rundir.RunFolder, dict[str, Any], str]]
                     ) -> pd.DataFrame:
    """Per (arm, backend): host/platform, server kind and version, flags, model and tool versions, from
    its complete run's manifest (else any run's); flags from the campaign file where none was recorded."""
    seen: dict[tuple[str, str], dict] = {}
    for folder, manifest, _ in found:
        key = (folder.arm, folder.backend)
        if key not in seen or (seen[key].get("status") != "complete" and manifest.get("status") == "complete"):
            seen[key] = manifest
    arms, backends = {a.name for a in campaign.arms}, {b.name for b in campaign.backends}
    rows = []
    for (arm, backend), m in sorted(seen.items()):
        server = m.get("server") or {}
        tools = m.get("tools") or {}
        flags = server.get("flags") or []
        flags = " ".join(str(f) for f in flags) if isinstance(flags, list) else str(flags)
        if not flags and (arm in arms or backend in backends):
            spec_args = [*(campaign.backend(backend).extra_args if backend in backends else ()),
                         *(campaign.arm_config(arm).extra_args if arm in arms else ())]
            flags = f"{' '.join(spec_args)} (from the campaign file; the run recorded none)" if spec_args else ""
        flags = re.sub(r"(-m|--model) \S*/", r"\1 …/", flags)  # no local paths on the page
        flags = re.sub(r"--port \d+", "--port N", flags)
        tool_text = ", ".join(f"{k} {v}" for k, v in sorted(tools.items()) if k != "platform")
        model = server.get("model")
        rows.append({"arm": arm, "backend": backend, "host": m.get("host") or tools.get("platform") or "n/a",
                     "server": f"{server.get('kind', 'n/a')} {server.get('version') or ''}".strip(),
                     "model": os.path.basename(str(model)) if model else "n/a",
                     "flags": flags or "n/a", "tools": tool_text or "n/a",
                     "device": devices.describe_record(m.get("device")), "device_kind": devices.kind(m.get("device"))})
    return pd.DataFrame(rows, columns=ENVIRONMENT) if rows else _empty(ENVIRONMENT)


def _text(frame: pd.DataFrame, column: str) -> pd.Series:
    return frame[column].fillna("").astype(str) if column in frame.columns else pd.Series([""] * len(frame))


def device_lines(environment: pd.DataFrame) -> list[str]:
    """One sentence per backend whose arms ran on different devices (cluster workers, issue 29): of one
    kind, or of different kinds; nothing where they shared one or recorded none."""
    out = []
    if not len(environment):
        return out
    frame = environment.assign(device=_text(environment, "device").values,
                               device_kind=_text(environment, "device_kind").values)
    for backend, rows in frame[frame["device"] != ""].groupby("backend", sort=True):
        if rows["device"].nunique() < 2:
            continue
        which = "; ".join(f"{r.arm} on {r.device}" for r in rows.itertuples(index=False))
        kinds = sorted(set(rows["device_kind"]))
        out.append(f"The arms of {backend} ran on different devices of one kind ({kinds[0]}): {which}."
                   if len(kinds) == 1 else
                   f"The arms of {backend} ran on different kinds of device ({', '.join(kinds)}), so comparing "
                   f"them compares the devices too: {which}.")
    return out


def ran_on(environment: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(arm, backend) -> the device its runs recorded (host first), where they recorded one."""
    if not len(environment):
        return {}
    devices_seen = _text(environment, "device")
    return {(str(a), str(b)): d for a, b, d in zip(environment["arm"], environment["backend"], devices_seen,
                                                   strict=True) if d}


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


def environment_facts(campaign: Campaign) -> pd.DataFrame:
    """Facts from the campaign's `environment_files` (a capture record, a trace manifest): the named
    dotted keys (or every scalar leaf), each with the file it came from. A file that is missing or not a
    JSON document is an `InputError` naming it and the campaign key that names it."""
    rows = []
    for i, spec in enumerate(campaign.environment_files):
        file = campaign.resolve(spec.file)
        expected = f"a JSON file (named by {campaign.path}: {campaign.where(f'environment_files[{i}].file')})"
        text = safeinput.read_text(file, expected)
        try:
            doc = json.loads(text or "")
        except json.JSONDecodeError as exc:
            raise InputError(file, f"{exc.lineno}:{exc.colno}", expected, exc.msg) from None
        pairs = [(k, _dotted(doc, k)) for k in spec.keys] if spec.keys else _leaves(doc)
        rows += [{"file": file, "label": spec.label, "key": key,
                  "value": "n/a (not in the file)" if value is None else str(value)} for key, value in pairs]
    return pd.DataFrame(rows, columns=FACTS) if rows else _empty(FACTS)


def references(campaign: Campaign) -> tuple[Reference, ...]:
    """The `compare_with` campaigns' derived runs, rebuilt from their own raw data (from this campaign's
    data folder where it holds theirs too, as under `--data`), and where each ran, from its own manifests."""
    out = []
    for ref in campaign.compare_with:
        other = read_campaign(ref.campaign)
        if (campaign.data_dir / "raw" / other.name).is_dir():
            other = replace(other, data_dir=campaign.data_dir)
        backend, arm = ref.backend or other.backends[0].name, other.compared_arms[-1].name
        where = ran_on(environment_rows(other, manifests(other))).get((arm, backend), "")
        out.append(Reference(label=ref.label or f"campaign {other.name}", campaign=other.name, backend=backend,
                             arm=arm, batches=tuple(other.batches), runs=derive.build(other).runs, ran_on=where))
    return tuple(out)


def _share(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def signal_rows(label: str, found: Sequence[tuple[rundir.RunFolder, dict[str, Any], str]]) -> pd.DataFrame:
    """`SIGNALS` of one run's folders, from their manifests (`device`, `contention`)."""
    rows = []
    for folder, m, unreadable in found:
        level = rundir.parse_run_name(folder.path.name)
        if level is None:
            continue
        seen = m.get("contention") if isinstance(m.get("contention"), dict) else {}
        waits = seen.get("signals") if isinstance(seen.get("signals"), dict) else {}
        rows.append({"run": label, "arm": folder.arm, "backend": folder.backend, "batch": level[0],
                     "context": level[1], "repeat": level[2],
                     "status": "unreadable manifest" if unreadable else str(m.get("status", "no manifest")),
                     "device": devices.describe_record(m.get("device")), "sampled": bool(seen.get("available")),
                     "contended": bool(seen.get("contended")), "foreign_cpu_share": _share(seen.get("foreign_cpu_share")),
                     "steal_share": _share(seen.get("steal_share")), "psi_some_share": _share(waits.get("psi_some_share")),
                     "wait_per_cpu": _share(waits.get("wait_per_cpu")), "contention_why": str(seen.get("why") or "")})
    return pd.DataFrame(rows, columns=SIGNALS) if rows else _empty(SIGNALS)


def run_labels(this: Path, other: Path, label: str = "") -> tuple[str, str]:
    """(this run's label, the other's): their data folders' names, the other's `label` where given; where
    the two would read alike, 'this run' and the other's folder with its parent."""
    this_label, other_label = Path(this).name or str(this), label or Path(other).name or str(other)
    if this_label == other_label:
        this_label = "this run"
        other_label = other_label if label else f"{Path(other).parent.name}/{Path(other).name}"
    return this_label, other_label


def other_run(campaign: Campaign, found: Sequence[tuple[rundir.RunFolder, dict[str, Any], str]]) -> OtherRun | None:
    """The `agree_with` run of `campaign` (None where it names none): its derived tables, rebuilt from its own
    raw data, and both runs' `SIGNALS`. A data folder without this campaign's run folders is an `InputError`."""
    spec = campaign.agree_with
    if spec is None:
        return None
    other = replace(campaign, data_dir=Path(spec.data))
    if not other.raw_dir().is_dir():
        raise InputError(other.raw_dir(), None, f"the run folders of campaign {campaign.name}, another run of it "
                         f"(named by {campaign.path}: {campaign.where('agree_with.data')} or --agree-with)",
                         "no such folder")
    this_label, label = run_labels(campaign.data_dir, other.data_dir, spec.label)
    signals = pd.concat([signal_rows(this_label, found), signal_rows(label, manifests(other))], ignore_index=True)
    return OtherRun(label=label, this_label=this_label, data_dir=other.data_dir, tables=derive.build(other),
                    signals=signals)


def see_also(entries: Sequence[str], reports_dir: Path, own: str = "") -> tuple[tuple[str, str], ...]:
    """Other pages to link: URLs as given; paths relative to the reports folder, where a glob
    (`h200-pytorch-*.md`) picks the newest match that is not a page of this campaign (`own`: its
    name); '' for a page not there yet."""
    out = []
    mine = re.compile(rf"{re.escape(own)}-\d{{4}}-\d{{2}}-\d{{2}}(T\d{{6}}Z)?(-\d+)?\.md") if own else None
    for entry in entries:
        if "://" in entry:
            out.append((entry, entry))
            continue
        matches = sorted(p for p in Path(reports_dir).glob(entry)
                         if p.is_file() and not (mine and mine.fullmatch(p.name)))
        out.append((entry, os.path.relpath(matches[-1], reports_dir).replace(os.sep, "/") if matches else ""))
    return tuple(out)


def pages_named(reports_dir: Path, name: str) -> dict[str, tuple[str, ...]]:
    """The pages `<name>-*.md` already in the reports folder, each with the derived folders it names
    (`DERIVED_NOTE`): the page then takes a name no other data folder's page has."""
    out = {}
    for page in sorted(Path(reports_dir).glob(f"{glob.escape(name)}-*.md")):
        if page.is_file():
            text = safeinput.read_text(page, "a results page (to tell which data folder it was drawn from)") or ""
            out[page.name] = tuple(_DERIVED_NAMED.findall(text))
    return out


def build_and_write(campaign: Campaign, data_dir: Path | None = None, reports_dir: Path | None = None
                    ) -> PageInputs:
    """`build`, written beside the derived tables in `data/derived/<campaign>/`."""
    inputs = build(campaign, data_dir, reports_dir)
    write(inputs, campaign.derived_dir(data_dir))
    return inputs


# ------------------------------------------------------------------------------------ write and read


def _rel(path: Path | str | None, data_dir: Path) -> str:
    """A path as written in these files: relative to the data folder ('' for none)."""
    return "" if path is None or str(path) == "" else os.path.relpath(path, data_dir).replace(os.sep, "/")


def _abs(text: Any, data_dir: Path) -> Path | None:
    return Path(os.path.normpath(data_dir / str(text))) if isinstance(text, str) and text else None


def write(inputs: PageInputs, out_dir: Path) -> list[Path]:
    """Write the tables (CSV) and `page.json` into `out_dir`, paths relative to the data folder."""
    out_dir, data = Path(out_dir), inputs.data_dir
    frames = {"folders.csv": inputs.folders.assign(path=inputs.folders["path"].map(lambda p: _rel(p, data))),
              "trace_files.csv": inputs.trace_files.assign(
                  path=inputs.trace_files["path"].map(lambda p: _rel(p, data))),
              "environment.csv": inputs.environment,
              "environment_facts.csv": inputs.facts.assign(file=inputs.facts["file"].map(lambda p: _rel(p, data)))}
    refs = [r.runs.assign(reference=r.label) for r in inputs.references if len(r.runs)]
    runs = pd.concat(refs, ignore_index=True) if refs else derive.empty("runs").assign(reference=None)
    frames[REFERENCE_RUNS] = runs[["reference", *[c for c in runs.columns if c != "reference"]]]
    written = []
    for name, frame in frames.items():
        written.append(atomic.write_atomic(out_dir / name, frame.to_csv(index=False, float_format=derive.FLOAT_FORMAT,
                                                                        lineterminator="\n")))
    doc = {"question": inputs.question, "question_from": inputs.question_from,
           "reports_dir": _rel(inputs.reports_dir, data),
           "environment_files": [{"label": label, "file": _rel(file, data)} for label, file in inputs.environment_files],
           "references": [{"label": r.label, "campaign": r.campaign, "backend": r.backend, "arm": r.arm,
                           "batches": list(r.batches), "ran_on": r.ran_on} for r in inputs.references],
           "notes": [{"text": text, "link": _rel(link, data) or None} for text, link in inputs.notes],
           "see_also": [{"entry": entry, "target": target} for entry, target in inputs.see_also],
           "pages": {name: list(named) for name, named in inputs.pages.items()},
           "agree_with": None}
    if inputs.agree is not None:
        agree = inputs.agree
        doc["agree_with"] = {"label": agree.label, "this_label": agree.this_label, "data": _rel(agree.data_dir, data)}
        written.append(atomic.write_atomic(out_dir / AGREE_SIGNALS, agree.signals.to_csv(
            index=False, float_format=derive.FLOAT_FORMAT, lineterminator="\n")))
        written += derive.write(agree.tables, out_dir / AGREE_TABLES)
    written.append(atomic.write_atomic(out_dir / PAGE, json.dumps(doc, indent=2, ensure_ascii=False) + "\n"))
    return written


def read(out_dir: Path) -> PageInputs:
    """The page's inputs back from a `data/derived/<campaign>/` folder that `write` wrote; a file missing
    or not in its form is an `InputError` (rebuild it with `perflib campaign report`)."""
    out_dir = Path(out_dir)
    data = Path(os.path.normpath(out_dir / ".." / ".."))  # data/derived/<campaign>/
    text = safeinput.read_text(out_dir / PAGE, "the page's inputs (JSON) written by perflib campaign report")
    try:
        doc = json.loads(text or "")
    except json.JSONDecodeError as exc:
        raise InputError(out_dir / PAGE, f"{exc.lineno}:{exc.colno}", "JSON written by perflib", exc.msg) from None
    frames = {name: _read_csv(out_dir / name, columns, dtype=str) for name, columns in TEXT_COLUMNS.items()}
    folders = frames["folders.csv"]
    folders = folders.assign(path=folders["path"].map(lambda p: _abs(p, data)),
                             end_ns=pd.array([int(v) if v else None for v in folders["end_ns"]], dtype="Int64"),
                             contended=folders["contended"] == "True")
    trace_files = frames["trace_files.csv"]
    trace_files = trace_files.assign(path=trace_files["path"].map(lambda p: _abs(p, data)),
                                     **{k: trace_files[k].astype(int) for k in ("batch", "context", "repeat")})
    facts = frames["environment_facts.csv"]
    runs = _read_csv(out_dir / REFERENCE_RUNS, ["reference"])
    refs = tuple(Reference(label=r["label"], campaign=r["campaign"], backend=r["backend"], arm=r["arm"],
                           batches=tuple(r["batches"]), ran_on=str(r.get("ran_on") or ""),
                           runs=runs[runs["reference"] == r["label"]].drop(columns="reference").reset_index(drop=True))
                 for r in doc["references"])
    return PageInputs(
        data_dir=data, reports_dir=_abs(doc["reports_dir"], data) or data, question=doc["question"],
        question_from=doc["question_from"], folders=folders, trace_files=trace_files,
        environment=frames["environment.csv"], facts=facts.assign(file=facts["file"].map(lambda p: _abs(p, data))),
        environment_files=tuple((e["label"], _abs(e["file"], data)) for e in doc["environment_files"]),
        references=refs, notes=tuple((n["text"], _abs(n["link"], data)) for n in doc["notes"]),
        see_also=tuple((s["entry"], s["target"]) for s in doc["see_also"]),
        pages={name: tuple(named) for name, named in doc["pages"].items()},
        agree=_read_other(out_dir, doc.get("agree_with"), data))


def _read_other(out_dir: Path, doc: dict[str, Any] | None, data: Path) -> OtherRun | None:
    """The `agree_with` run back from what `write` wrote (None where the page named none)."""
    if not doc:
        return None
    signals = _read_csv(out_dir / AGREE_SIGNALS, SIGNALS, dtype=str)
    numbers = {c: pd.to_numeric(signals[c].where(signals[c] != ""), errors="coerce")
               for c in ("foreign_cpu_share", "steal_share", "psi_some_share", "wait_per_cpu")}
    signals = signals.assign(**numbers, **{c: signals[c].astype(int) for c in ("batch", "context", "repeat")},
                             **{c: signals[c] == "True" for c in ("sampled", "contended")})
    return OtherRun(label=doc["label"], this_label=doc["this_label"], data_dir=_abs(doc["data"], data) or data,
                    tables=derive.read(out_dir / AGREE_TABLES), signals=signals)


def _read_csv(path: Path, columns: Sequence[str], dtype: Any = None) -> pd.DataFrame:
    """A table `write` wrote (text columns as written, '' for empty with `dtype=str`)."""
    if not path.is_file():
        raise InputError(path, None, "a table written by perflib campaign report", "no such file")
    frame = (pd.read_csv(path, dtype=dtype, keep_default_na=dtype is not str, **derive.ROUND_TRIP)
             if path.stat().st_size else _empty(columns))
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(path, "header", f"the columns {', '.join(columns)}", f"none named {', '.join(missing)}")
    return frame
