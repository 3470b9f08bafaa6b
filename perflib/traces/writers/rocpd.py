"""A rocpd SQLite database (FORMATS.md §1.7): UUID-suffixed tables, the views the reader queries, and
`rocpd_metadata.schema_version` = "3"."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd

from perflib.traces.writers.common import GUID, HOST_AGENT, complete, copies, kernels, to_host

_SUFFIX = GUID.replace("-", "_")
_G = f"TEXT DEFAULT '{GUID}' NOT NULL"
TABLES = f"""
    CREATE TABLE rocpd_metadata_{_SUFFIX} (id INTEGER PRIMARY KEY, tag TEXT NOT NULL, value TEXT NOT NULL);
    CREATE TABLE rocpd_string_{_SUFFIX} (id INTEGER PRIMARY KEY, guid {_G}, string TEXT NOT NULL);
    CREATE TABLE rocpd_info_agent_{_SUFFIX} (id INTEGER PRIMARY KEY, guid {_G}, nid INTEGER, pid INTEGER,
        type TEXT, absolute_index INTEGER, logical_index INTEGER, type_index INTEGER, uuid INTEGER,
        name TEXT, model_name TEXT, vendor_name TEXT, product_name TEXT, user_name TEXT, extdata JSONB);
    CREATE TABLE rocpd_info_kernel_symbol_{_SUFFIX} (id INTEGER PRIMARY KEY, guid {_G}, nid INTEGER,
        pid INTEGER, code_object_id INTEGER, kernel_name TEXT, display_name TEXT, extdata JSONB);
    CREATE TABLE rocpd_event_{_SUFFIX} (id INTEGER PRIMARY KEY, guid {_G}, category_id INTEGER,
        stack_id INTEGER, parent_stack_id INTEGER, correlation_id INTEGER, call_stack JSONB,
        line_info JSONB, extdata JSONB);
    CREATE TABLE rocpd_kernel_dispatch_{_SUFFIX} (id INTEGER PRIMARY KEY, guid {_G}, nid INTEGER, pid INTEGER,
        tid INTEGER, agent_id INTEGER, kernel_id INTEGER, dispatch_id INTEGER, queue_id INTEGER,
        stream_id INTEGER, start BIGINT NOT NULL, "end" BIGINT NOT NULL, event_id INTEGER);
    CREATE TABLE rocpd_memory_copy_{_SUFFIX} (id INTEGER PRIMARY KEY, guid {_G}, nid INTEGER, pid INTEGER,
        tid INTEGER, start BIGINT NOT NULL, "end" BIGINT NOT NULL, name_id INTEGER NOT NULL,
        dst_agent_id INTEGER, src_agent_id INTEGER, size INTEGER NOT NULL, queue_id INTEGER,
        stream_id INTEGER, event_id INTEGER);
    CREATE TABLE rocpd_region_{_SUFFIX} (id INTEGER PRIMARY KEY, guid {_G}, nid INTEGER, pid INTEGER,
        tid INTEGER, start BIGINT NOT NULL, "end" BIGINT NOT NULL, name_id INTEGER NOT NULL,
        event_id INTEGER, extdata JSONB);
""" + "".join(f"    CREATE VIEW rocpd_{t} AS SELECT * FROM rocpd_{t}_{_SUFFIX};\n" for t in (
    "metadata", "string", "info_agent", "info_kernel_symbol", "event", "kernel_dispatch", "memory_copy", "region"))
"""The physical tables (UUID-suffixed, as rocprofv3 writes them) and their plain-named views."""

VIEWS = """
    CREATE VIEW kernels AS SELECT K.id, K.guid, K.tid, 'KERNEL_DISPATCH' AS category,
        S.display_name AS name, K.nid, K.pid, A.absolute_index AS agent_abs_index,
        A.logical_index AS agent_log_index, A.type_index AS agent_type_index, A.type AS agent_type,
        K.kernel_id, K.dispatch_id, K.stream_id, K.queue_id, K.start, K."end",
        (K."end" - K.start) AS duration, E.correlation_id AS corr_id
    FROM rocpd_kernel_dispatch K
        INNER JOIN rocpd_info_agent A ON A.id = K.agent_id AND A.guid = K.guid
        INNER JOIN rocpd_info_kernel_symbol S ON S.id = K.kernel_id AND S.guid = K.guid
        INNER JOIN rocpd_event E ON E.id = K.event_id AND E.guid = K.guid;
    CREATE VIEW memory_copies AS SELECT M.id, M.guid, 'MEMORY_COPY' AS category, M.nid, M.pid, M.tid,
        M.start, M."end", (M."end" - M.start) AS duration, NS.string AS name, M.stream_id, M.queue_id,
        M.size, dst.logical_index AS dst_agent_log_index, dst.absolute_index AS dst_agent_abs_index,
        src.logical_index AS src_agent_log_index, src.absolute_index AS src_agent_abs_index,
        E.correlation_id AS corr_id
    FROM rocpd_memory_copy M
        INNER JOIN rocpd_string NS ON NS.id = M.name_id AND NS.guid = M.guid
        INNER JOIN rocpd_info_agent dst ON dst.id = M.dst_agent_id AND dst.guid = M.guid
        INNER JOIN rocpd_info_agent src ON src.id = M.src_agent_id AND src.guid = M.guid
        INNER JOIN rocpd_event E ON E.id = M.event_id AND E.guid = M.guid;
    CREATE VIEW regions AS SELECT R.id, R.guid, CS.string AS category, S.string AS name, R.nid, R.pid,
        R.tid, R.start, R."end", (R."end" - R.start) AS duration, R.event_id,
        E.correlation_id AS corr_id
    FROM rocpd_region R
        INNER JOIN rocpd_event E ON E.id = R.event_id AND E.guid = R.guid
        INNER JOIN rocpd_string S ON S.id = R.name_id AND S.guid = R.guid
        LEFT JOIN rocpd_string CS ON CS.id = E.category_id AND CS.guid = E.guid;
