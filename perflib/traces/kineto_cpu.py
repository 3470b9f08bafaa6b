"""The device's work of a Kineto trace without GPU activity: the model's CPU operators (PyTorch on the CPU,
as vLLM's CPU worker writes it).

A Kineto trace with no `kernel`, `gpu_memcpy` or `gpu_memset` event has no dispatch; where it has
`cpu_op` events, its dispatches are the model's operators instead, kind `cpu_op` (`device` -1,
`stream` the thread, `queue` and `correlation_id` -1), so that the same attribution splits each step
into the model's work (busy) and the rest (host time: scheduling, input preparation, sampling, output
processing). Which operators are the model's:

1. the model's ranges, the first family the trace has: vLLM's model runner `_model_forward` and the LM
   head's `compute_logits` (python ranges, `with_stack`); else the outermost `nn.Module: ...` ranges
   but the sampler's (`with_modules`); else, with no python range at all, the whole trace;
2. the operators inside them, on their thread, that no other operator holds (top level): `aten::linear`
   counts once, not again as its `aten::addmm`;
3. a compiled graph's call (`## Call CompiledFxGraph ... ##`, any `## ... ##` range) is split: its own
   top-level operators (`_C::onednn_mm`, attention) stand as they are, and the rest of its span, the
   graph's generated code that records no operator of its own (Inductor's fused C++ kernels: norms,
   activations, rotary), stands as pieces named after the call. The pieces and the operators tile the
   call's span: busy is its span, and the class times add up to it.

Everything else the trace holds (the sampler's operators, input preparation's slices and copies) is
host time. `meta["device_work"]` says which family of ranges chose the operators and how many.
A file's events are read again for this (`events_of`, streamed), only where it holds no GPU work.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from perflib.errors import InputError
from perflib.traces import files, json_stream, kineto
from perflib.traces.codebook import Names
from perflib.traces.json_stream import Text
from perflib.traces.trace import Trace

KIND = "cpu_op"
RUNNER_RANGES = re.compile(r"\): (?:_model_forward|compute_logits)$")
"""vLLM's model runner: the forward (`gpu_model_runner.py(N): _model_forward`) and the LM head
(`<model>.py(N): compute_logits`), as python ranges of a `with_stack` trace."""
MODULE_RANGE, SAMPLER = "nn.Module: ", re.compile(r"Sampler")
COMPILED_CALL = re.compile(r"^## .* ##$")
"""A compiled graph's call (TorchInductor's `## Call CompiledFxGraph <key> ##`)."""
BLOCK = 16 << 20


def events_of(path: Path) -> Iterator[list]:
    """The `traceEvents` of a Kineto file, streamed in chunks of whole events (`perflib.traces.json_stream`)."""
    with files.read_ahead(path, BLOCK) as blocks:
        text = Text(blocks, path)
        text.expect(b"{", 'a Kineto object with a "traceEvents" list')
        for key in json_stream.members(text, "',' or '}' between top-level keys"):
            if key == "traceEvents" and text.startswith(b"["):
                text.consume(1)
                closed = False
                while not closed:
                    events, closed, chunk = json_stream.next_chunk(text, "traceEvents")
                    if events:
                        yield _exact_where_needed(events, chunk, path)
            else:
                text.value()


def _exact_where_needed(events: list, chunk: bytes | None, path: Path) -> list:
    """The chunk's events, parsed again keeping decimal text where a float `ts` needs it (`kineto`)."""
    for e in events:
        if not isinstance(e, dict) or chunk is None:
            continue
        for key in ("ts", "dur"):  # a float either way (a huge integer parses as one) needs its text
            value = e.get(key)
            if type(value) is float and abs(value) >= kineto.EXACT_BELOW_US:
                return json_stream.loads(chunk, exact=True)
    return events


def _wanted(e: Any) -> str | None:
    """`op` for a cpu_op, `range` for a python range that may be the model's, else None."""
    if not isinstance(e, dict) or e.get("ph", "X") != "X":
        return None
    cat = e.get("cat")
    if cat == "cpu_op":
        return "op"
    if cat == "python_function":
        name = e.get("name")
        if isinstance(name, str) and (name.startswith(MODULE_RANGE) or RUNNER_RANGES.search(name)):
            return "range"
    return None


def collect(chunks: Iterable[list], path: Path, offset: int = 0) -> dict[str, dict[str, list]]:
    """The cpu_op events and the candidate model ranges of the events, as columns (`index` counts every
    event of every chunk from `offset`, for errors)."""
    cols = {which: {k: [] for k in ("index", "name", "ts", "dur", "tid")} for which in ("op", "range")}
    seen = offset
    for events in chunks:
        for i, e in enumerate(events):
            which = _wanted(e)
            if which is None:
                continue
            c = cols[which]
            c["index"].append(seen + i)
            c["name"].append(str(e.get("name", "")))
            c["ts"].append(e.get("ts"))
            c["dur"].append(e.get("dur", 0))
            c["tid"].append(e.get("tid"))
        seen += len(events)
    return cols


