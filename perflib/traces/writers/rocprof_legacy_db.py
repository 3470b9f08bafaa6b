"""A legacy rocprof `results.db` (FORMATS.md §1.8) as rocprof's `tblextr.py` and `sqlitedb.py` write it:
the kernel table created with every column `INTEGER` but `KernelName` `TEXT`, one row per dispatch with
the values as the `results.txt` dispatch line gave them (numbers as integers, `sig` and `obj` as hex
text, the name inside double quotes with its ` [clone .kd]`), then `DurationNs` added and computed
(`dform.post_process_data`). `table="A"` writes the 2019-2021 layout (`vgpr, sgpr, fbar` in place of
`arch_vgpr ... wave_size`). Given host API calls, the `HIP` table `tblextr.fill_api_db` makes of
`hip_api_trace.txt` (`rocprof --hip-trace`) is written too, `DurationNs` added after as there."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pandas as pd

from perflib.traces.writers.common import complete, kernels

COLUMNS = {
    "KERN": ("Index", "KernelName", "gpu-id", "queue-id", "queue-index", "pid", "tid", "grd", "wgr", "lds", "scr",
             "arch_vgpr", "accum_vgpr", "sgpr", "wave_size", "sig", "obj", "DispatchNs", "BeginNs", "EndNs",
             "CompleteNs"),
    "A": ("Index", "KernelName", "gpu-id", "queue-id", "queue-index", "pid", "tid", "grd", "wgr", "lds", "scr",
          "vgpr", "sgpr", "fbar", "sig", "obj", "DispatchNs", "BeginNs", "EndNs", "CompleteNs"),
}
"""The kernel table's columns in `results.csv` order, by table name (before `DurationNs` is added)."""
PID = 2046349
"""The process id written (the one of the finite-difference example's `results.csv`)."""


def _row(table: str, index: int, name: str, device: int, queue: int, start: int, end: int) -> list[object]:
    """One dispatch as `tblextr.py` inserts it: the `results.txt` line's values, by column."""
    values: dict[str, object] = {
        "Index": index, "KernelName": f'"{name} [clone .kd]"', "gpu-id": device, "queue-id": queue,
        "queue-index": index, "pid": PID, "tid": PID, "grd": 1048576, "wgr": 256, "lds": 0, "scr": 0,
        "arch_vgpr": 16, "accum_vgpr": 0, "vgpr": 16, "sgpr": 32, "wave_size": 64, "fbar": 0, "sig": "0x0",
        "obj": f"0x{0x7F28C7C85580 + 64 * index:x}", "DispatchNs": start - 25_000, "BeginNs": start,
        "EndNs": end, "CompleteNs": end + 20_000,
    }
    return [values[c] for c in COLUMNS[table]]


API_COLUMNS = (("BeginNs", "INTEGER"), ("EndNs", "INTEGER"), ("pid", "INTEGER"), ("tid", "INTEGER"),
               ("Name", "TEXT"), ("args", "TEXT"), ("Index", "INTEGER"), ("Data", "TEXT"), ("__section", "INTEGER"),
               ("__lane", "INTEGER"))
"""The `HIP` table's columns and types in `tblextr.api_table_descr` order (before `DurationNs`)."""
HIP_SECTION = 2
"""`tblextr.HIP_PID`: the `__section` of every HIP call (its lane is its thread)."""


def _api_rows(api: pd.DataFrame) -> list[list[object]]:
    """One row per call as `tblextr.fill_api_db` inserts it: the regex groups of its line as text (times,
    pid, tid: SQLite's INTEGER affinity stores them as integers), its name, its arguments as the reformatted
    `( name(value) ...)` text, its correlation id (`Index`), no memory-copy data, section and lane."""
    return [[str(int(s)), str(int(e)), str(int(p)), str(int(t)), str(n), f"( stream({int(t) % 4}) )",
             int(c), "", HIP_SECTION, int(t)]
            for n, s, e, p, t, c in zip(api["name"].astype(str), api["start_ns"], api["end_ns"], api["pid"],
                                        api["tid"], api["correlation_id"], strict=True)]


def write_results_db(dispatches: pd.DataFrame, path: str | Path, table: str = "KERN",
                     api: pd.DataFrame | None = None) -> Path:
    """The kernels of a dispatch table as a legacy rocprof `results.db` (its kernel table, as `rocprof
    --stats -o results.db` leaves it without API tracing), and the `HIP` table of `api` where given (an API
    table: `rocprof --stats --hip-trace`). Copies are not written: legacy rocprof keeps them in its `COPY`
    table only with `--hsa-trace`."""
    if table not in COLUMNS:
        raise ValueError(f"table must be one of {', '.join(COLUMNS)}, not {table!r}")
    k = kernels(complete(dispatches)).sort_values("start_ns", kind="stable")
    path = Path(path)
    if path.exists():
        path.unlink()
    cols = COLUMNS[table]
    con = sqlite3.connect(path)
    try:
        types = ", ".join(f'"{c}" {"TEXT" if c == "KernelName" else "INTEGER"}' for c in cols)
        con.execute(f"CREATE TABLE {table} ({types})")
        rows = [_row(table, i, str(name), int(d), int(q), int(s), int(e)) for i, (name, d, q, s, e) in enumerate(zip(
            k["kernel"].astype(str), k["device"], k["queue"], k["start_ns"], k["end_ns"], strict=True))]
        fields = ",".join(f'"{c}"' for c in cols)
        con.executemany(f"INSERT INTO {table}({fields}) VALUES({','.join('?' * len(cols))});", rows)
        con.commit()
        con.execute(f'ALTER TABLE {table} ADD COLUMN "DurationNs" INTEGER')
        con.execute(f"UPDATE {table} SET DurationNs = (EndNs - BeginNs);")
        con.commit()
        if api is not None:
            con.execute("CREATE TABLE HIP (" + ", ".join(f'"{c}" {t}' for c, t in API_COLUMNS) + ")")
            fields = ",".join(f'"{c}"' for c, _ in API_COLUMNS)
            con.executemany(f"INSERT INTO HIP({fields}) VALUES({','.join('?' * len(API_COLUMNS))});", _api_rows(api))
            con.execute('ALTER TABLE HIP ADD COLUMN "DurationNs" INTEGER')
            con.execute("UPDATE HIP SET DurationNs = (EndNs - BeginNs);")
            con.commit()
    finally:
        con.close()
    return path
