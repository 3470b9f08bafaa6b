"""rocprofv3 `<prefix>_results.json` (FORMATS.md §1.6): minimal but complete for the reader."""

from __future__ import annotations

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


def _dispatch_records(k: pd.DataFrame, codes: list[int], handle: dict[int, int], pid: int) -> list[dict[str, Any]]:
    rows = zip(codes, k["start_ns"].tolist(), k["end_ns"].tolist(), k["device"].tolist(), k["queue"].tolist(),
               k["stream"].tolist(), k["correlation_id"].tolist(), strict=True)
    return [{
        "size": 184, "kind": 11, "operation": 2, "thread_id": pid,
        "correlation_id": {"internal": c, "external": 0}, "start_timestamp": s, "end_timestamp": e,
        "dispatch_info": {"size": 72, "agent_id": {"handle": handle[d]}, "queue_id": {"handle": q},
                          "kernel_id": code + 1, "dispatch_id": i + 1, "private_segment_size": 0,
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


def write_rocprof_json(dispatches: pd.DataFrame, path: str | Path, pid: int = 1) -> Path:
    """rocprofv3 `<prefix>_results.json` (§1.6) holding kernels and memory copies."""
    dispatches = complete(dispatches)
    k, m = kernels(dispatches), copies(dispatches)
    codes, uniques = pd.factorize(k["kernel"])
    devices = sorted(set(dispatches["device"].tolist()) | {HOST_AGENT})
    handle = {d: 1000 + i for i, d in enumerate(devices)}
    ops = list(COPY_OPERATIONS) + [n for n in m["kernel"].astype(str).unique() if n not in COPY_OPERATIONS]
    strings = {"buffer_records": [{"kind": "NONE", "operations": []}] * 10 + [
        {"kind": "MEMORY_COPY", "operations": ops}, {"kind": "KERNEL_DISPATCH", "operations": KERNEL_DISPATCH_OPERATIONS}]}
    starts = dispatches["start_ns"]
    metadata = {"pid": pid, "init_time": int(starts.min()) if len(starts) else 0,
                "fini_time": int(dispatches["end_ns"].max()) if len(starts) else 0,
                "node": {"hostname": "perflib-writer"}, "command": ["perflib"], "config": {}}
    buffers = {"kernel_dispatch": _dispatch_records(k, codes.tolist(), handle, pid), "hip_api": [], "hsa_api": [],
               "marker_api": [], "rccl_api": [], "memory_copy": _copy_records(m, ops, handle, pid),
               "memory_allocation": [], "scratch_memory": []}
    process = {"metadata": metadata, "agents": _agents(handle), "counters": [], "strings": strings,
               "code_objects": [], "kernel_symbols": _symbols(list(uniques.astype(str))), "host_functions": [],
               "summary": [], "callback_records": {}, "buffer_records": buffers}
    path = Path(path)
    path.write_text(json.dumps({"rocprofiler-sdk-tool": [process]}))
    return path
