"""rocprofv3 `<prefix>_results.json` (FORMATS.md §1.6): minimal but complete for the reader."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pandas as pd

from perflib.traces.writers.common import HOST_AGENT, complete, copies, kernels, to_host

COPY_OPERATIONS = [
    "MEMORY_COPY_NONE",
    "MEMORY_COPY_HOST_TO_HOST",
    "MEMORY_COPY_HOST_TO_DEVICE",
    "MEMORY_COPY_DEVICE_TO_HOST",
    "MEMORY_COPY_DEVICE_TO_DEVICE",
]
KERNEL_DISPATCH_OPERATIONS = ["KERNEL_DISPATCH_NONE", "KERNEL_DISPATCH_ENQUEUE", "KERNEL_DISPATCH_COMPLETE"]


def _agents(handle: dict[int, int]) -> list[dict[str, Any]]:
    return [{"id": {"handle": h}, "type": 1 if d == HOST_AGENT else 2, "name": "cpu" if d == HOST_AGENT else "gfx942",
             "node_id": d, "logical_node_id": d} for d, h in handle.items()]


def _symbols(names: list[str]) -> list[dict[str, Any]]:
    """Entry 0 is rocprofv3's placeholder; kernel i+1 is names[i]."""
    return [{"kernel_id": 0, "kernel_name": "", "formatted_kernel_name": "0", "demangled_kernel_name": "0"}] + [
        {"kernel_id": i + 1, "kernel_name": f"{name}.kd", "formatted_kernel_name": name,
         "demangled_kernel_name": f"{name} [clone .kd]", "truncated_kernel_name": name}
        for i, name in enumerate(names)]


def _dispatch_records(k: pd.DataFrame, codes: list[int], handle: dict[int, int], pid: int,
                      first: int = 0) -> list[dict[str, Any]]:
    rows = zip(codes, k["start_ns"].tolist(), k["end_ns"].tolist(), k["device"].tolist(), k["queue"].tolist(),
               k["stream"].tolist(), k["correlation_id"].tolist(), strict=True)
    return [{
        "size": 184, "kind": 11, "operation": 2, "thread_id": pid,
        "correlation_id": {"internal": c, "external": 0}, "start_timestamp": s, "end_timestamp": e,
        "dispatch_info": {"size": 72, "agent_id": {"handle": handle[d]}, "queue_id": {"handle": q},
                          "kernel_id": code + 1, "dispatch_id": first + i + 1, "private_segment_size": 0,
                          "group_segment_size": 0, "workgroup_size": {"x": 64, "y": 1, "z": 1},
                          "grid_size": {"x": 1024, "y": 1, "z": 1}},
        "stream_id": {"handle": st},
    } for i, (code, s, e, d, q, st, c) in enumerate(rows)]


def _copy_records(m: pd.DataFrame, ops: list[str], handle: dict[int, int], pid: int) -> list[dict[str, Any]]:
    """Copies: the GPU end is `device`, the host end agent 0, the direction an operation of `ops`."""
    names = m["kernel"].astype(str).tolist()
    rows = zip(names, to_host(m["kernel"]), m["start_ns"].tolist(), m["end_ns"].tolist(), m["device"].tolist(),
               m["stream"].tolist(), m["correlation_id"].tolist(), strict=True)
    return [{
        "size": 80, "kind": 10, "operation": ops.index(name), "thread_id": pid,
        "correlation_id": {"internal": c, "external": 0}, "start_timestamp": s, "end_timestamp": e,
        "dst_agent_id": {"handle": handle[HOST_AGENT if host else d]},
        "src_agent_id": {"handle": handle[d if host else HOST_AGENT]},
        "bytes": 0, "stream_id": {"handle": st},
    } for name, host, s, e, d, st, c in rows]


HIP_RUNTIME_API, MARKER_CORE_API, MEMORY_COPY, KERNEL_DISPATCH = 5, 7, 10, 11
"""rocprofv3's buffer tracing kinds (`strings.buffer_records[kind]`) that the writer uses."""
MARKER_OPERATIONS = ["roctxMarkA", "roctxRangePushA", "roctxRangePop", "roctxRangeStartA", "roctxRangeStop"]
SLICE = 100_000
"""Records turned into text at a time: a million dispatches never become a million dicts at once."""


def _host_records(calls: pd.DataFrame, kind: int, operation: list[int], pid: int) -> list[dict[str, Any]]:
    """API calls or markers (`name, start_ns, end_ns`, optional `tid`, `correlation_id`) as buffer records."""
    tid = calls["tid"].tolist() if "tid" in calls else [pid] * len(calls)
    rows = zip(operation, calls["start_ns"].tolist(), calls["end_ns"].tolist(), tid,
               calls["correlation_id"].tolist(), strict=True)
    return [{"size": 64, "kind": kind, "operation": op, "thread_id": t, "correlation_id": {"internal": c, "external": 0},
             "start_timestamp": s, "end_timestamp": e} for op, s, e, t, c in rows]


def _api(api: pd.DataFrame | None, pid: int) -> tuple[list[str], list[dict[str, Any]]]:
    """HIP runtime API calls: their operation names (entry 0 rocprofv3's placeholder) and records."""
    if api is None or not len(api):
        return ["HIP_API_ID_NONE"], []
    codes, uniques = pd.factorize(api["name"].astype(str))
    return ["HIP_API_ID_NONE", *uniques], _host_records(api, HIP_RUNTIME_API, (codes + 1).tolist(), pid)


