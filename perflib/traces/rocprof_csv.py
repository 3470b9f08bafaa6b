"""rocprofv3 CSV outputs (FORMATS.md §1.3-1.5): kernel, memory copy, API, marker and stats files.

Headers are matched case-insensitively and the table kind is told from the header, not the file
name (the docs name files freely). Parsing is pyarrow's multi-threaded CSV reader with typed
columns; Python only looks at the file row by row when pyarrow refuses it, to name the line and
column in the error.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from perflib.errors import InputError
from perflib.traces import csvread, files, rocprof_legacy, schema
from perflib.traces.trace import ReadMode

SOURCE = "rocprofv3-csv"

# Table kinds, told from the header.
KERNEL = "kernel_trace"
MEMCPY = "memory_copy_trace"
API = "api_trace"
MEMALLOC = "memory_allocation_trace"
SCRATCH = "scratch_memory_trace"
COUNTERS = "counter_collection"
STATS = "stats"
AGENT_INFO = "agent_info"
LEGACY = rocprof_legacy.TABLE

REQUIRED = {
    KERNEL: ("kernel_name", "start_timestamp", "end_timestamp", "agent_id"),
    MEMCPY: ("direction", "start_timestamp", "end_timestamp", "source_agent_id", "destination_agent_id"),
    API: ("domain", "function", "start_timestamp", "end_timestamp"),
    STATS: ("name", "calls", "totaldurationns", "averagens", "percentage"),
    LEGACY: rocprof_legacy.REQUIRED,
}


def classify(header: list[str]) -> str | None:
    """Which rocprofv3 table a header belongs to, or None."""
    cols = {h.strip().lower() for h in header}
    if "counter_name" in cols:
        return COUNTERS
    if "kernelname" in cols or ("beginns" in cols and "endns" in cols):
        return LEGACY
    if "kernel_name" in cols:
        return KERNEL
    if "direction" in cols:
        return MEMCPY
    if "domain" in cols and "function" in cols:
        return API
    if "name" in cols and "calls" in cols and "totaldurationns" in cols:
        return STATS
    if "alloc_flags" in cols:
        return SCRATCH
    if "allocation_size" in cols or ("operation" in cols and "address" in cols):
        return MEMALLOC
    if "agent_type" in cols and "node_id" in cols:
        return AGENT_INFO
    if "kernel_id" in cols or "dispatch_id" in cols:
        return KERNEL  # a kernel trace that lost Kernel_Name: reported as a missing column
    return None


def kernel_header_version(header: list[str]) -> str:
    """`A` (≤6.1, 16 columns), `B` (6.2/6.3, 18), `C` (19), `D` (7.0, 22) or `E` (rocpd convert)."""
    cols = [h.strip().lower() for h in header]
    if cols and cols[0] == "guid":
        return "E"
    if "lds_block_size" in cols or "vgpr_count" in cols:
        return "D"
    if "stream_id" in cols:
        return "C"
    if "thread_id" in cols or "dispatch_id" in cols:
        return "B"
    return "A"


# --- tables ----------------------------------------------------------------------------------------


def read_kernel_trace(path: Path, header: list[str] | None = None) -> tuple[pd.DataFrame, dict]:
    """`kernel_trace.csv` in every header version A-E -> canonical dispatch table."""
    header = header or csvread.header_of(path)
    names = csvread.columns(path, header, KERNEL, REQUIRED[KERNEL])
    dict_str = pa.dictionary(pa.int32(), pa.string())
    types: dict[str, Any] = {
        names["kernel_name"]: pa.string(),
        names["start_timestamp"]: pa.int64(),
        names["end_timestamp"]: pa.int64(),
        names["agent_id"]: dict_str,
    }
    optional = {c: names.get(c) for c in ("queue_id", "stream_id", "correlation_id")}
    for col in optional.values():
        if col:
            types[col] = pa.int64()
    int_cols = {"start_timestamp", "end_timestamp", "queue_id", "stream_id", "correlation_id"}
    table = csvread.read_arrow(path, header, types, int_cols)
    n = table.num_rows
    data = {
        "kernel": csvread.string_column(table, names["kernel_name"]),
        "start_ns": csvread.int_column(table, names["start_timestamp"], n, path, required=True),
        "end_ns": csvread.int_column(table, names["end_timestamp"], n, path, required=True),
        "device": csvread.agent_column(table, names["agent_id"], n),
        "queue": csvread.int_column(table, optional["queue_id"], n, path),
        "stream": csvread.int_column(table, optional["stream_id"], n, path),
        "correlation_id": csvread.int_column(table, optional["correlation_id"], n, path),
        "kind": "kernel",
    }
    frame = schema.dispatch_frame(data, SOURCE, path, csvread.line_label)
    return frame, {"header_version": kernel_header_version(header), "columns": len(header)}


def read_kernel_trace_lean(path: Path, header: list[str] | None = None, table: Any = None,
                           ids: bool = False) -> tuple[pd.DataFrame, dict]:
    """`kernel_trace.csv` -> a lean dispatch table (`schema.LEAN_DISPATCH_COLUMNS`), for a summary.

    One pass of pyarrow's multi-threaded reader over only the name, start, end and correlation
    columns, the name dictionary-encoded per block: what stays in memory is about 24 bytes a dispatch
    whatever the names' length (the full read holds every name as a Python string). Times are
    checked as in `read_kernel_trace`, and the rows come out in the same order. `table`: those columns
    already parsed (`prefetch.ArrowCSV`, while pandas imported). `ids`: the agent, queue and stream
    columns too, as `read_kernel_trace` reads them.
    """
    header = header or csvread.header_of(path)
    frame = _read_lean(path, header, KERNEL, "kernel_name", "kernel", table, ids)
    return frame, {"header_version": kernel_header_version(header), "columns": len(header), "lean": True}


def read_memory_copy_trace_lean(path: Path, header: list[str] | None = None,
                                ids: bool = False) -> tuple[pd.DataFrame, dict]:
    """`memory_copy_trace.csv` -> a lean table of kind memcpy (`kernel` = the `Direction`; `ids`: the
    device, the copy's GPU end, and stream as in `read_memory_copy_trace`)."""
    header = header or csvread.header_of(path)
    return _read_lean(path, header, MEMCPY, "direction", "memcpy", ids=ids), {"columns": len(header), "lean": True}


_ID_SPECS = {KERNEL: (("agent_id",), ("queue_id", "stream_id")),
             MEMCPY: (("source_agent_id", "destination_agent_id"), ("stream_id",))}
"""Per table, the agent columns (read dictionary-encoded, `csvread.agent_column`) and integer id
columns that a lean read with ids adds."""


def _read_lean(path: Path, header: list[str], spec: str, name_key: str, kind: str, table: Any = None,
               ids: bool = False) -> pd.DataFrame:
    """The lean read of one rocprofv3 CSV: `name_key`'s column as dictionary codes, start, end and
    correlation as int64, every row of kind `kind` (`ids`: with device, queue and stream)."""
    names = csvread.columns(path, header, spec, REQUIRED[spec])
    dict_str = pa.dictionary(pa.int32(), pa.string())
    types: dict[str, Any] = {
        names[name_key]: dict_str,
        names["start_timestamp"]: pa.int64(),
        names["end_timestamp"]: pa.int64(),
    }
    agents, id_ints = _ID_SPECS[spec] if ids else ((), ())
    optional = {c: names.get(c) for c in ("correlation_id", *id_ints)}
    for col in optional.values():
        if col:
            types[col] = pa.int64()
    for key in agents:
        types[names[key]] = dict_str
    if table is None or set(table.column_names) != set(types):
        table = csvread.read_arrow(path, header, types, {"start_timestamp", "end_timestamp", "correlation_id",
                                                         *id_ints}, stream_gzip=True)
    n = table.num_rows
    codes, distinct = csvread.dictionary_codes(table, names[name_key])
    start = csvread.int_column(table, names["start_timestamp"], n, path, required=True)
    end = csvread.int_column(table, names["end_timestamp"], n, path, required=True)
    correlation = csvread.int_column(table, optional["correlation_id"], n, path)
    id_cols = None
    if ids:
        id_cols = {c: csvread.int_column(table, optional.get(f"{c}_id"), n, path) for c in ("queue", "stream")}
        if spec == KERNEL:
            id_cols["device"] = csvread.agent_column(table, names["agent_id"], n)
        else:
            id_cols["device"] = schema.copy_devices(distinct, codes,
                                                    csvread.agent_column(table, names["source_agent_id"], n),
                                                    csvread.agent_column(table, names["destination_agent_id"], n))
    del table
    return schema.lean_dispatch_frame(codes, distinct, start, end, correlation, kind, SOURCE, path,
                                      csvread.line_label, ids=id_cols)


def read_memory_copy_trace(path: Path, header: list[str] | None = None) -> tuple[pd.DataFrame, dict]:
    """`memory_copy_trace.csv` (7.0 with `Stream_Id`, ≤6.3 without) -> dispatch rows of kind memcpy.

    `kernel` is the `Direction` (e.g. `MEMORY_COPY_HOST_TO_DEVICE`); `device` is the GPU end of the
    copy: the source agent for `*_TO_HOST` copies, else the destination agent.
    """
    header = header or csvread.header_of(path)
    names = csvread.columns(path, header, MEMCPY, REQUIRED[MEMCPY])
    dict_str = pa.dictionary(pa.int32(), pa.string())
    types: dict[str, Any] = {
        names["direction"]: pa.string(),
        names["start_timestamp"]: pa.int64(),
        names["end_timestamp"]: pa.int64(),
        names["source_agent_id"]: dict_str,
        names["destination_agent_id"]: dict_str,
    }
    optional = {c: names.get(c) for c in ("stream_id", "correlation_id")}
    for col in optional.values():
        if col:
            types[col] = pa.int64()
    table = csvread.read_arrow(
        path, header, types, {"start_timestamp", "end_timestamp", "stream_id", "correlation_id"}
    )
    n = table.num_rows
    direction = csvread.string_column(table, names["direction"])
    src = csvread.agent_column(table, names["source_agent_id"], n)
    dst = csvread.agent_column(table, names["destination_agent_id"], n)
    codes, distinct = pd.factorize(direction)
    data = {
        "kernel": direction,
        "start_ns": csvread.int_column(table, names["start_timestamp"], n, path, required=True),
        "end_ns": csvread.int_column(table, names["end_timestamp"], n, path, required=True),
        "device": schema.copy_devices(list(distinct), codes, src, dst),
        "queue": None,
        "stream": csvread.int_column(table, optional["stream_id"], n, path),
        "correlation_id": csvread.int_column(table, optional["correlation_id"], n, path),
        "kind": "memcpy",
    }
    return schema.dispatch_frame(data, SOURCE, path, csvread.line_label), {"columns": len(header)}


def read_api_trace(path: Path, header: list[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`*_api_trace.csv` (hip, hsa, marker, rccl, ...; also the Guid form) -> (api, markers).

    Rows whose `Domain` starts with `MARKER` are ROCTx markers (`Function` = the text; a
    `roctxMark` has Start == End); the rest are API calls.
    """
    header = header or csvread.header_of(path)
    names = csvread.columns(path, header, API, REQUIRED[API])
    types: dict[str, Any] = {
        names["domain"]: pa.string(),
        names["function"]: pa.string(),
        names["start_timestamp"]: pa.int64(),
        names["end_timestamp"]: pa.int64(),
    }
    optional = {c: names.get(c) for c in ("process_id", "thread_id", "correlation_id")}
    for col in optional.values():
        if col:
            types[col] = pa.int64()
    table = csvread.read_arrow(
        path, header, types, {"start_timestamp", "end_timestamp", "process_id", "thread_id", "correlation_id"}
    )
    n = table.num_rows
    domain = csvread.string_column(table, names["domain"])
    data = {
        "name": csvread.string_column(table, names["function"]),
        "start_ns": csvread.int_column(table, names["start_timestamp"], n, path, required=True),
        "end_ns": csvread.int_column(table, names["end_timestamp"], n, path, required=True),
        "pid": csvread.int_column(table, optional["process_id"], n, path),
        "tid": csvread.int_column(table, optional["thread_id"], n, path),
        "correlation_id": csvread.int_column(table, optional["correlation_id"], n, path),
        "domain": domain,
    }
    schema.check_intervals(data["start_ns"], data["end_ns"], path, csvread.line_label)
    is_marker = domain.str.upper().str.startswith("MARKER").to_numpy(dtype=bool)
    rows = np.arange(n)

    def subset(mask: np.ndarray) -> dict:
        return {
            k: (v[mask].reset_index(drop=True) if isinstance(v, pd.Series) else v[mask])
            for k, v in data.items()
        }

    def label_of(mask: np.ndarray):
        idx = rows[mask]
        return lambda i: csvread.line_label(int(idx[i]))

    api = schema.api_frame(subset(~is_marker), SOURCE, path, label_of(~is_marker))
    markers = schema.marker_frame(subset(is_marker), SOURCE, path, label_of(is_marker))
    return api, markers


def read_stats(path: Path) -> pd.DataFrame:
    """`kernel_stats.csv`, `domain_stats.csv`, `*_stats.csv` (and legacy `results.stats.csv`).

    Columns `name, calls, total_ns, average_ns, percentage, min_ns, max_ns, stddev`; legacy files
    have no min/max/stddev, which are then NaN (not computed), never 0. A legacy file (no MinNs) names
    kernels as legacy `results.csv` does, `.kd` suffix included: it is dropped as the trace reader drops
    it, so that both name a kernel alike.
    """
    path = Path(path)
    header = csvread.header_of(path)
    if classify(header) != STATS:
        raise InputError(
            path,
            "line 1",
            "a stats header (Name, Calls, TotalDurationNs, AverageNs, Percentage, ...)",
            ",".join(header),
        )
    names = csvread.columns(path, header, STATS, REQUIRED[STATS])
    types: dict[str, Any] = {
        names["name"]: pa.string(),
        names["calls"]: pa.int64(),
        names["totaldurationns"]: pa.int64(),
        names["averagens"]: pa.float64(),
        names["percentage"]: pa.float64(),
    }
    for col in ("minns", "maxns"):
        if col in names:
            types[names[col]] = pa.int64()
    if "stddev" in names:
        types[names["stddev"]] = pa.float64()
    table = csvread.read_arrow(path, header, types, {"calls", "totaldurationns", "minns", "maxns"})

    def col(key: str, dtype: str) -> Any:
        if key not in names:
            return np.full(table.num_rows, np.nan)
        if dtype == "int64":  # Calls, TotalDurationNs: an empty cell is no count
            return csvread.int_column(table, names[key], table.num_rows, path, required=True,
                                      expected="an integer (a count or ns)")
        return table.column(names[key]).to_pandas().astype(dtype)

    name = table.column(names["name"])
    if "minns" not in names:
        name = rocprof_legacy.clean_names(name)
    return pd.DataFrame(
        {
            "name": name.to_pandas().astype("str"),
            "calls": col("calls", "int64"),
            "total_ns": col("totaldurationns", "int64"),
            "average_ns": col("averagens", "float64"),
            "percentage": col("percentage", "float64"),
            "min_ns": col("minns", "float64"),
            "max_ns": col("maxns", "float64"),
            "stddev": col("stddev", "float64"),
        }
    )


def read_csv_table(path: Path) -> tuple[str, pd.DataFrame]:
    """Any rocprofv3 CSV as (kind, DataFrame) with lower-case column names.

    The reader for tables that are not dispatches, API calls or markers (`memory_allocation_trace`,
    `scratch_memory_trace`, `counter_collection`, `agent_info`): timestamps are checked int64 ns
    (end >= start), agent ids (`"Agent 4"`, `4`, empty) become int64 (-1 unknown).
    """
    path = Path(path)
    header = csvread.header_of(path)
    kind = classify(header)
    if kind is None:
        raise InputError(
            path, "line 1", "a rocprofv3 CSV header (kernel, API, copy, stats, ...)", ",".join(header)
        )
    lower = [h.strip().lower() for h in header]
    dict_str = pa.dictionary(pa.int32(), pa.string())
    types: dict[str, Any] = {}
    for raw, low in zip(header, lower, strict=True):
        if low.endswith("_timestamp"):
            types[raw] = pa.int64()
        elif low.endswith("agent_id"):
            types[raw] = dict_str
        elif low in ("kernel_name", "name", "function", "domain", "guid", "counter_name", "address"):
            types[raw] = pa.string()
        else:
            types[raw] = None
    explicit = {k: v for k, v in types.items() if v is not None}
    int_cols = {low for low in lower if low.endswith("_timestamp")}
    source: Any = io.BytesIO(files.read_bytes(path))
    try:
        table = pacsv.read_csv(
            source,
            convert_options=pacsv.ConvertOptions(column_types=explicit, strings_can_be_null=False),
        )
    except pa.ArrowException as exc:
        raise csvread.locate_error(path, header, int_cols, files.said(exc)) from exc
    n = table.num_rows
    out: dict[str, Any] = {}
    for raw, low in zip(header, lower, strict=True):
        if low.endswith("agent_id"):
            out[low] = csvread.agent_column(table, raw, n)
        elif low.endswith("_timestamp"):
            out[low] = csvread.int_column(table, raw, n, path, required=True)
        else:
            out[low] = table.column(raw).to_pandas()
    if "start_timestamp" in out and "end_timestamp" in out:
        schema.check_intervals(out["start_timestamp"], out["end_timestamp"], path, csvread.line_label)
    return kind, pd.DataFrame(out)


# --- whole files and output directories -----------------------------------------------------------

_TRACE_STEMS = {
    "kernel_trace.csv": KERNEL,
    "memory_copy_trace.csv": MEMCPY,
    "marker_api_trace.csv": API,
    "hip_api_trace.csv": API,
    "hsa_api_trace.csv": API,
    "rccl_api_trace.csv": API,
}


def stem_kind(path: Path) -> str | None:
    """rocprofv3's naming: `<prefix>_<stem>.csv` or exactly `<stem>.csv` (also `.csv.gz`)."""
    name = files.base_name(path)
    for stem, kind in _TRACE_STEMS.items():
        if name == stem or name.endswith("_" + stem):
            return kind
    return None


def read_csv_file(path: Path, mode: ReadMode = ReadMode.FULL) -> dict[str, Any]:
    """One CSV file -> parts of a Trace: {'dispatches', 'api', 'markers', 'meta'}; a lean `mode`: the
    dispatches as a lean table (`read_kernel_trace_lean`; LEAN_IDS: with device, queue and stream)."""
    header = csvread.header_of(path)
    kind = classify(header)
    parts: dict[str, Any] = {"meta": {"table": kind}}
    if kind == KERNEL:
        parts["dispatches"], meta = (read_kernel_trace_lean(path, header, ids=mode.ids) if mode.lean
                                     else read_kernel_trace(path, header))
        parts["meta"].update(meta)
    elif kind == MEMCPY:
        parts["dispatches"], meta = (read_memory_copy_trace_lean(path, header, mode.ids) if mode.lean
                                     else read_memory_copy_trace(path, header))
        parts["meta"].update(meta)
    elif kind == API:
        parts["api"], parts["markers"] = read_api_trace(path, header)
    elif kind == LEGACY:
        return rocprof_legacy.read_results_csv(path, header, mode)
    elif kind is None:
        raise InputError(
            path,
            "line 1",
            "a rocprofv3 trace header (kernel_trace, memory_copy_trace, *_api_trace) or legacy results.csv",
            ",".join(header),
        )
    else:
        reader = "read_stats" if kind == STATS else "read_csv_table"
        raise InputError(
            path,
            "line 1",
            f"a trace of dispatches, API calls or markers; this is a {kind} file (read it with "
            f"perflib.traces.{reader})",
        )
    return parts


def find_outputs(directory: Path) -> dict[str, list[Path]]:
    """rocprofv3 outputs under a directory, found by suffix (never by full name)."""
    found: dict[str, list[Path]] = {"csv": [], "db": [], "json": [], "legacy": []}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        name = files.base_name(path)
        if stem_kind(path):
            found["csv"].append(path)
        elif name.endswith("_results.db"):
            found["db"].append(path)
        elif name.endswith("_results.json"):
            found["json"].append(path)
        elif name == "results.csv":
            found["legacy"].append(path)
    return found
