"""rocprofv3 `--output-format json` (`<prefix>_results.json`, also `.json.gz`; FORMATS.md §1.6).

`read_json`: one `json.loads`, then each buffer's records as int64 columns (`Records`: one
comprehension per field, every field checked), then the tables of each process (`process_tables`).
`rocprof_json_stream` gives the same `Records` chunk by chunk instead, and the same tables. Kernel names come from
`kernel_symbols[kernel_id].formatted_kernel_name` (demangled, without the ` [clone .kd]` suffix,
as the CSV prints it), falling back to `demangled_kernel_name`, then `kernel_name`; `meta`
says which. `device` is the agent's `logical_node_id` (the CSV's relative "Agent N").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from perflib.errors import InputError
from perflib.traces import json_stream, schema
from perflib.traces.codebook import Names
from perflib.traces.files import gc_paused, load_json
from perflib.traces.rocprof import ROCPROF_CLOCK, ROCPROF_CLOCK_CANDIDATES
from perflib.traces.trace import ReadMode, Trace

SOURCE = "rocprofv3-json"
TOOL = "rocprofiler-sdk-tool"
NOT_ROCPROF_JSON = f'an object with a "{TOOL}" list (rocprofv3 JSON)'
NAME_FIELDS = ("formatted_kernel_name", "demangled_kernel_name", "kernel_name")


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
CAUGHT = (KeyError, TypeError, IndexError, AttributeError)
"""What a getter raises on a record lacking a field or of the wrong shape."""


class Fields:
    """The fields of one buffer's records, each a Python expression over a record `r` (one source for
    both functions made of them): `row` gets them all at once (one call per record: the fast path),
    `getters` one each (to find which field of which record is missing)."""

    def __init__(self, exprs: dict[str, str]) -> None:
        self.names = tuple(exprs)
        self.getters: dict[str, Callable[[Any], Any]] = {n: eval(f"lambda r: {e}") for n, e in exprs.items()}
        self.row: Callable[[Any], tuple] = eval(f"lambda r: ({', '.join(exprs.values())},)")


def _columns(records: list, fields: Fields, path: Path, where: str, offset: int = 0) -> dict[str, Any]:
    """One sequence per field; a record lacking a field, or not shaped as one, is an `InputError` naming
    it (`offset`: the index of `records[0]` in its buffer, where they are a chunk of it)."""
    if not isinstance(records, list):
        raise InputError(path, where, "a list of records", type(records).__name__)
    try:
        rows = list(map(fields.row, records))
    except CAUGHT:
        for i, r in enumerate(records):
            for name, get in fields.getters.items():
                try:
                    get(r)
                except CAUGHT as exc:
                    raise InputError(
                        path, f"{where}[{offset + i}]", f"a record with its {name} field", repr(exc)
                    ) from exc
        raise
    return dict(zip(fields.names, zip(*rows, strict=True), strict=True)) if rows else {n: () for n in fields.names}


def _int64(values: Sequence[Any], path: Path, where: str, field: str, offset: int = 0) -> np.ndarray:
    """The values as int64; one that is not an integer (a bool, a float, text, null) or does not fit
    int64 is an `InputError` naming its record (`offset` + its index) and field."""
    if set(map(type, values)) <= {int}:
        try:
            return np.asarray(values, dtype=np.int64)
        except OverflowError:
            pass
    for i, v in enumerate(values):
        if type(v) is not int:
            raise InputError(path, f"{where}[{offset + i}]", f"an integer {field}", repr(v)[:80])
        if not INT64_MIN <= v <= INT64_MAX:
            raise InputError(path, f"{where}[{offset + i}]", f"an integer {field} that fits int64", repr(v)[:80])
    raise AssertionError("unreachable: every value is an int64")  # pragma: no cover


KERNEL_FIELDS = Fields({
    "kernel_id": 'r["dispatch_info"]["kernel_id"]',
    "start_ns": 'r["start_timestamp"]',
    "end_ns": 'r["end_timestamp"]',
    "agent": 'r["dispatch_info"]["agent_id"]["handle"]',
    "queue": 'r["dispatch_info"]["queue_id"]["handle"]',
    "stream": '(r.get("stream_id") or {}).get("handle", -1)',
    "correlation_id": 'r["correlation_id"]["internal"]',
})
COPY_FIELDS = Fields({
    "kind": 'r["kind"]',
    "operation": 'r["operation"]',
    "start_ns": 'r["start_timestamp"]',
    "end_ns": 'r["end_timestamp"]',
    "src": 'r["src_agent_id"]["handle"]',
    "dst": 'r["dst_agent_id"]["handle"]',
    "stream": '(r.get("stream_id") or {}).get("handle", -1)',
    "correlation_id": 'r["correlation_id"]["internal"]',
})
HOST_FIELDS = Fields({
    "kind": 'r["kind"]',
    "operation": 'r["operation"]',
    "start_ns": 'r["start_timestamp"]',
    "end_ns": 'r["end_timestamp"]',
    "tid": 'r.get("thread_id", -1)',
    "correlation_id": 'r["correlation_id"]["internal"]',
})
API_BUFFERS = ("hip_api", "hsa_api", "rccl_api")
MARKER_BUFFERS = ("marker_api",)
BUFFER_FIELDS = {"kernel_dispatch": KERNEL_FIELDS, "memory_copy": COPY_FIELDS,
                 **{b: HOST_FIELDS for b in (*API_BUFFERS, *MARKER_BUFFERS)}}
"""The buffers of `buffer_records` that the tables read, and each one's fields (every one an integer)."""
LEAN_FIELDS = {"kernel_dispatch": ("kernel_id", "start_ns", "end_ns", "correlation_id"),
               "memory_copy": ("kind", "operation", "start_ns", "end_ns", "correlation_id")}
