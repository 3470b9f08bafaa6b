"""rocpd SQLite (rocprofv3 7.0+ default output, `*_results.db`; FORMATS.md §1.7).

Opened read-only (`file:...?mode=ro`). Physical tables carry a per-run UUID suffix, so only the
plain-named views are queried: `kernels`, `memory_copies`, `regions`. `device` is the agent's
logical index (the CSV's relative "Agent N"). Also tells rocpd from Nsight Systems exports.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np

from perflib.errors import InputError
from perflib.traces import Trace, schema
from perflib.traces.rocprof_dir import ROCPROF_CLOCK, ROCPROF_CLOCK_CANDIDATES

SOURCE = "rocpd"
ROCPD_VIEWS = ("rocpd_metadata", "kernels")
NSYS_TABLES = ("StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "TARGET_INFO_SESSION_START_TIME", "NVTX_EVENTS")


def connect(path: Path) -> sqlite3.Connection:
    """Read-only connection; an unreadable or non-SQLite file is an `InputError`."""
    try:
        con = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise InputError(path, None, "a readable SQLite database", str(exc)) from exc
    return con


def objects(con: sqlite3.Connection) -> set[str]:
    """Names of all tables and views."""
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def sqlite_flavour(path: Path) -> str:
    """`rocpd` or `nsys-sqlite`; anything else is an `InputError` saying what was expected."""
    con = connect(path)
    try:
        names = objects(con)
    finally:
        con.close()
    if "rocpd_metadata" in names or any(n.startswith("rocpd_") for n in names):
        return "rocpd"
    if any(n in names for n in NSYS_TABLES):
        return "nsys-sqlite"
    raise InputError(
        path,
        "sqlite_master",
        "a rocpd database (rocpd_metadata and the kernels/regions/memory_copies views) or an Nsight "
        "Systems export (StringIds, CUPTI_ACTIVITY_KIND_KERNEL, ...)",
        "tables " + (", ".join(sorted(names)[:12]) or "none"),
    )


def _columns(con: sqlite3.Connection, view: str) -> list[str]:
    return [r[1] for r in con.execute(f"PRAGMA table_info(`{view}`)")]


def _pick(cols: list[str], *choices: str) -> str | None:
    return next((c for c in choices if c in cols), None)


def _query(
    con: sqlite3.Connection, path: Path, view: str, wanted: dict[str, tuple[str, ...]]
) -> dict[str, list]:
    cols = _columns(con, view)
    exprs = []
    for out, choices in wanted.items():
        col = _pick(cols, *choices)
        exprs.append(f"`{col}`" if col else "NULL")
        if col is None and out in ("start_ns", "end_ns", "name"):
            raise InputError(path, f"view {view}", f"a column {' or '.join(choices)}", ", ".join(cols))
    try:
        rows = con.execute(f"SELECT {', '.join(exprs)} FROM `{view}`").fetchall()
    except sqlite3.DatabaseError as exc:
        raise InputError(path, f"view {view}", "a readable rocpd view", str(exc)) from exc
    keys = list(wanted)
    return {k: [r[i] for r in rows] for i, k in enumerate(keys)}


def _ints(values: list, path: Path, view: str, col: str, required: bool = False) -> np.ndarray:
    if required:
        for i, v in enumerate(values):
            if not isinstance(v, int):
                raise InputError(
                    path, f"view {view}, row {i + 1}, column {col}", "an integer ns timestamp", repr(v)
                )
        return np.asarray(values, dtype=np.int64)
    return np.asarray([v if isinstance(v, int) else -1 for v in values], dtype=np.int64)


def read_rocpd(path: Path) -> Trace:
    """A rocpd database -> Trace (kernels + copies, HIP/HSA API regions, marker regions)."""
    path = Path(path)
    con = connect(path)
    try:
        names = objects(con)
        missing = [v for v in ROCPD_VIEWS if v not in names]
        if missing:
            raise InputError(
                path, "sqlite_master", f"rocpd views {', '.join(ROCPD_VIEWS)}", f"no {', '.join(missing)}"
            )
        meta_rows = dict(con.execute("SELECT tag, value FROM rocpd_metadata").fetchall())
        k = _query(
            con,
            path,
            "kernels",
            {
                "name": ("name",),
                "start_ns": ("start",),
                "end_ns": ("end",),
                "device": ("agent_log_index", "agent_abs_index"),
                "queue": ("queue_id",),
                "stream": ("stream_id",),
                "correlation_id": ("corr_id", "correlation_id"),
            },
        )
        frames = [
            schema.dispatch_frame(
                {
                    "kernel": [str(v) for v in k["name"]],
                    "start_ns": _ints(k["start_ns"], path, "kernels", "start", True),
                    "end_ns": _ints(k["end_ns"], path, "kernels", "end", True),
                    "device": _ints(k["device"], path, "kernels", "agent_log_index"),
                    "queue": _ints(k["queue"], path, "kernels", "queue_id"),
                    "stream": _ints(k["stream"], path, "kernels", "stream_id"),
                    "correlation_id": _ints(k["correlation_id"], path, "kernels", "corr_id"),
                    "kind": "kernel",
                },
                SOURCE,
                path,
                lambda i: f"view kernels, row {i + 1}",
            )
        ]
        if "memory_copies" in names:
            m = _query(
                con,
                path,
                "memory_copies",
                {
                    "name": ("name",),
                    "start_ns": ("start",),
                    "end_ns": ("end",),
                    "dst": ("dst_agent_log_index", "dst_agent_logical_index", "dst_agent_abs_index"),
                    "src": ("src_agent_log_index", "src_agent_logical_index", "src_agent_abs_index"),
                    "queue": ("queue_id",),
                    "stream": ("stream_id",),
                    "correlation_id": ("corr_id", "correlation_id"),
                },
            )
            direction = [str(v) for v in m["name"]]
            to_host = np.array([d.upper().endswith("TO_HOST") for d in direction], dtype=bool)
            frames.append(
                schema.dispatch_frame(
                    {
                        "kernel": direction,
                        "start_ns": _ints(m["start_ns"], path, "memory_copies", "start", True),
                        "end_ns": _ints(m["end_ns"], path, "memory_copies", "end", True),
                        "device": np.where(
                            to_host,
                            _ints(m["src"], path, "memory_copies", "src"),
                            _ints(m["dst"], path, "memory_copies", "dst"),
                        ),
                        "queue": _ints(m["queue"], path, "memory_copies", "queue_id"),
                        "stream": _ints(m["stream"], path, "memory_copies", "stream_id"),
                        "correlation_id": _ints(m["correlation_id"], path, "memory_copies", "corr_id"),
                        "kind": "memcpy",
                    },
                    SOURCE,
                    path,
                    lambda i: f"view memory_copies, row {i + 1}",
                )
            )
        api: dict[str, Any] = {"start_ns": [], "end_ns": []}
        markers: dict[str, Any] = {"start_ns": [], "end_ns": []}
        if "regions" in names:
            r = _query(
                con,
                path,
                "regions",
                {
                    "name": ("name",),
                    "start_ns": ("start",),
                    "end_ns": ("end",),
                    "pid": ("pid",),
                    "tid": ("tid",),
                    "correlation_id": ("corr_id", "correlation_id"),
                    "domain": ("category",),
                },
            )
            table = {
                "name": [str(v) for v in r["name"]],
                "start_ns": _ints(r["start_ns"], path, "regions", "start", True),
                "end_ns": _ints(r["end_ns"], path, "regions", "end", True),
                "pid": _ints(r["pid"], path, "regions", "pid"),
                "tid": _ints(r["tid"], path, "regions", "tid"),
                "correlation_id": _ints(r["correlation_id"], path, "regions", "corr_id"),
                "domain": [str(v or "") for v in r["domain"]],
            }
            is_marker = np.array([d.upper().startswith("MARKER") for d in table["domain"]], dtype=bool)

            def sub(mask: np.ndarray) -> dict[str, Any]:
                return {
                    c: (
                        v[mask]
                        if isinstance(v, np.ndarray)
                        else [x for x, keep in zip(v, mask, strict=True) if keep]
                    )
                    for c, v in table.items()
                }

            api, markers = sub(~is_marker), sub(is_marker)
    finally:
        con.close()
    dispatches = schema.concat(frames, schema.DISPATCH_COLUMNS)
    meta = {
        "schema_version": meta_rows.get("schema_version"),
        "rocpd_metadata": meta_rows,
        "clock_candidates": ROCPROF_CLOCK_CANDIDATES,
    }
    return Trace(
        dispatches,
        schema.api_frame(api, SOURCE, path, lambda i: f"view regions, row {i + 1}"),
        schema.marker_frame(markers, SOURCE, path, lambda i: f"view regions, row {i + 1}"),
        ROCPROF_CLOCK,
        SOURCE,
        str(path),
        meta,
    )
