"""Legacy rocprof v1/v2 `results.db` (FORMATS.md §1.8): the SQLite database `rocprof -o results.db` writes.

rocprof's `tblextr.py` fills one table of kernel dispatches, `KERN` (`A` before 2021), through its
`sqlitedb.py`: the columns of `results.csv` in its order (`results.csv` is that table dumped), every one
`INTEGER` but `KernelName` `TEXT`; `"Index"`, `"KernelName"`, then each `name(value)` property of the
dispatch line (`gpu-id`, `queue-id`, `queue-index`, `pid`, `tid`, `grd`, `wgr`, `lds`, `scr`, the
register counts, `sig`, `obj`), any counters, `DispatchNs`, `BeginNs`, `EndNs`, `CompleteNs`, and
`DurationNs` (`EndNs - BeginNs`) added after. Each name is stored inside double quotes, as `results.csv`
prints it (`"void foo<float>(float*) [clone .kd]"`): the quotes and the `.kd` suffix are dropped here, as
the CSV reader drops them. `gpu-id` is the device and `queue-id` the queue; the file has no stream and no
correlation id. With `--hip-trace`/`--hsa-trace` it also holds `HIP`, `HSA`, `COPY`, `OPS` and `rocTX`
tables (`meta["tables"]` names them). The `HIP` table is read into the API table (what fills the host
gaps): `tblextr.fill_api_db` creates it with the columns `BeginNs, EndNs, pid, tid, Name, args, Index,
Data, __section, __lane` (`Name` and `args` `TEXT`, the rest `INTEGER` but `Data`), one row per line of
`hip_api_trace.txt`, `Index` the call's correlation id, and `dform.post_process_data` adds `DurationNs`.
The others are left: `HSA` carries a zero-length `hsa_dispatch` row per kernel beside its calls, `OPS` and
`COPY` the activity of the HIP calls (with its own kernel names; the kernels here are `KERN`'s), and
`rocTX` writes a mark as a 1 ns range. Opened read-only through `perflib.traces.sqlite.reading`.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

from perflib.errors import InputError
from perflib.traces import schema
from perflib.traces.codebook import Names
from perflib.traces.files import said
from perflib.traces.rocprof import KD_SUFFIX, ROCPROF_CLOCK, ROCPROF_CLOCK_CANDIDATES
from perflib.traces.sqlite import ERRORS, columns, objects, reading
from perflib.traces.trace import ReadMode, Trace

SOURCE = "rocprof-legacy-db"
TABLES = ("KERN", "A")
"""The kernel table, by the name rocprof gave it: `KERN` (2021 on), `A` (2019 to 2021)."""
REQUIRED = ("KernelName", "BeginNs", "EndNs")
IDS = {"device": "gpu-id", "queue": "queue-id"}
CHUNK = 1 << 16
"""Rows fetched at a time."""
_KD = re.compile(KD_SUFFIX)


def kernel_table(tables: set[str] | frozenset[str]) -> str | None:
    """The name of the kernel table among a database's tables, None where it has none."""
    return next((t for t in TABLES if t in tables), None)


def clean_name(stored: object) -> str:
    """A name as `results.csv` and the other readers give it: without rocprof's surrounding double
    quotes and its ` [clone .kd]` or `.kd` suffix; a NULL name is empty."""
    if stored is None:
        return ""
    text = str(stored)
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    return _KD.sub("", text)


def _ints(values: tuple, path: Path, table: str, col: str, required: bool, offset: int) -> np.ndarray:
    """int64 of one column of a chunk; `required` (times): a value that is no integer is an `InputError`
    naming its row, else it is -1 (`sig`-like text in an INTEGER column, a NULL)."""
    if set(map(type, values)) == {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    out = np.full(len(values), -1, dtype=np.int64)
    for i, v in enumerate(values):
        ok = isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63
        if ok:
            out[i] = v
        elif required:
            raise InputError(path, f"table {table}, row {offset + i + 1}, column {col}", "an integer ns timestamp",
                             repr(v))
    return out


def _read(con: sqlite3.Connection, path: Path, table: str, ids: bool) -> tuple[np.ndarray, list[str], dict]:
    """(name codes, names, int64 columns) of the kernel table, fetched `CHUNK` rows at a time."""
    cols = columns(con, table, path)
    missing = [c for c in REQUIRED if c not in cols]
    if missing:
        raise InputError(path, f"table {table}", f"the columns of results.csv ({', '.join(REQUIRED)}, ...)",
                         "columns " + ", ".join(cols))
    wanted = {"start_ns": "BeginNs", "end_ns": "EndNs"}
    if ids:
        wanted |= {k: c for k, c in IDS.items() if c in cols}
    select = ", ".join(f'"{c}"' for c in ("KernelName", *wanted.values()))
    order = ' ORDER BY "Index"' if "Index" in cols else ""
    names = Names()
    cleaned: dict[object, str] = {}
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("codes", *wanted)}
    done = 0
    try:
        cursor = con.execute(f'SELECT {select} FROM "{table}"{order}')
        while rows := cursor.fetchmany(CHUNK):
            chunk = list(zip(*rows, strict=True))
            for raw in dict.fromkeys(chunk[0]):
                if raw not in cleaned:
                    cleaned[raw] = clean_name(raw)
            parts["codes"].append(names.encode([cleaned[raw] for raw in chunk[0]]))
            for i, (key, col) in enumerate(wanted.items(), start=1):
                parts[key].append(_ints(chunk[i], path, table, col, key in ("start_ns", "end_ns"), done))
            done += len(rows)
    except ERRORS as exc:
        raise InputError(path, f"table {table}", "a readable legacy rocprof kernel table", said(exc)) from exc
    joined = {k: np.concatenate(v) if v else np.zeros(0, dtype=np.int32 if k == "codes" else np.int64)
              for k, v in parts.items()}
    return joined.pop("codes"), names.names, joined


