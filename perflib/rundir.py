"""Run folders (docs/SCHEMA.md §2): their names, their files, the manifest, and where the trace is.

One run = one (campaign, arm, backend, batch, context, repeat), in
`<data>/raw/<campaign>/<arm>/<backend>/b<batch>_c<context>_r<repeat>/` (a sweep writes the last part
under its `--out`). The folder holds `manifest.json`, `requests.jsonl`, `warmup.jsonl`,
`metrics_before.txt`, `metrics_after.txt`, `gauges.jsonl` and, where perflib started the server,
`server.log`. The manifest is written at the start of the level with status `incomplete` and
rewritten (temp file + rename, never half-written) at its end, so a crash or a kill leaves a folder
that says it is incomplete and is re-measured on the next run.

This module is the only place that knows these names and this layout. It reads and writes files and
nothing else: no HTTP, no parsing of what the files hold beyond JSON. How a file is read safely is
`perflib.safeinput`'s, how one is written whole `perflib.atomic`'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflib.atomic import append_jsonl, naming, write_json_atomic
from perflib.errors import InputError, PerflibError
from perflib.safeinput import (
    check_fields,
    describe,
    read_json_object,
    read_jsonl_lines,
    read_text,
    value_problem,
)

SCHEMA_VERSION = 1

MANIFEST = "manifest.json"
REQUESTS = "requests.jsonl"
WARMUP = "warmup.jsonl"
"""Extension of SCHEMA §2: the level's unrecorded warm-up request, kept apart from `requests.jsonl`."""
GAUGES = "gauges.jsonl"
METRICS_BEFORE = "metrics_before.txt"
METRICS_AFTER = "metrics_after.txt"
SERVER_LOG = "server.log"
SERVER_RECORD = "server.json"
"""Beside the run folders of an (arm, backend): every start of its server (`perflib.campaign.servers`)."""
TRACE_NAMES = ("trace", "trace.json", "trace.json.gz", "trace.parquet")
"""Where a run folder holds its own trace when the manifest names none (a folder or a file)."""

COMPLETE = "complete"
INCOMPLETE = "incomplete"

RUN_NAME_RE = re.compile(r"^b(\d+)_c(\d+)_r(\d+)$")
"""`b<batch>_c<context>_r<repeat>`; attempt copies (`….incomplete-1`, `….contended-2`) do not match."""

SAFE_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")
SAFE_NAME = ("a name of letters, digits and _ . + - that does not start with . or - (at most 128 "
             "characters: it becomes a folder or file name)")
"""Campaign, arm and backend names and page dates become path parts: nothing that could climb out."""


# ------------------------------------------------------------------------------------------- names


def run_name(batch: int, context: int, repeat: int) -> str:
    """`b<batch>_c<context>_r<repeat>`: the one place a run folder's name is built."""
    return f"b{batch}_c{context}_r{repeat}"


def parse_run_name(name: str) -> tuple[int, int, int] | None:
    """(batch, context, repeat) of a run folder's name, or None for any other name."""
    match = RUN_NAME_RE.match(name)
    return None if match is None else (int(match[1]), int(match[2]), int(match[3]))


def run_dir(root: Path | str, batch: int, context: int, repeat: int) -> Path:
    """The run folder of one level and repeat below a sweep's output folder."""
    return Path(root) / run_name(batch, context, repeat)


def name_problem(name: object) -> str | None:
    """None for a name that is safe as one path part (`SAFE_NAME`), else what was found."""
    if not isinstance(name, str):
        return f"a {type(name).__name__}"
    if SAFE_NAME_RE.fullmatch(name) is None:
        return repr(name[:60])
    return None


def safe_name(name: str, what: str) -> str:
    """`name` when it is safe as a path part, else a `PerflibError` saying which name and why."""
    problem = name_problem(name)
    if problem is not None:
        raise PerflibError(f"{what} name: expected {SAFE_NAME}, found {problem}")
    return name


def campaign_root(data_dir: Path | str, campaign: str) -> Path:
    """`<data>/raw/<campaign>`: the folder that holds every arm of a campaign."""
    return Path(data_dir) / "raw" / safe_name(campaign, "campaign")


