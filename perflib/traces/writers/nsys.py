"""An Nsight Systems `nsys export --type sqlite` database (FORMATS.md §2.1), so that the nsys reader and
what stands on it can be run on exports of any size without a capture.

Two export generations, chosen by `version`, with the tables and columns their exports have:
- `"2022"`: Nsight Systems 2022.2, export schema 2.9.1, as `.schema` prints the public export in
  `shared/fixtures/external/nsys/` (hpcgroup/pipit): `REFERENCES` clauses, metadata in `EXPORT_META_DATA`,
  no `ENUM_*` tables (so a reader cannot name a copy's direction).
- `"2024"`: Nsight Systems 2024.6.2, export schema 3.16.1, as the `.schema` of such an export gives it:
  `greenContextId`, `NVTX_EVENTS.binaryData`, metadata in `META_DATA_EXPORT`, `ENUM_CUDA_MEMCPY_OPER`,
  `ENUM_CUDA_MEM_KIND` and `ENUM_NSYS_EVENT_TYPE` with their rows.

Tables are written lazily, as `nsys export` does by default: a copy, fill, launch or marker table
only where there are rows. Times in an export are ns since the session start, and
`TARGET_INFO_SESSION_START_TIME.utcEpochNs` is that start in Unix ns.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perflib.traces.writers.common import complete
from perflib.traces.writers.cupti_text import (
    COPY_ENDS,
    LAUNCH,
    PROCESS_ID,
    THREAD_ID,
    copy_kinds,
    launch_times,
)


@dataclass(frozen=True)
class Generation:
    """What differs between export generations."""

    product_version: str
    schema_version: str
    meta_table: str
    references: bool
    green_context: bool
    nvtx_binary: bool
    enums: bool


VERSIONS = {
    "2022": Generation("2022.2.1.31", "2.9.1", "EXPORT_META_DATA", True, False, False, False),
    "2024": Generation("2024.6.2.225", "3.16.1", "META_DATA_EXPORT", False, True, True, True),
}
"""`version` -> its generation; the versions are those of the exports the schemas were taken from."""

_NN, _I = "INTEGER   NOT NULL", "INTEGER"
_TIMES = (("start", _NN), ("end", _NN))
_IDS = (("deviceId", _NN), ("contextId", _NN), ("streamId", _NN),
        ("correlationId", "INTEGER   REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)"), ("globalPid", _I))
_GRAPH_NODE = ("graphNodeId", "INTEGER   REFERENCES CUDA_GRAPH_EVENTS(graphNodeId)")
TABLES_2022: dict[str, tuple[tuple[str, str], ...]] = {
    "StringIds": (("id", "INTEGER   NOT NULL   PRIMARY KEY"), ("value", "TEXT      NOT NULL")),
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        *_TIMES, *_IDS, ("demangledName", _NN), ("shortName", _NN), ("mangledName", _I), ("launchType", _I),
        ("cacheConfig", _I), ("registersPerThread", _NN), *((f"{d}{a}", _NN) for d in ("grid", "block")
                                                              for a in "XYZ"),
        ("staticSharedMemory", _NN), ("dynamicSharedMemory", _NN), ("localMemoryPerThread", _NN),
        ("localMemoryTotal", _NN), ("gridId", _NN), ("sharedMemoryExecuted", _I), _GRAPH_NODE,
        ("sharedMemoryLimitConfig", _I)),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        *_TIMES, *_IDS, ("bytes", _NN), ("copyKind", _NN), *((c, _I) for c in (
            "deprecatedSrcId", "srcKind", "dstKind", "srcDeviceId", "srcContextId", "dstDeviceId", "dstContextId",
            "migrationCause")), _GRAPH_NODE, ("virtualAddress", _I)),
    "CUPTI_ACTIVITY_KIND_MEMSET": (*_TIMES, *_IDS, ("value", _NN), ("bytes", _NN), _GRAPH_NODE, ("memKind", _I)),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        *_TIMES, ("eventClass", _NN), ("globalTid", _I), ("correlationId", _I),
        ("nameId", "INTEGER   NOT NULL   REFERENCES StringIds(id)"), ("returnValue", _NN),
        ("callchainId", "INTEGER   REFERENCES CUDA_CALLCHAINS(id)")),
    "NVTX_EVENTS": (
        ("start", _NN), ("end", _I), ("eventType", _NN), ("rangeId", _I), ("category", _I), ("color", _I),
        ("text", "TEXT"), ("globalTid", _I), ("endGlobalTid", _I), ("textId", "INTEGER   REFERENCES StringIds(id)"),
        ("domainId", _I), ("uint64Value", _I), ("int64Value", _I), ("doubleValue", "REAL"), ("uint32Value", _I),
        ("int32Value", _I), ("floatValue", "REAL"), ("jsonTextId", _I), ("jsonText", "TEXT")),
    "TARGET_INFO_SESSION_START_TIME": (("utcEpochNs", _I), ("utcTime", "TEXT"), ("localTime", "TEXT")),
    "PROCESSES": (("globalPid", _I), ("pid", _I), ("name", "TEXT")),
    "ThreadNames": (("nameId", "INTEGER   NOT NULL   REFERENCES StringIds(id)"), ("priority", _I),
                    ("globalTid", _I)),
    "EXPORT_META_DATA": (("name", "TEXT      NOT NULL"), ("value", "TEXT")),
}
"""The tables written, as the 2022.2 export (schema 2.9.1) declares them: names, types, constraints."""

ENUMS_2024 = {
    "ENUM_CUDA_MEMCPY_OPER": [(i, f"CUDA_MEMCPY_KIND_{n}", label) for i, (n, label) in enumerate((
        ("UNKNOWN", "Unknown"), ("HTOD", "Host-to-Device"), ("DTOH", "Device-to-Host"), ("HTOA", "Host-to-Array"),
        ("ATOH", "Array-to-Host"), ("ATOA", "Array-to-Array"), ("ATOD", "Array-to-Device"),
        ("DTOA", "Device-to-Array"), ("DTOD", "Device-to-Device"), ("HTOH", "Host-to-Host"),
        ("PTOP", "Peer-to-Peer"), ("UVM_HTOD", "Unified Host-to-Device"), ("UVM_DTOH", "Unified Device-to-Host"),
        ("UVM_DTOD", "Unified Device-to-Device")))],
    "ENUM_CUDA_MEM_KIND": [(i, f"CUDA_MEMOPR_MEMORY_KIND_{n}", label) for i, (n, label) in enumerate((
        ("PAGEABLE", "Pageable"), ("PINNED", "Pinned"), ("DEVICE", "Device"), ("ARRAY", "Array"),
        ("MANAGED", "Managed"), ("DEVICE_STATIC", "Device Static"), ("MANAGED_STATIC", "Managed Static"),
        ("UNKNOWN", "Unknown")))],
    "ENUM_NSYS_EVENT_TYPE": [(34, "NvtxMark", "NvtxMark"), (59, "NvtxPushPopRange", "NvtxPushPopRange"),
                             (60, "NvtxStartEndRange", "NvtxStartEndRange")],
}
"""The 2024 export's enum tables and their rows (`id, name, label`)."""
MEM_KIND = {"H": 0, "D": 2, "A": 3, "U": 7}
"""Memory end of a copy -> `ENUM_CUDA_MEM_KIND` id."""
NVTX_MARK, NVTX_RANGE = 34, 59
GLOBAL_PID = (1 << 48) | (PROCESS_ID << 24)
"""nsys's serialized GlobalId of the process: the reader takes pid = (id >> 24) & 0xFFFFFF."""
UNIX_MIN_NS = 10**18
"""Times at or after this (2001-09-09) are taken as Unix ns."""
_ROWS = 200_000


