"""Legacy rocprof v1/v2 `results.csv` (FORMATS.md §1.8): `KernelName`, `BeginNs`, `EndNs`.

Names end in ` [clone .kd]` or a bare `.kd` (the kernel descriptor's symbol, e.g.
`__amd_rocclr_fillBufferAligned.kd`): both are dropped here, and from the names of the legacy
`results.stats.csv` (`perflib.traces.read_stats`), so that the two files name a kernel alike.
`gpu-id` is the device, `queue-id` the queue.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from perflib.traces import csvread, schema
from perflib.traces.rocprof import KD_SUFFIX
from perflib.traces.trace import ReadMode

SOURCE = "rocprof-legacy"
TABLE = "legacy_results"
REQUIRED = ("kernelname", "beginns", "endns")


def clean_names(names: Any) -> Any:
    """A pyarrow string array of legacy rocprof names without their `.kd` suffix."""
    return pc.replace_substring_regex(names, KD_SUFFIX, "")


def read_results_csv(path: Path, header: list[str] | None = None,
                     mode: ReadMode = ReadMode.FULL) -> dict[str, Any]:
    """`results.csv` -> {'dispatches', 'meta'} (no API or marker tables in this file); a lean `mode`: the
    dispatches as a lean table (`read_results_lean`; LEAN_IDS: with device and queue)."""
    path = Path(path)
    header = header or csvread.header_of(path)
    names = csvread.columns(path, header, TABLE, REQUIRED)
    if mode.lean:
        return {"dispatches": read_results_lean(path, header, names, mode.ids),
                "meta": {"table": TABLE, "columns": len(header), "lean": True}, "source": SOURCE}
    types: dict[str, Any] = {
        names["kernelname"]: pa.string(),
        names["beginns"]: pa.int64(),
        names["endns"]: pa.int64(),
    }
    for col in ("gpu-id", "queue-id"):
        if col in names:
            types[names[col]] = pa.int64()
    table = csvread.read_arrow(path, header, types, {"beginns", "endns", "gpu-id", "queue-id"})
    n = table.num_rows
    kernel = clean_names(table.column(names["kernelname"]))
    data = {
        "kernel": kernel.to_pandas().astype("str"),
        "start_ns": csvread.int_column(table, names["beginns"], n, path, required=True),
        "end_ns": csvread.int_column(table, names["endns"], n, path, required=True),
        "device": csvread.int_column(table, names.get("gpu-id"), n, path),
        "queue": csvread.int_column(table, names.get("queue-id"), n, path),
        "kind": "kernel",
    }
    frame = schema.dispatch_frame(data, SOURCE, path, csvread.line_label)
    return {
        "dispatches": frame,
        "meta": {"table": TABLE, "columns": len(header)},
        "source": SOURCE,
    }


def read_results_lean(path: Path, header: list[str], names: dict[str, str], ids: bool = False) -> Any:
    """The dispatches of `results.csv` as a lean table (`schema.LEAN_DISPATCH_COLUMNS`): one streamed
    pyarrow pass over the name, begin and end columns, the names dictionary-encoded, so only the
    distinct names go through the `.kd` cleaning (two that clean alike share one code). Times are
    checked, and rows ordered, as in the full read. `ids`: the gpu-id and queue-id columns too."""
    types = {names["kernelname"]: pa.dictionary(pa.int32(), pa.string()),
             names["beginns"]: pa.int64(), names["endns"]: pa.int64()}
    id_names = {"device": names.get("gpu-id"), "queue": names.get("queue-id")} if ids else {}
    types.update({c: pa.int64() for c in id_names.values() if c})
    table = csvread.read_arrow(path, header, types, {"beginns", "endns", "gpu-id", "queue-id"}, stream_gzip=True)
    n = table.num_rows
    codes, distinct = csvread.dictionary_codes(table, names["kernelname"])
    start = csvread.int_column(table, names["beginns"], n, path, required=True)
    end = csvread.int_column(table, names["endns"], n, path, required=True)
    id_cols = {c: csvread.int_column(table, col, n, path) for c, col in id_names.items()} if ids else None
    del table
    cleaned = clean_names(pa.array(distinct, type=pa.string())).to_pylist()
    merged = {name: i for i, name in enumerate(dict.fromkeys(cleaned))}
    remap = np.array([merged[name] for name in cleaned], dtype=np.int32)
    return schema.lean_dispatch_frame(remap[codes] if len(remap) else codes, list(merged), start, end, None, "kernel",
                                      SOURCE, path, csvread.line_label, ids=id_cols)
