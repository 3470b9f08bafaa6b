"""A rocprofv3 output file or directory as one `Trace`: kernels and copies merged into one table.

Files are found by rocprofv3's naming suffix (`*_kernel_trace.csv`, `*_memory_copy_trace.csv`,
`*_marker_api_trace.csv`, `*_hip_api_trace.csv`, `*_results.json`, `*_results.db`), never by
full name, anywhere below the directory (the default layout is `<dir>/<host>/<pid>_...`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perflib.errors import InputError
from perflib.traces import rocpd, rocprof_csv, rocprof_json, rocprof_json_stream, rocprof_legacy, schema
from perflib.traces.rocprof import ROCPROF_CLOCK, ROCPROF_CLOCK_CANDIDATES
from perflib.traces.trace import ReadMode, Trace


def _trace(parts: list[dict[str, Any]], source: str, path: Path, meta: dict[str, Any]) -> Trace:
    dispatches = schema.concat(
        [p["dispatches"] for p in parts if "dispatches" in p] or [schema.empty_dispatches(source)],
        schema.DISPATCH_COLUMNS,
    )
    api = schema.concat(
        [p["api"] for p in parts if "api" in p] or [schema.empty_api(source)], schema.API_COLUMNS
    )
    markers = schema.concat(
        [p["markers"] for p in parts if "markers" in p] or [schema.empty_markers(source)],
        schema.MARKER_COLUMNS,
    )
    meta = {"clock_candidates": ROCPROF_CLOCK_CANDIDATES, **meta}
    return Trace(dispatches, api, markers, ROCPROF_CLOCK, source, str(path), meta)


def read_csv_trace(path: Path, mode: ReadMode = ReadMode.FULL) -> Trace:
    """One rocprofv3 (or legacy rocprof) CSV file as a Trace, read in `mode` (`ReadMode`)."""
    return trace_of_parts([rocprof_csv.read_csv_file(path, mode)], path)


def trace_of_parts(parts: list[dict[str, Any]], path: Path) -> Trace:
    """The Trace of one CSV file's parts (`rocprof_csv.read_csv_file`)."""
    part = parts[0]
    source = part.pop("source", rocprof_csv.SOURCE)
    return _trace([part], source, path, dict(part.get("meta", {})))


def read_directory(directory: Path, mode: ReadMode = ReadMode.FULL) -> Trace:
    """Every rocprofv3 trace under `directory`, merged; CSV first, then rocpd, then JSON, then legacy
    rocprof `results.csv`, each read in `mode` (a lean mode reads the JSON as a stream)."""
    found = rocprof_csv.find_outputs(directory)
    if found["csv"]:
        parts = [rocprof_csv.read_csv_file(p, mode) for p in found["csv"]]
        versions = sorted({p["meta"]["header_version"] for p in parts if "header_version" in p["meta"]})
        meta = {"files": [str(p) for p in found["csv"]], "header_versions": versions}
        return _trace(parts, rocprof_csv.SOURCE, directory, meta)
    if found["db"] or found["json"]:
        if found["db"]:
            traces = [rocpd.read_rocpd(p, mode) for p in found["db"]]
        elif mode.lean:
            traces = [rocprof_json_stream.read_json_lean(p, mode.ids) for p in found["json"]]
        else:
            traces = [rocprof_json.read_json(p) for p in found["json"]]
        if len(traces) == 1:
            t = traces[0]
            return Trace(
                t.dispatches,
                t.api,
                t.markers,
                t.clock,
                t.source,
                str(directory),
                {**t.meta, "files": [t.path]},
            )
        parts = [{"dispatches": t.dispatches, "api": t.api, "markers": t.markers} for t in traces]
        meta = {**traces[0].meta, "files": [t.path for t in traces]}
        return _trace(parts, traces[0].source, directory, meta)
    if found["legacy"]:
        parts = [rocprof_legacy.read_results_csv(p, mode=mode) for p in found["legacy"]]
        return _trace(parts, rocprof_legacy.SOURCE, directory, {"files": [str(p) for p in found["legacy"]]})
    raise InputError(
        directory,
        None,
        "rocprofv3 output: files ending in _kernel_trace.csv, _memory_copy_trace.csv, _hip_api_trace.csv, "
        "_marker_api_trace.csv, _results.db or _results.json (or a legacy results.csv)",
        "none below this directory",
    )
