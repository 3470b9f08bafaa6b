"""Every profiler's output as one canonical trace: dispatches, API calls and markers in int64 ns.

`read_trace(path, mode)` tells the format from the file (or rocprofv3 output directory) and calls the
one reader that knows its quirks; `formats.FORMATS` is the registry, one entry per format (detect,
read, write); docs/SCHEMA.md §1 is the contract. What this package exports is its public face: nothing
outside `perflib.traces` imports a reader module (`tests/test_architecture.py`).

- `trace`: the `Trace` record and `ReadMode` (FULL, LEAN, LEAN_IDS); `schema`: the canonical tables,
  their dtypes and checks.
- `formats`: the registry, `detect_format` and `read_trace`; `detect`: what detection reads of a file;
  `files`: raw bytes, gzip and JSON.
- readers: `rocprof_csv`, `rocprof_dir`, `rocprof_json`, `rocpd`, `rocprof_legacy`, `kineto`, `nsys`,
  `cupti_text`, `parquet`; shared by some of them: `csvread`, `sqlite`, `rocprof`.
- `kineto_stream`, `rocprof_json_stream`: a Kineto or rocprofv3 JSON file read in chunks of whole
  events or records into lean tables (`ReadMode.LEAN`: only the columns a summary reads, memory
  bounded by the dispatches), both on `json_stream` (a large JSON file walked as a stream).
- `prefetch`: a large Kineto file streamed into tables by a forked child while pandas imports
  (`start_prefetch`).
- `writers`: a dispatch table written out in the profilers' own formats (tests, benchmarks).

Importing this package stays cheap (no pandas, numpy or pyarrow): a reader loads on the first read of
its format, so that format detection and the Kineto prefetch run before the heavy imports.
`write_trace_parquet` writes perflib's own trace file (a cut) from a `Trace`, its host API calls and its
markers beside it (`write_side_parquet`, `write_api_parquet`, `api_path`, `markers_path`); `companion_files`
names the files a read of a path reads besides it.
"""

from __future__ import annotations

from perflib.traces.formats import (
    FORMATS,
    TraceFormat,
    detect_format,
    file_meta,
    read_csv_table,
    read_stats,
    read_trace,
)
from perflib.traces.parquet import (
    api_path,
    companion_files,
    host_start,
    markers_path,
    write_api_parquet,
    write_side_parquet,
    write_trace_parquet,
)
from perflib.traces.prefetch import Prefetched, start_prefetch
from perflib.traces.trace import ReadMode, Trace

__all__ = ["FORMATS", "Prefetched", "ReadMode", "Trace", "TraceFormat", "api_path", "companion_files", "detect_format", "file_meta",
           "host_start", "markers_path", "read_csv_table", "read_stats", "read_trace", "start_prefetch", "write_api_parquet",
           "write_side_parquet", "write_trace_parquet"]
