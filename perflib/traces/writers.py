"""Write a canonical dispatch table out in the profilers' own formats, so every reader can be
checked against the same dispatches (and benchmarks get large, realistic inputs).

rocprofv3 `kernel_trace.csv` in header versions A/B/C/D/E and `memory_copy_trace.csv` (numbers
bare, strings quoted, header fully quoted, as FORMATS.md §1.3-1.5 show), rocprofv3 JSON (§1.6,
minimal but complete for the reader), rocpd SQLite (§1.7: UUID-suffixed tables, the views the
reader uses, `rocpd_metadata.schema_version` = "3") and Kineto JSON (§3, CUDA style, µs with 3
decimals). All vectorised: a million rows take seconds.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perflib.traces import schema

KERNEL_HEADERS: dict[str, tuple[str, ...]] = {
    "A": (
        "Kind",
        "Agent_Id",
        "Queue_Id",
        "Kernel_Id",
        "Kernel_Name",
        "Correlation_Id",
        "Start_Timestamp",
        "End_Timestamp",
        "Private_Segment_Size",
        "Group_Segment_Size",
        "Workgroup_Size_X",
        "Workgroup_Size_Y",
        "Workgroup_Size_Z",
        "Grid_Size_X",
        "Grid_Size_Y",
        "Grid_Size_Z",
    ),
    "B": (
        "Kind",
        "Agent_Id",
        "Queue_Id",
        "Thread_Id",
        "Dispatch_Id",
        "Kernel_Id",
        "Kernel_Name",
        "Correlation_Id",
        "Start_Timestamp",
        "End_Timestamp",
        "Private_Segment_Size",
        "Group_Segment_Size",
        "Workgroup_Size_X",
        "Workgroup_Size_Y",
        "Workgroup_Size_Z",
        "Grid_Size_X",
        "Grid_Size_Y",
        "Grid_Size_Z",
    ),
    "C": (
        "Kind",
        "Agent_Id",
        "Queue_Id",
        "Stream_Id",
        "Thread_Id",
        "Dispatch_Id",
        "Kernel_Id",
        "Kernel_Name",
        "Correlation_Id",
        "Start_Timestamp",
        "End_Timestamp",
        "Private_Segment_Size",
        "Group_Segment_Size",
        "Workgroup_Size_X",
        "Workgroup_Size_Y",
        "Workgroup_Size_Z",
        "Grid_Size_X",
        "Grid_Size_Y",
        "Grid_Size_Z",
    ),
    "D": (
        "Kind",
        "Agent_Id",
        "Queue_Id",
        "Stream_Id",
        "Thread_Id",
        "Dispatch_Id",
        "Kernel_Id",
        "Kernel_Name",
        "Correlation_Id",
        "Start_Timestamp",
        "End_Timestamp",
        "LDS_Block_Size",
        "Scratch_Size",
        "VGPR_Count",
        "Accum_VGPR_Count",
        "SGPR_Count",
        "Workgroup_Size_X",
        "Workgroup_Size_Y",
        "Workgroup_Size_Z",
        "Grid_Size_X",
        "Grid_Size_Y",
        "Grid_Size_Z",
    ),
    "E": (
        "Guid",
        "Kind",
        "Agent_Id",
        "Queue_Id",
        "Stream_Id",
        "Thread_Id",
        "Dispatch_Id",
        "Kernel_Id",
        "Kernel_Name",
        "Correlation_Id",
        "Start_Timestamp",
        "End_Timestamp",
        "Lds_Block_Size",
        "Scratch_Size",
        "Vgpr_Count",
        "Accum_Vgpr_Count",
        "Sgpr_Count",
        "Workgroup_Size_X",
        "Workgroup_Size_Y",
        "Workgroup_Size_Z",
        "Grid_Size_X",
        "Grid_Size_Y",
        "Grid_Size_Z",
    ),
}
COPY_HEADER = (
    "Kind",
    "Direction",
    "Stream_Id",
    "Source_Agent_Id",
    "Destination_Agent_Id",
    "Correlation_Id",
    "Start_Timestamp",
    "End_Timestamp",
)
GUID = "0000beef-0000-7000-8000-00000000cafe"
HOST_AGENT = 0
_CONSTANTS = {
    "Private_Segment_Size": 0,
    "Group_Segment_Size": 0,
    "LDS_Block_Size": 0,
    "Scratch_Size": 0,
    "VGPR_Count": 8,
    "Accum_VGPR_Count": 0,
    "SGPR_Count": 16,
    "Workgroup_Size_X": 64,
    "Workgroup_Size_Y": 1,
    "Workgroup_Size_Z": 1,
    "Grid_Size_X": 1024,
    "Grid_Size_Y": 1,
    "Grid_Size_Z": 1,
    "Thread_Id": 1,
}


def _complete(df: pd.DataFrame) -> pd.DataFrame:
    """Fill columns a caller left out: kind `kernel`, ids -1 (unknown), as the readers do."""
    missing = {c: -1 for c in ("device", "queue", "stream", "correlation_id") if c not in df.columns}
    if "kind" not in df.columns:
        missing["kind"] = "kernel"
    return df.assign(**missing) if missing else df


def _kernels(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["kind"] == "kernel"]


def _agent_strings(values: np.ndarray) -> Any:
    """`"Agent N"` for 7.0-style files, built per distinct value."""
    import pyarrow as pa

    uniq, inverse = np.unique(values, return_inverse=True)
    labels = pa.array([f"Agent {int(u)}" for u in uniq])
    return pa.DictionaryArray.from_arrays(pa.array(inverse.astype(np.int32)), labels).cast(pa.string())


def _write_arrow_csv(columns: dict[str, Any], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.csv as pacsv

    table = pa.table(
        {k: (v if isinstance(v, pa.Array | pa.ChunkedArray) else pa.array(v)) for k, v in columns.items()}
    )
    pacsv.write_csv(table, str(path), write_options=pacsv.WriteOptions(quoting_style="needed"))
    return path


def write_kernel_trace_csv(dispatches: pd.DataFrame, path: str | Path, version: str = "D") -> Path:
    """The kernel rows of `dispatches` as a rocprofv3 `kernel_trace.csv` of header `version`."""
    dispatches = _complete(dispatches)
    import pyarrow as pa

    if version not in KERNEL_HEADERS:
        raise ValueError(f"header version must be one of {sorted(KERNEL_HEADERS)}, not {version!r}")
    df = _kernels(dispatches)
    n = len(df)
    names = pa.array(df["kernel"].astype("str").to_numpy(dtype=object), type=pa.string())
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
        "Kernel_Name": names,
        "Correlation_Id": df["correlation_id"].to_numpy(dtype=np.int64),
        "Start_Timestamp": df["start_ns"].to_numpy(dtype=np.int64),
        "End_Timestamp": df["end_ns"].to_numpy(dtype=np.int64),
    }
    columns = {}
    for name in KERNEL_HEADERS[version]:
        key = {
            "Lds_Block_Size": "LDS_Block_Size",
            "Vgpr_Count": "VGPR_Count",
            "Accum_Vgpr_Count": "Accum_VGPR_Count",
            "Sgpr_Count": "SGPR_Count",
        }.get(name, name)
        columns[name] = values[key] if key in values else np.full(n, _CONSTANTS[key], dtype=np.int64)
    return _write_arrow_csv(columns, Path(path))


def write_memory_copy_trace_csv(dispatches: pd.DataFrame, path: str | Path, with_stream: bool = True) -> Path:
    """The memcpy rows as `memory_copy_trace.csv`: 7.0 layout (`Stream_Id`, "Agent N") or ≤6.3.

    `kernel` is written as the `Direction`; the GPU end of the copy is `device`, the host end agent 0.
    """
    dispatches = _complete(dispatches)
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


COPY_OPERATIONS = [
    "MEMORY_COPY_NONE",
    "MEMORY_COPY_HOST_TO_HOST",
    "MEMORY_COPY_HOST_TO_DEVICE",
    "MEMORY_COPY_DEVICE_TO_HOST",
    "MEMORY_COPY_DEVICE_TO_DEVICE",
]


def write_rocprof_json(dispatches: pd.DataFrame, path: str | Path, pid: int = 1) -> Path:
    """rocprofv3 `<prefix>_results.json` (§1.6) holding kernels and memory copies."""
    dispatches = _complete(dispatches)
    kernels = _kernels(dispatches)
    copies = dispatches[dispatches["kind"] == "memcpy"]
    codes, uniques = pd.factorize(kernels["kernel"])
    devices = sorted(set(dispatches["device"].tolist()) | {HOST_AGENT})
    handle = {d: 1000 + i for i, d in enumerate(devices)}
    agents = [
        {
            "id": {"handle": handle[d]},
            "type": 1 if d == HOST_AGENT else 2,
            "name": "cpu" if d == HOST_AGENT else "gfx942",
            "node_id": d,
            "logical_node_id": d,
        }
        for d in devices
    ]
    symbols = [
        {"kernel_id": 0, "kernel_name": "", "formatted_kernel_name": "0", "demangled_kernel_name": "0"}
    ]
    symbols += [
        {
            "kernel_id": i + 1,
            "kernel_name": f"{name}.kd",
            "formatted_kernel_name": name,
            "demangled_kernel_name": f"{name} [clone .kd]",
            "truncated_kernel_name": name,
        }
        for i, name in enumerate(uniques.astype(str))
    ]
    ops = list(COPY_OPERATIONS)
    for name in copies["kernel"].astype(str).unique():
        if name not in ops:
            ops.append(name)
    strings = {
        "buffer_records": [{"kind": "NONE", "operations": []}] * 10
        + [
            {"kind": "MEMORY_COPY", "operations": ops},
            {
                "kind": "KERNEL_DISPATCH",
                "operations": ["KERNEL_DISPATCH_NONE", "KERNEL_DISPATCH_ENQUEUE", "KERNEL_DISPATCH_COMPLETE"],
            },
        ]
    }
    kd = [
        {
            "size": 184,
            "kind": 11,
            "operation": 2,
            "thread_id": pid,
            "correlation_id": {"internal": c, "external": 0},
            "start_timestamp": s,
            "end_timestamp": e,
            "dispatch_info": {
                "size": 72,
                "agent_id": {"handle": handle[d]},
                "queue_id": {"handle": q},
                "kernel_id": k + 1,
                "dispatch_id": i + 1,
                "private_segment_size": 0,
                "group_segment_size": 0,
                "workgroup_size": {"x": 64, "y": 1, "z": 1},
                "grid_size": {"x": 1024, "y": 1, "z": 1},
            },
            "stream_id": {"handle": st},
        }
        for i, (k, s, e, d, q, st, c) in enumerate(
            zip(
                codes.tolist(),
                kernels["start_ns"].tolist(),
                kernels["end_ns"].tolist(),
                kernels["device"].tolist(),
                kernels["queue"].tolist(),
                kernels["stream"].tolist(),
                kernels["correlation_id"].tolist(),
                strict=True,
            )
        )
    ]
    mc = []
    for name, s, e, d, st, c in zip(
        copies["kernel"].astype(str).tolist(),
        copies["start_ns"].tolist(),
        copies["end_ns"].tolist(),
        copies["device"].tolist(),
        copies["stream"].tolist(),
        copies["correlation_id"].tolist(),
        strict=True,
    ):
        to_host = name.upper().endswith("TO_HOST")
        mc.append(
            {
                "size": 80,
                "kind": 10,
                "operation": ops.index(name),
                "thread_id": pid,
                "correlation_id": {"internal": c, "external": 0},
                "start_timestamp": s,
                "end_timestamp": e,
                "dst_agent_id": {"handle": handle[HOST_AGENT if to_host else d]},
                "src_agent_id": {"handle": handle[d if to_host else HOST_AGENT]},
                "bytes": 0,
                "stream_id": {"handle": st},
            }
        )
    starts = dispatches["start_ns"]
    doc = {
        "rocprofiler-sdk-tool": [
            {
                "metadata": {
                    "pid": pid,
                    "init_time": int(starts.min()) if len(starts) else 0,
                    "fini_time": int(dispatches["end_ns"].max()) if len(starts) else 0,
                    "node": {"hostname": "perflib-writer"},
                    "command": ["perflib"],
                    "config": {},
                },
                "agents": agents,
                "counters": [],
                "strings": strings,
                "code_objects": [],
                "kernel_symbols": symbols,
                "host_functions": [],
                "summary": [],
                "callback_records": {},
                "buffer_records": {
                    "kernel_dispatch": kd,
                    "hip_api": [],
                    "hsa_api": [],
                    "marker_api": [],
                    "rccl_api": [],
                    "memory_copy": mc,
                    "memory_allocation": [],
                    "scratch_memory": [],
                },
            }
        ]
    }
    path = Path(path)
    path.write_text(json.dumps(doc))
    return path


def write_rocpd(dispatches: pd.DataFrame, path: str | Path, pid: int = 1) -> Path:
    """A rocpd SQLite database (§1.7) with kernels and memory copies, schema_version "3"."""
    dispatches = _complete(dispatches)
    path = Path(path)
    if path.exists():
        path.unlink()
    u = GUID.replace("-", "_")
    kernels = _kernels(dispatches)
    copies = dispatches[dispatches["kind"] == "memcpy"]
    codes, uniques = pd.factorize(kernels["kernel"])
    devices = sorted(set(dispatches["device"].tolist()) | {HOST_AGENT})
    agent_id = {d: i + 1 for i, d in enumerate(devices)}
    con = sqlite3.connect(path)
    try:
        cur = con.cursor()
        g = f"TEXT DEFAULT '{GUID}' NOT NULL"
        cur.executescript(f"""
            CREATE TABLE rocpd_metadata_{u} (id INTEGER PRIMARY KEY, tag TEXT NOT NULL, value TEXT NOT NULL);
            CREATE TABLE rocpd_string_{u} (id INTEGER PRIMARY KEY, guid {g}, string TEXT NOT NULL);
            CREATE TABLE rocpd_info_agent_{u} (id INTEGER PRIMARY KEY, guid {g}, nid INTEGER, pid INTEGER,
                type TEXT, absolute_index INTEGER, logical_index INTEGER, type_index INTEGER, uuid INTEGER,
                name TEXT, model_name TEXT, vendor_name TEXT, product_name TEXT, user_name TEXT, extdata JSONB);
            CREATE TABLE rocpd_info_kernel_symbol_{u} (id INTEGER PRIMARY KEY, guid {g}, nid INTEGER,
                pid INTEGER, code_object_id INTEGER, kernel_name TEXT, display_name TEXT, extdata JSONB);
            CREATE TABLE rocpd_event_{u} (id INTEGER PRIMARY KEY, guid {g}, category_id INTEGER,
                stack_id INTEGER, parent_stack_id INTEGER, correlation_id INTEGER, call_stack JSONB,
                line_info JSONB, extdata JSONB);
            CREATE TABLE rocpd_kernel_dispatch_{u} (id INTEGER PRIMARY KEY, guid {g}, nid INTEGER, pid INTEGER,
                tid INTEGER, agent_id INTEGER, kernel_id INTEGER, dispatch_id INTEGER, queue_id INTEGER,
                stream_id INTEGER, start BIGINT NOT NULL, "end" BIGINT NOT NULL, event_id INTEGER);
            CREATE TABLE rocpd_memory_copy_{u} (id INTEGER PRIMARY KEY, guid {g}, nid INTEGER, pid INTEGER,
                tid INTEGER, start BIGINT NOT NULL, "end" BIGINT NOT NULL, name_id INTEGER NOT NULL,
                dst_agent_id INTEGER, src_agent_id INTEGER, size INTEGER NOT NULL, queue_id INTEGER,
                stream_id INTEGER, event_id INTEGER);
            CREATE TABLE rocpd_region_{u} (id INTEGER PRIMARY KEY, guid {g}, nid INTEGER, pid INTEGER,
                tid INTEGER, start BIGINT NOT NULL, "end" BIGINT NOT NULL, name_id INTEGER NOT NULL,
                event_id INTEGER, extdata JSONB);
        """)
        for t in (
            "metadata",
            "string",
            "info_agent",
            "info_kernel_symbol",
            "event",
            "kernel_dispatch",
            "memory_copy",
            "region",
        ):
            cur.execute(f"CREATE VIEW rocpd_{t} AS SELECT * FROM rocpd_{t}_{u}")
        cur.executescript("""
            CREATE VIEW kernels AS SELECT K.id, K.guid, K.tid, 'KERNEL_DISPATCH' AS category,
                S.display_name AS name, K.nid, K.pid, A.absolute_index AS agent_abs_index,
                A.logical_index AS agent_log_index, A.type_index AS agent_type_index, A.type AS agent_type,
                K.kernel_id, K.dispatch_id, K.stream_id, K.queue_id, K.start, K."end",
                (K."end" - K.start) AS duration, E.correlation_id AS corr_id
            FROM rocpd_kernel_dispatch K
                INNER JOIN rocpd_info_agent A ON A.id = K.agent_id AND A.guid = K.guid
                INNER JOIN rocpd_info_kernel_symbol S ON S.id = K.kernel_id AND S.guid = K.guid
                INNER JOIN rocpd_event E ON E.id = K.event_id AND E.guid = K.guid;
            CREATE VIEW memory_copies AS SELECT M.id, M.guid, 'MEMORY_COPY' AS category, M.nid, M.pid, M.tid,
                M.start, M."end", (M."end" - M.start) AS duration, NS.string AS name, M.stream_id, M.queue_id,
                M.size, dst.logical_index AS dst_agent_log_index, dst.absolute_index AS dst_agent_abs_index,
                src.logical_index AS src_agent_log_index, src.absolute_index AS src_agent_abs_index,
                E.correlation_id AS corr_id
            FROM rocpd_memory_copy M
                INNER JOIN rocpd_string NS ON NS.id = M.name_id AND NS.guid = M.guid
                INNER JOIN rocpd_info_agent dst ON dst.id = M.dst_agent_id AND dst.guid = M.guid
                INNER JOIN rocpd_info_agent src ON src.id = M.src_agent_id AND src.guid = M.guid
                INNER JOIN rocpd_event E ON E.id = M.event_id AND E.guid = M.guid;
            CREATE VIEW regions AS SELECT R.id, R.guid, CS.string AS category, S.string AS name, R.nid, R.pid,
                R.tid, R.start, R."end", (R."end" - R.start) AS duration, R.event_id,
                E.correlation_id AS corr_id
            FROM rocpd_region R
                INNER JOIN rocpd_event E ON E.id = R.event_id AND E.guid = R.guid
                INNER JOIN rocpd_string S ON S.id = R.name_id AND S.guid = R.guid
                LEFT JOIN rocpd_string CS ON CS.id = E.category_id AND CS.guid = E.guid;
        """)
        cur.executemany(
            f"INSERT INTO rocpd_metadata_{u} (tag, value) VALUES (?, ?)",
            [("schema_version", "3"), ("uuid", GUID), ("writer", "perflib.traces.writers")],
        )
        cur.executemany(
            f"INSERT INTO rocpd_info_agent_{u} (id, nid, pid, type, absolute_index, logical_index, type_index, "
            "name) VALUES (?, 1, ?, ?, ?, ?, ?, ?)",
            [
                (
                    agent_id[d],
                    pid,
                    "CPU" if d == HOST_AGENT else "GPU",
                    d,
                    d,
                    i,
                    "cpu" if d == HOST_AGENT else "gfx942",
                )
                for i, d in enumerate(devices)
            ],
        )
        cur.executemany(
            f"INSERT INTO rocpd_info_kernel_symbol_{u} (id, nid, pid, code_object_id, kernel_name, display_name) "
            "VALUES (?, 1, ?, 1, ?, ?)",
            [(i + 1, pid, f"{name}.kd", name) for i, name in enumerate(uniques.astype(str))],
        )
        n = len(kernels)
        corr = kernels["correlation_id"].tolist() + copies["correlation_id"].tolist()
        cur.executemany(
            f"INSERT INTO rocpd_event_{u} (id, correlation_id) VALUES (?, ?)",
            zip(range(1, len(corr) + 1), corr, strict=True),
        )
        dev_ids = [agent_id[d] for d in kernels["device"].tolist()]
        cur.executemany(
            f"INSERT INTO rocpd_kernel_dispatch_{u} (nid, pid, tid, agent_id, kernel_id, dispatch_id, queue_id, "
            'stream_id, start, "end", event_id) VALUES (1, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)',
            zip(
                [pid] * n,
                dev_ids,
                (codes + 1).tolist(),
                range(1, n + 1),
                kernels["queue"].tolist(),
                kernels["stream"].tolist(),
                kernels["start_ns"].tolist(),
                kernels["end_ns"].tolist(),
                range(1, n + 1),
                strict=True,
            ),
        )
        copy_names = copies["kernel"].astype(str).tolist()
        string_ids = {s: i + 1 for i, s in enumerate(dict.fromkeys(copy_names))}
        cur.executemany(
            f"INSERT INTO rocpd_string_{u} (id, string) VALUES (?, ?)",
            [(i, s) for s, i in string_ids.items()],
        )
        rows = []
        for j, (name, s, e, d, st) in enumerate(
            zip(
                copy_names,
                copies["start_ns"].tolist(),
                copies["end_ns"].tolist(),
                copies["device"].tolist(),
                copies["stream"].tolist(),
                strict=True,
            )
        ):
            to_host = name.upper().endswith("TO_HOST")
            dst, src = (HOST_AGENT, d) if to_host else (d, HOST_AGENT)
            rows.append((pid, s, e, string_ids[name], agent_id[dst], agent_id[src], st, n + j + 1))
        cur.executemany(
            f'INSERT INTO rocpd_memory_copy_{u} (nid, pid, tid, start, "end", name_id, dst_agent_id, '
            "src_agent_id, size, queue_id, stream_id, event_id) VALUES (1, ?, 1, ?, ?, ?, ?, ?, 0, -1, ?, ?)",
            rows,
        )
        con.commit()
    finally:
        con.close()
    return path


def write_kineto_json(dispatches: pd.DataFrame, path: str | Path, base_time_ns: int | None = None) -> Path:
    """A CUDA-style Kineto trace: `pid` = device, `tid` = stream, `ts`/`dur` µs with 3 decimals.

    With `base_time_ns`, `ts` is relative to it and `baseTimeNanoseconds` is written, as PyTorch
    ≥2.3 does; the decimal µs text is produced from the integer ns, so nothing is lost.
    """
    dispatches = _complete(dispatches)
    cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}
    shift = base_time_ns or 0
    names = {n: json.dumps(n) for n in dispatches["kernel"].astype(str).unique()}

    def us(ns: int) -> str:
        sign = "-" if ns < 0 else ""
        ns = abs(ns)
        return f"{sign}{ns // 1000}.{ns % 1000:03d}"

    events = [
        f'{{"ph": "X", "cat": "{cat[k]}", "name": {names[n]}, "pid": {d}, "tid": {st}, "ts": {us(s - shift)}, '
        f'"dur": {us(e - s)}, "args": {{"device": {d}, "stream": {st}, "correlation": {c}}}}}'
        for n, k, s, e, d, st, c in zip(
            dispatches["kernel"].astype(str).tolist(),
            dispatches["kind"].astype(str).tolist(),
            dispatches["start_ns"].tolist(),
            dispatches["end_ns"].tolist(),
            dispatches["device"].tolist(),
            dispatches["stream"].tolist(),
            dispatches["correlation_id"].tolist(),
            strict=True,
        )
    ]
    head = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "perflib writer", "warpSize": 32}],
        "traceName": str(path),
        "displayTimeUnit": "ms",
    }
    if base_time_ns is not None:
        head["baseTimeNanoseconds"] = int(base_time_ns)
    text = json.dumps(head)[:-1] + ', "traceEvents": [\n' + ",\n".join(events) + "\n]}"
    path = Path(path)
    if path.name.endswith(".gz"):
        import gzip

        path.write_bytes(gzip.compress(text.encode(), compresslevel=3))
    else:
        path.write_text(text)
    return path


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