def _outermost(start: np.ndarray, end: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Rows that no earlier row of their thread holds (an operator inside another is not top level)."""
    order = np.lexsort((-end, start, tid))
    keep = np.zeros(start.size, dtype=bool)
    running, last = 0, None
    for i in order.tolist():
        if tid[i] != last:  # a thread's first row
            keep[i], running, last = True, int(end[i]), tid[i]
            continue
        keep[i] = bool(start[i] >= running or end[i] > running)  # after the rows before it, or not within them
        running = max(running, int(end[i]))
    return keep


def _regions(r: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """The model's ranges (start, end, thread) and which family they are (module docstring)."""
    names = np.asarray(r["name"], dtype=object)
    runner = np.array([bool(RUNNER_RANGES.search(n)) for n in names], dtype=bool)
    module = np.array([n.startswith(MODULE_RANGE) and not SAMPLER.search(n) for n in names], dtype=bool)
    for pick, label in ((runner, "vLLM's _model_forward and compute_logits ranges"),
                        (module, "the outermost nn.Module ranges but the sampler's")):
        if pick.any():
            s, e, t = r["start"][pick], r["end"][pick], r["tid"][pick]
            keep = _outermost(s, e, t)
            return s[keep], e[keep], t[keep], label
    empty = np.empty(0, dtype=np.int64)
    return empty, empty, empty, "the whole trace (no python ranges: a trace without with_stack)"


def _inside(start: np.ndarray, tid: np.ndarray, rs: np.ndarray, re_: np.ndarray, rt: np.ndarray) -> np.ndarray:
    """Whether each row starts inside a range of its thread."""
    out = np.zeros(start.size, dtype=bool)
    for t in np.unique(rt):
        order = np.argsort(rs[rt == t])
        lo, hi = rs[rt == t][order], re_[rt == t][order]
        mine = np.flatnonzero(tid == t)
        k = np.searchsorted(lo, start[mine], "right") - 1
        ok = k >= 0
        out[mine[ok]] = start[mine[ok]] < hi[k[ok]]
    return out


def select(cols: dict[str, dict[str, list]], path: Path) -> tuple[dict[str, Any], str]:
    """The dispatch columns of the model's operators (unshifted ns) and what chose them."""
    times = {}
    for which in ("op", "range"):
        c = cols[which]
        start, end = kineto._times(c, path)
        times[which] = {"start": start, "end": end, "tid": kineto._ints(c["tid"]),
                        "name": np.asarray(c["name"], dtype=object)}
    op, rng = times["op"], times["range"]
    rs, re_, rt, family = _regions(rng)
    top = _outermost(op["start"], op["end"], op["tid"])
    if rs.size:
        top &= _inside(op["start"], op["tid"], rs, re_, rt)
    names: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    tids: list[int] = []
    for i in np.flatnonzero(top):
        name, s, e, t = op["name"][i], int(op["start"][i]), int(op["end"][i]), int(op["tid"][i])
        if not COMPILED_CALL.match(name):
            names.append(name), starts.append(s), ends.append(e), tids.append(t)
            continue
        held = np.flatnonzero((op["tid"] == t) & (op["start"] >= s) & (op["end"] <= e))
        held = held[held != i]
        children = held[_outermost(op["start"][held], op["end"][held], op["tid"][held])] if held.size else held
        at = s
        for j in children[np.argsort(op["start"][children], kind="stable")]:
            cs, ce = int(op["start"][j]), int(op["end"][j])
            if cs > at:
                names.append(name), starts.append(at), ends.append(cs), tids.append(t)
            names.append(op["name"][j]), starts.append(cs), ends.append(ce), tids.append(t)
            at = max(at, ce)
        if e > at:
            names.append(name), starts.append(at), ends.append(e), tids.append(t)
    note = (f"CPU operators: no GPU activity in the trace; the model's top-level operators inside {family} "
            f"({int(top.sum())} of {op['start'].size} cpu_op events, compiled-graph calls split into their "
            "operators and their own code)")
    return {"name": names, "start": np.asarray(starts, dtype=np.int64), "end": np.asarray(ends, dtype=np.int64),
            "tid": np.asarray(tids, dtype=np.int64)}, note


def dispatches(cols: dict[str, Any], shift: int, path: Path, lean: bool, ids: bool) -> Any:
    """The operators as a dispatch table (kind `cpu_op`), shifted by `shift` ns (`baseTimeNanoseconds`)."""
    from perflib.traces import schema  # pandas: loaded where a table is made, not at import

    book = Names()
    codes = book.encode(cols["name"])
    start, end = cols["start"] + shift, cols["end"] + shift
    if start.size and (int(start.min()) < kineto.INT64_MIN + abs(shift) or int(end.max()) > kineto.INT64_MAX - abs(shift)):
        raise InputError(path, "traceEvents", "cpu_op ts whose ns plus baseTimeNanoseconds fit int64")
    with_ids = {"device": -1, "queue": -1, "stream": cols["tid"]} if ids or not lean else None
    frame = schema.lean_dispatch_frame(codes, book.names, start, end, None, KIND, kineto.SOURCE, path,
                                       lambda k: f"cpu_op {k}", ids=with_ids)
    return frame if lean else frame.assign(kernel=frame["kernel"].astype("str"))


def with_cpu_ops(trace: Trace, path: Path, lean: bool, ids: bool) -> Trace:
    """The trace with the model's operators as its dispatches where it holds no GPU work and has
    operators (module docstring); else the trace as it was."""
    if len(trace.dispatches):
        return trace
    cols = collect(events_of(Path(path)), Path(path))
    if not cols["op"]["name"]:
        return trace
    chosen, note = select(cols, Path(path))
    frame = dispatches(chosen, int(trace.meta.get("ts_offset_ns") or 0), Path(path), lean, ids)
    return replace(trace, dispatches=frame, meta={**trace.meta, "device_work": note})
