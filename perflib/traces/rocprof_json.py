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


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
CAUGHT = (KeyError, TypeError, IndexError, AttributeError)
"""What a getter raises on a record lacking a field or of the wrong shape."""


def _columns(records: list, getters: dict[str, Any], path: Path, where: str) -> dict[str, list]:
    """One list per field; a record lacking a field, or not shaped as one, is an `InputError` naming it."""
    if not isinstance(records, list):
        raise InputError(path, where, "a list of records", type(records).__name__)
    try:
        return {name: [get(r) for r in records] for name, get in getters.items()}
    except CAUGHT:
        for i, r in enumerate(records):
            for name, get in getters.items():
                try:
                    get(r)
                except CAUGHT as exc:
                    raise InputError(
                        path, f"{where}[{i}]", f"a record with its {name} field", repr(exc)
                    ) from exc
        raise


def _int64(values: list, path: Path, where: str, field: str) -> np.ndarray:
    """The values as int64; one that is not an integer (a bool, a float, text, null) or does not fit
    int64 is an `InputError` naming its record and field."""
    if set(map(type, values)) <= {int}:
        try:
            return np.asarray(values, dtype=np.int64)
        except OverflowError:
            pass
    for i, v in enumerate(values):
        if type(v) is not int:
            raise InputError(path, f"{where}[{i}]", f"an integer {field}", repr(v)[:80])
        if not INT64_MIN <= v <= INT64_MAX:
            raise InputError(path, f"{where}[{i}]", f"an integer {field} that fits int64", repr(v)[:80])
    raise AssertionError("unreachable: every value is an int64")  # pragma: no cover


def _op_names(strings: dict, kind_index: int) -> tuple[str, list[str]]:
    try:
        entry = strings["buffer_records"][kind_index]
        return str(entry.get("kind", "")), list(entry.get("operations", []))
    except CAUGHT:
        return "", []


def _name_of(names: list, op: int) -> str:
    return str(names[op]) if 0 <= op < len(names) else f"operation {op}"


def _object(value: Any, path: Path, where: str, what: str, default: Any) -> Any:
    """`value` where it is a JSON object (list, for `default` a list), `default` where missing or null."""
    if value is None:
        return default
    if not isinstance(value, type(default)):
        raise InputError(path, where, what, type(value).__name__)
    return value


def _agents(proc: dict, path: Path, where: str) -> dict[Any, int]:
    """Agent handle -> its logical index (the CSV's relative "Agent N")."""
    out = {}
    for i, a in enumerate(_object(proc.get("agents"), path, f"{where}.agents", "a list of agents", [])):
        here = f"{where}.agents[{i}]"
        if not isinstance(a, dict):
            raise InputError(path, here, "an agent object", type(a).__name__)
        handle = _object(a.get("id"), path, f"{here}.id", "an id object with a handle", {}).get("handle")
        index = a.get("logical_node_id", a.get("node_id", -1))
        for name, value in (("id.handle", handle), ("logical_node_id", index)):
            if name == "id.handle" and value is None:
                continue
            if type(value) is not int or not INT64_MIN <= value <= INT64_MAX:
                raise InputError(path, f"{here}.{name}", "an integer", repr(value)[:80])
        out[handle] = index
    return out


def _symbols(proc: dict, path: Path, where: str) -> tuple[dict[int, str], str]:
    """Kernel id -> name, from the first name field that any symbol fills, and that field."""
    symbols = _object(proc.get("kernel_symbols"), path, f"{where}.kernel_symbols", "a list of kernel symbols", [])
    for i, sym in enumerate(symbols):
        if not isinstance(sym, dict):
            raise InputError(path, f"{where}.kernel_symbols[{i}]", "a kernel symbol object", type(sym).__name__)
    field_used = next((f for f in NAME_FIELDS if any(s.get(f) for s in symbols[1:])), "kernel_name")
    names: dict[int, str] = {}
    for i, sym in enumerate(symbols):
        kernel_id = sym.get("kernel_id", len(names))
        if type(kernel_id) is not int:
            raise InputError(path, f"{where}.kernel_symbols[{i}].kernel_id", "an integer", repr(kernel_id)[:80])
        name = sym.get(field_used) or sym.get("kernel_name") or ""
        names[kernel_id] = name if isinstance(name, str) else str(name)
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
    here = f"{where}.buffer_records.kernel_dispatch"
    ints = {c: _int64(v, path, here, c) for c, v in cols.items()}
    missing = sorted({k for k in set(cols["kernel_id"]) if k not in names})
    if missing:
        raise InputError(path, f"{where}.kernel_symbols", "a symbol for every kernel_id", f"none for {missing[:5]}")
    kernels = {
        "kernel": [names[k] for k in cols["kernel_id"]],
        "start_ns": ints["start_ns"],
        "end_ns": ints["end_ns"],
        "device": np.asarray([agents.get(a, -1) for a in cols["agent"]], dtype=np.int64),
        "queue": ints["queue"],
        "stream": ints["stream"],
        "correlation_id": ints["correlation_id"],
    }
    schema.check_intervals(kernels["start_ns"], kernels["end_ns"], path, lambda i: f"{here}[{i}]")
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
    here = f"{where}.buffer_records.memory_copy"
    ints = {c: _int64(v, path, here, c) for c, v in cols.items()}
    op_names = {k: _op_names(strings, k)[1] for k in set(cols["kind"])}
    direction = [_name_of(op_names[k], o) for k, o in zip(cols["kind"], cols["operation"], strict=True)]
    device = [agents.get(s if d.upper().endswith("TO_HOST") else t, -1)
              for d, s, t in zip(direction, cols["src"], cols["dst"], strict=True)]
    copies = {
        "kernel": direction,
        "start_ns": ints["start_ns"],
        "end_ns": ints["end_ns"],
        "device": np.asarray(device, dtype=np.int64),
        "queue": -1,
        "stream": ints["stream"],
        "correlation_id": ints["correlation_id"],
    }
    schema.check_intervals(copies["start_ns"], copies["end_ns"], path, lambda i: f"{here}[{i}]")
    return copies