"""The fields a lean read keeps of the dispatch buffers (it checks them all); it keeps all of the others."""


class Records:
    """One buffer's records as int64 columns, added whole or chunk by chunk (`add`). A fault is kept,
    not raised: `columns()` raises the one that the check of the whole list finds first (a record
    lacking a field before any value of the wrong type, the fields in order, each at its first record),
    whether the records came in one list or in many chunks."""

    def __init__(self, fields: Fields, path: Path, where: str, keep: tuple[str, ...] | None = None) -> None:
        self.fields, self.path, self.where = fields, path, where
        self.keep = fields.names if keep is None else keep
        self.table = json_stream.Table()
        self.rows = 0
        self.faults: dict[str, InputError] = {}

    def add(self, records: Any) -> None:
        """The next records (a list; anything else is the fault "a list of records")."""
        offset = self.rows
        self.rows += len(records) if isinstance(records, list) else 0
        if "" in self.faults:  # nothing found later comes before it
            return
        try:
            cols = _columns(records, self.fields, self.path, self.where, offset)
        except InputError as exc:
            self.faults[""] = exc
            return
        ints = {}
        for name, values in cols.items():
            try:
                ints[name] = _int64(values, self.path, self.where, name, offset)
            except InputError as exc:
                self.faults.setdefault(name, exc)
        if not self.faults:
            self.table.add(**{k: ints[k] for k in self.keep})

    def columns(self) -> dict[str, np.ndarray]:
        """The kept fields' columns; the first fault (see the class) is raised here."""
        for key in ("", *self.fields.names):
            if key in self.faults:
                raise self.faults[key]
        return {k: self.table.column(k, np.int64) for k in self.keep}


def new_records(name: str, path: Path, where: str, lean: bool = False) -> Records:
    """An empty `Records` for buffer `name` of process `where` (`lean`: keeping only the fields a
    lean table needs; a lean read with ids keeps them all, as the whole read does)."""
    return Records(BUFFER_FIELDS[name], path, f"{where}.buffer_records.{name}",
                   LEAN_FIELDS.get(name) if lean else None)


