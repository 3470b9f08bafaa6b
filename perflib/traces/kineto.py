"""PyTorch profiler / Kineto JSON from CUDA and ROCm builds, gzipped or not (FORMATS.md §3).

One `json.loads`, one pass that buckets the `ph: X` events by `cat`, then one comprehension per
column. GPU work is `cat` in kernel / gpu_memcpy / gpu_memset; the API table is cuda_runtime and
cuda_driver (HIP names in ROCm builds); markers are user_annotation and gpu_user_annotation.
The read has two halves: `extract` (plain Python, column lists) and `build` (numpy and pandas), so
that `perflib.traces.prefetch` can run the first in a forked child while the parent imports.

Time: `ts`/`dur` are µs (integers before PyTorch ~2.3, floats with 3 decimals after). They become
integer ns as `floor(x)*1000 + rint(frac(x)*1000)`: exact for integer µs up to 2^53 and, for
3-decimal floats, exact while |ts| < 2^42 µs (~51 days; Kineto's relative `ts` stays far below);
beyond that a value can be 1 ns off. `end_ns = start_ns + dur_ns`.

Clock: Kineto's `ts` origin is arbitrary. With `baseTimeNanoseconds` (Unix ns = ts*1000 + base)
the tables are shifted to Unix ns and `clock` is `realtime`; meta carries `base_time_ns` and
`to_unix_ns` (the offset still to add: 0). Without it `clock` is `unknown` and `to_unix_ns` None.

Build (`meta["build"]`, `rocm`, `cuda` or `unknown`): from the version fields the profiler writes at
the top level (`hip_runtime_version`, `hip_driver_version`, `roctracer_version` in ROCm builds;
`cuda_runtime_version`, `cuda_driver_version`, `cupti_version` in CUDA builds), else from the warp
size of `deviceProperties` (64 on AMD, 32 on NVIDIA), else from the device names. Not from the names
first: a ROCm build can leave every name empty (the vLLM MI300X trace). `meta["build_evidence"]`
says which field decided.

"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflib.errors import InputError
from perflib.traces.files import load_json
from perflib.traces.trace import Trace

if TYPE_CHECKING:
    import numpy as np

SOURCE = "kineto"
GPU_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
API_CATS = ("cuda_runtime", "cuda_driver")
MARKER_CATS = ("user_annotation", "gpu_user_annotation")
VERSION_FIELDS = {
    "rocm": ("hip_runtime_version", "hip_driver_version", "roctracer_version"),
    "cuda": ("cuda_runtime_version", "cuda_driver_version", "cupti_version"),
}
"""Top-level fields that only one build of PyTorch's profiler writes."""
TOP_FIELDS = ("baseTimeNanoseconds", "schemaVersion", "traceName", "deviceProperties",
              *VERSION_FIELDS["rocm"], *VERSION_FIELDS["cuda"])


def us_to_ns(values: np.ndarray) -> np.ndarray:
    """µs (int or 3-decimal float) -> int64 ns, splitting off the integer part to keep precision."""
    import numpy as np

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
    import numpy as np

    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.array([_int(v) for v in values], dtype=np.int64)


def _times(cols: dict[str, list], path: Path) -> tuple[np.ndarray, np.ndarray]:
    """int64 ns start and end of one table's events; a missing, non-number or non-finite `ts`/`dur`
    is an `InputError` naming the event's position in `traceEvents`."""
    import numpy as np

    try:
        ts = np.array(cols["ts"], dtype=np.float64)
        dur = np.array(cols["dur"], dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(ts) | ~np.isfinite(dur))
    except (TypeError, ValueError):
        bad = None
    if bad is None or bad.size:
        for j, (t, d) in enumerate(zip(cols["ts"], cols["dur"], strict=True)):
            for key, value in (("ts", t), ("dur", d)):
                if not isinstance(value, int | float) or isinstance(value, bool):
                    where = f"traceEvents[{cols['index'][j]}].{key}"
                    raise InputError(path, where, "a number of µs", repr(value))
        if bad is None:  # pragma: no cover - every value is a number, yet numpy refused them
            raise InputError(path, "traceEvents", "ts and dur as numbers of µs")
        i = int(bad[0])
        raise InputError(path, f"traceEvents[{cols['index'][i]}]", "finite ts and dur (µs)", f"{ts[i]}, {dur[i]}")
    start = us_to_ns(ts)
    return start, start + us_to_ns(dur)