def _markers(markers: pd.DataFrame | None, pid: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """roctx markers: their texts (`strings.marker_api`, by correlation id) and records (a mark where end == start)."""
    if markers is None or not len(markers):
        return [], []
    ops = [MARKER_OPERATIONS.index("roctxMarkA" if e == s else "roctxRangePushA")
           for s, e in zip(markers["start_ns"].tolist(), markers["end_ns"].tolist(), strict=True)]
    texts = [{"key": c, "value": n} for c, n in zip(markers["correlation_id"].tolist(),
                                                   markers["name"].astype(str).tolist(), strict=True)]
    return texts, _host_records(markers, MARKER_CORE_API, ops, pid)


def _strings(copy_ops: list[str], api_ops: list[str]) -> dict[str, Any]:
    kinds: list[dict[str, Any]] = [{"kind": "NONE", "operations": []} for _ in range(KERNEL_DISPATCH + 1)]
    kinds[HIP_RUNTIME_API] = {"kind": "HIP_RUNTIME_API", "operations": api_ops}
    kinds[MARKER_CORE_API] = {"kind": "MARKER_CORE_API", "operations": MARKER_OPERATIONS}
    kinds[MEMORY_COPY] = {"kind": "MEMORY_COPY", "operations": copy_ops}
    kinds[KERNEL_DISPATCH] = {"kind": "KERNEL_DISPATCH", "operations": KERNEL_DISPATCH_OPERATIONS}
    return {"buffer_records": kinds}


def _process(dispatches: pd.DataFrame, pid: int, api: pd.DataFrame | None,
             markers: pd.DataFrame | None) -> dict[str, Any]:
    """One process object, its kernel_dispatch records left as a callable that makes them slice by slice."""
    dispatches = complete(dispatches)
    k, m = kernels(dispatches), copies(dispatches)
    codes, uniques = pd.factorize(k["kernel"])
    devices = sorted(set(dispatches["device"].tolist()) | {HOST_AGENT})
    handle = {d: 1000 + i for i, d in enumerate(devices)}
    ops = list(COPY_OPERATIONS) + [n for n in m["kernel"].astype(str).unique() if n not in COPY_OPERATIONS]
    api_ops, api_records = _api(api, pid)
    marker_texts, marker_records = _markers(markers, pid)
    starts = dispatches["start_ns"]
    metadata = {"pid": pid, "init_time": int(starts.min()) if len(starts) else 0,
                "fini_time": int(dispatches["end_ns"].max()) if len(starts) else 0,
                "node": {"hostname": "perflib-writer"}, "command": ["perflib"], "config": {}}
    strings = {**_strings(ops, api_ops), "marker_api": marker_texts}

    def dispatch_slices() -> Any:
        for at in range(0, len(k), SLICE):
            yield _dispatch_records(k.iloc[at:at + SLICE], codes[at:at + SLICE].tolist(), handle, pid, at)

    buffers = {"kernel_dispatch": dispatch_slices, "hip_api": api_records, "hsa_api": [],
               "marker_api": marker_records, "rccl_api": [], "memory_copy": _copy_records(m, ops, handle, pid),
               "memory_allocation": [], "scratch_memory": []}
    return {"metadata": metadata, "agents": _agents(handle), "counters": [], "strings": strings,
            "code_objects": [], "kernel_symbols": _symbols(list(uniques.astype(str))), "host_functions": [],
            "summary": [], "callback_records": {}, "buffer_records": buffers}


def _text(processes: list[dict[str, Any]], indent: int | None) -> Any:
    """The file's text in pieces: each process's kernel_dispatch records written a slice at a time."""
    marks = []
    for i, proc in enumerate(processes):
        marks.append(proc["buffer_records"]["kernel_dispatch"])
        proc["buffer_records"]["kernel_dispatch"] = f"@perflib-dispatches-{i}@"
    text = json.dumps({"rocprofiler-sdk-tool": processes}, indent=indent)
    for i, slices in enumerate(marks):
        head, text = text.split(f'"@perflib-dispatches-{i}@"')
        yield head + "["
        for n, records in enumerate(slices()):
            yield ("," if n else "") + json.dumps(records, indent=indent)[1:-1]
        yield "]"
    yield text


def write_rocprof_json(dispatches: pd.DataFrame, path: str | Path, pid: int = 1, api: pd.DataFrame | None = None,
                       markers: pd.DataFrame | None = None, indent: int | None = None) -> Path:
    """rocprofv3 `<prefix>_results.json` (§1.6) holding kernels and memory copies, and where given HIP
    runtime API calls (`api`: name, start_ns, end_ns, correlation_id, optional tid) and roctx markers
    (`markers`: the same columns; a mark where end == start). `indent` as in `json.dumps` (rocprofv3
    writes compact JSON); a `.gz` path is gzipped. The dispatch records are made and written
    `SLICE` at a time, so that a million-dispatch file is written in bounded memory."""
    path = Path(path)
    pieces = _text([_process(dispatches, pid, api, markers)], indent)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", compresslevel=3, encoding="utf-8") as out:
            out.writelines(pieces)
    else:
        with open(path, "w", encoding="utf-8") as out:
            out.writelines(pieces)
    return path
