"""PyTorch profiler / Kineto JSON from CUDA and ROCm builds, gzipped or not (FORMATS.md §3).

One `json.loads`, one pass that buckets the `ph: X` events by `cat`, then one comprehension per
column. GPU work is `cat` in kernel / gpu_memcpy / gpu_memset (a trace without any, from PyTorch on the
CPU, has the model's `cpu_op` operators as its dispatches instead: `perflib.traces.kineto_cpu`); the API table is cuda_runtime and
cuda_driver (HIP names in ROCm builds); markers are user_annotation and gpu_user_annotation, and
of the `python_function` frames (a `with_stack` trace holds thousands per step) only vLLM's
`gpu_model_runner.py(N): execute_model`, the one mark of an engine step in vLLM 0.8's traces
(`STEP_FRAME`; perflib.attribution.markers reads it as a step).
The read has two halves: `extract` (plain Python, column lists) and `build` (numpy and pandas);
`extract_lean` is the first half at C speed for the lean tables, which `kineto_stream` runs per chunk.

Time, exact to the ns: `ts`/`dur` are µs (integers before PyTorch ~2.3, floats with 3 decimals
after). Integers become `x*1000`. A float becomes `floor(x)*1000 + rint(frac(x)*1000)`, which is
exact while |x| < 2^43 µs (~102 days): below that float64 values lie at most 2^-10 µs apart, so the
float nearest a 3-decimal text is within 0.49 ns of it and rounds back to it (above, 2^-9 µs apart,
they do not). That covers the relative `ts` of traces with `baseTimeNanoseconds` (the H200 captures
reach 5.1e12 µs, past 2^42). Some traces write Unix-epoch µs with a fraction and no base
(`1712195495505582.988`), where float64 keeps only 0.25 µs; where any value needs it, the file is
parsed again keeping each number's decimal text (`files.load_json(exact=True)`) and the values are
converted with integer arithmetic (`exact_ns`). A `ts`, `dur` or base that is not a number, not
finite, or whose ns do not fit int64 is an `InputError` naming the event and the value.
`end_ns = start_ns + dur_ns`.

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

import math
import re
from decimal import ROUND_HALF_EVEN, Decimal
from itertools import compress, repeat
from pathlib import Path
from typing import Any

import numpy as np

from perflib.errors import InputError
from perflib.traces.files import load_json
from perflib.traces.trace import Trace

SOURCE = "kineto"
GPU_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
API_CATS = ("cuda_runtime", "cuda_driver")
MARKER_CATS = ("user_annotation", "gpu_user_annotation", "python_function")
FRAME_CAT = "python_function"
STEP_FRAME = re.compile(r"gpu_model_runner\.py\(\d+\): execute_model$")
"""The Python frames kept as markers (module docstring); every other `python_function` event is skipped."""
VERSION_FIELDS = {
    "rocm": ("hip_runtime_version", "hip_driver_version", "roctracer_version"),
    "cuda": ("cuda_runtime_version", "cuda_driver_version", "cupti_version"),
}
"""Top-level fields that only one build of PyTorch's profiler writes."""
TOP_FIELDS = ("baseTimeNanoseconds", "schemaVersion", "traceName", "deviceProperties",
              *VERSION_FIELDS["rocm"], *VERSION_FIELDS["cuda"])

EXACT_BELOW_US = 2**43
"""Below this many µs a 3-decimal float64 gives its ns exactly (module docstring)."""
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_US_LIMIT = Decimal(2**63).scaleb(-3)
_MILLI = Decimal("0.001")
FIT = "µs whose ns fit int64 (|value| < 9.2e15 µs)"


class _NeedsText(Exception):
    """A float µs value beyond `EXACT_BELOW_US`: its ns need the number's decimal text."""


def us_to_ns(values: np.ndarray) -> np.ndarray:
    """µs (int or 3-decimal float) -> int64 ns, splitting off the integer part to keep precision."""
    values = np.asarray(values, dtype=np.float64)
    whole = np.floor(values)
    return whole.astype(np.int64) * 1000 + np.rint((values - whole) * 1000).astype(np.int64)


def exact_ns(value: Any, path: Path, where: str) -> int:
    """One µs value as int ns, exactly: an int, a `Decimal` (its digits as written, rounded half-even
    to the ns), or a float below `EXACT_BELOW_US`. Anything else is an `InputError` naming `where`."""
    kind = type(value)
    if kind is int:
        ns = value * 1000
    elif kind is Decimal:
        if not value.is_finite():
            raise InputError(path, where, "a finite number of µs", str(value))
        if abs(value) >= _US_LIMIT:
            raise InputError(path, where, FIT, str(value))
        ns = int(value.quantize(_MILLI, rounding=ROUND_HALF_EVEN).scaleb(3))
    elif kind is float:
        if not math.isfinite(value):
            raise InputError(path, where, "a finite number of µs", repr(value))
        if abs(value) >= EXACT_BELOW_US:
            raise _NeedsText
        whole = math.floor(value)
        ns = whole * 1000 + round((value - whole) * 1000)  # round() is half-even, as np.rint
    else:
        raise InputError(path, where, "a number of µs", repr(value)[:80])
    if not INT64_MIN <= ns <= INT64_MAX:
        raise InputError(path, where, FIT, repr(value)[:80])
    return ns