def tables(version: str) -> dict[str, tuple[tuple[str, str], ...]]:
    """The columns of every table written for `version`: the 2022 ones, changed as 2024 changed them."""
    gen = generation(version)
    out: dict[str, tuple[tuple[str, str], ...]] = {}
    for name, cols in TABLES_2022.items():
        cols = tuple((c, d if gen.references else re.sub(r"\s+REFERENCES .*$", "", d)) for c, d in cols)
        if gen.green_context and name in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                                          "CUPTI_ACTIVITY_KIND_MEMSET"):
            at = [c for c, _ in cols].index("contextId") + 1
            cols = (*cols[:at], ("greenContextId", _I), *cols[at:])
        if gen.nvtx_binary and name == "NVTX_EVENTS":
            cols = (*cols, ("binaryData", "TEXT"))
        out[gen.meta_table if name == "EXPORT_META_DATA" else name] = cols
    if gen.enums:
        out.update({e: (("id", "INTEGER   NOT NULL   PRIMARY KEY"), ("name", "TEXT"), ("label", "TEXT"))
                    for e in ENUMS_2024})
    return out


def generation(version: str) -> Generation:
    """The generation `version` names; an unknown one is a `ValueError` listing those there are."""
    if version not in VERSIONS:
        raise ValueError(f"nsys export version must be one of {sorted(VERSIONS)}, not {version!r}")
    return VERSIONS[version]