def buffer_records(path: Path, where: str, lean: bool = False) -> dict[str, Records]:
    """An empty `Records` for each buffer of process `where` that the tables read (`lean` as in
    `new_records`)."""
    return {name: new_records(name, path, where, lean) for name in BUFFER_FIELDS}


def _first_seen(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes of `values` (1-D, or the rows of a 2-D array) into their distinct values, first seen first."""
    if not len(values):
        return np.zeros(0, dtype=np.int32), values[:0]
    distinct, first, inverse = np.unique(values, axis=0 if values.ndim > 1 else None, return_index=True,
                                         return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(order.size, dtype=np.int32)
    rank[order] = np.arange(order.size, dtype=np.int32)
    return rank[inverse.reshape(-1)], distinct[order]


def _mapped(values: np.ndarray, mapping: dict[Any, int]) -> np.ndarray:
    """`mapping[v]` for each value (-1 where it has none), looked up once per distinct value."""
    codes, distinct = _first_seen(values)
    return np.asarray([mapping.get(v, -1) for v in distinct.tolist()], dtype=np.int64)[codes]


def _op_names(strings: dict, kind_index: int) -> tuple[str, list[str]]:
    try:
        entry = strings["buffer_records"][kind_index]
        return str(entry.get("kind", "")), list(entry.get("operations", []))
    except CAUGHT:
        return "", []


def _name_of(names: list, op: int) -> str:
    return str(names[op]) if 0 <= op < len(names) else f"operation {op}"


def _operations(kind: np.ndarray, operation: np.ndarray, strings: dict) -> tuple[np.ndarray, list[str], list[str]]:
    """Codes of each record's (kind, operation) into the distinct pairs, first seen first, and each
    pair's operation name and kind name (`strings.buffer_records`)."""
    codes, pairs = _first_seen(np.stack([kind, operation], axis=1))
    names, domains = [], []
    for k, op in pairs.tolist():
        domain, operations = _op_names(strings, k)
        names.append(_name_of(operations, op))
        domains.append(domain)
    return codes, names, domains


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


def _marker_text(strings: dict, path: Path, where: str) -> dict[int, str]:
    """Correlation id -> the text of its marker (`strings.marker_api`)."""
    marker_text = {}
    for i, e in enumerate(_object(strings.get("marker_api"), path, f"{where}.strings.marker_api",
                                  "a list of marker texts", [])):
        if isinstance(e, dict) and type(e.get("key")) is int:
            marker_text[e["key"]] = str(e.get("value", ""))
        else:
            raise InputError(path, f"{where}.strings.marker_api[{i}]", 'a {"key": <int>, "value": <text>} object',
                             repr(e)[:80])
    return marker_text


def _kernel_rows(cols: dict[str, np.ndarray], names: dict[int, str], agents: dict[Any, int], path: Path,
                 where: str) -> dict[str, Any]:
    """Kernels: `code` into their distinct `names`, times, correlation ids, and (where `cols` has the
    agent, queue and stream: the whole read) device, queue and stream."""
    here = f"{where}.buffer_records.kernel_dispatch"
    codes, ids = _first_seen(cols["kernel_id"])
    missing = sorted(k for k in ids.tolist() if k not in names)
    if missing:
        raise InputError(path, f"{where}.kernel_symbols", "a symbol for every kernel_id", f"none for {missing[:5]}")
    kernels = {"code": codes, "names": [names[k] for k in ids.tolist()], "start_ns": cols["start_ns"],
               "end_ns": cols["end_ns"], "correlation_id": cols["correlation_id"]}
    if "agent" in cols:
        kernels.update(device=_mapped(cols["agent"], agents), queue=cols["queue"], stream=cols["stream"])
    schema.check_intervals(kernels["start_ns"], kernels["end_ns"], path, lambda i: f"{here}[{i}]")
    return kernels


def _copy_rows(cols: dict[str, np.ndarray], strings: dict, agents: dict[Any, int], path: Path,
               where: str) -> dict[str, Any]:
    """Copies named by their direction (`code` into `names`); `device` (the whole read) is the GPU end."""
    here = f"{where}.buffer_records.memory_copy"
    codes, directions, _ = _operations(cols["kind"], cols["operation"], strings)
    copies = {"code": codes, "names": directions, "start_ns": cols["start_ns"], "end_ns": cols["end_ns"],
              "correlation_id": cols["correlation_id"]}
    if "src" in cols:
        copies.update(device=_mapped(schema.copy_devices(directions, codes, cols["src"], cols["dst"]), agents),
                      queue=-1, stream=cols["stream"])
    schema.check_intervals(copies["start_ns"], copies["end_ns"], path, lambda i: f"{here}[{i}]")
    return copies


def _host_rows(records: dict[str, Records], strings: dict, buffer_names: tuple[str, ...], pid: int,
               marker_text: dict | None = None) -> dict[str, Any]:
    """API calls (or markers, whose text `marker_text` gives by correlation id) of the named buffers."""
    rows: dict[str, list] = {k: [] for k in ("name", "start_ns", "end_ns", "tid", "correlation_id", "domain")}
    for buffer in buffer_names:
        cols = records[buffer].columns()
        codes, ops, domains = _operations(cols["kind"], cols["operation"], strings)
        names = [ops[c] for c in codes.tolist()]
        if marker_text is not None:
            names = [marker_text.get(c, n) for c, n in zip(cols["correlation_id"].tolist(), names, strict=True)]
        rows["name"] += names
        rows["domain"] += [domains[c] for c in codes.tolist()]
        for c in ("start_ns", "end_ns", "tid", "correlation_id"):
            rows[c].append(cols[c])
    out: dict[str, Any] = {k: (np.concatenate(v or [np.zeros(0, np.int64)]) if k not in ("name", "domain") else v)
                           for k, v in rows.items()}
    out["pid"] = pid
    return out


def process_tables(proc: dict, buffers: Any, records: dict[str, Records], path: Path, where: str) -> dict[str, Any]:
    """One process's tables (kernels, copies, API calls and markers, as column arrays) from its keys
    other than the records (`proc`: metadata, agents, kernel_symbols, strings), the value of its
    `buffer_records` (`buffers`, only checked here) and the records of its buffers. Faults are raised
    in one order however the records were read."""
    strings = _object(proc.get("strings"), path, f"{where}.strings", "a strings object", {})
    _object(buffers, path, f"{where}.buffer_records", "an object of buffers", {})
    pid = _object(proc.get("metadata"), path, f"{where}.metadata", "a metadata object", {}).get("pid", -1)
    if type(pid) is not int or not INT64_MIN <= pid <= INT64_MAX:
        raise InputError(path, f"{where}.metadata.pid", "an integer process id", repr(pid)[:80])
    agents = _agents(proc, path, where)
    names, field_used = _symbols(proc, path, where)
    marker_text = _marker_text(strings, path, where)
    return {
        "field": field_used,
        "kernels": _kernel_rows(records["kernel_dispatch"].columns(), names, agents, path, where),
        "copies": _copy_rows(records["memory_copy"].columns(), strings, agents, path, where),
        "api": _host_rows(records, strings, API_BUFFERS, pid),
        "markers": _host_rows(records, strings, MARKER_BUFFERS, pid, marker_text),
    }


NOT_A_PROCESS = "a process object with buffer_records (rocprofv3 JSON §1.6)"


def _process(proc: dict, path: Path, p_index: int) -> dict[str, Any]:
    """One parsed process object's tables (`process_tables`)."""
    where = f"{TOOL}[{p_index}]"
    if not isinstance(proc, dict) or "buffer_records" not in proc:
        raise InputError(path, where, NOT_A_PROCESS)
    records = buffer_records(path, where)
    if isinstance(proc["buffer_records"], dict):
        for name, rec in records.items():
            rec.add(proc["buffer_records"].get(name, []) or [])
    return process_tables(proc, proc["buffer_records"], records, path, where)


def read_json(path: Path) -> Trace:
    """A rocprofv3 JSON file -> Trace (kernels + copies in one dispatch table, HIP API, markers)."""
    path = Path(path)
    data = load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get(TOOL), list):
        raise InputError(path, "top level", NOT_ROCPROF_JSON)
    with gc_paused():  # the records' rows: many small objects beside the parsed file, none cyclic
        procs = [_process(p, path, i) for i, p in enumerate(data[TOOL])]
    return trace_of(procs, path)


