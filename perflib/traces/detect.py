"""Which profiler wrote a file: told from its bytes (and, for CSV, its name), never from a guess.

Light on purpose (no pandas or numpy): `perflib.traces.prefetch` calls it before the heavy imports.
"""

from __future__ import annotations

import re
from pathlib import Path

from perflib.errors import InputError
from perflib.rundir import not_regular
from perflib.traces import files

SQLITE_MAGIC = b"SQLite format 3\x00"
PARQUET_MAGIC = b"PAR1"
NSYS_TABLES = ("StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "TARGET_INFO_SESSION_START_TIME", "NVTX_EVENTS")
_CUPTI_RECORD = re.compile(
    rb"^(CONCURRENT_KERNEL|KERNEL|RUNTIME|DRIVER|MEMCPY|MEMSET)\b.*\[\s*\d+\s*,\s*\d+\s*\]", re.M
)


def sqlite_flavour(path: Path) -> str:
    """`rocpd` or `nsys-sqlite`; anything else is an `InputError` saying what was expected."""
    from perflib.traces import sqlite  # sqlite3 only for databases: not before the Kineto prefetch forks

    try:
        with sqlite.reading(path) as con:
            names = sqlite.objects(con)
    except sqlite.ERRORS as exc:  # a damaged file: the header read, its schema does not
        raise InputError(path, "sqlite_master", "a readable SQLite database", files.said(exc)) from exc
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


def detect_format(path: str | Path) -> str:
    """The format id of a file or directory (`rocprofv3-dir`, `rocprofv3-csv`, `kineto`, ...)."""
    path = Path(path)
    if path.is_dir():
        return "rocprofv3-dir"
    if not path.exists():
        raise InputError(path, None, "an existing trace file or rocprofv3 output directory", "nothing there")
    problem = not_regular(path)
    if problem is not None:  # a FIFO would block the read below forever, a device never end
        raise InputError(path, None, "a trace file (a regular file) or rocprofv3 output directory", problem)
    with open(path, "rb") as fh:
        raw_head = fh.read(16)
    if raw_head.startswith(PARQUET_MAGIC):
        return "perflib-parquet"
    if raw_head.startswith(SQLITE_MAGIC):
        return sqlite_flavour(path)
    head = files.read_head(path)
    name = files.base_name(path)
    stripped = head.lstrip()
    if name.endswith(".csv"):
        return "rocprofv3-csv"
    if stripped.startswith(b"{"):
        if b'"rocprofiler-sdk-tool"' in head:
            return "rocprofv3-json"
        return "kineto"
    if _CUPTI_RECORD.search(head):
        return "cupti-text"
    raise InputError(
        path,
        "byte 0",
        "a known trace format: rocprofv3 CSV/JSON/rocpd, legacy rocprof results.csv, Kineto JSON, "
        "Nsight Systems SQLite, CUPTI activity text or a perflib trace .parquet",
        repr(head[:40]),
    )
