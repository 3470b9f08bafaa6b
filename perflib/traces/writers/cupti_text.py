"""CUPTI activity text as the CUDA sample `cupti_trace_injection` prints it (GPU.md; FORMATS.md units),
so that tests and benchmarks of non-PyTorch servers get the file a real H200 capture gives.

The record layouts are those of the sample's `helper_cupti_activity.h` (CUDA 12.x, `PrintActivity`):
a `CONCURRENT_KERNEL` line and two tab-indented lines (grid/block, then device/context/stream ids),
`MEMCPY "HtoD" [ ... ]` and `MEMSET [ ... ]` with one tab-indented id line, and `RUNTIME [ ... ]` for
the launching call. The header lines are those of the project's own H200 capture
(tests/data/traces/cupti_h200_sample.txt.gz). Times are written as given: the format's are Unix ns.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from perflib.traces import files
from perflib.traces.writers.common import complete

HEADER = (
    "Calling CUPTI API: cuptiSubscribe(&globals.subscriberHandle, (CUpti_CallbackFunc)pTraceCallback, pUserData)",
    "Calling CUPTI API: cuptiEnableCallback(1, globals.subscriberHandle, CUPTI_CB_DOMAIN_RUNTIME_API, "
    "CUPTI_RUNTIME_TRACE_CBID_cudaDeviceReset_v3020)",
    "Calling CUPTI API: cuptiEnableCallback(1, globals.subscriberHandle, CUPTI_CB_DOMAIN_STATE, "
    "CUPTI_CBID_STATE_FATAL_ERROR)",
    "Calling CUPTI API: cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted)",
    "Activity buffer size = 8388608 bytes.",
    "Calling CUPTI API: cuptiEnableCallback(1, injectionGlobals.subscriberHandle, CUPTI_CB_DOMAIN_DRIVER_API, "
    "CUPTI_DRIVER_TRACE_CBID_cuProfilerStart)",
    "Calling CUPTI API: cuptiEnableCallback(1, injectionGlobals.subscriberHandle, CUPTI_CB_DOMAIN_DRIVER_API, "
    "CUPTI_DRIVER_TRACE_CBID_cuProfilerStop)",
    "Calling CUPTI API: cuptiEnableCallback(1, injectionGlobals.subscriberHandle, CUPTI_CB_DOMAIN_RUNTIME_API, "
    "CUPTI_RUNTIME_TRACE_CBID_cudaDeviceReset_v3020)",
    *(f"Enabling CUPTI_ACTIVITY_KIND_{k}." for k in (
        "MEMCPY", "MEMSET", "DRIVER", "RUNTIME", "CONCURRENT_KERNEL", "NAME", "MARKER", "MARKER_DATA", "OVERHEAD",
        "MEMCPY2", "MEMORY2")),
)
"""What the sample prints before its first record (copied from the H200 capture)."""

MEMCPY_KINDS = ("UNKNOWN", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP")
"""`CUpti_ActivityMemcpyKind` by value, as `GetMemcpyKindString` prints it. Nsight Systems'
`ENUM_CUDA_MEMCPY_OPER` has the same values, plus 11-13 for unified-memory copies."""
COPY_ENDS = {0: "UU", 1: "HD", 2: "DH", 3: "HA", 4: "AH", 5: "AA", 6: "AD", 7: "DA", 8: "DD", 9: "HH", 10: "DD",
             11: "HD", 12: "DH", 13: "DD"}
"""Copy kind -> (source, destination) memory: Host, Device, Array, Unknown."""
_PAIR_KIND = {"HD": 1, "DH": 2, "HA": 3, "AH": 4, "AA": 5, "AD": 6, "DA": 7, "DD": 8, "HH": 9, "PP": 10}
_UNIFIED_KIND = {"HD": 11, "DH": 12, "DD": 13}
_LONG = re.compile(r"(UNIFIED[ _])?(HOST|DEVICE|ARRAY|PEER)[-_ ]?TO[-_ ]?(HOST|DEVICE|ARRAY|PEER)")
_SHORT = re.compile(r"\b([HDAP])(?:TO|2)([HDAP])\b")
_MEMORY = {"H": "PAGEABLE", "D": "DEVICE", "A": "ARRAY", "U": "UNKNOWN"}

LAUNCH = ("cudaLaunchKernel_v7000", 211)
"""The runtime call that launches a kernel, and its CUPTI callback id (as in the H200 capture)."""
PROCESS_ID, THREAD_ID = 4242, 4243
"""The stand-in process and its launching thread."""
CHUNK_ROWS = 200_000
GZIP_LEVEL = 3


def copy_kind(name: str) -> int:
    """The CUPTI / nsys copy-kind value a copy's name spells, in any profiler's words: `Memcpy HtoD`,
    `Memcpy Host-to-Device`, `MEMORY_COPY_DEVICE_TO_HOST`, `D2H`; 0 (unknown) when none."""
    upper = name.upper()
    m = _LONG.search(upper)
    if m:
        pair = m[2][0] + m[3][0]
        return (_UNIFIED_KIND if m[1] else _PAIR_KIND).get(pair, _PAIR_KIND.get(pair, 0))
    m = _SHORT.search(upper)
    return _PAIR_KIND.get(m[1] + m[2], 0) if m else 0


def copy_kinds(names: pd.Series) -> np.ndarray:
    """`copy_kind` of each name, parsed once per distinct name."""
    codes, uniques = pd.factorize(names.astype(str))
    return np.asarray([copy_kind(u) for u in uniques], dtype=np.int64)[codes] if len(codes) else np.zeros(0, int)


def launch_times(starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A launch call per kernel on one host thread: it ends 500 ns before its kernel starts and lasts
    up to 2.5 us, never overlapping the previous launch (so a busy stream looks like a real one)."""
    order = np.argsort(starts, kind="stable")
    s = starts[order]
    end = np.maximum(s - 500, 0)
    prev_end = np.concatenate(([0], end[:-1]))
    begin = np.minimum(np.maximum(np.maximum(s - 3000, prev_end), 0), end)
    out_begin, out_end = np.empty_like(starts), np.empty_like(starts)
    out_begin[order], out_end[order] = begin, end
    return out_begin, out_end