def _merged(procs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """One table (`key`) of every process, column by column (a scalar spread over its rows; kernel and
    copy names from their codes)."""
    out: dict[str, Any] = {}
    for p in procs:
        table = dict(p[key])
        if "code" in table:
            table["kernel"] = np.asarray(table.pop("names"), dtype=object)[table.pop("code")]
        n = len(table["start_ns"])
        for col, val in table.items():
            if np.isscalar(val):
                val = np.full(n, val, dtype=np.int64)
            out.setdefault(col, []).append(val)
    return {c: (np.concatenate(v) if isinstance(v[0], np.ndarray) else sum(v, [])) for c, v in out.items()}


def _lean_dispatches(procs: list[dict[str, Any]], path: Path, ids: bool) -> Any:
    """Kernels, then copies, of every process as one lean dispatch table (names as codes; `ids`: with
    device, queue and stream, which the records then hold)."""
    names = Names()
    parts = [(p[key], kind) for key, kind in (("kernels", "kernel"), ("copies", "memcpy")) for p in procs]

    def joined(arrays: list[np.ndarray], dtype: Any) -> np.ndarray:
        return np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)

    codes = joined([names.encode(t["names"])[t["code"]] for t, _ in parts], np.int32)
    kind = joined([np.full(len(t["start_ns"]), schema.DISPATCH_KINDS.index(k), dtype=np.int8) for t, k in parts],
                  np.int8)
    start, end, corr = (joined([t[c] for t, _ in parts], np.int64) for c in ("start_ns", "end_ns", "correlation_id"))
    id_cols = None
    if ids:
        id_cols = {c: joined([np.broadcast_to(np.asarray(t[c], dtype=np.int64), len(t["start_ns"])) for t, _ in parts],
                             np.int64) for c in schema.ID_COLUMNS}
    return schema.lean_dispatch_frame(codes, names.names, start, end, corr, kind, SOURCE, path, ids=id_cols)


