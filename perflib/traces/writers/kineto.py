"""A CUDA-style Kineto (PyTorch profiler) trace (FORMATS.md §3): µs with 3 decimals, written from integer ns."""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from perflib.traces.writers.common import complete


def write_kineto_json(dispatches: pd.DataFrame, path: str | Path, base_time_ns: int | None = None,
                      events: Sequence[dict[str, Any]] = ()) -> Path:
    """A CUDA-style Kineto trace: `pid` = device, `tid` = stream, `ts`/`dur` µs with 3 decimals.

    With `base_time_ns`, `ts` is relative to it and `baseTimeNanoseconds` is written, as PyTorch
    ≥2.3 does; the decimal µs text is produced from the integer ns, so nothing is lost. `events`: host
    events written after the dispatches as they are (`ph`, `cat`, `name`, `pid`, `tid`, `args`), with
    `start_ns`/`end_ns` (on the dispatches' clock) written as `ts`/`dur`: annotations, runtime calls,
    Python frames.
    """
    dispatches = complete(dispatches)
    cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}
    shift = base_time_ns or 0
    names = {n: json.dumps(n) for n in dispatches["kernel"].astype(str).unique()}

    def us(ns: int) -> str:
        sign = "-" if ns < 0 else ""
        ns = abs(ns)
        return f"{sign}{ns // 1000}.{ns % 1000:03d}"

    rows = [
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
    for event in events:
        extra = {k: v for k, v in event.items() if k not in ("start_ns", "end_ns")}
        body = json.dumps({"ph": "X", **extra})[1:-1]
        start, end = int(event["start_ns"]), int(event["end_ns"])
        rows.append(f'{{{body}, "ts": {us(start - shift)}, "dur": {us(end - start)}}}')
    head = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "perflib writer", "warpSize": 32}],
        "traceName": str(path),
        "displayTimeUnit": "ms",
    }
    if base_time_ns is not None:
        head["baseTimeNanoseconds"] = int(base_time_ns)
    text = json.dumps(head)[:-1] + ', "traceEvents": [\n' + ",\n".join(rows) + "\n]}"
    path = Path(path)
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode(), compresslevel=3))
    else:
        path.write_text(text)
    return path
