"""Nsight Systems SQLite export (`nsys export --type sqlite`; FORMATS.md §2.1).

Kernels from `CUPTI_ACTIVITY_KIND_KERNEL` (name via `StringIds`: `demangledName`, else
`shortName`; very old exports have a text `name` column), copies and sets from
`CUPTI_ACTIVITY_KIND_MEMCPY` / `_MEMSET`, API calls from `CUPTI_ACTIVITY_KIND_RUNTIME`, markers
from `NVTX_EVENTS` (text, or `textId` into `StringIds`; a mark has no end). Empty tables are absent
in real exports, so a missing table is an empty one. Copies are named by their `copyKind` through
`ENUM_CUDA_MEMCPY_OPER`, or, in exports without that table (2022.2), through CUPTI's own numbering
of `CUpti_ActivityMemcpyKind`. The export's metadata is `META_DATA_EXPORT`, called
`EXPORT_META_DATA` in 2022 exports; both are read.

Clock: an export's times are ns since the session start, and `TARGET_INFO_SESSION_START_TIME.utcEpochNs`
is that start in Unix ns (`utcEpochNs + start`, as public analysis scripts align nsys exports). Checked
on a real export (Nsight Systems 2022.2.1, hpcgroup/pipit's saxpy; tests/traces/test_external.py):
every time lies within [0, `ANALYSIS_DETAILS.duration`], the session's length; `utcEpochNs` is the
instant its `utcTime` text names; and session start + the last time falls before `EXPORT_TIME_UTC`.
So the tables are shifted to Unix ns, and `clock` is `realtime`, only where the times are
session-relative: none outside [0, duration] where `ANALYSIS_DETAILS` gives one, and in any case the
first within an hour and none past ~13 days, which an absolute clock reading is not (below an hour of
uptime aside); and only for a `utcEpochNs` after 2000 that keeps every time int64-safe. Otherwise the
times stay as exported and `clock` is `unknown`. `meta` says which was done and why.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perflib.errors import InputError
from perflib.traces import schema
from perflib.traces.codebook import Names
from perflib.traces.files import said
from perflib.traces.sqlite import ERRORS, columns, fetch, objects, reading
from perflib.traces.trace import ReadMode, Trace

RELATIVE_FIRST_MAX_NS = 3_600_000_000_000
"""Session-relative times start near 0: the first event within an hour of the session start (a
`--delay` capture included). An absolute monotonic, boot-time or Unix reading is that small only on
a machine up for less than an hour."""
RELATIVE_MAX_NS = 1 << 50
"""... and no time in them reaches ~13 days."""
EPOCH_MIN_NS = 946_684_800_000_000_000
"""2000-01-01 in Unix ns: a session start before it is not a session start."""
INT64_MAX = (1 << 63) - 1
MEMCPY_KINDS = {0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array", 4: "Array-to-Host",
                5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array", 8: "Device-to-Device",
                9: "Host-to-Host", 10: "Peer-to-Peer"}
"""CUPTI's `CUpti_ActivityMemcpyKind`, labelled as `ENUM_CUDA_MEMCPY_OPER` labels them."""
EXPORT_META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")
"""The export's own metadata table: its name in recent exports, and in 2022 ones."""


SOURCE = "nsys-sqlite"
NVTX_KINDS = (34, 59, 60)  # mark, push/pop range, start/end range


def _pid_tid(global_tid: list) -> tuple[np.ndarray, np.ndarray]:
    g = np.asarray([v if isinstance(v, int) else -1 for v in global_tid], dtype=np.int64)
    known = g >= 0
    return np.where(known, (g >> 24) & 0xFFFFFF, -1), np.where(known, g & 0xFFFFFF, -1)


def _fetch(con: sqlite3.Connection, path: Path, sql: str, where: str) -> list[tuple]:
    return fetch(con, path, sql, where, "a table as in an nsys SQLite export (FORMATS.md §2.1)")


def _times(rows: list[tuple], path: Path, table: str, mark_ok: bool = False) -> tuple[np.ndarray, np.ndarray]:
    starts, ends = [], []
    for i, r in enumerate(rows):
        s, e = r[0], r[1]
        if not isinstance(s, int):
            raise InputError(
                path, f"table {table}, row {i + 1}, column start", "an integer ns timestamp", repr(s)
            )
        if mark_ok and (e is None or e == -1):
            e = s
        if not isinstance(e, int):
            raise InputError(
                path, f"table {table}, row {i + 1}, column end", "an integer ns timestamp", repr(e)
            )
        starts.append(s)
        ends.append(e)
    return np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)


