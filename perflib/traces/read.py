"""`read_trace`: the format told from the file, then the one reader that knows its quirks.

Every reader returns a `Trace` in the canonical schema (docs/SCHEMA.md §1); this table is the only
place that knows which reader reads which format.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from perflib.traces import cupti_text, kineto, nsys, parquet, rocpd, rocprof_csv, rocprof_dir, rocprof_json
from perflib.traces.detect import detect_format
from perflib.traces.trace import Trace

if TYPE_CHECKING:
    import pandas as pd

READERS: dict[str, Callable[[Path], Trace]] = {
    "rocprofv3-dir": rocprof_dir.read_directory,
    "rocprofv3-csv": rocprof_dir.read_csv_trace,
    "rocprofv3-json": rocprof_json.read_json,
    "rocpd": rocpd.read_rocpd,
    "nsys-sqlite": nsys.read_nsys,
    "kineto": kineto.read_kineto,
    "cupti-text": cupti_text.read_cupti_text,
    "perflib-parquet": parquet.read_trace_parquet,
}
"""Format id (`perflib.traces.detect.detect_format`) -> its reader."""


def read_trace(path: str | Path) -> Trace:
    """Read any supported profiler output (file or rocprofv3 output directory) into a `Trace`."""
    path = Path(path)
    return READERS[detect_format(path)](path)


def read_stats(path: str | Path) -> pd.DataFrame:
    """rocprofv3 `*_stats.csv` -> `name, calls, total_ns, average_ns, percentage, min_ns, max_ns, stddev`."""
    return rocprof_csv.read_stats(Path(path))


def read_csv_table(path: str | Path) -> tuple[str, pd.DataFrame]:
    """Any rocprofv3 CSV (allocations, scratch, counters, agent info) as (kind, DataFrame)."""
    return rocprof_csv.read_csv_table(Path(path))