def backend_dir(data_dir: Path | str, campaign: str, arm: str, backend: str) -> Path:
    """`<data>/raw/<campaign>/<arm>/<backend>`: one server's run folders and its log."""
    return campaign_root(data_dir, campaign) / safe_name(arm, "arm") / safe_name(backend, "backend")


def campaign_run_dir(data_dir: Path | str, campaign: str, arm: str, backend: str, batch: int, context: int,
                     repeat: int) -> Path:
    """The run folder of one run of a campaign."""
    return run_dir(backend_dir(data_dir, campaign, arm, backend), batch, context, repeat)


@dataclass(frozen=True)
class RunFolder:
    """A run folder found on disk: its arm and backend (from the path) and the folder."""

    arm: str
    backend: str
    path: Path


def list_runs(root: Path | str) -> list[RunFolder]:
    """Every run folder below `<root>/<arm>/<backend>/`, sorted by arm, backend, batch, context and
    repeat; attempt copies moved aside are left out."""
    root = Path(root)
    found: list[RunFolder] = []
    if not root.is_dir():
        return found
    for arm_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for backend_path in sorted(p for p in arm_dir.iterdir() if p.is_dir()):
            runs = [(parse_run_name(p.name), p) for p in backend_path.iterdir() if p.is_dir()]
            for _, path in sorted((key, p) for key, p in runs if key is not None):
                found.append(RunFolder(arm_dir.name, backend_path.name, path))
    return found


# ---------------------------------------------------------------------------------------- manifest


MANIFEST_FIELDS: dict[str, str] = {
    "schema": "int", "campaign": "str?", "arm": "str?", "backend": "str?", "batch": "positive",
    "context": "positive", "decode_tokens": "positive", "repeat": "positive", "base_url": "str?",
    "endpoint": "str?", "server": "dict?", "tools": "dict?", "clocks": "dict?", "prompt_tokens": "dict?",
    "status": "str", "errors": "list[str]", "metrics": "dict?", "trace_path": "str?", "warmup_ok": "bool?",
    "gauge_samples": "count?", "moved_aside": "str?", "warmup_from": "str?", "metrics_before_from": "str?",
}
"""Manifest keys (docs/SCHEMA.md §2) and their kinds, checked where present when a manifest is read."""

METRICS_INFO_FIELDS: dict[str, str] = {
    "available": "bool?", "dialect": "str?", "error": "str?", "process_start_before": "number?",
    "process_start_after": "number?",
}
"""The manifest's `metrics` object: what the level's scrapes said."""


def write_manifest(run: Path | str, manifest: Mapping[str, Any]) -> Path:
    """Atomically (re)write `manifest.json`; `schema` is set to `SCHEMA_VERSION`."""
    return write_json_atomic(Path(run) / MANIFEST, {"schema": SCHEMA_VERSION, **manifest})


def read_manifest(run: Path | str, missing_ok: bool = False) -> dict[str, Any] | None:
    """The manifest of a run folder (or of a manifest file given as such). A missing one is None with
    `missing_ok`, else an `InputError`; one that is not a JSON object, or whose known keys
    (`MANIFEST_FIELDS`) hold the wrong type, is always an `InputError` naming the file and field."""
    path = Path(run)
    if path.is_dir() or not path.suffix:
        path = path / MANIFEST
    text = read_text(path, "a run manifest (JSON)", missing_ok=missing_ok)
    if text is None:
        return None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"{exc.lineno}:{exc.colno}", "JSON", exc.msg) from None
    except RecursionError:
        raise InputError(path, None, "JSON nested at most a few hundred levels deep", "deeper nesting") from None
    if not isinstance(obj, dict):
        raise InputError(path, None, "a JSON object", type(obj).__name__)
    check_fields(obj, MANIFEST_FIELDS, path, "field ")
    metrics = obj.get("metrics")
    if isinstance(metrics, dict):
        check_fields(metrics, METRICS_INFO_FIELDS, path, "field metrics.")
    _check_clocks(obj.get("clocks"), path)
    return obj


