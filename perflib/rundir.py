"""Run folders (docs/SCHEMA.md §2): paths, the manifest, JSON Lines, and the level's sink.

A run folder holds one (batch, context, repeat) level as captured: `manifest.json`,
`requests.jsonl`, `warmup.jsonl`, `metrics_before.txt`, `metrics_after.txt`, `gauges.jsonl` and,
where perflib started the server, `server.log`. The manifest is written at the start of the level
with status `incomplete` and rewritten (temp file + rename, never half-written) at its end, so a
crash or a kill leaves a folder that says it is incomplete and is re-measured on the next run.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
from collections.abc import Mapping
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

COMPLETE = "complete"
INCOMPLETE = "incomplete"


def run_name(batch: int, context: int, repeat: int) -> str:
    """`b<batch>_c<context>_r<repeat>`."""
    return f"b{batch}_c{context}_r{repeat}"


def run_dir_for(out_dir: Path | str, batch: int, context: int, repeat: int) -> Path:
    return Path(out_dir) / run_name(batch, context, repeat)


def write_json_atomic(path: Path, obj: Any) -> Path:
    """Write JSON to a temp file beside `path`, fsync it, then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes it 0600; a run folder is meant to be shared
        with os.fdopen(fd, "w") as handle:
            json.dump(obj, handle, indent=2, sort_keys=False, default=str)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_manifest(run_dir: Path | str, manifest: Mapping[str, Any]) -> Path:
    """Atomically (re)write `manifest.json`; `schema` is set to `SCHEMA_VERSION`."""
    return write_json_atomic(Path(run_dir) / MANIFEST, {"schema": SCHEMA_VERSION, **manifest})


def read_manifest(run_dir: Path | str) -> dict[str, Any]:
    """The run's manifest; a missing or unreadable one is an `InputError` naming the file."""
    path = Path(run_dir) / MANIFEST
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(path, None, "a run manifest (the run folder was never started)", "no file") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"{exc.lineno}:{exc.colno}", "JSON", exc.msg) from None
    if not isinstance(obj, dict):
        raise InputError(path, None, "a JSON object", type(obj).__name__)
    return obj


def is_complete(run_dir: Path | str) -> bool:
    """True only if the folder's manifest exists, parses and says `status: complete`."""
    try:
        return read_manifest(run_dir).get("status") == COMPLETE
    except InputError:
        return False


def move_aside(run_dir: Path | str) -> Path:
    """Rename an incomplete run folder to `<name>.incomplete-<n>` (first free n ≥ 1); returns it."""
    run_dir = Path(run_dir)
    n = 1
    while True:
        target = run_dir.with_name(f"{run_dir.name}.incomplete-{n}")
        if not target.exists():
            run_dir.rename(target)
            return target
        n += 1


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
    text = path.read_text()
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


def tool_versions() -> dict[str, str]:
    """Versions of perflib, Python, the event loop, httpx and the platform, for the manifest."""
    from importlib import metadata

    from perflib import __version__
    from perflib.load import event_loop_name

    tools = {"perflib": __version__, "python": sys.version.split()[0], "platform": platform.platform(),
             "event_loop": event_loop_name()}
    for dist in ("httpx", "httpcore", "h11"):
        try:
            tools[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            tools[dist] = "not installed"
    return tools


def server_kind(props: Mapping[str, Any] | None, models: Mapping[str, Any] | None) -> str:
    """`llama.cpp` when `/props` looks like llama-server's, else the `owned_by` of `/v1/models`."""
    if props and ("default_generation_settings" in props or "build_info" in props):
        return "llama.cpp"
    data = (models or {}).get("data") or []
    if data and isinstance(data[0], dict) and data[0].get("owned_by"):
        return str(data[0]["owned_by"])
    return "unknown"


def json_object(resp: Any) -> dict[str, Any] | None:
    """The JSON object of a 200 answer (an httpx response), or None for any other answer."""
    if resp.status_code != 200:
        return None
    try:
        obj = resp.json()
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def server_identity(base_url: str, *, flags: list[str] | None = None, version: str | None = None,
                    timeout: float = 10.0) -> dict[str, Any]:
    """`{kind, version, flags, model, props, models}` from `GET /props` and `GET /v1/models`.

    `flags` are the command-line flags perflib used when it started the server (None when it
    did not). Raises `httpx.ConnectError` when nothing listens at `base_url`; an endpoint the
    server lacks reads as None.
    """
    import httpx

    def get(client: httpx.Client, path: str) -> dict[str, Any] | None:
        return json_object(client.get(base_url.rstrip("/") + path, headers={"Connection": "close"}))

    with httpx.Client(timeout=timeout, trust_env=False,
                      limits=httpx.Limits(max_keepalive_connections=0)) as client:
        props = get(client, "/props")
        models = get(client, "/v1/models")
    data = (models or {}).get("data") or []
    model = data[0].get("id") if data and isinstance(data[0], dict) else None
    if model is None and props:
        model = props.get("model_alias") or props.get("model_path")
    if version is None and props:
        version = props.get("build_info")
    return {"kind": server_kind(props, models), "version": version, "flags": flags, "model": model,
            "props": props, "models": models}


class RunWriter:
    """A `perflib.load.LevelSink` that writes a level's outputs into its run folder as they come."""

    def __init__(self, run_dir: Path | str):
        self.run_dir = Path(run_dir)
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
