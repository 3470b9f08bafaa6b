"""A Kineto (PyTorch profiler) trace read as a stream of event chunks, into lean tables.

`kineto.read_kineto` parses the whole file into Python objects (about 2.4 GiB per million events).
Here the file is read as a stream (`perflib.traces.json_stream`): the gunzipped text in blocks of
`BLOCK` bytes (a thread gunzips ahead), `traceEvents` in chunks of about `json_stream.PARSE` bytes of
whole events, each parsed at once (orjson), reduced to numpy columns and dropped before the next
chunk; the keys around `traceEvents` are read whole. Small chunks pay: their objects are still in the
CPU's caches when they are reduced, and the next chunk's objects reuse their memory. What stays is the
lean dispatch table (`schema.LEAN_DISPATCH_COLUMNS`), the launch calls (int columns and name codes) and
the markers: memory grows with the events kept, not with the file. Up to those tables (`read_tables`)
the read needs numpy but not pandas, so `perflib.traces.prefetch` runs it in a forked child.

Every figure is the full reader's: the same events, the same checks (`kineto._times`, `kineto._ints`),
exact ns (a chunk with a float `ts` beyond 2^43 µs is parsed again keeping decimal text, as
`kineto.build` does for the whole file), and the rows in the same order (kernels, then copies, then
fills, each in file order, then a stable sort by start).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from perflib.errors import InputError
from perflib.traces import files, json_stream, kineto, kineto_cpu
from perflib.traces.codebook import Names
from perflib.traces.json_stream import Table, Text
from perflib.traces.trace import ReadMode, Trace

if TYPE_CHECKING:
    import pandas as pd

BLOCK = 16 << 20
"""Bytes of JSON read at a time."""


def _split(cols: dict[str, list], cats: tuple[str, ...]) -> list[tuple[str, slice]]:
    """The slice of each category in a table of `kineto.extract` (its rows are grouped by category)."""
    out, at = [], 0
    categories = cols["cat"]
    for cat in cats:
        n = categories.count(cat)
        out.append((cat, slice(at, at + n)))
        at += n
    return out


def read(path: Path, mode: ReadMode = ReadMode.FULL) -> Trace:
    """A Kineto trace in `mode`: FULL parses it whole (`kineto.read_kineto`), a lean mode streams it
    (`read_kineto_lean`); either way, a trace without GPU work gets its model's CPU operators (`kineto_cpu`)."""
    if mode.lean:
        return read_kineto_lean(path, mode.ids)
    return kineto_cpu.with_cpu_ops(kineto.read_kineto(path), Path(path), lean=False, ids=True)


def read_kineto_lean(path: Path, ids: bool = False) -> Trace:
    """A Kineto trace (`.json` / `.json.gz`) -> Trace with a lean dispatch table, read as a stream
    (`ids`: with device and stream, as `kineto.read_kineto` reads them)."""
    path = Path(path)
    return trace_of_tables(path, read_tables(path, ids))


@dataclass
class Tables:
    """What the stream leaves of a file: the top-level fields, the running name dictionaries, the GPU
    and API columns by category, the markers, and whether a chunk needed decimal text. Plain data
    (numpy arrays, lists, dicts): `perflib.traces.prefetch` pickles it from a forked child."""

    top: dict[str, Any]
    names: Names
    api_names: Names
    domains: Names
    gpu: dict[str, Table]
    api: dict[str, Table]
    markers: dict[str, dict[str, list]]
    exact: bool
    ids: bool = False

    def compact(self) -> None:
        """Each column of each table as one array (fewer, larger objects to pickle)."""
        for table in (*self.gpu.values(), *self.api.values()):
            table.parts = {k: [np.concatenate(v)] for k, v in table.parts.items() if v}


def read_tables(path: Path, ids: bool = False) -> Tables:
    """The streamed read of a Kineto file up to the tables (`Tables`): numpy, no pandas, so that a
    forked child can do it while its parent imports pandas. `ids`: the dispatches' device and stream too."""
    path = Path(path)
    try:
        with files.read_ahead(path, BLOCK) as blocks:
            return _read(Text(blocks, path), path, ids)
    except RecursionError as exc:  # an event nested deeper than the parser goes: one line, never a traceback
        raise InputError(path, None, "JSON nested to a sensible depth", "deeper than the parser's limit") from exc


def trace_of_tables(path: Path, t: Tables) -> Trace:
    """The lean Trace of a streamed read's `Tables`."""
    return _trace(Path(path), t.top, t.names, t.api_names, t.domains, t.gpu, t.api, t.markers, t.exact, t.ids)