def _check_clocks(clocks: Any, path: Path) -> None:
    """`clocks.start` and `clocks.end` are null or objects whose readings are integers of ns in int64
    (`perflib.clocks.now_clocks`), at least 0: a string, NaN (read as a float), a fraction or 1e30 is an `InputError` naming the field,
    never a ValueError or an overflow where a window is computed from it."""
    if not isinstance(clocks, dict):
        return
    for which in ("start", "end"):
        reading = clocks.get(which)
        if reading is None:
            continue
        if not isinstance(reading, dict):
            raise InputError(path, f"field clocks.{which}", "a JSON object of clock readings or null",
                             describe(reading))
        for name, value in reading.items():
            if value_problem(value, "count") is not None:  # 0 to 2^63 - 1
                raise InputError(path, f"field clocks.{which}.{name}",
                                 "an integer of nanoseconds from 0 to 2^63 - 1 (int64)", describe(value))


def is_complete(run: Path | str) -> bool:
    """True only if the folder's manifest exists, parses and says `status: complete`."""
    try:
        manifest = read_manifest(run, missing_ok=True)
    except InputError:
        return False
    return manifest is not None and manifest.get("status") == COMPLETE


def mark_incomplete(run: Path | str, keys: Mapping[str, Any], error: str) -> None:
    """Record a failure in the run's manifest without losing what the run wrote before it.

    `keys` (campaign, arm, backend, batch, context, decode_tokens, repeat) start a manifest where the
    run never wrote one; an unreadable manifest is kept beside the new one as `manifest.json.bad`.
    """
    run = Path(run)
    run.mkdir(parents=True, exist_ok=True)
    try:
        manifest = read_manifest(run, missing_ok=True)
    except InputError:
        (run / MANIFEST).replace(run / f"{MANIFEST}.bad")
        manifest = None
    manifest = manifest if manifest is not None else {"schema": SCHEMA_VERSION, **keys}
    manifest["status"] = INCOMPLETE
    errors = manifest.get("errors")
    manifest["errors"] = [*(errors if isinstance(errors, list) else []), error]
    write_json_atomic(run / MANIFEST, manifest)


def move_aside(run: Path | str, why: str = INCOMPLETE) -> Path:
    """Rename a run folder to `<name>.<why>-<n>` (first free n ≥ 1) and return the new path: an
    incomplete folder before it is measured again, a contended attempt before the next one."""
    run = Path(run)
    n = 1
    while True:
        target = run.with_name(f"{run.name}.{why}-{n}")
        if not target.exists():
            run.rename(target)
            return target
        n += 1


def find_trace(run: Path | str, manifest: Mapping[str, Any] | None = None) -> Path | None:
    """The trace a run folder names or holds: the manifest's `trace_path` (relative to the folder),
    else a `trace/` folder or a `trace.json(.gz)` / `trace.parquet` file in it; None where neither.

    A trace kept elsewhere (a campaign's `profiler.output` pattern) is the campaign's to find.
    """
    run = Path(run)
    if manifest is None:
        try:
            manifest = read_manifest(run, missing_ok=True) or {}
        except InputError:
            manifest = {}
    named = manifest.get("trace_path")
    if isinstance(named, str) and named:
        path = Path(named)
        return path if path.is_absolute() else run / path
    for name in TRACE_NAMES:
        if (run / name).exists():
            return run / name
    return None


# ------------------------------------------------------------------------------------- server.json


def server_starts(path: Path | str) -> list[dict[str, Any]]:
    """The `starts` of a `server.json` (every start of an (arm, backend) server), [] where it has none."""
    starts = read_json_object(path).get("starts")
    return [s for s in starts if isinstance(s, dict)] if isinstance(starts, list) else []


def server_start_of(run: Path | str) -> dict[str, Any] | None:
    """The start of the server that served a campaign run folder: the last entry of the `server.json`
    beside it whose `runs` name this run (`<arm>/<backend>/<folder>`); None where there is no record, or
    none names the run (a server perflib did not start)."""
    run = Path(run)
    label = f"{run.parent.parent.name}/{run.parent.name}/{run.name}"
    mine = [s for s in server_starts(run.parent / SERVER_RECORD) if label in (s.get("runs") or [])]
    return mine[-1] if mine else None