def _create(con: sqlite3.Connection, name: str, cols: Sequence[tuple[str, str]]) -> None:
    """CREATE TABLE laid out as nsys lays it out (one column a line, names padded)."""
    body = ",\n".join(f"    {c:<27} {d}" for c, d in cols)
    con.execute(f"CREATE TABLE {name} (\n{body}\n)")


def _literal(value: Any) -> str:
    """A constant as SQL text (ints, strings without quotes in them, None)."""
    if value is None:
        return "NULL"
    return f"'{value}'" if isinstance(value, str) else str(int(value))


def _insert(con: sqlite3.Connection, table: str, rows: dict[str, Any], n: int) -> None:
    """Insert `n` rows: array or list values are bound row by row (in chunks), scalars written once in the SQL."""
    varying = {c: v for c, v in rows.items() if isinstance(v, np.ndarray | list)}
    names = ", ".join(f'"{c}"' for c in rows)
    values = ", ".join("?" if c in varying else _literal(v) for c, v in rows.items())
    sql = f"INSERT INTO {table} ({names}) VALUES ({values})"
    for first in range(0, n, _ROWS):
        cols = [v[first:first + _ROWS] for v in varying.values()]
        con.executemany(sql, zip(*[c.tolist() if isinstance(c, np.ndarray) else c for c in cols], strict=True))


def short_name(name: str) -> str:
    """nsys's `shortName`: the function's base name, without return type, scope, template arguments
    or parameters (`void ns::gemv<half>(half const*)` -> `gemv`); a name with no parameter list (not a
    demangled signature: `Cijk_...`, a mangled `_Z...`) is its own short name."""
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if ch == "(" and depth <= 0 and i > 0:
            cut = i
            break
    if cut == len(name):
        return name
    head = name[:cut].rstrip()
    if head.endswith(">"):
        depth = 0
        for j in range(len(head) - 1, -1, -1):
            depth += {">": 1, "<": -1}.get(head[j], 0)
            if depth == 0:
                head = head[:j]
                break
    base = head.rsplit(" ", 1)[-1].rsplit("::", 1)[-1]
    return base or name


class _Strings:
    """`StringIds`: each distinct string once, ids from 1 in order of first use."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def of(self, values: Sequence[str]) -> list[int]:
        return [self.ids.setdefault(v, len(self.ids) + 1) for v in values]


def _ints(df: pd.DataFrame, col: str, shift: int = 0) -> np.ndarray:
    """An integer column, less `shift` (the session start, for times)."""
    return df[col].to_numpy(np.int64) - shift


def _write_kernels(con: sqlite3.Connection, k: pd.DataFrame, strings: _Strings, shift: int) -> None:
    """Kernels: names through `StringIds` (the name perflib has is also the mangled one: it does not mangle),
    launch dimensions and resources as constants, `gridId` counting up as the driver assigns it."""
    codes, uniques = pd.factorize(k["kernel"].astype(str))
    names = np.asarray(strings.of(list(uniques)), dtype=np.int64)[codes]
    short = np.asarray(strings.of([short_name(u) for u in uniques]), dtype=np.int64)[codes]
    _insert(con, "CUPTI_ACTIVITY_KIND_KERNEL", {
        "start": _ints(k, "start_ns", shift), "end": _ints(k, "end_ns", shift), "deviceId": _ints(k, "device"),
        "contextId": 1, "streamId": _ints(k, "stream"), "correlationId": _ints(k, "correlation_id"),
        "globalPid": GLOBAL_PID, "demangledName": names, "shortName": short, "mangledName": names, "launchType": 0,
        "cacheConfig": 0, "registersPerThread": 32, "gridX": 16, "gridY": 1, "gridZ": 1, "blockX": 256, "blockY": 1,
        "blockZ": 1, "staticSharedMemory": 0, "dynamicSharedMemory": 0, "localMemoryPerThread": 0,
        "localMemoryTotal": 0, "gridId": np.arange(1, len(k) + 1, dtype=np.int64), "sharedMemoryExecuted": 0,
        "sharedMemoryLimitConfig": 0}, len(k))


def _ids(df: pd.DataFrame, shift: int) -> dict[str, Any]:
    """The columns every GPU activity table starts with."""
    return {"start": _ints(df, "start_ns", shift), "end": _ints(df, "end_ns", shift), "deviceId": _ints(df, "device"),
            "contextId": 1, "streamId": _ints(df, "stream"), "correlationId": _ints(df, "correlation_id"),
            "globalPid": GLOBAL_PID}


def _write_copies_and_sets(con: sqlite3.Connection, df: pd.DataFrame, shift: int) -> None:
    """Copies (copy kind and memory kinds read from each name; sizes unknown, so 0) and fills."""
    kind = df["kind"].astype(str)
    m, s = df[kind == "memcpy"], df[kind == "memset"]
    if len(m):
        kinds = copy_kinds(m["kernel"])
        ends = [COPY_ENDS[c] for c in kinds.tolist()]
        _insert(con, "CUPTI_ACTIVITY_KIND_MEMCPY", {
            **_ids(m, shift), "bytes": 0, "copyKind": kinds, "srcKind": [MEM_KIND[e[0]] for e in ends],
            "dstKind": [MEM_KIND[e[1]] for e in ends]}, len(m))
    if len(s):
        _insert(con, "CUPTI_ACTIVITY_KIND_MEMSET", {**_ids(s, shift), "value": 0, "bytes": 0, "memKind": 2}, len(s))


def _launches(k: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, correlation id) of the launch call of each kernel that has a correlation id."""
    known = k[k["correlation_id"] >= 0]
    begin, end = launch_times(known["start_ns"].to_numpy(np.int64))
    return begin, end, known["correlation_id"].to_numpy(np.int64)