def _ints(values: list) -> np.ndarray:
    return np.asarray([v if isinstance(v, int) else -1 for v in values], dtype=np.int64)


def _activity_frame(rows: list[tuple], path: Path, table: str, kind: str) -> pd.DataFrame:
    """Dispatch rows `(start, end, deviceId, streamId, correlationId, name)` of one CUPTI activity table."""
    s, e = _times(rows, path, table)
    return schema.dispatch_frame(
        {
            "kernel": ["" if r[5] is None else str(r[5]) for r in rows],
            "start_ns": s,
            "end_ns": e,
            "device": _ints([r[2] for r in rows]),
            "stream": _ints([r[3] for r in rows]),
            "correlation_id": _ints([r[4] for r in rows]),
            "kind": kind,
        },
        SOURCE,
        path,
        lambda i: f"table {table}, row {i + 1}",
    )


LEAN_CHUNK = 1 << 16
"""Rows fetched at a time by the lean read."""


def _lean_frame(con: sqlite3.Connection, path: Path, sql: str, table: str, kind: str,
                name: Any = None, ids: bool = False) -> pd.DataFrame:
    """Rows `(start, end, deviceId, streamId, correlationId, name, ...)` of one activity table as a lean
    dispatch table (`schema.LEAN_DISPATCH_COLUMNS`; `ids`: with device and stream), fetched `LEAN_CHUNK`
    rows at a time, checked as `_activity_frame` checks them. `name(row)` gives a row's name where
    column 5 is not it."""
    names = Names()
    codes, starts, ends, corrs, devices, streams = [], [], [], [], [], []
    done = 0
    try:
        cursor = con.execute(sql)
        while rows := cursor.fetchmany(LEAN_CHUNK):
            s, e = _times_at(rows, path, table, done)
            starts.append(s)
            ends.append(e)
            corrs.append(_ints([r[4] for r in rows]))
            if ids:
                devices.append(_ints([r[2] for r in rows]))
                streams.append(_ints([r[3] for r in rows]))
            texts = (("" if r[5] is None else str(r[5])) for r in rows) if name is None else map(name, rows)
            codes.append(names.encode(list(texts)))
            done += len(rows)
    except ERRORS as exc:
        raise InputError(path, f"table {table}", "a table as in an nsys SQLite export (FORMATS.md §2.1)",
                         said(exc)) from exc

    def joined(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

    id_cols = {"device": joined(devices, np.int64), "stream": joined(streams, np.int64)} if ids else None
    return schema.lean_dispatch_frame(joined(codes, np.int32), names.names, joined(starts, np.int64),
                                      joined(ends, np.int64), joined(corrs, np.int64), kind, SOURCE, path,
                                      lambda i: f"table {table}, row {i + 1}", ids=id_cols)


def _times_at(rows: list[tuple], path: Path, table: str, offset: int) -> tuple[np.ndarray, np.ndarray]:
    """`_times` of rows that come `offset` rows into the table: the error names the table's row."""
    try:
        return _times(rows, path, table)
    except InputError as exc:
        where = re.sub(r"row (\d+)", lambda m: f"row {int(m.group(1)) + offset}", str(exc.where or ""), count=1)
        raise InputError(path, where, exc.expected, exc.found) from None


KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"


def _kernels(con: sqlite3.Connection, path: Path, names: set[str],
             lean: bool = False, ids: bool = False) -> tuple[pd.DataFrame | None, str | None]:
    """Kernels, named through `StringIds` (demangledName, else shortName; a very old export has text)."""
    if KERNELS not in names:
        return None, None
    cols = columns(con, KERNELS, path)
    name_col = next((c for c in ("demangledName", "shortName", "mangledName", "name") if c in cols), None)
    if name_col is None:
        raise InputError(path, f"table {KERNELS}", "a demangledName, shortName or name column", ", ".join(cols))
    strings = "StringIds" in names
    name_expr = f"COALESCE(s.value, k.{name_col})" if strings else f"k.{name_col}"
    join = f"LEFT JOIN StringIds s ON s.id = k.{name_col}" if strings else ""
    sql = f"SELECT k.start, k.end, k.deviceId, k.streamId, k.correlationId, {name_expr} FROM {KERNELS} k {join}"
    if lean:
        return _lean_frame(con, path, sql, KERNELS, "kernel", ids=ids), name_col
    rows = _fetch(con, path, sql, f"table {KERNELS}")
    return _activity_frame(rows, path, KERNELS, "kernel"), name_col


def _copies_and_sets(con: sqlite3.Connection, path: Path, names: set[str], lean: bool = False,
                     ids: bool = False) -> list[pd.DataFrame]:
    """Memcpy rows named by their copy kind (the export's enum table, else CUPTI's numbering) and memset rows."""
    frames = []
    for table, kind in (("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"), ("CUPTI_ACTIVITY_KIND_MEMSET", "memset")):
        if table not in names:
            continue
        if kind == "memcpy":
            enum = "ENUM_CUDA_MEMCPY_OPER" in names
            label = "o.label" if enum else "NULL"
            join = "LEFT JOIN ENUM_CUDA_MEMCPY_OPER o ON o.id = t.copyKind" if enum else ""
            sql = (f"SELECT t.start, t.end, t.deviceId, t.streamId, t.correlationId, {label}, t.copyKind "
                   f"FROM {table} t {join}")
            if lean:
                frames.append(_lean_frame(con, path, sql, table, kind, lambda r: _copy_name(r[5], r[6]), ids))
                continue
            rows = _fetch(con, path, sql, f"table {table}")
            rows = [(*r[:5], _copy_name(r[5], r[6])) for r in rows]
        else:
            sql = f"SELECT t.start, t.end, t.deviceId, t.streamId, t.correlationId, 'Memset' FROM {table} t"
            if lean:
                frames.append(_lean_frame(con, path, sql, table, kind, ids=ids))
                continue
            rows = _fetch(con, path, sql, f"table {table}")
        frames.append(_activity_frame(rows, path, table, kind))
    return frames


def _copy_name(label: Any, copy_kind: Any) -> str:
    """`Memcpy <label>`: the enum table's label, else CUPTI's for the copy kind, else plain `Memcpy`."""
    if label is None and isinstance(copy_kind, int):
        label = MEMCPY_KINDS.get(copy_kind)
    return f"Memcpy {label}" if label is not None else "Memcpy"


def _runtime(con: sqlite3.Connection, path: Path, names: set[str]) -> pd.DataFrame:
    """CUDA runtime API calls."""
    if RUNTIME not in names:
        return schema.empty_api(SOURCE)
    strings = "StringIds" in names
    name_expr = "COALESCE(s.value, r.nameId)" if strings else "r.nameId"
    join = "LEFT JOIN StringIds s ON s.id = r.nameId" if strings else ""
    rows = _fetch(con, path, f"SELECT r.start, r.end, r.globalTid, r.correlationId, {name_expr} "
                             f"FROM {RUNTIME} r {join}", f"table {RUNTIME}")
    s, e = _times(rows, path, RUNTIME)
    pid, tid = _pid_tid([r[2] for r in rows])
    return schema.api_frame({"name": ["" if r[4] is None else str(r[4]) for r in rows], "start_ns": s, "end_ns": e, "pid": pid, "tid": tid,
                             "correlation_id": _ints([r[3] for r in rows]), "domain": "cuda_runtime"},
                            SOURCE, path, lambda i: f"table {RUNTIME}, row {i + 1}")


def _nvtx(con: sqlite3.Connection, path: Path, names: set[str]) -> pd.DataFrame:
    """NVTX ranges and marks (a mark has no end), their text inline or through `StringIds`."""
    if "NVTX_EVENTS" not in names:
        return schema.empty_markers(SOURCE)
    cols = columns(con, "NVTX_EVENTS", path)
    text = "n.text" if "text" in cols else "NULL"
    join = ""
    if "StringIds" in names and "textId" in cols:
        text = f"COALESCE({text}, s.value)"
        join = "LEFT JOIN StringIds s ON s.id = n.textId"
    kinds = ", ".join(str(k) for k in NVTX_KINDS)
    cond = f"WHERE n.eventType IN ({kinds})" if "eventType" in cols else ""
    rows = _fetch(con, path, f"SELECT n.start, n.end, n.globalTid, {text} FROM NVTX_EVENTS n {join} {cond}",
                  "table NVTX_EVENTS")
    s, e = _times(rows, path, "NVTX_EVENTS", mark_ok=True)
    pid, tid = _pid_tid([r[2] for r in rows])
    return schema.marker_frame({"name": [str(r[3] or "") for r in rows], "start_ns": s, "end_ns": e, "pid": pid,
                                "tid": tid, "domain": "nvtx"},
                               SOURCE, path, lambda i: f"table NVTX_EVENTS, row {i + 1}")


def _session(con: sqlite3.Connection, path: Path, names: set[str]) -> dict[str, Any]:
    """The session: its start in Unix ns (`utcEpochNs`) and text, its length (`ANALYSIS_DETAILS`), and
    the export's own metadata (under either of its table names)."""
    out: dict[str, Any] = {"epoch": None, "utc_time": None, "duration": None, "export": {}, "export_table": None}
    if "TARGET_INFO_SESSION_START_TIME" in names:
        rows = _fetch(con, path, "SELECT * FROM TARGET_INFO_SESSION_START_TIME", "table TARGET_INFO_SESSION_START_TIME")
        cols = columns(con, "TARGET_INFO_SESSION_START_TIME", path)
        if rows:
            row = dict(zip(cols, rows[0], strict=False))
            out["epoch"], out["utc_time"] = row.get("utcEpochNs"), row.get("utcTime")
    if "ANALYSIS_DETAILS" in names and "duration" in columns(con, "ANALYSIS_DETAILS", path):
        rows = _fetch(con, path, "SELECT duration FROM ANALYSIS_DETAILS", "table ANALYSIS_DETAILS")
        durations = [r[0] for r in rows if isinstance(r[0], int)]
        out["duration"] = max(durations) if durations else None
    table = next((t for t in EXPORT_META_TABLES if t in names), None)
    if table is not None:
        rows = _fetch(con, path, f"SELECT name, value FROM {table}", f"table {table}")
        out["export"] = {str(k): v for k, v in rows if k is not None}
        out["export_table"] = table
    return out


def _shift_to_unix(tables: tuple[pd.DataFrame, ...], session: dict[str, Any]) -> tuple[bool, str]:
    """Add the session start to every time where the times are session-relative (module docstring);
    (whether that was done, why)."""
    epoch, duration = session["epoch"], session["duration"]
    filled = [t for t in tables if len(t)]
    latest = max((int(t["end_ns"].max()) for t in filled), default=0)
    first = min((int(t["start_ns"].min()) for t in filled), default=0)
    if not isinstance(epoch, int) or not EPOCH_MIN_NS <= epoch <= INT64_MAX - max(latest, 0):
        return False, f"no usable session start (utcEpochNs {epoch!r}): times kept as exported"
    if isinstance(duration, int) and not (first >= 0 and latest <= duration):
        return False, (f"times [{first}, {latest}] ns lie outside the session's [0, {duration}] ns "
                       "(ANALYSIS_DETAILS): not session-relative, kept as exported")
    if not (0 <= first < RELATIVE_FIRST_MAX_NS and latest < RELATIVE_MAX_NS):
        return False, f"times [{first}, {latest}] ns do not look session-relative: kept as exported"
    for t in tables:
        t["start_ns"] += epoch
        t["end_ns"] += epoch
    within = f" within the session's {duration} ns (ANALYSIS_DETAILS)" if isinstance(duration, int) else ""
    return True, f"session-relative times{within}, shifted by utcEpochNs {epoch}"


def read_nsys(path: Path, mode: ReadMode = ReadMode.FULL) -> Trace:
    """An nsys SQLite export -> Trace; a lean `mode`: the dispatches as a lean table fetched in chunks
    (LEAN_IDS: with device and stream). The CUDA API calls are read in every mode: what fills the host
    gaps (`perflib.attribution.hostgaps`) is told from them, in a summary and in a cut alike."""
    path, lean, ids = Path(path), mode.lean, mode.ids
    try:
        with reading(path) as con:
            names = objects(con)
            kernels, name_col = _kernels(con, path, names, lean, ids)
            frames = ([kernels] if kernels is not None else []) + _copies_and_sets(con, path, names, lean, ids)
            markers = _nvtx(con, path, names)
            api = _runtime(con, path, names)
            session = _session(con, path, names)
            opened = con.open_note or "mode=ro"
    except ERRORS as exc:  # a damaged page met anywhere in the file
        raise InputError(path, None, "a readable SQLite database", said(exc)) from exc
    dispatches = schema.concat(frames or [schema.empty_dispatches(SOURCE)], schema.DISPATCH_COLUMNS)
    relative, why = _shift_to_unix((dispatches, api, markers), session)
    export = session["export"]
    meta = {
        "kernel_name_column": name_col,
        "session_start_utc_epoch_ns": session["epoch"],
        "session_start_utc_time": session["utc_time"],
        "session_duration_ns": session["duration"],
        "export_schema_version": export.get("EXPORT_SCHEMA_VERSION"),
        "export_product_version": export.get("EXPORT_PRODUCT_VERSION"),
        "export_meta_table": session["export_table"],
        "shifted_by_session_start": relative,
        "clock_note": why,
        "to_unix_ns": 0 if relative else None,
        "sqlite_open": opened,
    }
    if lean:
        meta["lean"] = True
    return Trace(dispatches, api, markers, "realtime" if relative else "unknown", SOURCE, str(path), meta)
