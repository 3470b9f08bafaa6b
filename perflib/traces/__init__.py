"""Every profiler's output as one canonical trace: dispatches, API calls and markers in int64 ns.

`read_trace(path)` tells the format from the file (or rocprofv3 output directory) and calls the
one reader that knows its quirks (`perflib.traces.read.READERS`); docs/SCHEMA.md §1 is the contract.

- `trace`: the `Trace` record; `schema`: the canonical tables, their dtypes and checks.
- `detect`: the format of a file, from its bytes; `files`: raw bytes, gzip and JSON.
- readers: `rocprof_csv`, `rocprof_dir`, `rocprof_json`, `rocpd`, `rocprof_legacy`, `kineto`, `nsys`,
  `cupti_text`, `parquet`; shared by some of them: `csvread`, `sqlite`, `rocprof`.
- `kineto_stream`, `rocprof_json_stream`: a Kineto or rocprofv3 JSON file read in chunks of whole
  events or records into lean tables (`read_trace(path, lean=True)`: only the columns a summary reads,
  memory bounded by the dispatches), both on `json_stream` (a large JSON file walked as a stream).
- `prefetch`: a large Kineto file streamed into tables by a forked child while pandas imports.
- `writers`: a dispatch table written out in the profilers' own formats (tests, benchmarks).

Importing this package stays cheap (no pandas, numpy or pyarrow): the readers load on the first
`read_trace`, so that format detection and the Kineto prefetch run before the heavy imports.
"""

from __future__ import annotations

from typing import Any

from perflib.traces.detect import detect_format
from perflib.traces.trace import Trace

__all__ = ["Trace", "detect_format", "read_csv_table", "read_stats", "read_trace"]

_READ = ("read_trace", "read_stats", "read_csv_table")


def __getattr__(name: str) -> Any:
    """`read_trace`, `read_stats` and `read_csv_table` load the readers on first use."""
    if name in _READ:
        from perflib.traces import read

        return getattr(read, name)
    raise AttributeError(f"module 'perflib.traces' has no attribute {name!r}")
