"""One run's attributed trace tables, kept under `data/derived/<campaign>/runs/` and keyed by what
they came from, so that each trace is read and attributed once.

The campaign runner attributes each traced run at the end of its arm (`perflib.derive.run_tables`),
and the page's tables (`perflib.derive.build`) take that result from here instead of reading the raw
trace again. A stored result stands only while its key does: the SHA-256 of the raw trace file (and
its name, which format detection reads, and the files a read of it reads besides it: a cut's host API
calls and markers, `traces.companion_files`), of the run folder's `manifest.json` and `requests.jsonl`
(the level's window and step count), the counters' decode steps, the class table, the window mode,
the step marker, perflib's version and `ATTRIBUTION_VERSION`. Anything else is recomputed from raw and
stored again; `data/derived/` is never committed, so a fresh clone rebuilds everything from raw.

A folder holds `attributed.json` (the key, the trace's source format, and the outcome: tables, a
window the capture does not cover, or an error) and one Parquet file per table, each carrying the
key's digest in its metadata: a file written for another key is never read as this one's.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from perflib import atomic, classes, rundir, traces
from perflib.version import __version__

if TYPE_CHECKING:
    import pandas as pd

ATTRIBUTION_VERSION = 9
"""Raised whenever attribution, its windows or this stored form change what a run's tables hold (2: step
phases and the host gaps split, `phases`, `host_gaps` and the step table's parts; 4: the decode steps'
kernel time by kernel and class, and their host-gap split; 5: with the decode window each run was attributed over, `window` and
`window_why`; 6: what the
work is, `work`, and a sampling profile's split of its samples; 7: a CPU backend's host-gap split, from its
operators or samples, and what each split was measured from, `basis`; 8: a staggered level's trace read over
its decode span's decode-only part, `window_prefill_share` where it is not; 9: a coalesced stream read over
the requests' span, its steps the server's counters where the trace marks none, its prefill the server's
`prompt_ms`)."""

TABLES = ("trace_runs", "classes", "kernels", "gaps", "steps", "phases", "host_gaps")
RECORD = "attributed.json"
_DIGEST_KEY = b"perflib.runcache.key"


@dataclass(frozen=True)
class Attributed:
    """What attributing one run's trace gave, before the run's key columns and its start's losses are
    added: its tables, or the coverage's description of a window the capture does not cover, or the
    error that stopped it. `source`: the trace's format (where it was read)."""

    source: str | None
    tables: dict[str, pd.DataFrame] | None = None
    uncovered: str = ""
    error: str = ""


def file_sha256(path: Path) -> str | None:
    """The file's SHA-256 (None where it is missing), kept per path, size and mtime within a process."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return _sha256(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def class_table_id(table: classes.ClassTable | str | None) -> str:
    """What the attribution's class table is, as a digest of its rules: a user's table, a built-in one
    by name, or (None) every built-in table, from which `auto` picks."""
    if isinstance(table, classes.ClassTable):
        rules: Any = [table.name, table.standalone, table.rules]
    elif isinstance(table, str):
        rules = [table, classes.load_builtin(table).rules]
    else:
        rules = ["auto", [classes.load_builtin(name).rules for name in classes.builtin_backends()]]
    return hashlib.sha256(repr([classes.MATCHING, rules]).encode()).hexdigest()  # and how names meet them


def key(trace: Path, run_dir: Path, decode_steps: float | None, class_table: classes.ClassTable | str | None, window: str,
        step_marker: str | None) -> dict[str, Any]:
    """Everything a run's attributed tables depend on."""
    steps = None
    if decode_steps is not None:
        try:
            steps = float(decode_steps)
        except (TypeError, ValueError):
            steps = str(decode_steps)
        if steps != steps:  # NaN: not a count
            steps = None
    return {"attribution_version": ATTRIBUTION_VERSION, "perflib": __version__, "trace_name": trace.name,
            "trace_sha256": file_sha256(trace),
            "companions": {p.name: file_sha256(p) for p in traces.companion_files(trace)},
            "manifest_sha256": file_sha256(run_dir / rundir.MANIFEST),
            "requests_sha256": file_sha256(run_dir / rundir.REQUESTS), "decode_steps": steps,
            "classes": class_table_id(class_table), "window": window, "step_marker": step_marker}


def _digest(key: Mapping[str, Any]) -> bytes:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest().encode()


def load(folder: Path, key: Mapping[str, Any]) -> Attributed | None:
    """The result stored in `folder` for `key`, or None where there is none, it is for another key, or
    any of its files cannot be read."""
    import pyarrow.parquet as pq  # late: 18 ms (measured) that `campaign validate` skips (it imports derive)

    try:
        record = json.loads((folder / RECORD).read_text())
        if not isinstance(record, dict) or record.get("key") != dict(key):
            return None
        digest = _digest(key)
        tables = None
        if record.get("tables") is not None:
            tables = {}
            for name in record["tables"]:
                table = pq.read_table(folder / f"{name}.parquet")
                if (table.schema.metadata or {}).get(_DIGEST_KEY) != digest:
                    return None
                tables[name] = table.to_pandas()
        return Attributed(record.get("source"), tables, str(record.get("uncovered") or ""),
                          str(record.get("error") or ""))
    except Exception:  # noqa: BLE001 - a stored result that cannot be read is recomputed from raw, whatever broke it
        return None


def save(folder: Path, key: Mapping[str, Any], result: Attributed) -> bool:
    """Store `result` under `key` in `folder` (tables first, the record last); False where the folder
    cannot be written (a read-only checkout: the tables are then recomputed each time)."""
    import pyarrow.parquet as pq  # late: see load

    digest = _digest(key)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, frame in (result.tables or {}).items():
            table = pa.Table.from_pandas(frame, preserve_index=False)
            table = table.replace_schema_metadata({**(table.schema.metadata or {}), _DIGEST_KEY: digest})
            with atomic.atomic_target(folder / f"{name}.parquet") as target:
                pq.write_table(table, target)
        record = {"key": dict(key), "source": result.source,
                  "tables": list(result.tables) if result.tables is not None else None,
                  "uncovered": result.uncovered, "error": result.error}
        atomic.write_atomic(folder / RECORD, json.dumps(record, indent=1, sort_keys=True) + "\n")
    except (OSError, pa.ArrowException):  # not writable, or a column Parquet cannot hold: recomputed next time
        return False
    return True
