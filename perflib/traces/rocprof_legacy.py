"""Legacy rocprof v1/v2 `results.csv` (FORMATS.md §1.8): `KernelName`, `BeginNs`, `EndNs`.

Names end in ` [clone .kd]` or a bare `.kd` (the kernel descriptor's symbol, e.g.
`__amd_rocclr_fillBufferAligned.kd`): both are dropped here, and from the names of the legacy
`results.stats.csv` (`perflib.traces.read_stats`), so that the two files name a kernel alike.
`gpu-id` is the device, `queue-id` the queue.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perflib.traces import csvread, schema

SOURCE = "rocprof-legacy"
TABLE = "legacy_results"
REQUIRED = ("kernelname", "beginns", "endns")
KD_SUFFIX = r"(\s*\[clone \.kd\]|\.kd)$"
"""What legacy rocprof appends to a kernel's name: ` [clone .kd]`, or `.kd` alone."""


def clean_names(names: Any) -> Any:
    """A pyarrow string array of legacy rocprof names without their `.kd` suffix."""
    import pyarrow.compute as pc

    return pc.replace_substring_regex(names, KD_SUFFIX, "")


def read_results_csv(path: Path, header: list[str] | None = None) -> dict[str, Any]:
    """`results.csv` -> {'dispatches', 'meta'} (no API or marker tables in this file)."""
    import pyarrow as pa

    path = Path(path)
    header = header or csvread.header_of(path)
    names = csvread.columns(path, header, TABLE, REQUIRED)
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
