"""Every profiler's output as one canonical trace: dispatches, API calls and markers in int64 ns.

`read_trace(path)` tells the format from the file (or rocprofv3 output directory) and calls the
one reader that knows its quirks; docs/SCHEMA.md §1 is the contract. Readers import pandas and
pyarrow lazily, so importing this package stays cheap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflib.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Trace", "detect_format", "read_trace", "read_stats", "read_csv_table"]

SQLITE_MAGIC = b"SQLite format 3\x00"
_CUPTI_RECORD = re.compile(
    rb"^(CONCURRENT_KERNEL|KERNEL|RUNTIME|DRIVER|MEMCPY|MEMSET)\b.*\[\s*\d+\s*,\s*\d+\s*\]", re.M
)


@dataclass(frozen=True, eq=False)
class Trace:
    """One profiler output: dispatch, API and marker tables on one clock (docs/SCHEMA.md §1)."""

    dispatches: pd.DataFrame
    api: pd.DataFrame
    markers: pd.DataFrame
    clock: str
    source: str
    path: str
    meta: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return (
            f"Trace(source={self.source!r}, path={self.path!r}, clock={self.clock!r}, "
            f"dispatches={len(self.dispatches)}, api={len(self.api)}, markers={len(self.markers)})"
        )


def detect_format(path: str | Path) -> str:
    """The format id of a file or directory (`rocprofv3-dir`, `rocprofv3-csv`, `kineto`, ...)."""
    from perflib.traces import files

    path = Path(path)
    if path.is_dir():
        return "rocprofv3-dir"
    if not path.exists():
        raise InputError(path, None, "an existing trace file or rocprofv3 output directory", "nothing there")
    with open(path, "rb") as fh:
        raw_head = fh.read(16)
    if raw_head.startswith(b"PAR1"):
        return "perflib-parquet"
    if raw_head.startswith(SQLITE_MAGIC):
        from perflib.traces import rocpd

        return rocpd.sqlite_flavour(path)
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


def read_trace(path: str | Path) -> Trace:
    """Read any supported profiler output (file or rocprofv3 output directory) into a `Trace`."""
    path = Path(path)
    fmt = detect_format(path)
    if fmt == "rocprofv3-dir":
        from perflib.traces import rocprof_dir

        return rocprof_dir.read_directory(path)
    if fmt == "rocprofv3-csv":
        from perflib.traces import rocprof_dir

        return rocprof_dir.read_csv_trace(path)
    if fmt == "rocprofv3-json":
        from perflib.traces import rocprof_json

        return rocprof_json.read_json(path)
    if fmt == "rocpd":
        from perflib.traces import rocpd

        return rocpd.read_rocpd(path)
    if fmt == "nsys-sqlite":
        from perflib.traces import nsys

        return nsys.read_nsys(path)
    if fmt == "kineto":
        from perflib.traces import kineto

        return kineto.read_kineto(path)
    if fmt == "cupti-text":
        from perflib.traces import cupti_text

        return cupti_text.read_cupti_text(path)
    if fmt == "perflib-parquet":
        from perflib.traces import parquet

        return parquet.read_trace_parquet(path)
    raise InputError(path, None, "a known trace format", fmt)  # pragma: no cover


def read_stats(path: str | Path) -> pd.DataFrame:
    """rocprofv3 `*_stats.csv` -> `name, calls, total_ns, average_ns, percentage, min_ns, max_ns, stddev`."""
    from perflib.traces import rocprof_csv

    return rocprof_csv.read_stats(Path(path))


def read_csv_table(path: str | Path) -> tuple[str, pd.DataFrame]:
    """Any rocprofv3 CSV (allocations, scratch, counters, agent info) as (kind, DataFrame)."""
    from perflib.traces import rocprof_csv

    return rocprof_csv.read_csv_table(Path(path))