def _read(text: Text, path: Path, ids: bool) -> Tables:
    names, api_names, domains = Names(), Names(), Names()
    gpu = {c: Table() for c in kineto.GPU_KINDS}
    api = {c: Table() for c in kineto.API_CATS}
    markers: dict[str, dict[str, list]] = {c: {} for c in kineto.MARKER_CATS}
    top: dict[str, Any] = {}
    exact_any, seen, events_found = False, 0, False
    with files.gc_paused():  # millions of acyclic objects per chunk, dropped right after
        text.expect(b"{", 'a Kineto object with a "traceEvents" list')
        for key in json_stream.members(text, "',' or '}' between top-level keys"):
            if key == "traceEvents" and text.startswith(b"["):
                text.consume(1)
                events_found = True
                closed = False
                while not closed:
                    events, closed, chunk = json_stream.next_chunk(text, "traceEvents")
                    if events:
                        exact_any |= _reduce(events, chunk, seen, path, names, api_names, domains,
                                             gpu, api, markers, ids)
                        seen += len(events)
                    del events, chunk
            else:
                top[key] = text.value()
    if not events_found:
        raise InputError(path, "top level", 'a Kineto object with a "traceEvents" list')
    return Tables(top, names, api_names, domains, gpu, api, markers, exact_any, ids)


def _extract(events: list, path: Path, exact: bool, ids: bool) -> dict[str, Any]:
    return kineto.extract_lean(events, ids) or kineto.extract({"traceEvents": events}, path, exact=exact)


def _reduce(events: list, chunk: bytes, seen: int, path: Path, names: Names, api_names: Names, domains: Names,
            gpu: dict[str, Table], api: dict[str, Table], markers: dict[str, dict[str, list]], ids: bool) -> bool:
    """One chunk's events into the tables; True where it needed decimal text (parsed again exactly)."""
    exact = False
    cols = _extract(events, path, False, ids)
    for table in ("gpu", "api", "markers"):
        cols[table]["index"] = [i + seen for i in cols[table]["index"]]
    try:
        times = {t: kineto._times(cols[t], path) for t in ("gpu", "api")}
        kineto._times(cols["markers"], path)
    except kineto._NeedsText:
        exact = True
        cols = _extract(json_stream.loads(chunk, exact=True), path, True, ids)
        for table in ("gpu", "api", "markers"):
            cols[table]["index"] = [i + seen for i in cols[table]["index"]]
        times = {t: kineto._times(cols[t], path) for t in ("gpu", "api")}
    _add(cols, times, names, api_names, domains, gpu, api, markers, ids)
    return exact


def _add(cols: dict[str, Any], times: dict[str, tuple[np.ndarray, np.ndarray]], names: Names, api_names: Names,
         domains: Names, gpu: dict[str, Table], api: dict[str, Table], markers: dict[str, dict[str, list]],
         ids: bool) -> None:
    """One chunk's columns (`kineto.extract_lean`) and their times into the tables (`ids`: the
    dispatches' device and stream too)."""
    g = cols["gpu"]
    start, end = times["gpu"]
    code = names.encode(g["name"])
    corr = kineto._ints(g["correlation_id"])
    index = np.asarray(g["index"], dtype=np.int64)
    more = {"device": kineto._ints(g["device"]), "stream": kineto._ints(g["stream"])} if ids else {}
    for cat, rows in _split(g, tuple(kineto.GPU_KINDS)):
        if rows.stop > rows.start:
            gpu[cat].add(code=code[rows], start=start[rows], end=end[rows], corr=corr[rows], index=index[rows],
                         **{k: v[rows] for k, v in more.items()})
    a = cols["api"]
    if len(a["index"]):
        start, end = times["api"]
        code, dom = api_names.encode(a["name"]), domains.encode(a["cat"])
        pid, tid, corr = kineto._ints(a["pid"]), kineto._ints(a["tid"]), kineto._ints(a["correlation_id"])
        index = np.asarray(a["index"], dtype=np.int64)
        for cat, rows in _split(a, kineto.API_CATS):
            if rows.stop > rows.start:
                api[cat].add(code=code[rows], start=start[rows], end=end[rows], pid=pid[rows], tid=tid[rows],
                             corr=corr[rows], domain=dom[rows], index=index[rows])
    m = cols["markers"]
    for cat, rows in _split(m, kineto.MARKER_CATS):
        for key, values in m.items():
            markers[cat].setdefault(key, []).extend(values[rows])