def _host_rows(buffers: dict, strings: dict, buffer_names: tuple[str, ...], pid: int, path: Path, where: str,
               marker_text: dict | None = None) -> dict[str, Any]:
    """API calls (or markers, whose text `marker_text` gives by correlation id) of the named buffers."""
    rows: dict[str, list] = {k: [] for k in ("name", "start_ns", "end_ns", "tid", "correlation_id", "domain")}
    for buffer in buffer_names:
        here = f"{where}.buffer_records.{buffer}"
        cols = _columns(buffers.get(buffer, []) or [], {
            "kind": lambda r: r["kind"],
            "operation": lambda r: r["operation"],
            "start_ns": lambda r: r["start_timestamp"],
            "end_ns": lambda r: r["end_timestamp"],
            "tid": lambda r: r.get("thread_id", -1),
            "correlation_id": lambda r: r["correlation_id"]["internal"],
        }, path, here)
        ints = {c: _int64(v, path, here, c) for c, v in cols.items()}
        ops = {k: _op_names(strings, k) for k in set(cols["kind"])}
        names = [_name_of(ops[k][1], o) for k, o in zip(cols["kind"], cols["operation"], strict=True)]
        if marker_text is not None:
            names = [marker_text.get(c, n) for c, n in zip(cols["correlation_id"], names, strict=True)]
        rows["name"] += names
        rows["domain"] += [ops[k][0] for k in cols["kind"]]
        for c in ("start_ns", "end_ns", "tid", "correlation_id"):
            rows[c].append(ints[c])
    out: dict[str, Any] = {k: (np.concatenate(v or [np.zeros(0, np.int64)]) if k not in ("name", "domain") else v)
                           for k, v in rows.items()}
    out["pid"] = pid
    return out


def _process(proc: dict, path: Path, p_index: int) -> dict[str, Any]:
    """One process's tables: kernels, copies, API calls and markers, as column arrays."""
    where = f"rocprofiler-sdk-tool[{p_index}]"
    if not isinstance(proc, dict) or "buffer_records" not in proc:
        raise InputError(path, where, "a process object with buffer_records (rocprofv3 JSON §1.6)")
    strings = _object(proc.get("strings"), path, f"{where}.strings", "a strings object", {})
    buffers = _object(proc["buffer_records"], path, f"{where}.buffer_records", "an object of buffers", {})
    pid = _object(proc.get("metadata"), path, f"{where}.metadata", "a metadata object", {}).get("pid", -1)
    if type(pid) is not int or not INT64_MIN <= pid <= INT64_MAX:
        raise InputError(path, f"{where}.metadata.pid", "an integer process id", repr(pid)[:80])
    agents = _agents(proc, path, where)
    names, field_used = _symbols(proc, path, where)
    marker_text = {}
    for i, e in enumerate(_object(strings.get("marker_api"), path, f"{where}.strings.marker_api",
                                  "a list of marker texts", [])):
        if isinstance(e, dict) and type(e.get("key")) is int:
            marker_text[e["key"]] = str(e.get("value", ""))
        else:
            raise InputError(path, f"{where}.strings.marker_api[{i}]", 'a {"key": <int>, "value": <text>} object',
                             repr(e)[:80])
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

    if not procs:
        return Trace(schema.empty_dispatches(SOURCE), schema.empty_api(SOURCE), schema.empty_markers(SOURCE),
                     ROCPROF_CLOCK, SOURCE, str(path),
                     {"kernel_name_field": None, "processes": 0, "clock_candidates": ROCPROF_CLOCK_CANDIDATES})

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
