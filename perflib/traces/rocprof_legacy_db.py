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
tables, which this reader leaves (`meta["tables"]` names them). Opened read-only through
`perflib.traces.sqlite.reading`.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import numpy as np

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


def read_results_db(path: Path, mode: ReadMode = ReadMode.FULL) -> Trace:
    """A legacy rocprof `results.db` -> Trace of its kernel dispatches (no API or marker tables read); a
    lean `mode`: the lean table (LEAN_IDS: with device and queue), from the same one pass."""
    path = Path(path)
    try:
        with reading(path) as con:
            tables = objects(con)
            table = kernel_table(tables)
            if table is None:
                raise InputError(path, "sqlite_master", "a legacy rocprof kernel table (KERN, or A before 2021)",
                                 "tables " + (", ".join(sorted(tables)[:12]) or "none"))
            codes, names, cols = _read(con, path, table, ids=not mode.lean or mode.ids)
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
    return Trace(dispatches, schema.empty_api(SOURCE), schema.empty_markers(SOURCE), ROCPROF_CLOCK, SOURCE, str(path),
                 meta)
