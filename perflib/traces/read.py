"""`read_trace`: the format told from the file, then the one reader that knows its quirks.

Every reader returns a `Trace` in the canonical schema (docs/SCHEMA.md §1); this table is the only
place that knows which reader reads which format.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from perflib.traces import (
    cupti_text,
    kineto,
    kineto_stream,
    nsys,
    parquet,
    rocpd,
    rocprof_csv,
    rocprof_dir,
    rocprof_json,
    rocprof_json_stream,
)
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


LEAN_READERS: dict[str, Callable[[Path, bool], Trace]] = {
    "rocprofv3-dir": lambda p, ids: rocprof_dir.read_directory(p, lean=True, ids=ids),
    "rocprofv3-csv": lambda p, ids: rocprof_dir.read_csv_trace(p, lean=True, ids=ids),
    "rocprofv3-json": rocprof_json_stream.read_json_lean,
    "rocpd": lambda p, ids: rocpd.read_rocpd(p, lean=True, ids=ids),
    "nsys-sqlite": lambda p, ids: nsys.read_nsys(p, lean=True, ids=ids),
    "kineto": kineto_stream.read_kineto_lean,
    "cupti-text": lambda p, ids: cupti_text.read_cupti_text(p, lean=True, ids=ids),
    "perflib-parquet": parquet.read_trace_parquet_lean,
}
"""Format id -> its lean reader `(path, ids)`: dispatches as `schema.LEAN_DISPATCH_COLUMNS` (with `ids`,
`schema.ID_COLUMNS` too), read with bounded memory."""


LEAN_META = ("lean", "api")
"""Meta keys a lean read adds about how it read, not about the file: `lean`, and nsys's note of the
runtime calls it left unread (`api`)."""


def file_meta(trace: Trace) -> dict:
    """The trace's meta without what a lean read adds (`LEAN_META`): what the full read gives."""
    if not trace.meta.get("lean"):
        return trace.meta
    return {k: v for k, v in trace.meta.items() if k not in LEAN_META}


def read_trace(path: str | Path, lean: bool = False, ids: bool = False) -> Trace:
    """Read any supported profiler output (file or rocprofv3 output directory) into a `Trace`.

    `lean`: the dispatch table holds only what a summary reads (`schema.LEAN_DISPATCH_COLUMNS`, names
    as a categorical), read in one pass whose memory grows with the dispatches, not with the file.
    Every figure of `perflib.attribution` is the same to the ns either way. `ids` (with `lean`): the
    device, queue and stream columns too, so the table holds every dispatch column, the names still as
    codes: what a cut writes (`perflib.cut`), about 54 bytes a dispatch.
    """
    path = Path(path)
    fmt = detect_format(path)
    if lean:
        return LEAN_READERS[fmt](path, ids)
    return READERS[fmt](path)


def read_stats(path: str | Path) -> pd.DataFrame:
    """rocprofv3 `*_stats.csv` -> `name, calls, total_ns, average_ns, percentage, min_ns, max_ns, stddev`."""
    return rocprof_csv.read_stats(Path(path))


def read_csv_table(path: str | Path) -> tuple[str, pd.DataFrame]:
    """Any rocprofv3 CSV (allocations, scratch, counters, agent info) as (kind, DataFrame)."""
    return rocprof_csv.read_csv_table(Path(path))