def _text(values: np.ndarray | list) -> pa.Array:
    """Integers (or strings) as a string array: the formatting is done in Arrow's C loops. 64-bit
    offsets, so that a chunk of long (mangled) names cannot overflow them."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        return pa.array(values, type=pa.int64()).cast(pa.large_string())
    codes, uniques = pd.factorize(pd.Series(values, dtype=object))
    return pa.array(list(uniques), type=pa.large_string()).take(pa.array(codes, type=pa.int32()))


def _join(*pieces: pa.Array | str) -> pa.Array:
    """Row by row, the pieces (arrays, or one string for every row) concatenated."""
    return pc.binary_join_element_wise(*(_large(p) for p in pieces), _large(""))


def _large(piece: pa.Array | str) -> pa.Array | pa.Scalar:
    """A string as a 64-bit-offset scalar, so that it joins with the arrays."""
    return pa.scalar(piece, pa.large_string()) if isinstance(piece, str) else piece


def _col(df: pd.DataFrame, name: str) -> pa.Array:
    """An integer column as text."""
    return _text(df[name].to_numpy(np.int64))


def _kernel_lines(df: pd.DataFrame, runtime: bool) -> pa.Array:
    """CONCURRENT_KERNEL records, each followed by its RUNTIME launch record as the sample prints them
    (launch times in `launch_begin` / `launch_end`; none for a kernel without a correlation id)."""
    s, e = df["start_ns"].to_numpy(np.int64), df["end_ns"].to_numpy(np.int64)
    corr = _col(df, "correlation_id")
    launch: pa.Array | str = ""
    if runtime:
        b, x = df["launch_begin"].to_numpy(np.int64), df["launch_end"].to_numpy(np.int64)
        record = _join("RUNTIME [ ", _text(b), ", ", _text(x), " ] duration ", _text(x - b), f', "{LAUNCH[0]}", '
                       f"cbid {LAUNCH[1]}, processId {PROCESS_ID}, threadId {THREAD_ID}, correlationId ", corr, "\n")
        launch = pc.if_else(pa.array(df["correlation_id"].to_numpy() >= 0), record, _large(""))
    return _join("CONCURRENT_KERNEL [ ", _text(s), ", ", _text(e), " ] duration ", _text(e - s), ', "',
                 _text(df["kernel"].tolist()), '", correlationId ', corr, ", cacheConfigRequested 0, "
                 "cacheConfigExecuted 0\n\tgrid [ 16, 1, 1 ], block [ 256, 1, 1 ], cluster [ 0, 0, 0 ], "
                 "sharedMemory (static 0, dynamic 0)\n\tdeviceId ", _col(df, "device"), ", contextId 1, streamId ",
                 _col(df, "stream"), ", graphId 0, graphNodeId 0, channelId 0, channelType COMPUTE\n", launch)


def _cupti(kind: int) -> int:
    """Nsight's unified-memory copy kinds (11-13) as the CUPTI kind CUPTI prints for them."""
    return {11: 1, 12: 2, 13: 8}.get(kind, kind)