def _write_runtime(con: sqlite3.Connection, launches: tuple[np.ndarray, ...], strings: _Strings, shift: int) -> None:
    """The launch calls, on the stand-in process's launching thread."""
    begin, end, corr = launches
    if len(corr):
        _insert(con, "CUPTI_ACTIVITY_KIND_RUNTIME", {
            "start": begin - shift, "end": end - shift, "eventClass": 0, "globalTid": GLOBAL_PID | THREAD_ID,
            "correlationId": corr, "nameId": strings.of([LAUNCH[0]])[0], "returnValue": 0}, len(corr))


def _global_tids(markers: pd.DataFrame) -> np.ndarray:
    """Each marker's thread as a serialized GlobalId; the stand-in thread where the table has none."""
    n = len(markers)
    pid = markers["pid"].to_numpy(np.int64) if "pid" in markers else np.full(n, -1)
    tid = markers["tid"].to_numpy(np.int64) if "tid" in markers else np.full(n, -1)
    known = (pid >= 0) & (tid >= 0)
    return np.where(known, (1 << 48) | (np.maximum(pid, 0) << 24) | np.maximum(tid, 0), GLOBAL_PID | THREAD_ID)


def _write_markers(con: sqlite3.Connection, markers: pd.DataFrame, shift: int) -> None:
    """NVTX push/pop ranges, and marks (start == end) with no end, their text inline as for unregistered strings."""
    start, end = _ints(markers, "start_ns", shift), _ints(markers, "end_ns", shift)
    mark = start == end
    _insert(con, "NVTX_EVENTS", {
        "start": start, "end": [None if m else e for m, e in zip(mark.tolist(), end.tolist(), strict=True)],
        "eventType": np.where(mark, NVTX_MARK, NVTX_RANGE), "text": markers["name"].astype(str).tolist(),
        "globalTid": _global_tids(markers), "domainId": 0}, len(markers))


def session_start(first_ns: int | None, given: int | None = None) -> int | None:
    """The session start in Unix ns: `given`, else, for times on the Unix clock, the first one rounded
    down to a whole second (so the export's times start within a second, as a capture's do); None
    (unknown) for times on another clock, which are then written as they are."""
    if given is not None:
        return int(given)
    if first_ns is not None and first_ns >= UNIX_MIN_NS:
        return first_ns - first_ns % 1_000_000_000
    return None


