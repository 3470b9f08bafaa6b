"""PyTorch profiler / Kineto JSON from CUDA and ROCm builds, gzipped or not (FORMATS.md §3).

One `json.loads`, one pass that buckets the `ph: X` events by `cat`, then one comprehension per
column. GPU work is `cat` in kernel / gpu_memcpy / gpu_memset; the API table is cuda_runtime and
cuda_driver (HIP names in ROCm builds); markers are user_annotation and gpu_user_annotation.

Time: `ts`/`dur` are µs (integers before PyTorch ~2.3, floats with 3 decimals after). They become
integer ns as `floor(x)*1000 + rint(frac(x)*1000)`: exact for integer µs up to 2^53 and, for
3-decimal floats, exact while |ts| < 2^42 µs (~51 days; Kineto's relative `ts` stays far below);
beyond that a value can be 1 ns off. `end_ns = start_ns + dur_ns`.

Clock: Kineto's `ts` origin is arbitrary. With `baseTimeNanoseconds` (Unix ns = ts*1000 + base)
the tables are shifted to Unix ns and `clock` is `realtime`; meta carries `base_time_ns` and
`to_unix_ns` (the offset still to add: 0). Without it `clock` is `unknown` and `to_unix_ns` None.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from perflib.errors import InputError
from perflib.traces import Trace, schema
from perflib.traces.rocprof_json import load_json

SOURCE = "kineto"
GPU_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
API_CATS = ("cuda_runtime", "cuda_driver")
MARKER_CATS = ("user_annotation", "gpu_user_annotation")


def us_to_ns(values: np.ndarray) -> np.ndarray:
    """µs (int or 3-decimal float) -> int64 ns, splitting off the integer part to keep precision."""
    values = np.asarray(values, dtype=np.float64)
    whole = np.floor(values)
    return whole.astype(np.int64) * 1000 + np.rint((values - whole) * 1000).astype(np.int64)


def _int(value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            return -1
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return -1


def _ints(values: list) -> np.ndarray:
    """int64 ids; values that are not ints (None, hex strings, ...) go through `_int` (-1 unknown)."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.array([_int(v) for v in values], dtype=np.int64)


def _times(events: list[dict], index_of: Any, path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        ts = np.array([e["ts"] for e in events], dtype=np.float64)
        dur = np.array([e.get("dur", 0) for e in events], dtype=np.float64)
    except (KeyError, TypeError, ValueError):
        for e in events:
            for key in ("ts", "dur"):
                value = e.get(key, 0) if key == "dur" else e.get(key)
                if not isinstance(value, int | float) or isinstance(value, bool):
                    where = f"traceEvents[{index_of(e)}].{key}"
                    raise InputError(path, where, "a number of µs", repr(value)) from None
        raise
    bad = np.flatnonzero(~np.isfinite(ts) | ~np.isfinite(dur))
    if bad.size:
        i = int(bad[0])
        where = f"traceEvents[{index_of(events[i])}]"
        raise InputError(path, where, "finite ts and dur (µs)", f"{ts[i]}, {dur[i]}")
    start = us_to_ns(ts)
    return start, start + us_to_ns(dur)


def read_kineto(path: Path) -> Trace:
    """A Kineto trace (`.json` / `.json.gz`) -> Trace."""
    path = Path(path)
    data = load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise InputError(path, "top level", 'a Kineto object with a "traceEvents" list')
    events = data["traceEvents"]
    wanted = frozenset((*GPU_KINDS, *API_CATS, *MARKER_CATS))
    try:
        selected = [e for e in events if e.get("cat") in wanted and e.get("ph", "X") == "X"]
    except AttributeError:
        i = next(i for i, e in enumerate(events) if not isinstance(e, dict))
        raise InputError(path, f"traceEvents[{i}]", "an event object", type(events[i]).__name__) from None
    buckets: dict[str, list[dict]] = {c: [] for c in wanted}
    for e in selected:
        buckets[e["cat"]].append(e)
    position: dict[int, int] | None = None

    def index_of(e: dict) -> int:
        """Position of an event in traceEvents (only computed when an error is reported)."""
        nonlocal position
        if position is None:
            position = {id(ev): i for i, ev in enumerate(events)}
        return position[id(e)]

    base = data.get("baseTimeNanoseconds")
    base_ns = int(base) if isinstance(base, int | float) and not isinstance(base, bool) else None
    shift = base_ns or 0

    def label_for(evs: list[dict]):
        return lambda k: f"traceEvents[{index_of(evs[k])}]"

    gpu = [e for c in GPU_KINDS for e in buckets[c]]
    start, end = _times(gpu, index_of, path)
    args = [e.get("args") or {} for e in gpu]
    dispatches = schema.dispatch_frame(
        {
            "kernel": [str(e.get("name", "")) for e in gpu],
            "start_ns": start + shift,
            "end_ns": end + shift,
            # args.device / args.stream (ints in CUDA and ROCm builds), else pid / tid
            "device": _ints([a.get("device", e.get("pid")) for a, e in zip(args, gpu, strict=True)]),
            "queue": -1,
            "stream": _ints(
                [
                    s if type(s) is int else e.get("tid")
                    for s, e in zip((a.get("stream") for a in args), gpu, strict=True)
                ]
            ),
            "correlation_id": _ints([a.get("correlation", -1) for a in args]),
            "kind": [GPU_KINDS[e["cat"]] for e in gpu],
        },
        SOURCE,
        path,
        label_for(gpu),
    )

    def host_table(evs: list[dict]) -> dict[str, Any]:
        s, t = _times(evs, index_of, path)
        return {
            "name": [str(e.get("name", "")) for e in evs],
            "start_ns": s + shift,
            "end_ns": t + shift,
            "pid": _ints([e.get("pid") for e in evs]),
            "tid": _ints([e.get("tid") for e in evs]),
            "correlation_id": _ints([(e.get("args") or {}).get("correlation", -1) for e in evs]),
            "domain": [e["cat"] for e in evs],
        }

    api_events = [e for c in API_CATS for e in buckets[c]]
    marker_events = [e for c in MARKER_CATS for e in buckets[c]]
    api = schema.api_frame(host_table(api_events), SOURCE, path, label_for(api_events))
    markers = schema.marker_frame(host_table(marker_events), SOURCE, path, label_for(marker_events))
    devices = data.get("deviceProperties") or []
    meta = {
        "base_time_ns": base_ns,
        "to_unix_ns": 0 if base_ns is not None else None,
        "ts_offset_ns": shift,
        "schema_version": data.get("schemaVersion"),
        "trace_name": data.get("traceName"),
        "devices": [d.get("name") for d in devices if isinstance(d, dict)],
        "build": "rocm"
        if any("AMD" in str(d.get("name", "")) for d in devices if isinstance(d, dict))
        else "cuda",
        "ts_precision": "exact ns for |ts| < 2^42 us; 3-decimal us floats beyond may be 1 ns off",
    }
    clock = "realtime" if base_ns is not None else "unknown"
    return Trace(dispatches, api, markers, clock, SOURCE, str(path), meta)