def _ns(values: list, key: str, index: list[int], path: Path) -> np.ndarray:
    """int64 ns of one column of µs values (`ts` or `dur`): vectorised where float64 or int64 is
    exact (the common case), value by value otherwise (`exact_ns`; raises `_NeedsText`)."""
    types = set(map(type, values))
    if types == {int}:
        try:
            arr = np.array(values, dtype=np.int64)
        except OverflowError:
            arr = None
        if arr is not None and -(INT64_MAX // 1000) <= arr.min() and arr.max() <= INT64_MAX // 1000:
            return arr * 1000
    elif types <= {int, float}:
        try:
            arr = np.array(values, dtype=np.float64)
        except OverflowError:  # an int beyond float range
            arr = None
        if arr is not None and (not arr.size or (np.isfinite(arr).all() and np.abs(arr).max() < EXACT_BELOW_US)):
            return us_to_ns(arr)
    return np.array([exact_ns(v, path, f"traceEvents[{i}].{key}") for v, i in zip(values, index, strict=True)],
                    dtype=np.int64)


def _int(value: Any) -> int:
    """An id as an int: ints, integral numbers and int strings (`"0x0"`); anything else -1 (unknown)."""
    kind = type(value)
    if kind is int:
        out = value
    elif kind is str:
        try:
            out = int(value, 0)
        except ValueError:
            return -1
    elif kind in (float, Decimal) and math.isfinite(value) and abs(value) < 2**63 and value == int(value):
        out = int(value)
    else:
        return -1
    return out if INT64_MIN <= out <= INT64_MAX else -1


def _ints(values: list) -> np.ndarray:
    """int64 ids; values that are not ints (None, hex strings, ...) go through `_int` (-1 unknown)."""
    if set(map(type, values)) <= {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    return np.array([_int(v) for v in values], dtype=np.int64)


def _times(cols: dict[str, list], path: Path) -> tuple[np.ndarray, np.ndarray]:
    """int64 ns start and end of one table's events; a `ts`/`dur` that is missing, not a number, not
    finite, or whose ns (or their sum) overflow int64 is an `InputError` naming the event."""
    start = _ns(cols["ts"], "ts", cols["index"], path)
    dur = _ns(cols["dur"], "dur", cols["index"], path)
    end = start + dur
    over = np.flatnonzero(((dur > 0) & (end < start)) | ((dur < 0) & (end > start)))
    if over.size:
        i = int(over[0])
        raise InputError(path, f"traceEvents[{cols['index'][i]}]", "ts + dur whose ns fit int64",
                         f"ts {cols['ts'][i]!r}, dur {cols['dur'][i]!r}")
    return start, end


def _bad_event(events: list, path: Path) -> InputError:
    """The first event that is not an object, or whose `cat` cannot be a category name."""
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            return InputError(path, f"traceEvents[{i}]", "an event object", type(e).__name__)
        try:
            hash(e.get("cat"))
        except TypeError:
            return InputError(path, f"traceEvents[{i}].cat", "a category name", type(e.get("cat")).__name__)
    return InputError(path, "traceEvents", "a list of event objects")  # pragma: no cover - found above


def extract(data: Any, path: Path, exact: bool = False) -> dict[str, Any]:
    """First half of the read, plain Python only: the `ph: X` events by table, as column lists.

    No numpy or pandas here. Each table keeps `index`, the events' positions in `traceEvents`, for errors.
    `exact` records that `data` was parsed keeping decimal text (`files.load_json(exact=True)`).
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
    except (AttributeError, TypeError):
        raise _bad_event(events, path) from None
    buckets[FRAME_CAT] = _step_frames(events, buckets[FRAME_CAT])

    def columns(cats: tuple[str, ...] | dict[str, str], gpu: bool) -> dict[str, list]:
        index = [i for c in cats for i in buckets[c]]
        evs = [events[i] for i in index]
        args = [e.get("args") or {} for e in evs]
        try:
            cols = {
                "index": index,
                "name": [str(e.get("name", "")) for e in evs],
                "ts": [e.get("ts") for e in evs],
                "dur": [e.get("dur", 0) for e in evs],
                "correlation_id": [a.get("correlation", -1) for a in args],
                "cat": [e["cat"] for e in evs],
            }
        except AttributeError:
            j = next(j for j, a in enumerate(args) if not isinstance(a, dict))
            raise InputError(path, f"traceEvents[{index[j]}].args", "an object of event arguments",
                             type(args[j]).__name__) from None
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
            "markers": columns(MARKER_CATS, False), "top": top, "exact": exact}


_NO_ARGS: dict = {}
_WANTED = frozenset((*GPU_KINDS, *API_CATS, *MARKER_CATS))


def _step_frames(events: list, rows: list[int]) -> list[int]:
    """The `python_function` rows that are step frames (`STEP_FRAME`)."""
    out = []
    for i in rows:
        name = events[i].get("name")
        if type(name) is str and name.endswith(": execute_model") and STEP_FRAME.search(name):
            out.append(i)
    return out


def extract_lean(events: list, ids: bool = False) -> dict[str, Any] | None:
    """`extract` of well-formed events at C speed (`map` over `dict.get`), without the columns a lean
    table leaves out (device, stream; `ids`: with them); None where an event or its args is not an
    object, or a `cat` is unhashable: then `extract` does it and names the fault."""
    get = dict.get
    n = len(events)
    try:
        # each pass over every event costs its cache misses: one for `cat`, then `ph` of the wanted only
        cats = list(map(get, events, repeat("cat", n)))
        all_kernels = n > 0 and cats[0] == "kernel" and cats.count("kernel") == n
        wanted = range(n) if all_kernels else list(compress(range(n), map(_WANTED.__contains__, cats)))
        phs = list(map(get, map(events.__getitem__, wanted), repeat("ph", len(wanted)), repeat("X", len(wanted))))
        buckets: dict[str, list[int]] = {c: [] for c in _WANTED}
        if all_kernels and phs.count("X") == n:
            buckets["kernel"] = list(range(n))
        else:
            for i, ph in zip(wanted, phs, strict=True):
                if ph == "X":
                    buckets[cats[i]].append(i)
        if buckets[FRAME_CAT]:
            buckets[FRAME_CAT] = _step_frames(events, buckets[FRAME_CAT])

        def columns(table: tuple[str, ...], host: bool) -> dict[str, list]:
            index = [i for c in table for i in buckets[c]]
            evs = events if len(buckets[table[0]]) == n else [events[i] for i in index]  # all of one category
            k = len(evs)
            args = list(map(get, evs, repeat("args", k), repeat(_NO_ARGS, k)))
            if None in args:  # "args": null
                args = [a if a is not None else _NO_ARGS for a in args]
            cols = {
                "index": index,
                "name": list(map(str, map(get, evs, repeat("name", k), repeat("", k)))),
                "ts": list(map(get, evs, repeat("ts", k))),
                "dur": list(map(get, evs, repeat("dur", k), repeat(0, k))),
                "correlation_id": list(map(get, args, repeat("correlation", k), repeat(-1, k))),
                "cat": [c for c in table for c in [c] * len(buckets[c])],
            }
            if host:
                cols["pid"] = list(map(get, evs, repeat("pid", k)))
                cols["tid"] = list(map(get, evs, repeat("tid", k)))
            elif ids:  # as `extract`: args.device, else pid; args.stream where an int, else tid
                cols["device"] = list(map(get, args, repeat("device", k), map(get, evs, repeat("pid", k))))
                cols["stream"] = [s if type(s) is int else t for s, t in
                                  zip(map(get, args, repeat("stream", k)), map(get, evs, repeat("tid", k)), strict=True)]
            return cols

        return {"gpu": columns(tuple(GPU_KINDS), False), "api": columns(API_CATS, True),
                "markers": columns(MARKER_CATS, True)}
    except TypeError:  # an event or its args that is no object, an unhashable cat
        return None


def _base_ns(top: dict[str, Any], path: Path) -> int | None:
    """`baseTimeNanoseconds` as an int, None where absent; anything but an int64 number of ns is an error."""
    base = top.get("baseTimeNanoseconds")
    if base is None:
        return None
    kind = type(base)
    if kind in (float, Decimal):
        if not (math.isfinite(base) and abs(base) < 2**63):
            raise InputError(path, "baseTimeNanoseconds", "ns that fit int64", repr(base)[:80])
        if base != int(base):
            raise InputError(path, "baseTimeNanoseconds", "an integer number of ns", repr(base)[:80])
        base = int(base)
    elif kind is not int:
        raise InputError(path, "baseTimeNanoseconds", "an integer number of ns", repr(base)[:80])
    if not INT64_MIN <= base <= INT64_MAX:
        raise InputError(path, "baseTimeNanoseconds", "ns that fit int64", repr(base)[:80])
    return base


def _shift(times: np.ndarray, shift: int, c: dict[str, list], key: str, path: Path) -> np.ndarray:
    """`times + shift`, where no sum overflows int64; else an `InputError` naming the event."""
    if not shift or not times.size:
        return times
    bad = np.flatnonzero(times > INT64_MAX - shift if shift > 0 else times < INT64_MIN - shift)
    if bad.size:
        i = int(bad[0])
        raise InputError(path, f"traceEvents[{c['index'][i]}]", "ts whose ns plus baseTimeNanoseconds fit int64",
                         f"{key} {int(times[i])} ns + base {shift} ns")
    return times + shift


def _devices(top: dict[str, Any], path: Path) -> list[dict]:
    devices = top.get("deviceProperties")
    if devices is None:
        return []
    if not isinstance(devices, list):
        raise InputError(path, "deviceProperties", "a list of device objects", type(devices).__name__)
    for i, d in enumerate(devices):
        if not isinstance(d, dict):
            raise InputError(path, f"deviceProperties[{i}]", "a device object", type(d).__name__)
    return devices


def build_of(top: dict[str, Any], devices: list[dict]) -> tuple[str, str]:
    """(`rocm` | `cuda` | `unknown`, the field that told): version fields, then warp size, then names."""
    for build, keys in VERSION_FIELDS.items():
        for key in keys:
            if top.get(key) is not None:
                return build, f"{key} {top[key]!r}"
    warps = {d.get("warpSize") for d in devices if type(d.get("warpSize")) is int}
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


def _all_times(cols: dict[str, Any], path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
    """(start, end) of each table, or None where a value needs its decimal text (parse again)."""
    try:
        return {key: _times(cols[key], path) for key in ("gpu", "api", "markers")}
    except _NeedsText:
        return None


def _plain(value: Any) -> Any:
    """A top-level value for `meta`, which is written as JSON: text, a number or None as they are."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    return str(value)[:200]


def build(cols: dict[str, Any], path: Path) -> Trace:
    """Second half of the read: column lists (from `extract`) -> the canonical tables and a Trace.

    Where a float needs its decimal text (module docstring) and `cols` were not parsed keeping it, the
    file is parsed again that way first.
    """
    from perflib.traces import schema  # pandas: loaded where a table is made, not at import

    path = Path(path)
    times = _all_times(cols, path)
    if times is None:
        cols = extract(load_json(path, exact=True), path, exact=True)
        times = _all_times(cols, path)
        if times is None:  # pragma: no cover - every float of an exact parse is a Decimal or not finite
            raise InputError(path, "traceEvents", "ts and dur as numbers of µs")
    top = cols["top"]
    base_ns = _base_ns(top, path)
    shift = base_ns or 0
    devices = _devices(top, path)

    def label_for(c: dict[str, list]):
        return lambda k: f"traceEvents[{c['index'][k]}]"

    def shifted(key: str) -> tuple[np.ndarray, np.ndarray]:
        s, e = times[key]
        return _shift(s, shift, cols[key], "ts", path), _shift(e, shift, cols[key], "ts + dur", path)

    gpu = cols["gpu"]
    start, end = shifted("gpu")
    dispatches = schema.dispatch_frame(
        {"kernel": gpu["name"], "start_ns": start, "end_ns": end, "device": _ints(gpu["device"]), "queue": -1,
         "stream": _ints(gpu["stream"]), "correlation_id": _ints(gpu["correlation_id"]),
         "kind": [GPU_KINDS[c] for c in gpu["cat"]]},
        SOURCE, path, label_for(gpu),
    )

    def host_table(key: str) -> dict[str, Any]:
        c = cols[key]
        s, t = shifted(key)
        return {"name": c["name"], "start_ns": s, "end_ns": t, "pid": _ints(c["pid"]),
                "tid": _ints(c["tid"]), "correlation_id": _ints(c["correlation_id"]), "domain": c["cat"]}

    api = schema.api_frame(host_table("api"), SOURCE, path, label_for(cols["api"]))
    markers = schema.marker_frame(host_table("markers"), SOURCE, path, label_for(cols["markers"]))
    build_name, evidence = build_of(top, devices)
    meta = {
        "base_time_ns": base_ns,
        "to_unix_ns": 0 if base_ns is not None else None,
        "ts_offset_ns": shift,
        "schema_version": _plain(top.get("schemaVersion")),
        "trace_name": _plain(top.get("traceName")),
        "devices": [_plain(d.get("name")) for d in devices],
        "build": build_name,
        "build_evidence": evidence,
        "ts_parse": "decimal text (floats beyond 2^43 us)" if cols.get("exact") else "float64",
        "ts_precision": "exact ns",
    }
    clock = "realtime" if base_ns is not None else "unknown"
    return Trace(dispatches, api, markers, clock, SOURCE, str(path), meta)


def read_kineto(path: Path) -> Trace:
    """A Kineto trace (`.json` / `.json.gz`) -> Trace (its GPU work; `kineto_stream.read` adds a CPU trace's
    operators)."""
    path = Path(path)
    return build(extract(load_json(path), path), path)