def extract(data: Any, path: Path) -> dict[str, Any]:
    """First half of the read, plain Python only: the `ph: X` events by table, as column lists.

    No numpy or pandas here, so that `perflib.traces.prefetch` can run it in a forked child while the
    parent imports them. Each table keeps `index`, the events' positions in `traceEvents`, for errors.
    """
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise InputError(path, "top level", 'a Kineto object with a "traceEvents" list')
    events = data["traceEvents"]
    wanted = frozenset((*GPU_KINDS, *API_CATS, *MARKER_CATS))
    buckets: dict[str, list[int]] = {c: [] for c in wanted}
    try:
        for i, e in enumerate(events):
            cat = e.get("cat")
            if cat in wanted and e.get("ph", "X") == "X":
                buckets[cat].append(i)
    except AttributeError:
        i = next(i for i, e in enumerate(events) if not isinstance(e, dict))
        raise InputError(path, f"traceEvents[{i}]", "an event object", type(events[i]).__name__) from None

    def columns(cats: tuple[str, ...] | dict[str, str], gpu: bool) -> dict[str, list]:
        index = [i for c in cats for i in buckets[c]]
        evs = [events[i] for i in index]
        args = [e.get("args") or {} for e in evs]
        cols = {
            "index": index,
            "name": [str(e.get("name", "")) for e in evs],
            "ts": [e.get("ts") for e in evs],
            "dur": [e.get("dur", 0) for e in evs],
            "correlation_id": [a.get("correlation", -1) for a in args],
            "cat": [e["cat"] for e in evs],
        }
        if gpu:  # args.device / args.stream (ints in CUDA and ROCm builds), else pid / tid
            cols["device"] = [a.get("device", e.get("pid")) for a, e in zip(args, evs, strict=True)]
            cols["stream"] = [a.get("stream") if type(a.get("stream")) is int else e.get("tid")
                              for a, e in zip(args, evs, strict=True)]
        else:
            cols["pid"] = [e.get("pid") for e in evs]
            cols["tid"] = [e.get("tid") for e in evs]
        return cols

    top = {k: data.get(k) for k in TOP_FIELDS}
    return {"gpu": columns(GPU_KINDS, True), "api": columns(API_CATS, False),
            "markers": columns(MARKER_CATS, False), "top": top}


def build_of(top: dict[str, Any], devices: list[dict]) -> tuple[str, str]:
    """(`rocm` | `cuda` | `unknown`, the field that told): version fields, then warp size, then names."""
    for build, keys in VERSION_FIELDS.items():
        for key in keys:
            if top.get(key) is not None:
                return build, f"{key} {top[key]!r}"
    warps = {d.get("warpSize") for d in devices}
    if 64 in warps:
        return "rocm", "deviceProperties warpSize 64 (an AMD wavefront)"
    if 32 in warps:
        return "cuda", "deviceProperties warpSize 32"
    names = " ".join(str(d.get("name") or "") for d in devices)
    if any(w in names for w in ("AMD", "Radeon", "Instinct")):
        return "rocm", "deviceProperties name"
    if "NVIDIA" in names:
        return "cuda", "deviceProperties name"
    return "unknown", "no HIP or CUDA version field, warp size or device name"


def build(cols: dict[str, Any], path: Path) -> Trace:
    """Second half of the read: column lists (from `extract`) -> the canonical tables and a Trace."""
    from perflib.traces import schema  # numpy and pandas: not before the prefetch has forked

    path = Path(path)
    top = cols["top"]
    base = top.get("baseTimeNanoseconds")
    base_ns = int(base) if isinstance(base, int | float) and not isinstance(base, bool) else None
    shift = base_ns or 0

    def label_for(c: dict[str, list]):
        return lambda k: f"traceEvents[{c['index'][k]}]"

    gpu = cols["gpu"]
    start, end = _times(gpu, path)
    dispatches = schema.dispatch_frame(
        {
            "kernel": gpu["name"],
            "start_ns": start + shift,
            "end_ns": end + shift,
            "device": _ints(gpu["device"]),
            "queue": -1,
            "stream": _ints(gpu["stream"]),
            "correlation_id": _ints(gpu["correlation_id"]),
            "kind": [GPU_KINDS[c] for c in gpu["cat"]],
        },
        SOURCE,
        path,
        label_for(gpu),
    )

    def host_table(c: dict[str, list]) -> dict[str, Any]:
        s, t = _times(c, path)
        return {"name": c["name"], "start_ns": s + shift, "end_ns": t + shift, "pid": _ints(c["pid"]),
                "tid": _ints(c["tid"]), "correlation_id": _ints(c["correlation_id"]), "domain": c["cat"]}

    api = schema.api_frame(host_table(cols["api"]), SOURCE, path, label_for(cols["api"]))
    markers = schema.marker_frame(host_table(cols["markers"]), SOURCE, path, label_for(cols["markers"]))
    devices = top.get("deviceProperties") or []
    build_name, evidence = build_of(top, [d for d in devices if isinstance(d, dict)])
    meta = {
        "base_time_ns": base_ns,
        "to_unix_ns": 0 if base_ns is not None else None,
        "ts_offset_ns": shift,
        "schema_version": top.get("schemaVersion"),
        "trace_name": top.get("traceName"),
        "devices": [d.get("name") for d in devices if isinstance(d, dict)],
        "build": build_name,
        "build_evidence": evidence,
        "ts_precision": "exact ns for |ts| < 2^42 us; 3-decimal us floats beyond may be 1 ns off",
    }
    clock = "realtime" if base_ns is not None else "unknown"
    return Trace(dispatches, api, markers, clock, SOURCE, str(path), meta)


def read_kineto(path: Path) -> Trace:
    """A Kineto trace (`.json` / `.json.gz`) -> Trace."""
    path = Path(path)
    return build(extract(load_json(path), path), path)
