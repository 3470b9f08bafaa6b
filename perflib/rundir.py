"""Run folders (docs/SCHEMA.md §2): their names, their files, the manifest, and where the trace is.

One run = one (campaign, arm, backend, batch, context, repeat), in
`<data>/raw/<campaign>/<arm>/<backend>/b<batch>_c<context>_r<repeat>/` (a sweep writes the last part
under its `--out`). The folder holds `manifest.json`, `requests.jsonl`, `warmup.jsonl`,
`metrics_before.txt`, `metrics_after.txt`, `gauges.jsonl` and, where perflib started the server,
`server.log`. The manifest is written at the start of the level with status `incomplete` and
rewritten (temp file + rename, never half-written) at its end, so a crash or a kill leaves a folder
that says it is incomplete and is re-measured on the next run.

This module is the only place that knows these names and this layout. It reads and writes files and
nothing else: no HTTP, no parsing of what the files hold beyond JSON.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflib.errors import InputError

SCHEMA_VERSION = 1

MANIFEST = "manifest.json"
REQUESTS = "requests.jsonl"
WARMUP = "warmup.jsonl"
"""Extension of SCHEMA §2: the level's unrecorded warm-up request, kept apart from `requests.jsonl`."""
GAUGES = "gauges.jsonl"
METRICS_BEFORE = "metrics_before.txt"
METRICS_AFTER = "metrics_after.txt"
SERVER_LOG = "server.log"
TRACE_NAMES = ("trace", "trace.json", "trace.json.gz", "trace.parquet")
"""Where a run folder holds its own trace when the manifest names none (a folder or a file)."""

COMPLETE = "complete"
INCOMPLETE = "incomplete"

RUN_NAME_RE = re.compile(r"^b(\d+)_c(\d+)_r(\d+)$")
"""`b<batch>_c<context>_r<repeat>`; attempt copies (`….incomplete-1`, `….contended-2`) do not match."""


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


def campaign_root(data_dir: Path | str, campaign: str) -> Path:
    """`<data>/raw/<campaign>`: the folder that holds every arm of a campaign."""
    return Path(data_dir) / "raw" / campaign


def backend_dir(data_dir: Path | str, campaign: str, arm: str, backend: str) -> Path:
    """`<data>/raw/<campaign>/<arm>/<backend>`: one server's run folders and its log."""
    return campaign_root(data_dir, campaign) / arm / backend


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


def write_json_atomic(path: Path | str, obj: Any) -> Path:
    """Write JSON to a temp file beside `path`, fsync it, then rename it over `path`."""
    return write_atomic(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def write_atomic(path: Path | str, data: str | bytes) -> Path:
    """Write text or bytes to a temp file beside `path`, fsync it, then rename it over `path`: a
    reader (another host's report, a crash) sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes it 0600; a run folder is meant to be shared
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_manifest(run: Path | str, manifest: Mapping[str, Any]) -> Path:
    """Atomically (re)write `manifest.json`; `schema` is set to `SCHEMA_VERSION`."""
    return write_json_atomic(Path(run) / MANIFEST, {"schema": SCHEMA_VERSION, **manifest})


def read_manifest(run: Path | str, missing_ok: bool = False) -> dict[str, Any] | None:
    """The manifest of a run folder (or of a manifest file given as such). A missing one is None with
    `missing_ok`, else an `InputError`; one that is not a JSON object is always an `InputError`
    naming the file."""
    path = Path(run)
    if path.is_dir() or not path.suffix:
        path = path / MANIFEST
    try:
        text = path.read_text()
    except FileNotFoundError:
        if missing_ok:
            return None
        raise InputError(path, None, "a run manifest (the run folder was never started)", "no file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, None, "a readable UTF-8 run manifest", f"{type(exc).__name__}: {exc}") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"{exc.lineno}:{exc.colno}", "JSON", exc.msg) from None
    if not isinstance(obj, dict):
        raise InputError(path, None, "a JSON object", type(obj).__name__)
    return obj


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


# ------------------------------------------------------------------------------------- JSON Lines


def append_jsonl(path: Path | str, obj: Mapping[str, Any]) -> None:
    """Append one JSON object as one line and flush it, so a crash keeps every finished line."""
    line = json.dumps(obj, separators=(",", ":"), default=str)
    with open(path, "a") as handle:
        handle.write(line + "\n")
        handle.flush()


def read_jsonl(path: Path | str) -> list[dict[str, Any]]:
    """Objects of a JSON Lines file; a missing file reads as empty.

    A last line cut off by a crash (no newline, not JSON) is dropped; any other bad line is an
    `InputError` naming the file and the line.
    """
    path = Path(path)
    if not path.exists():
        return []
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, None, "a readable UTF-8 JSON Lines file", f"{type(exc).__name__}: {exc}") from None
    lines = text.split("\n")
    out: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines) and not text.endswith("\n"):
                break  # cut off mid-write by a crash
            raise InputError(path, f"{number}:{exc.colno}", "one JSON object per line", exc.msg) from None
        if not isinstance(obj, dict):
            raise InputError(path, str(number), "a JSON object", type(obj).__name__)
        out.append(obj)
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
        (self.run_dir / name).write_text(text)