"""
"""The views the reader queries, as rocpd defines them (FORMATS.md §1.7), trimmed to their columns."""


def _insert_kernels(cur: sqlite3.Cursor, k: pd.DataFrame, agent_id: dict[int, int], pid: int) -> None:
    """Kernel symbols, then one dispatch per kernel row (event ids 1..n carry the correlation ids)."""
    codes, uniques = pd.factorize(k["kernel"])
    cur.executemany(f"INSERT INTO rocpd_info_kernel_symbol_{_SUFFIX} (id, nid, pid, code_object_id, kernel_name, "
                    "display_name) VALUES (?, 1, ?, 1, ?, ?)",
                    [(i + 1, pid, f"{name}.kd", name) for i, name in enumerate(uniques.astype(str))])
    n = len(k)
    cur.executemany(
        f"INSERT INTO rocpd_kernel_dispatch_{_SUFFIX} (nid, pid, tid, agent_id, kernel_id, dispatch_id, queue_id, "
        'stream_id, start, "end", event_id) VALUES (1, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)',
        zip([pid] * n, [agent_id[d] for d in k["device"].tolist()], (codes + 1).tolist(), range(1, n + 1),
            k["queue"].tolist(), k["stream"].tolist(), k["start_ns"].tolist(), k["end_ns"].tolist(), range(1, n + 1),
            strict=True))


def _insert_copies(cur: sqlite3.Cursor, m: pd.DataFrame, agent_id: dict[int, int], pid: int, first_event: int) -> None:
    """Copy names as strings, then one copy per memcpy row; the host end is agent 0."""
    names = m["kernel"].astype(str).tolist()
    string_ids = {s: i + 1 for i, s in enumerate(dict.fromkeys(names))}
    cur.executemany(f"INSERT INTO rocpd_string_{_SUFFIX} (id, string) VALUES (?, ?)",
                    [(i, s) for s, i in string_ids.items()])
    rows = []
    for j, (name, host, s, e, d, st) in enumerate(zip(names, to_host(m["kernel"]), m["start_ns"].tolist(),
                                                       m["end_ns"].tolist(), m["device"].tolist(),
                                                       m["stream"].tolist(), strict=True)):
        dst, src = (HOST_AGENT, d) if host else (d, HOST_AGENT)
        rows.append((pid, s, e, string_ids[name], agent_id[dst], agent_id[src], st, first_event + j))
    cur.executemany(
        f'INSERT INTO rocpd_memory_copy_{_SUFFIX} (nid, pid, tid, start, "end", name_id, dst_agent_id, '
        "src_agent_id, size, queue_id, stream_id, event_id) VALUES (1, ?, 1, ?, ?, ?, ?, ?, 0, -1, ?, ?)", rows)


def write_rocpd(dispatches: pd.DataFrame, path: str | Path, pid: int = 1) -> Path:
    """A rocpd SQLite database (§1.7) with kernels and memory copies, schema_version "3"."""
    dispatches = complete(dispatches)
    path = Path(path)
    if path.exists():
        path.unlink()
    k, m = kernels(dispatches), copies(dispatches)
    devices = sorted(set(dispatches["device"].tolist()) | {HOST_AGENT})
    agent_id = {d: i + 1 for i, d in enumerate(devices)}
    con = sqlite3.connect(path)
    try:
        cur = con.cursor()
        cur.executescript(TABLES + VIEWS)
        cur.executemany(f"INSERT INTO rocpd_metadata_{_SUFFIX} (tag, value) VALUES (?, ?)",
                        [("schema_version", "3"), ("uuid", GUID), ("writer", "perflib.traces.writers")])
        cur.executemany(
            f"INSERT INTO rocpd_info_agent_{_SUFFIX} (id, nid, pid, type, absolute_index, logical_index, type_index, "
            "name) VALUES (?, 1, ?, ?, ?, ?, ?, ?)",
            [(agent_id[d], pid, "CPU" if d == HOST_AGENT else "GPU", d, d, i, "cpu" if d == HOST_AGENT else "gfx942")
             for i, d in enumerate(devices)])
        corr = k["correlation_id"].tolist() + m["correlation_id"].tolist()
        cur.executemany(f"INSERT INTO rocpd_event_{_SUFFIX} (id, correlation_id) VALUES (?, ?)",
                        zip(range(1, len(corr) + 1), corr, strict=True))
        _insert_kernels(cur, k, agent_id, pid)
        _insert_copies(cur, m, agent_id, pid, len(k) + 1)
        con.commit()
    finally:
        con.close()
    return path
