"""A canonical dispatch table written out in the profilers' own formats, so that every reader can be
checked against the same dispatches (and benchmarks get large, realistic inputs). All vectorised:
a million rows take seconds.

- `rocprof_csv`: rocprofv3 `kernel_trace.csv` (header versions A-E) and `memory_copy_trace.csv`.
- `rocprof_json`: rocprofv3 `--output-format json`.
- `rocpd`: rocpd SQLite.
- `rocprof_legacy_db`: legacy rocprof `results.db` (its `KERN` table; `A` before 2021).
- `kineto`: PyTorch profiler (Kineto) JSON.
- `nsys`: Nsight Systems `nsys export --type sqlite` (2022 and 2024 export generations).
- `cupti_text`: the CUPTI activity text the CUDA sample `cupti_trace_injection` prints.
- `perf_script`: `perf script` text, one sample a row.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from perflib.traces import schema
from perflib.traces.writers.common import GUID, HOST_AGENT
from perflib.traces.writers.cupti_text import write_cupti_text
from perflib.traces.writers.kineto import write_kineto_json
from perflib.traces.writers.nsys import write_nsys_sqlite
from perflib.traces.writers.perf_script import write_perf_script
from perflib.traces.writers.rocpd import write_rocpd
from perflib.traces.writers.rocprof_csv import (
    KERNEL_HEADERS,
    write_kernel_trace_csv,
    write_memory_copy_trace_csv,
)
from perflib.traces.writers.rocprof_json import write_rocprof_json
from perflib.traces.writers.rocprof_legacy_db import write_results_db

__all__ = ["GUID", "HOST_AGENT", "KERNEL_HEADERS", "write_all", "write_cupti_text", "write_kernel_trace_csv",
           "write_kineto_json", "write_memory_copy_trace_csv", "write_nsys_sqlite", "write_perf_script", "write_results_db", "write_rocpd",
           "write_rocprof_json"]


def write_all(dispatches: pd.DataFrame, directory: str | Path) -> dict[str, Path]:
    """Every format at once (for cross-checks): returns {format label: path}."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    schema.validate(dispatches, schema.DISPATCH_COLUMNS)
    out = {
        f"csv-{v}": write_kernel_trace_csv(dispatches, directory / f"v{v}_kernel_trace.csv", v)
        for v in KERNEL_HEADERS
    }
    out["csv-copy"] = write_memory_copy_trace_csv(dispatches, directory / "x_memory_copy_trace.csv")
    out["json"] = write_rocprof_json(dispatches, directory / "x_results.json")
    out["rocpd"] = write_rocpd(dispatches, directory / "x_results.db")
    out["kineto"] = write_kineto_json(dispatches, directory / "x_kineto.json")
    return out