def _trace(path: Path, top: dict[str, Any], names: Names, api_names: Names, domains: Names,
           gpu: dict[str, Table], api: dict[str, Table], markers: dict[str, dict[str, list]], exact: bool,
           ids: bool = False) -> Trace:
    """The tables, shifted by `baseTimeNanoseconds`, as `kineto.build` makes them (`ids`: the
    dispatches with device, queue and stream)."""
    from perflib.traces import schema  # pandas: not in the prefetch child, which stops at the Tables
    top = {k: top.get(k) for k in kineto.TOP_FIELDS}
    base_ns = kineto._base_ns(top, path)
    shift = base_ns or 0
    devices = kineto._devices(top, path)

    def joined(tables: dict[str, Table], key: str, dtype: Any) -> np.ndarray:
        return np.concatenate([t.column(key, dtype) for t in tables.values()])

    def shifted(tables: dict[str, Table]) -> tuple[np.ndarray, np.ndarray]:
        c = {"index": joined(tables, "index", np.int64) if shift else None}  # for the error's event only
        return (kineto._shift(joined(tables, "start", np.int64), shift, c, "ts", path),
                kineto._shift(joined(tables, "end", np.int64), shift, c, "ts + dur", path))

    start, end = shifted(gpu)
    kind = np.concatenate([np.full(sum(p.size for p in t.parts.get("code", [])),
                                   schema.DISPATCH_KINDS.index(kineto.GPU_KINDS[c]), dtype=np.int8)
                           for c, t in gpu.items()])
    index = joined(gpu, "index", np.int64)
    dispatches = schema.lean_dispatch_frame(
        joined(gpu, "code", np.int32), names.names, start, end, joined(gpu, "corr", np.int64), kind,
        kineto.SOURCE, path, lambda k: f"traceEvents[{index[k]}]",
        ids={"device": joined(gpu, "device", np.int64), "stream": joined(gpu, "stream", np.int64)} if ids else None)
    api_frame = _api_frame(api, api_names, domains, shift, path, shifted)

    def marker_table() -> dict[str, Any]:
        c = {key: [v for cat in kineto.MARKER_CATS for v in markers[cat].get(key, [])]
             for key in ("index", "name", "ts", "dur", "correlation_id", "cat", "pid", "tid")}
        s, t = kineto._times(c, path)  # every chunk that needed decimal text was parsed so in _reduce
        s, t = kineto._shift(s, shift, c, "ts", path), kineto._shift(t, shift, c, "ts + dur", path)
        return {"name": c["name"], "start_ns": s, "end_ns": t, "pid": kineto._ints(c["pid"]),
                "tid": kineto._ints(c["tid"]), "correlation_id": kineto._ints(c["correlation_id"]),
                "domain": c["cat"], "index": c["index"]}

    mt = marker_table()
    marker_rows = mt.pop("index")
    marker_frame = schema.marker_frame(mt, kineto.SOURCE, path, lambda k: f"traceEvents[{marker_rows[k]}]")
    build_name, evidence = kineto.build_of(top, devices)
    meta = {
        "base_time_ns": base_ns,
        "to_unix_ns": 0 if base_ns is not None else None,
        "ts_offset_ns": shift,
        "schema_version": kineto._plain(top.get("schemaVersion")),
        "trace_name": kineto._plain(top.get("traceName")),
        "devices": [kineto._plain(d.get("name")) for d in devices],
        "build": build_name,
        "build_evidence": evidence,
        "ts_parse": "decimal text (floats beyond 2^43 us)" if exact else "float64",
        "ts_precision": "exact ns",
        "lean": True,
    }
    clock = "realtime" if base_ns is not None else "unknown"
    trace = Trace(dispatches, api_frame, marker_frame, clock, kineto.SOURCE, str(path), meta)
    return kineto_cpu.with_cpu_ops(trace, path, lean=True, ids=ids)  # a trace without GPU work: its operators


def _api_frame(api: dict[str, Table], api_names: Names, domains: Names, shift: int, path: Path,
               shifted: Any) -> pd.DataFrame:
    """The launch calls as a table of the API columns, names and domains categorical, sorted by start."""
    # pandas: not in the prefetch child (as in _trace)
    import pandas as pd

    from perflib.traces import schema
    start, end = shifted(api)
    index = np.concatenate([t.column("index", np.int64) for t in api.values()])
    schema.check_intervals(start, end, path, lambda k: f"traceEvents[{index[k]}]", " (API call)")
    n = start.size

    def joined(key: str) -> np.ndarray:
        return np.concatenate([t.column(key, np.int64) for t in api.values()])

    frame = pd.DataFrame({
        "name": pd.Categorical.from_codes(joined("code").astype(np.int32), categories=pd.Index(api_names.names, dtype=object),
                                          validate=False),
        "start_ns": start, "end_ns": end, "pid": joined("pid"), "tid": joined("tid"),
        "correlation_id": joined("corr"),
        "domain": pd.Categorical.from_codes(joined("domain").astype(np.int32),
                                            categories=pd.Index(domains.names, dtype=object), validate=False),
        "source": pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[kineto.SOURCE], validate=False),
    })
    if n > 1 and not bool(np.all(start[1:] >= start[:-1])):
        frame = frame.take(np.argsort(start, kind="stable")).reset_index(drop=True)
    return frame