def trace_of(procs: list[dict[str, Any]], path: Path, mode: ReadMode = ReadMode.FULL) -> Trace:
    """The Trace of every process's tables (`process_tables`): kernels and copies in one dispatch table
    (a lean `mode`: a lean one, `schema.LEAN_DISPATCH_COLUMNS`; LEAN_IDS: with `schema.ID_COLUMNS`, read
    by `buffer_records(lean=False)`), API calls, markers."""
    meta = {"kernel_name_field": procs[0]["field"] if procs else None, "processes": len(procs),
            "clock_candidates": ROCPROF_CLOCK_CANDIDATES, **({"lean": True} if mode.lean else {})}
    if mode.lean:
        dispatches = _lean_dispatches(procs, path, mode.ids)
    elif procs:
        kernels = {**_merged(procs, "kernels"), "kind": "kernel"}
        copies = {**_merged(procs, "copies"), "kind": "memcpy"}
        dispatches = schema.concat(
            [schema.dispatch_frame(kernels, SOURCE, path), schema.dispatch_frame(copies, SOURCE, path)],
            schema.DISPATCH_COLUMNS,
        )
    else:
        dispatches = schema.empty_dispatches(SOURCE)
    api = schema.api_frame(_merged(procs, "api"), SOURCE, path) if procs else schema.empty_api(SOURCE)
    markers = schema.marker_frame(_merged(procs, "markers"), SOURCE, path) if procs else schema.empty_markers(SOURCE)
    return Trace(dispatches, api, markers, ROCPROF_CLOCK, SOURCE, str(path), meta)
