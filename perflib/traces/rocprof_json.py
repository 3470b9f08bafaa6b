"""rocprofv3 `--output-format json` (`<prefix>_results.json`, also `.json.gz`; FORMATS.md §1.6).

One `json.loads`, then columns built with one comprehension per field. Kernel names come from
`kernel_symbols[kernel_id].formatted_kernel_name` (demangled, without the ` [clone .kd]` suffix,
as the CSV prints it), falling back to `demangled_kernel_name`, then `kernel_name`; `meta`
says which. `device` is the agent's `logical_node_id` (the CSV's relative "Agent N").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from perflib.errors import InputError
from perflib.traces import schema
from perflib.traces.files import load_json
from perflib.traces.rocprof import ROCPROF_CLOCK, ROCPROF_CLOCK_CANDIDATES
from perflib.traces.trace import Trace

SOURCE = "rocprofv3-json"
NAME_FIELDS = ("formatted_kernel_name", "demangled_kernel_name", "kernel_name")


def _columns(records: list[dict], getters: dict[str, Any], path: Path, where: str) -> dict[str, list]:
    """One list per field; a record lacking a field is an `InputError` naming it."""
    try:
        return {name: [get(r) for r in records] for name, get in getters.items()}
    except (KeyError, TypeError, IndexError):
        for i, r in enumerate(records):
            for name, get in getters.items():
                try:
                    get(r)
                except (KeyError, TypeError, IndexError) as exc:
                    raise InputError(
                        path, f"{where}[{i}]", f"a record with its {name} field", repr(exc)
                    ) from exc
        raise


def _op_names(strings: dict, kind_index: int) -> tuple[str, list[str]]:
    try:
        entry = strings["buffer_records"][kind_index]
        return entry.get("kind", ""), list(entry.get("operations", []))
    except (KeyError, IndexError, TypeError):
        return "", []


def _name_of(names: list[str], op: int) -> str:
    return names[op] if 0 <= op < len(names) else f"operation {op}"


def _agents(proc: dict) -> dict[Any, int]:
    """Agent handle -> its logical index (the CSV's relative "Agent N")."""
    out = {}
    for a in proc.get("agents", []) or []:
        handle = (a.get("id") or {}).get("handle")
        out[handle] = int(a.get("logical_node_id", a.get("node_id", -1)))
    return out


def _symbols(proc: dict) -> tuple[dict[int, str], str]:
    """Kernel id -> name, from the first name field that any symbol fills, and that field."""
    symbols = proc.get("kernel_symbols", []) or []
    field_used = next((f for f in NAME_FIELDS if any(s.get(f) for s in symbols[1:])), "kernel_name")
    names: dict[int, str] = {}
    for s in symbols:
        names[int(s.get("kernel_id", len(names)))] = s.get(field_used) or s.get("kernel_name") or ""
    return names, field_used


def _kernel_rows(records: list, names: dict[int, str], agents: dict[Any, int], path: Path,
                 where: str) -> dict[str, Any]:
    cols = _columns(records, {
        "kernel_id": lambda r: r["dispatch_info"]["kernel_id"],
        "start_ns": lambda r: r["start_timestamp"],
        "end_ns": lambda r: r["end_timestamp"],
        "agent": lambda r: r["dispatch_info"]["agent_id"]["handle"],
        "queue": lambda r: r["dispatch_info"]["queue_id"]["handle"],
        "stream": lambda r: (r.get("stream_id") or {}).get("handle", -1),
        "correlation_id": lambda r: r["correlation_id"]["internal"],
    }, path, f"{where}.buffer_records.kernel_dispatch")
    missing = sorted({k for k in set(cols["kernel_id"]) if k not in names})
    if missing:
        raise InputError(path, f"{where}.kernel_symbols", "a symbol for every kernel_id", f"none for {missing[:5]}")
    kernels = {
        "kernel": [names[k] for k in cols["kernel_id"]],
        "start_ns": np.asarray(cols["start_ns"], dtype=np.int64),
        "end_ns": np.asarray(cols["end_ns"], dtype=np.int64),
        "device": np.asarray([agents.get(a, -1) for a in cols["agent"]], dtype=np.int64),
        "queue": np.asarray(cols["queue"], dtype=np.int64),
        "stream": np.asarray(cols["stream"], dtype=np.int64),
        "correlation_id": np.asarray(cols["correlation_id"], dtype=np.int64),
    }
    schema.check_intervals(kernels["start_ns"], kernels["end_ns"], path,
                           lambda i: f"{where}.buffer_records.kernel_dispatch[{i}]")
    return kernels


def _copy_rows(records: list, strings: dict, agents: dict[Any, int], path: Path, where: str) -> dict[str, Any]:
    """Copies named by their direction; `device` is the GPU end of each copy."""
    cols = _columns(records, {
        "kind": lambda r: r["kind"],
        "operation": lambda r: r["operation"],
        "start_ns": lambda r: r["start_timestamp"],
        "end_ns": lambda r: r["end_timestamp"],
        "src": lambda r: r["src_agent_id"]["handle"],
        "dst": lambda r: r["dst_agent_id"]["handle"],
        "stream": lambda r: (r.get("stream_id") or {}).get("handle", -1),
        "correlation_id": lambda r: r["correlation_id"]["internal"],
    }, path, f"{where}.buffer_records.memory_copy")
    op_names = {k: _op_names(strings, k)[1] for k in set(cols["kind"])}
    direction = [_name_of(op_names[k], o) for k, o in zip(cols["kind"], cols["operation"], strict=True)]
    device = [agents.get(s if d.upper().endswith("TO_HOST") else t, -1)
              for d, s, t in zip(direction, cols["src"], cols["dst"], strict=True)]
    copies = {
        "kernel": direction,
        "start_ns": np.asarray(cols["start_ns"], dtype=np.int64),
        "end_ns": np.asarray(cols["end_ns"], dtype=np.int64),
        "device": np.asarray(device, dtype=np.int64),
        "queue": -1,
        "stream": np.asarray(cols["stream"], dtype=np.int64),
        "correlation_id": np.asarray(cols["correlation_id"], dtype=np.int64),
    }
    schema.check_intervals(copies["start_ns"], copies["end_ns"], path,
                           lambda i: f"{where}.buffer_records.memory_copy[{i}]")
    return copies


def _host_rows(buffers: dict, strings: dict, buffer_names: tuple[str, ...], pid: int, path: Path, where: str,
               marker_text: dict | None = None) -> dict[str, Any]:
    """API calls (or markers, whose text `marker_text` gives by correlation id) of the named buffers."""
    rows: dict[str, list] = {k: [] for k in ("name", "start_ns", "end_ns", "tid", "correlation_id", "domain")}
    for buffer in buffer_names:
        cols = _columns(buffers.get(buffer, []) or [], {
            "kind": lambda r: r["kind"],
            "operation": lambda r: r["operation"],
            "start_ns": lambda r: r["start_timestamp"],
            "end_ns": lambda r: r["end_timestamp"],
            "tid": lambda r: r.get("thread_id", -1),
            "correlation_id": lambda r: r["correlation_id"]["internal"],
        }, path, f"{where}.buffer_records.{buffer}")
        ops = {k: _op_names(strings, k) for k in set(cols["kind"])}
        names = [_name_of(ops[k][1], o) for k, o in zip(cols["kind"], cols["operation"], strict=True)]
        if marker_text is not None:
            names = [marker_text.get(c, n) for c, n in zip(cols["correlation_id"], names, strict=True)]
        rows["name"] += names
        rows["domain"] += [ops[k][0] for k in cols["kind"]]
        for c in ("start_ns", "end_ns", "tid", "correlation_id"):
            rows[c] += cols[c]
    out: dict[str, Any] = {k: (np.asarray(v, dtype=np.int64) if k not in ("name", "domain") else v)
                           for k, v in rows.items()}
    out["pid"] = pid
    return out


def _process(proc: dict, path: Path, p_index: int) -> dict[str, Any]:
    """One process's tables: kernels, copies, API calls and markers, as column arrays."""
    where = f"rocprofiler-sdk-tool[{p_index}]"
    if not isinstance(proc, dict) or "buffer_records" not in proc:
        raise InputError(path, where, "a process object with buffer_records (rocprofv3 JSON §1.6)")
    strings = proc.get("strings", {}) or {}
    buffers = proc["buffer_records"] or {}
    pid = int((proc.get("metadata") or {}).get("pid", -1))
    agents = _agents(proc)
    names, field_used = _symbols(proc)
    marker_text = {e["key"]: e.get("value", "") for e in strings.get("marker_api", []) or []
                   if isinstance(e, dict) and "key" in e}
    return {
        "field": field_used,
        "kernels": _kernel_rows(buffers.get("kernel_dispatch", []) or [], names, agents, path, where),
        "copies": _copy_rows(buffers.get("memory_copy", []) or [], strings, agents, path, where),
        "api": _host_rows(buffers, strings, ("hip_api", "hsa_api", "rccl_api"), pid, path, where),
        "markers": _host_rows(buffers, strings, ("marker_api",), pid, path, where, marker_text),
    }


def read_json(path: Path) -> Trace:
    """A rocprofv3 JSON file -> Trace (kernels + copies in one dispatch table, HIP API, markers)."""
    path = Path(path)
    data = load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("rocprofiler-sdk-tool"), list):
        raise InputError(path, "top level", 'an object with a "rocprofiler-sdk-tool" list (rocprofv3 JSON)')
    procs = [_process(p, path, i) for i, p in enumerate(data["rocprofiler-sdk-tool"])]

    def merged(key: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for p in procs:
            n = len(p[key]["start_ns"])
            for col, val in p[key].items():
                if np.isscalar(val):
                    val = np.full(n, val, dtype=np.int64)
                out.setdefault(col, []).append(val)
        return {
            c: (np.concatenate(v) if isinstance(v[0], np.ndarray) else sum(v, [])) for c, v in out.items()
        }

    kernels = {**merged("kernels"), "kind": "kernel"}
    copies = {**merged("copies"), "kind": "memcpy"}
    dispatches = schema.concat(
        [schema.dispatch_frame(kernels, SOURCE, path), schema.dispatch_frame(copies, SOURCE, path)],
        schema.DISPATCH_COLUMNS,
    )
    api = schema.api_frame(merged("api"), SOURCE, path)
    markers = schema.marker_frame(merged("markers"), SOURCE, path)
    meta = {
        "kernel_name_field": procs[0]["field"] if procs else None,
        "processes": len(procs),
        "clock_candidates": ROCPROF_CLOCK_CANDIDATES,
    }
    return Trace(dispatches, api, markers, ROCPROF_CLOCK, SOURCE, str(path), meta)
