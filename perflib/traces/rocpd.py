"""rocpd SQLite (rocprofv3 7.0+ default output, `*_results.db`; FORMATS.md §1.7).

Opened read-only through `perflib.traces.sqlite.reading` (no file created or changed beside it;
`meta["sqlite_open"]` says where it had to fall back to `immutable=1`). Physical tables carry a per-run UUID suffix, so only the
plain-named views are queried: `kernels`, `memory_copies`, `regions`. `device` is the agent's
logical index (the CSV's relative "Agent N").
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from perflib.errors import InputError
from perflib.traces import schema
from perflib.traces.codebook import Names
from perflib.traces.files import said
from perflib.traces.rocprof import ROCPROF_CLOCK, ROCPROF_CLOCK_CANDIDATES
from perflib.traces.sqlite import ERRORS, columns, fetch, objects, reading
from perflib.traces.trace import ReadMode, Trace

if TYPE_CHECKING:
    import pandas as pd

SOURCE = "rocpd"
ROCPD_VIEWS = ("rocpd_metadata", "kernels")


def _pick(cols: list[str], *choices: str) -> str | None:
    return next((c for c in choices if c in cols), None)


def _query(
    con: sqlite3.Connection, path: Path, view: str, wanted: dict[str, tuple[str, ...]]
) -> dict[str, list]:
    cols = columns(con, view, path)
    exprs = []
    for out, choices in wanted.items():
        col = _pick(cols, *choices)
        exprs.append(f"`{col}`" if col else "NULL")
        if col is None and out in ("start_ns", "end_ns", "name"):
            raise InputError(path, f"view {view}", f"a column {' or '.join(choices)}", ", ".join(cols))
    try:
        rows = con.execute(f"SELECT {', '.join(exprs)} FROM `{view}`").fetchall()
    except ERRORS as exc:
        raise InputError(path, f"view {view}", "a readable rocpd view", said(exc)) from exc
    keys = list(wanted)
    return {k: [r[i] for r in rows] for i, k in enumerate(keys)}


def _ints(values: list, path: Path, view: str, col: str, required: bool = False, offset: int = 0) -> np.ndarray:
    """int64 of one column; `required` (times): a value that is no integer is an `InputError` naming its
    row (`offset` rows before `values`), else it is -1."""
    if required:
        for i, v in enumerate(values):
            if not isinstance(v, int):
                raise InputError(
                    path, f"view {view}, row {offset + i + 1}, column {col}", "an integer ns timestamp", repr(v)
                )
        return np.asarray(values, dtype=np.int64)
    return np.asarray([v if isinstance(v, int) else -1 for v in values], dtype=np.int64)


def _names(values: list) -> list[str]:
    """Names as text; a NULL name is empty (never the text "None")."""
    return ["" if v is None else str(v) for v in values]


_KERNELS = {
    "name": ("name",), "start_ns": ("start",), "end_ns": ("end",),
    "device": ("agent_log_index", "agent_abs_index"), "queue": ("queue_id",), "stream": ("stream_id",),
    "correlation_id": ("corr_id", "correlation_id"),
}
_COPIES = {
    "name": ("name",), "start_ns": ("start",), "end_ns": ("end",),
    "dst": ("dst_agent_log_index", "dst_agent_logical_index", "dst_agent_abs_index"),
    "src": ("src_agent_log_index", "src_agent_logical_index", "src_agent_abs_index"),
    "queue": ("queue_id",), "stream": ("stream_id",), "correlation_id": ("corr_id", "correlation_id"),
}
_REGIONS = {
    "name": ("name",), "start_ns": ("start",), "end_ns": ("end",), "pid": ("pid",), "tid": ("tid",),
    "correlation_id": ("corr_id", "correlation_id"), "domain": ("category",),
}
"""Canonical column -> the view's column names that carry it, preferred first."""


def _kernels(con: sqlite3.Connection, path: Path) -> pd.DataFrame:
    k = _query(con, path, "kernels", _KERNELS)
    return schema.dispatch_frame(
        {
            "kernel": _names(k["name"]),
            "start_ns": _ints(k["start_ns"], path, "kernels", "start", True),
            "end_ns": _ints(k["end_ns"], path, "kernels", "end", True),
            "device": _ints(k["device"], path, "kernels", "agent_log_index"),
            "queue": _ints(k["queue"], path, "kernels", "queue_id"),
            "stream": _ints(k["stream"], path, "kernels", "stream_id"),
            "correlation_id": _ints(k["correlation_id"], path, "kernels", "corr_id"),
            "kind": "kernel",
        },
        SOURCE, path, lambda i: f"view kernels, row {i + 1}",
    )


