"""rocprofv3 `kernel_trace.csv` in header versions A-E and `memory_copy_trace.csv` (FORMATS.md §1.3-1.5):
numbers bare, strings quoted where needed, as rocprofv3 writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv

from perflib.traces.writers.common import GUID, HOST_AGENT, complete, kernels

_WORKGROUP_GRID = ("Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y",
                   "Grid_Size_Z")
_A = ("Kind", "Agent_Id", "Queue_Id", "Kernel_Id", "Kernel_Name", "Correlation_Id", "Start_Timestamp",
      "End_Timestamp", "Private_Segment_Size", "Group_Segment_Size", *_WORKGROUP_GRID)
_B = (*_A[:3], "Thread_Id", "Dispatch_Id", *_A[3:])
_C = (*_B[:3], "Stream_Id", *_B[3:])
_D = (*_C[:11], "LDS_Block_Size", "Scratch_Size", "VGPR_Count", "Accum_VGPR_Count", "SGPR_Count", *_WORKGROUP_GRID)
_E = ("Guid", *_C[:11], "Lds_Block_Size", "Scratch_Size", "Vgpr_Count", "Accum_Vgpr_Count", "Sgpr_Count",
      *_WORKGROUP_GRID)
KERNEL_HEADERS: dict[str, tuple[str, ...]] = {"A": _A, "B": _B, "C": _C, "D": _D, "E": _E}
"""FORMATS.md §1.4: A ≤6.1 (16 columns), B 6.2/6.3 (18), C (19), D 7.0 (22), E `rocpd convert` (23)."""

_CONSTANTS = {
    "Private_Segment_Size": 0, "Group_Segment_Size": 0, "LDS_Block_Size": 0, "Scratch_Size": 0, "VGPR_Count": 8,
    "Accum_VGPR_Count": 0, "SGPR_Count": 16, "Workgroup_Size_X": 64, "Workgroup_Size_Y": 1, "Workgroup_Size_Z": 1,
    "Grid_Size_X": 1024, "Grid_Size_Y": 1, "Grid_Size_Z": 1, "Thread_Id": 1,
}
"""Columns the dispatch table does not carry, written with plausible constants."""
_SPELLING = {"Lds_Block_Size": "LDS_Block_Size", "Vgpr_Count": "VGPR_Count", "Accum_Vgpr_Count": "Accum_VGPR_Count",
             "Sgpr_Count": "SGPR_Count"}
"""Header E's capitalisation -> D's."""


def _agent_strings(values: np.ndarray) -> Any:
    """`"Agent N"` for 7.0-style files, built per distinct value."""
    uniq, inverse = np.unique(values, return_inverse=True)
    labels = pa.array([f"Agent {int(u)}" for u in uniq])
    return pa.DictionaryArray.from_arrays(pa.array(inverse.astype(np.int32)), labels).cast(pa.string())


def _write_arrow_csv(columns: dict[str, Any], path: Path) -> Path:
    table = pa.table(
        {k: (v if isinstance(v, pa.Array | pa.ChunkedArray) else pa.array(v)) for k, v in columns.items()}
    )
    pacsv.write_csv(table, str(path), write_options=pacsv.WriteOptions(quoting_style="needed"))
    return path


def write_kernel_trace_csv(dispatches: pd.DataFrame, path: str | Path, version: str = "D") -> Path:
    """The kernel rows of `dispatches` as a rocprofv3 `kernel_trace.csv` of header `version`."""
    if version not in KERNEL_HEADERS:
        raise ValueError(f"header version must be one of {sorted(KERNEL_HEADERS)}, not {version!r}")
    df = kernels(complete(dispatches))
    n = len(df)
    codes, _ = pd.factorize(df["kernel"])
    device = df["device"].to_numpy(dtype=np.int64)
    values: dict[str, Any] = {
        "Guid": pa.array(np.full(n, GUID, dtype=object), type=pa.string()),
        "Kind": pa.array(np.full(n, "KERNEL_DISPATCH", dtype=object), type=pa.string()),
        "Agent_Id": _agent_strings(device) if version in ("D", "E") else device,
        "Queue_Id": df["queue"].to_numpy(dtype=np.int64),
        "Stream_Id": df["stream"].to_numpy(dtype=np.int64),
        "Dispatch_Id": np.arange(1, n + 1, dtype=np.int64),
        "Kernel_Id": codes.astype(np.int64) + 1,
        "Kernel_Name": pa.array(df["kernel"].astype("str").to_numpy(dtype=object), type=pa.string()),
        "Correlation_Id": df["correlation_id"].to_numpy(dtype=np.int64),
        "Start_Timestamp": df["start_ns"].to_numpy(dtype=np.int64),
        "End_Timestamp": df["end_ns"].to_numpy(dtype=np.int64),
    }
    columns = {}
    for name in KERNEL_HEADERS[version]:
        key = _SPELLING.get(name, name)
        columns[name] = values[key] if key in values else np.full(n, _CONSTANTS[key], dtype=np.int64)
    return _write_arrow_csv(columns, Path(path))


def write_memory_copy_trace_csv(dispatches: pd.DataFrame, path: str | Path, with_stream: bool = True) -> Path:
    """The memcpy rows as `memory_copy_trace.csv`: 7.0 layout (`Stream_Id`, "Agent N") or ≤6.3.

    `kernel` is written as the `Direction`; the GPU end of the copy is `device`, the host end agent 0.
    """
    dispatches = complete(dispatches)
    df = dispatches[dispatches["kind"] == "memcpy"]
    direction = df["kernel"].astype("str")
    to_host = direction.str.upper().str.endswith("TO_HOST").to_numpy(dtype=bool)
    device = df["device"].to_numpy(dtype=np.int64)
    src = np.where(to_host, device, HOST_AGENT)
    dst = np.where(to_host, HOST_AGENT, device)
    columns = {
        "Kind": np.full(len(df), "MEMORY_COPY", dtype=object),
        "Direction": direction.to_numpy(dtype=object),
        "Stream_Id": df["stream"].to_numpy(dtype=np.int64),
        "Source_Agent_Id": _agent_strings(src) if with_stream else src,
        "Destination_Agent_Id": _agent_strings(dst) if with_stream else dst,
        "Correlation_Id": df["correlation_id"].to_numpy(dtype=np.int64),
        "Start_Timestamp": df["start_ns"].to_numpy(dtype=np.int64),
        "End_Timestamp": df["end_ns"].to_numpy(dtype=np.int64),
    }
    if not with_stream:
        del columns["Stream_Id"]
    return _write_arrow_csv(columns, Path(path))