API_TABLE = "HIP"
"""The table of HIP API calls `tblextr.py` fills from `hip_api_trace.txt` (`rocprof --hip-trace`)."""
API_COLUMNS = {"name": "Name", "start_ns": "BeginNs", "end_ns": "EndNs", "pid": "pid", "tid": "tid",
               "correlation_id": "Index"}
"""API table column -> the HIP table's column (`tblextr.api_table_descr`)."""
API_DOMAIN = "HIP_API"
"""The domain of its calls, as legacy rocprof's `results.hip_stats.csv` and trace label it."""


def _api(con: sqlite3.Connection, path: Path, tables: set[str] | frozenset[str]) -> pd.DataFrame:
    """The `HIP` table's calls as the API table (empty where there is none), fetched `CHUNK` rows at a
    time; a table without its times or names is an `InputError` naming its columns."""
    if API_TABLE not in tables:
        return schema.empty_api(SOURCE)
    cols = columns(con, API_TABLE, path)
    missing = [c for c in API_COLUMNS.values() if c not in cols and c != "Index"]
    if missing:
        raise InputError(path, f"table {API_TABLE}", "the columns tblextr.py writes (BeginNs, EndNs, pid, tid, "
                         "Name, args, Index, ...)", "columns " + ", ".join(cols))
    wanted = {k: c for k, c in API_COLUMNS.items() if c in cols}
    select = ", ".join(f'"{c}"' for c in wanted.values())
    parts: dict[str, list] = {k: [] for k in wanted}
    done = 0
    try:
        cursor = con.execute(f'SELECT {select} FROM "{API_TABLE}" ORDER BY "BeginNs"')
        while rows := cursor.fetchmany(CHUNK):
            chunk = list(zip(*rows, strict=True))
            for i, (key, col) in enumerate(wanted.items()):
                parts[key].append(np.array([clean_name(v) for v in chunk[i]], dtype=object) if key == "name"
                                  else _ints(chunk[i], path, API_TABLE, col, key in ("start_ns", "end_ns"), done))
            done += len(rows)
    except ERRORS as exc:
        raise InputError(path, f"table {API_TABLE}", "a readable legacy rocprof HIP API table", said(exc)) from exc
    data: dict[str, object] = {k: np.concatenate(v) if v else np.zeros(0, dtype=object if k == "name" else np.int64)
                               for k, v in parts.items()}
    data["domain"] = API_DOMAIN
    return schema.api_frame(data, SOURCE, path, lambda i: f"table {API_TABLE}, row {i + 1}")


def read_results_db(path: Path, mode: ReadMode = ReadMode.FULL) -> Trace:
    """A legacy rocprof `results.db` -> Trace of its kernel dispatches and, where rocprof traced them, its
    HIP API calls (no marker table read); a lean `mode`: the lean table (LEAN_IDS: with device and queue),
    from the same one pass, and the same API calls."""
    path = Path(path)
    try:
        with reading(path) as con:
            tables = objects(con)
            table = kernel_table(tables)
            if table is None:
                raise InputError(path, "sqlite_master", "a legacy rocprof kernel table (KERN, or A before 2021)",
                                 "tables " + (", ".join(sorted(tables)[:12]) or "none"))
            codes, names, cols = _read(con, path, table, ids=not mode.lean or mode.ids)
            api = _api(con, path, tables)
            opened = con.open_note or "mode=ro"
    except ERRORS as exc:  # a damaged page met anywhere in the file
        raise InputError(path, None, "a readable SQLite database", said(exc)) from exc
    label = lambda i: f"table {table}, row {i + 1}"  # noqa: E731
    id_cols = {k: cols[k] for k in IDS if k in cols} if not mode.lean or mode.ids else None
    if mode.lean:
        dispatches = schema.lean_dispatch_frame(codes, names, cols["start_ns"], cols["end_ns"], None, "kernel", SOURCE,
                                                path, label, ids=id_cols)
    else:
        dispatches = schema.dispatch_frame(
            {"kernel": np.asarray(names, dtype=object)[codes] if names else np.zeros(0, dtype=object),
             "start_ns": cols["start_ns"], "end_ns": cols["end_ns"], **(id_cols or {}), "kind": "kernel"},
            SOURCE, path, label)
    meta = {"table": table, "tables": sorted(tables), "clock_candidates": ROCPROF_CLOCK_CANDIDATES,
            "sqlite_open": opened}
    if mode.lean:
        meta["lean"] = True
    return Trace(dispatches, api, schema.empty_markers(SOURCE), ROCPROF_CLOCK, SOURCE, str(path), meta)