def _copy_lines(df: pd.DataFrame) -> pa.Array:
    """MEMCPY records, the copy kind and memory kinds read from each copy's name."""
    kinds = copy_kinds(df["kernel"]).tolist()
    head = [f'MEMCPY "{MEMCPY_KINDS[_cupti(k)]}" [ ' for k in kinds]
    ends = [f", srcKind {_MEMORY[COPY_ENDS[k][0]]}, dstKind {_MEMORY[COPY_ENDS[k][1]]}, correlationId " for k in kinds]
    s, e = df["start_ns"].to_numpy(np.int64), df["end_ns"].to_numpy(np.int64)
    return _join(_text(head), _text(s), ", ", _text(e), " ] duration ", _text(e - s), ", size 0, copyCount 1",
                 _text(ends), _col(df, "correlation_id"), "\n\tdeviceId ", _col(df, "device"),
                 ", contextId 1, streamId ", _col(df, "stream"),
                 ", graphId 0, graphNodeId 0, channelId 0, channelType ASYNC_MEMCPY\n")


def _set_lines(df: pd.DataFrame) -> pa.Array:
    """MEMSET records."""
    s, e = df["start_ns"].to_numpy(np.int64), df["end_ns"].to_numpy(np.int64)
    return _join("MEMSET [ ", _text(s), ", ", _text(e), " ] duration ", _text(e - s), ", value 0, size 0, "
                 "correlationId ", _col(df, "correlation_id"), "\n\tdeviceId ", _col(df, "device"),
                 ", contextId 1, streamId ", _col(df, "stream"),
                 ", graphId 0, graphNodeId 0, channelId 0, channelType COMPUTE\n")


def _chunk_bytes(chunk: pd.DataFrame, runtime: bool) -> memoryview:
    """One chunk's records in table order: each kind formatted in one pass, then put back in order,
    and the string array's data buffer handed out as it is (no Python string per record)."""
    kind = chunk["kind"].astype(str).to_numpy()
    parts, rows = [], []
    for value, lines in (("kernel", lambda d: _kernel_lines(d, runtime)), ("memcpy", _copy_lines),
                         ("memset", _set_lines)):
        where = np.flatnonzero(kind == value)
        if where.size:
            parts.append(lines(chunk.iloc[where]))
            rows.append(where)
    if not parts:
        return memoryview(b"")
    text = pa.concat_arrays(parts).take(pa.array(np.argsort(np.concatenate(rows), kind="stable")))
    offsets = np.frombuffer(text.buffers()[1], dtype=np.int64)[text.offset:text.offset + len(text) + 1]
    return memoryview(text.buffers()[2])[offsets[0]:offsets[-1]]


def _check_names(names: pd.Series) -> None:
    """A record is one line: a name with a line break cannot be written (the format has no escaping)."""
    bad = names[names.str.contains(r"[\r\n]", regex=True)]
    if len(bad):
        raise ValueError(f"kernel name {bad.iloc[0]!r} has a line break: CUPTI text cannot carry it")


def write_cupti_text(dispatches: pd.DataFrame, path: str | Path, *, runtime: bool = True,
                     header: bool = True) -> Path:
    """The dispatches as `cupti_trace_injection` stdout (gzip where `path` ends in `.gz`), written in chunks.

    Ids are written as given (a real capture has no -1; give real ones for a realistic file). With
    `runtime`, each kernel with a correlation id >= 0 gets its `cudaLaunchKernel_v7000` RUNTIME record.
    Copies carry a copy kind, not a name: the reader names them `Memcpy <kind>`, fills `Memset`.
    """
    df = complete(dispatches)
    df = df.assign(kernel=df["kernel"].astype(str))
    _check_names(df["kernel"])
    if runtime:  # over all kernels at once, so that launches do not overlap at chunk edges
        begin, end = np.zeros(len(df), np.int64), np.zeros(len(df), np.int64)
        is_kernel = (df["kind"].astype(str) == "kernel").to_numpy()
        begin[is_kernel], end[is_kernel] = launch_times(df["start_ns"].to_numpy(np.int64)[is_kernel])
        df = df.assign(launch_begin=begin, launch_end=end)
    path = Path(path)
    gz = files.is_gzip_name(path)
    with open(path, "wb") as raw:
        # No file name or time in the gzip header: the same table gives the same bytes.
        fh = gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=GZIP_LEVEL, mtime=0) if gz else raw
        with fh:
            if header:
                fh.write(("\n".join(HEADER) + "\n").encode())
            for first in range(0, len(df), CHUNK_ROWS):
                fh.write(_chunk_bytes(df.iloc[first:first + CHUNK_ROWS], runtime))
    return path