# ----------------------------------------------------------------------------- requests and gauges


REQUEST_FIELDS: dict[str, str] = {
    "request_id": "str?", "batch": "positive?", "context": "positive?", "repeat": "positive?",
    "prompt_tokens": "count?", "prompt_tokens_method": "str?", "max_tokens": "count?", "start_ns": "int?",
    "first_token_ns": "int?", "last_token_ns": "int?", "end_ns": "int?", "start_unix_ns": "int?",
    "ttft_ms": "number?", "e2e_ms": "number?", "itl_ms": "list[number]?", "chunk_ns": "list[int]?",
    "completion_tokens": "count?", "decode_tok_s": "number?", "status": "int?", "ok": "bool?", "error": "str?",
    "timings": "dict?", "attempt": "count?", "usage_prompt_tokens": "count?",
}
"""Request record keys (docs/SCHEMA.md §2, `perflib.load.RequestRecord`) and their kinds."""

TIMINGS_FIELDS: dict[str, str] = {"predicted_n": "count?", "predicted_ms": "number?", "prompt_n": "count?",
                                  "prompt_ms": "number?"}
"""The parts of a server's `timings` object that perflib computes with."""


def check_request(rec: Mapping[str, Any], path: Path | str, line: int) -> None:
    """A request record's kinds, and for one that reached a token the order of its times."""
    where = f"line {line}, field "
    check_fields(rec, REQUEST_FIELDS, path, where)
    if isinstance(rec.get("timings"), dict):
        check_fields(rec["timings"], TIMINGS_FIELDS, path, where + "timings.")
    if rec.get("first_token_ns") is None and not rec.get("ok"):
        return
    for name in ("start_ns", "first_token_ns", "last_token_ns"):
        if rec.get(name) is None:
            raise InputError(path, where + name, "an integer (the request has a token)", "null or nothing")
    if not rec["start_ns"] <= rec["first_token_ns"] <= rec["last_token_ns"]:
        raise InputError(path, where + "first_token_ns", "start_ns <= first_token_ns <= last_token_ns",
                         f"{rec['start_ns']}, {rec['first_token_ns']}, {rec['last_token_ns']}")
    chunks = rec.get("chunk_ns") or []
    if any(b < a for a, b in zip(chunks, chunks[1:], strict=False)):
        raise InputError(path, where + "chunk_ns", "times in order (non-decreasing)", "a time that goes back")


def read_requests(path: Path | str) -> list[dict[str, Any]]:
    """The request records of `requests.jsonl` (or `warmup.jsonl`), each checked by `check_request`."""
    out = []
    for line, rec in read_jsonl_lines(path):
        check_request(rec, path, line)
        out.append(rec)
    return out


def read_gauges(path: Path | str) -> list[dict[str, Any]]:
    """The gauge samples of `gauges.jsonl`: `gauges` is an object of numbers (or null for a failed scrape)."""
    out = []
    for line, sample in read_jsonl_lines(path):
        check_fields(sample, {"t_ns": "int?", "unix_ns": "int?", "gauges": "dict?", "error": "str?"}, path,
                     f"line {line}, field ")
        gauges = sample.get("gauges") or {}
        check_fields(gauges, dict.fromkeys(gauges, "anynumber?"), path, f"line {line}, field gauges.")
        out.append(sample)
    return out


class RunWriter:
    """A `perflib.load.LevelSink` that writes a level's outputs into its run folder as they come."""

    def __init__(self, run: Path | str):
        self.run_dir = Path(run)
        self.run_dir.mkdir(parents=True, exist_ok=True)

    def request(self, record: Any) -> None:
        append_jsonl(self.run_dir / REQUESTS, record.to_dict())

    def warmup(self, record: Any) -> None:
        append_jsonl(self.run_dir / WARMUP, record.to_dict())

    def gauges(self, sample: dict[str, Any]) -> None:
        append_jsonl(self.run_dir / GAUGES, sample)

    def metrics(self, which: str, text: str) -> None:
        name = METRICS_BEFORE if which == "before" else METRICS_AFTER
        with naming(self.run_dir / name):
            (self.run_dir / name).write_text(text)