def _fast_ints(values: tuple, path: Path, view: str, col: str, required: bool, offset: int) -> np.ndarray:
    """`_ints` of a chunk, at C speed where every value is a plain int (the usual case)."""
    if set(map(type, values)) == {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    return _ints(list(values), path, view, col, required, offset)


LEAN_CHUNK = 1 << 16
"""Rows fetched at a time by the lean read."""


def _lean(con: sqlite3.Connection, path: Path, view: str, wanted: dict[str, tuple[str, ...]], kind: str,
          ids: bool = False) -> pd.DataFrame:
    """One view's dispatches as a lean table (`schema.LEAN_DISPATCH_COLUMNS`), fetched `LEAN_CHUNK`
    rows at a time: the rows never all stand in memory as tuples, only as int64 columns and name codes.
    `ids`: device, queue and stream too, as `_kernels` and `_copies` read them (a copy's device is its
    GPU end)."""
    cols = columns(con, view, path)
    keys = ("name", "start_ns", "end_ns", "correlation_id")
    if ids:
        keys += tuple(k for k in wanted if k in ("device", "src", "dst", "queue", "stream"))
    exprs = []
    for out in keys:
        col = _pick(cols, *wanted[out])
        exprs.append(f"`{col}`" if col else "NULL")
        if col is None and out in ("name", "start_ns", "end_ns"):
            raise InputError(path, f"view {view}", f"a column {' or '.join(wanted[out])}", ", ".join(cols))
    names = Names()
    parts: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    done = 0
    try:
        cursor = con.execute(f"SELECT {', '.join(exprs)} FROM `{view}`")
        while rows := cursor.fetchmany(LEAN_CHUNK):
            chunk = dict(zip(keys, zip(*rows, strict=True), strict=True))
            name = chunk["name"]
            if set(map(type, name)) != {str}:
                name = tuple("" if v is None else str(v) for v in name)
            parts["name"].append(names.encode(name))
            parts["start_ns"].append(_fast_ints(chunk["start_ns"], path, view, "start", True, done))
            parts["end_ns"].append(_fast_ints(chunk["end_ns"], path, view, "end", True, done))
            for key in keys[3:]:
                parts[key].append(_fast_ints(chunk[key], path, view, key, False, done))
            done += len(rows)
    except ERRORS as exc:
        raise InputError(path, f"view {view}", "a readable rocpd view", said(exc)) from exc

    def joined(key: str, dtype: type) -> np.ndarray:
        return np.concatenate(parts[key]) if parts[key] else np.zeros(0, dtype=dtype)

    codes = joined("name", np.int32)
    id_cols = None
    if ids:
        id_cols = {k: joined(k, np.int64) for k in ("queue", "stream")}
        if "device" in keys:
            id_cols["device"] = joined("device", np.int64)
        else:
            id_cols["device"] = schema.copy_devices(names.names, codes, joined("src", np.int64), joined("dst", np.int64))
    return schema.lean_dispatch_frame(
        codes, names.names, joined("start_ns", np.int64), joined("end_ns", np.int64),
        joined("correlation_id", np.int64), kind, SOURCE, path, lambda i: f"view {view}, row {i + 1}", ids=id_cols)


def _copies(con: sqlite3.Connection, path: Path) -> pd.DataFrame:
    """Copies of the `memory_copies` view; `device` is the GPU end of each copy."""
    m = _query(con, path, "memory_copies", _COPIES)
    direction = _names(m["name"])
    return schema.dispatch_frame(
        {
            "kernel": direction,
            "start_ns": _ints(m["start_ns"], path, "memory_copies", "start", True),
            "end_ns": _ints(m["end_ns"], path, "memory_copies", "end", True),
            "device": schema.copy_devices(direction, np.arange(len(direction)),
                                          _ints(m["src"], path, "memory_copies", "src"),
                                          _ints(m["dst"], path, "memory_copies", "dst")),
            "queue": _ints(m["queue"], path, "memory_copies", "queue_id"),
            "stream": _ints(m["stream"], path, "memory_copies", "stream_id"),
            "correlation_id": _ints(m["correlation_id"], path, "memory_copies", "corr_id"),
            "kind": "memcpy",
        },
        SOURCE, path, lambda i: f"view memory_copies, row {i + 1}",
    )


def _regions(con: sqlite3.Connection, path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The `regions` view split in two: API calls, and markers (category `MARKER_*`). Fetched
    `LEAN_CHUNK` rows at a time, each chunk reduced to int64 columns and codes into the distinct names
    and categories (few), so the rows never all stand in memory as tuples. The tables, and the error a
    bad file gets, are those of reading the whole view at once: a failed read of the view first, then
    the first row whose start is no integer, then the first whose end is none."""
    cols = columns(con, "regions", path)
    keys = tuple(_REGIONS)
    exprs = []
    for out, choices in _REGIONS.items():
        col = _pick(cols, *choices)
        exprs.append(f"`{col}`" if col else "NULL")
        if col is None and out in ("start_ns", "end_ns", "name"):
            raise InputError(path, "view regions", f"a column {' or '.join(choices)}", ", ".join(cols))
    texts = {"name": Names(), "domain": Names()}
    parts: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    faults: dict[str, InputError] = {}
    done = 0
    try:
        cursor = con.execute(f"SELECT {', '.join(exprs)} FROM `regions`")
        while rows := cursor.fetchmany(LEAN_CHUNK):
            chunk = dict(zip(keys, zip(*rows, strict=True), strict=True))
            times: dict[str, np.ndarray] = {}
            for key, col in (("start_ns", "start"), ("end_ns", "end")):
                if not faults or (key == "start_ns" and key not in faults):  # a bad start anywhere comes first
                    try:
                        times[key] = _fast_ints(chunk[key], path, "regions", col, True, done)
                    except InputError as exc:
                        faults[key] = exc
            if not faults:
                for key in times:
                    parts[key].append(times[key])
                for key, col in (("pid", "pid"), ("tid", "tid"), ("correlation_id", "corr_id")):
                    parts[key].append(_fast_ints(chunk[key], path, "regions", col, False, done))
                for key in texts:
                    parts[key].append(_codes(chunk[key], texts[key]))
            done += len(rows)
    except ERRORS as exc:
        raise InputError(path, "view regions", "a readable rocpd view", said(exc)) from exc
    for key in ("start_ns", "end_ns"):
        if key in faults:
            raise faults[key]

    def joined(key: str) -> np.ndarray:
        return np.concatenate(parts[key]) if parts[key] else np.zeros(0, dtype=np.int64)

    table: dict[str, Any] = {k: joined(k) for k in keys}
    for key in texts:
        table[key] = np.asarray(texts[key].names, dtype=object)[table[key]]
    marker_domain = np.array([d.upper().startswith("MARKER") for d in texts["domain"].names], dtype=bool)
    is_marker = marker_domain[joined("domain")] if marker_domain.size else np.zeros(done, dtype=bool)
    label = lambda i: f"view regions, row {i + 1}"  # noqa: E731
    return (schema.api_frame({k: v[~is_marker] for k, v in table.items()}, SOURCE, path, label),
            schema.marker_frame({k: v[is_marker] for k, v in table.items()}, SOURCE, path, label))


def _codes(values: tuple, names: Names) -> np.ndarray:
    """Codes of the values as `_names` gives their text (a NULL is empty), in a running dictionary."""
    return names.encode(values if set(map(type, values)) == {str} else tuple(_names(list(values))))


def _metadata(con: sqlite3.Connection, path: Path) -> dict[str, Any]:
    """`rocpd_metadata` as {tag: value}: text tags, values as text or numbers; rows without a tag are
    left out, and a table without `tag` and `value` columns is an `InputError`."""
    rows = fetch(con, path, "SELECT tag, value FROM rocpd_metadata", "table rocpd_metadata",
                 "a rocpd_metadata table with tag and value columns")
    return {str(tag): (value if isinstance(value, str | int | float) or value is None else repr(value))
            for tag, value in rows if tag is not None}


def read_rocpd(path: Path, mode: ReadMode = ReadMode.FULL) -> Trace:
    """A rocpd database -> Trace (kernels + copies, HIP/HSA API regions, marker regions); a lean `mode`:
    the dispatches as a lean table read in chunks (`_lean`; LEAN_IDS: with device, queue and stream)."""
    path = Path(path)
    try:
        with reading(path) as con:
            names = objects(con)
            missing = [v for v in ROCPD_VIEWS if v not in names]
            if missing:
                raise InputError(
                    path, "sqlite_master", f"rocpd views {', '.join(ROCPD_VIEWS)}", f"no {', '.join(missing)}"
                )
            meta_rows = _metadata(con, path)
            if mode.lean:
                frames = [_lean(con, path, "kernels", _KERNELS, "kernel", mode.ids)]
                if "memory_copies" in names:
                    frames.append(_lean(con, path, "memory_copies", _COPIES, "memcpy", mode.ids))
            else:
                frames = [_kernels(con, path)]
                if "memory_copies" in names:
                    frames.append(_copies(con, path))
            if "regions" in names:
                api, markers = _regions(con, path)
            else:
                api, markers = schema.empty_api(SOURCE), schema.empty_markers(SOURCE)
            opened = con.open_note or "mode=ro"
    except ERRORS as exc:  # a damaged page met anywhere in the file
        raise InputError(path, None, "a readable SQLite database", said(exc)) from exc
    version = meta_rows.get("schema_version")
    meta = {
        "schema_version": None if version is None else str(version),
        "rocpd_metadata": meta_rows,
        "clock_candidates": ROCPROF_CLOCK_CANDIDATES,
        "sqlite_open": opened,
    }
    return Trace(schema.concat(frames, schema.DISPATCH_COLUMNS), api, markers, ROCPROF_CLOCK, SOURCE, str(path), meta)