def _meta_rows(gen: Generation, path: Path) -> list[tuple[str, str]]:
    """The export's own metadata: what the source export of each generation holds, and the writer."""
    rows = [("EXPORT_PRODUCT_VERSION", gen.product_version), ("EXPORT_SCHEMA_VERSION", gen.schema_version)]
    if gen.meta_table == "EXPORT_META_DATA":  # 2022.2 writes these too (its keys, "OUTUPT" included)
        major, minor, micro = gen.schema_version.split(".")
        rows = [("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), rows[0],
                ("EXPORT_PRODUCT_DATE", gen.product_version.rsplit(".", 2)[0]), rows[1],
                ("EXPORT_SCHEMA_VERSION_MAJOR", major), ("EXPORT_SCHEMA_VERSION_MINOR", minor),
                ("EXPORT_SCHEMA_VERSION_MICRO", micro), ("EXPORT_PLATFORM", "linux-desktop"), ("EXPORT_ARCH", "x64"),
                ("EXPORT_INPUT_FILE", f"{path.stem}.nsys-rep"), ("EXPORT_OUTUPT_FILE", path.name),
                ("EXPORT_LAZY", "true")]
    return [*rows, ("PERFLIB_WRITER", "perflib.traces.writers.nsys")]


def _write_info(con: sqlite3.Connection, gen: Generation, epoch: int | None, path: Path, strings: _Strings) -> None:
    """Session start, the process and its thread, the export metadata and (2024) the enum tables."""
    utc = datetime.fromtimestamp(epoch // 1_000_000_000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S") if epoch else None
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, ?, ?)", (epoch, utc, utc))
    con.execute("INSERT INTO PROCESSES VALUES (?, ?, ?)", (GLOBAL_PID, PROCESS_ID, "perflib-writer"))
    con.execute("INSERT INTO ThreadNames VALUES (?, 0, ?)", (strings.of(["perflib-writer"])[0], GLOBAL_PID | THREAD_ID))
    con.executemany(f"INSERT INTO {gen.meta_table} VALUES (?, ?)", _meta_rows(gen, path))
    if gen.enums:
        for table, rows in ENUMS_2024.items():
            con.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)", rows)


def _present(gen: Generation, df: pd.DataFrame, launches: int, markers: bool) -> set[str]:
    """The tables a lazy export of this content has."""
    kinds = set(df["kind"].astype(str))
    out = {"StringIds", "TARGET_INFO_SESSION_START_TIME", "PROCESSES", "ThreadNames", gen.meta_table}
    out |= set(ENUMS_2024) if gen.enums else set()
    for kind, table in (("kernel", "KERNEL"), ("memcpy", "MEMCPY"), ("memset", "MEMSET")):
        if kind in kinds:
            out.add(f"CUPTI_ACTIVITY_KIND_{table}")
    return out | ({"CUPTI_ACTIVITY_KIND_RUNTIME"} if launches else set()) | ({"NVTX_EVENTS"} if markers else set())


def write_nsys_sqlite(dispatches: pd.DataFrame, path: str | Path, *, markers: pd.DataFrame | None = None,
                      version: str = "2024", runtime: bool = True, session_start_ns: int | None = None) -> Path:
    """The dispatches (and NVTX `markers`: name, start_ns, end_ns, optional pid/tid) as an nsys export.

    Times on the Unix clock are written relative to a session start (`session_start_ns`, else the first
    time's whole second) that goes into `utcEpochNs`, so the reader gives them back in Unix ns. Other
    times are written as they are, with the session start unknown. Ids are written as given. With
    `runtime`, each kernel with a correlation id >= 0 gets its `cudaLaunchKernel_v7000` call.
    """
    gen = generation(version)
    df = complete(dispatches)
    k = df[df["kind"].astype(str) == "kernel"]
    empty = np.zeros(0, np.int64)
    launches = _launches(k) if runtime else (empty, empty, empty)
    marks = markers if markers is not None and len(markers) else None
    starts = [df["start_ns"].to_numpy(np.int64), launches[0],
              marks["start_ns"].to_numpy(np.int64) if marks is not None else empty]
    first = min((int(a.min()) for a in starts if len(a)), default=None)
    epoch = session_start(first, session_start_ns)
    if epoch is not None and first is not None and first < epoch:
        raise ValueError(f"session start {epoch} ns is after the first time {first} ns")
    path = Path(path)
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    try:
        con.execute("PRAGMA synchronous = OFF")
        present = _present(gen, df, len(launches[2]), marks is not None)
        for name, cols in tables(version).items():
            if name in present:
                _create(con, name, cols)
        strings, shift = _Strings(), epoch or 0
        if len(k):
            _write_kernels(con, k, strings, shift)
        _write_copies_and_sets(con, df, shift)
        _write_runtime(con, launches, strings, shift)
        if marks is not None:
            _write_markers(con, marks, shift)
        _write_info(con, gen, epoch, path, strings)
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in strings.ids.items()])
        con.commit()
    finally:
        con.close()
    return path
