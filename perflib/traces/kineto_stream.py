"""A Kineto (PyTorch profiler) trace read as a stream of event chunks, into lean tables.

`kineto.read_kineto` parses the whole file into Python objects (about 2.4 GiB per million events).
Here the gunzipped text is read in blocks of `BLOCK` bytes (a thread gunzips ahead), and parsed in
chunks of about `PARSE` bytes: each chunk is cut after its last complete event of `traceEvents`, the
events before the cut are parsed at once (orjson) and reduced to numpy columns, and the parsed
objects are dropped before the next chunk. Small chunks pay: their objects are still in the CPU's
caches when they are reduced, and the next chunk's objects reuse their memory. What stays is the lean
dispatch table (`schema.LEAN_DISPATCH_COLUMNS`), the launch calls (int columns and name codes) and
the markers: memory grows with the events kept, not with the file. Up to those tables (`read_tables`)
the read needs numpy but not pandas, so `perflib.traces.prefetch` runs it in a forked child.

Cutting: JSON text cannot hold `[`+P+`]` as a valid array unless P is whole elements, so a cut at
a `},` is tried by parsing what lies before it (in a trace written one event per line the last
`},` of a chunk ends an event); where that fails (an event's last key holds an object followed by
another key, compact JSON), the chunk is scanned with numpy for quotes and brackets outside strings
and cut where the bracket depth returns to the array's; where no event ends in the chunk, a chunk
four times larger is tried. The keys around `traceEvents` are read with the standard parser's
`raw_decode`.

Every figure is the full reader's: the same events, the same checks (`kineto._times`, `kineto._ints`),
exact ns (a chunk with a float `ts` beyond 2^43 µs is parsed again keeping decimal text, as
`kineto.build` does for the whole file), and the rows in the same order (kernels, then copies, then
fills, each in file order, then a stable sort by start).
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from perflib.errors import InputError
from perflib.traces import files, kineto
from perflib.traces.trace import Trace

if TYPE_CHECKING:
    import pandas as pd

BLOCK = 16 << 20
"""Bytes of JSON read at a time."""
_TRIES = 3
"""`},` cuts tried before the numpy scan."""
_WINDOW = 1 << 16
"""Text decoded at a time to read one top-level value."""
PARSE = 1 << 18
"""Bytes of events parsed at a time: a chunk's objects stay in the CPU's caches while they are reduced
to columns, and the next chunk's reuse their memory. On the 29.7 MB H200 trace, parse and selection
in 256 KiB chunks took 0.15 s against 0.35 s for the whole text at once (4 MiB chunks: 0.36 s)."""
_SPACE = re.compile(rb"[ \t\n\r\x0b\x0c]*")

_QUOTE, _BACKSLASH = 34, 92
_OPEN, _CLOSE = (123, 91), (125, 93)


class _Text:
    """The gunzipped bytes of a file, read block by block; what is not yet consumed starts at `pos` of
    `data` (consuming moves `pos`: the buffer is copied only when a block is appended)."""

    def __init__(self, fh: files.ReadAhead, path: Path) -> None:
        self.fh, self.path, self.data, self.pos, self.eof, self.offset = fh, path, b"", 0, False, 0

    def more(self) -> bool:
        """Append the next block; False at the end of the file."""
        if self.eof:
            return False
        try:
            block = self.fh.read()
        except (EOFError, zlib.error, OSError) as exc:
            raise files.stream_error(self.path, exc) from exc
        if not block:
            self.eof = True
            return False
        self.data = self.data[self.pos:] + block
        self.pos = 0
        return True

    def left(self) -> int:
        """Bytes read and not yet consumed."""
        return len(self.data) - self.pos

    def head(self, n: int) -> bytes:
        """The next `n` bytes not yet consumed (fewer where fewer are read)."""
        return self.data[self.pos:self.pos + n]

    def startswith(self, prefix: bytes) -> bool:
        return self.data.startswith(prefix, self.pos)

    def consume(self, n: int) -> None:
        self.pos += n
        self.offset += n

    def skip_ws(self) -> None:
        """Drop leading whitespace (what `bytes.lstrip` drops), reading on while nothing else is left."""
        while True:
            self.consume(_SPACE.match(self.data, self.pos).end() - self.pos)
            if self.left() or not self.more():
                return

    def expect(self, char: bytes, what: str) -> None:
        self.skip_ws()
        if not self.startswith(char):
            found = self.head(20).decode("utf-8", "replace") or "the end of the file"
            raise InputError(self.path, f"byte {self.offset}", what, repr(found))
        self.consume(1)

    def value(self) -> Any:
        """One JSON value (a top-level key or the value of a key other than traceEvents)."""
        self.skip_ws()
        window = _WINDOW
        decoder = json.JSONDecoder()
        while True:
            while self.left() < window and self.more():
                pass
            part = self.head(window)
            text = part.decode("utf-8", "surrogateescape")
            try:
                obj, end = decoder.raw_decode(text)
            except json.JSONDecodeError as exc:
                if len(part) < self.left() or not self.eof:
                    window *= 4
                    continue
                raise InputError(self.path, f"byte {self.offset + exc.pos}", "complete JSON", exc.msg) from exc
            if end == len(text) and (len(part) < self.left() or not self.eof):
                window *= 4  # a number cut by the window's edge: read on
                continue
            self.consume(len(text[:end].encode("utf-8", "surrogateescape")))
            return obj


def _loads(text: bytes, exact: bool) -> list:
    """The events of the array `text`; orjson, or the standard parser (NaN, or `exact`: Decimal floats)."""
    if not exact:
        import orjson

        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text, parse_float=Decimal) if exact else json.loads(text)


def _scan(region: bytes) -> tuple[int, int | None]:
    """(end of the last complete element, position of the array's closing bracket or None) of a
    region that starts between two elements of an array, from its quotes and brackets outside strings."""
    a = np.frombuffer(region, dtype=np.uint8)
    quotes = np.flatnonzero(a == _QUOTE)
    maybe = quotes[(quotes > 0) & (a[np.maximum(quotes - 1, 0)] == _BACKSLASH)]
    if maybe.size:  # a quote after backslashes is escaped where their run is odd
        escaped = []
        for q in maybe.tolist():
            run = 0
            while q - run - 1 >= 0 and region[q - run - 1] == _BACKSLASH:
                run += 1
            if run % 2:
                escaped.append(q)
        quotes = np.setdiff1d(quotes, np.array(escaped, dtype=quotes.dtype), assume_unique=True)
    brackets = np.flatnonzero((a == 123) | (a == 125) | (a == 91) | (a == 93))
    brackets = brackets[(np.searchsorted(quotes, brackets) & 1) == 0]
    chars = a[brackets]
    depth = np.cumsum(np.where((chars == 123) | (chars == 91), 1, -1))
    closed = np.flatnonzero(depth < 0)
    close = int(brackets[closed[0]]) if closed.size else None
    upto = closed[0] if closed.size else depth.size
    ends = np.flatnonzero((depth[:upto] == 0) & (chars[:upto] == 125))
    return (int(brackets[ends[-1]]) + 1 if ends.size else 0), close


def _cuts(region: bytes) -> list[int]:
    """Where a `}` may end the last whole event: before `,` and a newline first (no JSON string holds a
    raw newline, so that `}` is outside any name), then before a bare `,`."""
    out = []
    for mark in (b"},\n", b"},\r\n", b"},"):
        at = region.rfind(mark)
        if at >= 0 and at not in out:
            out.append(at)
    return out[:_TRIES]


def _next_chunk(text: _Text) -> tuple[list, bool, bytes]:
    """The next whole events of `traceEvents` (parsed), whether the array closed, and their text: those
    that end in the next `PARSE` bytes, or in the first region four, sixteen, ... times that which
    holds one (an event longer than `PARSE`)."""
    size = PARSE
    while True:
        text.skip_ws()
        if text.startswith(b","):
            text.consume(1)
            text.skip_ws()
        if text.startswith(b"]"):
            text.consume(1)
            return [], True, b""
        while text.left() < size and text.more():
            pass
        region = text.head(size)
        for cut in _cuts(region):
            doc = b"".join((b"[", memoryview(region)[:cut + 1], b"]"))
            try:
                import orjson

                events = orjson.loads(doc)
            except orjson.JSONDecodeError:
                continue
            text.consume(cut + 1)
            return events, False, doc
        end, close = _scan(region)
        if close is not None or end:
            upto = close if close is not None else end
            doc = b"".join((b"[", memoryview(region)[:upto], b"]"))
            text.consume(upto + (close is not None))
            return _parse(doc, text), close is not None, doc
        if text.left() > size:  # no event ends in the region, and more text is read: a larger region
            size *= 4
        elif not text.more():
            raise InputError(text.path, f"byte {text.offset + text.left()}", "complete JSON",
                             "the end of the file inside traceEvents (file cut?)")


def _parse(doc: bytes, text: _Text) -> list:
    """The events of one cut (`[` + its text + `]`); a fault is an `InputError` naming its byte."""
    try:
        return _loads(doc, exact=False)
    except json.JSONDecodeError as exc:
        raise InputError(text.path, f"byte {text.offset - len(doc) + 2 + max(exc.pos - 1, 0)}", "complete JSON",
                         exc.msg) from exc
    except ValueError as exc:
        raise InputError(text.path, None, "JSON numbers of a sensible length", files.said(exc)) from exc


class _Table:
    """Columns of one event category, chunk by chunk: name codes, ns, ids; kept in file order."""

    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = {}

    def add(self, **cols: np.ndarray) -> None:
        for k, v in cols.items():
            self.parts.setdefault(k, []).append(v)

    def column(self, key: str, dtype: Any) -> np.ndarray:
        got = self.parts.get(key)
        return np.concatenate(got) if got else np.zeros(0, dtype=dtype)


class _Names:
    """A running dictionary: text -> int32 code in first-seen order."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}

    def encode(self, values: list[str]) -> np.ndarray:
        codes = self.codes
        for v in dict.fromkeys(values):  # the distinct ones, in first-seen order: few
            codes.setdefault(v, len(codes))
        return np.fromiter(map(codes.__getitem__, values), dtype=np.int32, count=len(values))

    @property
    def names(self) -> list[str]:
        return list(self.codes)


def _split(cols: dict[str, list], cats: tuple[str, ...]) -> list[tuple[str, slice]]:
    """The slice of each category in a table of `kineto.extract` (its rows are grouped by category)."""
    out, at = [], 0
    categories = cols["cat"]
    for cat in cats:
        n = categories.count(cat)
        out.append((cat, slice(at, at + n)))
        at += n
    return out


def read_kineto_lean(path: Path) -> Trace:
    """A Kineto trace (`.json` / `.json.gz`) -> Trace with a lean dispatch table, read as a stream."""
    path = Path(path)
    return trace_of_tables(path, read_tables(path))


@dataclass
class Tables:
    """What the stream leaves of a file: the top-level fields, the running name dictionaries, the GPU
    and API columns by category, the markers, and whether a chunk needed decimal text. Plain data
    (numpy arrays, lists, dicts): `perflib.traces.prefetch` pickles it from a forked child."""

    top: dict[str, Any]
    names: _Names
    api_names: _Names
    domains: _Names
    gpu: dict[str, _Table]
    api: dict[str, _Table]
    markers: dict[str, dict[str, list]]
    exact: bool

    def compact(self) -> None:
        """Each column of each table as one array (fewer, larger objects to pickle)."""
        for table in (*self.gpu.values(), *self.api.values()):
            table.parts = {k: [np.concatenate(v)] for k, v in table.parts.items() if v}


def read_tables(path: Path) -> Tables:
    """The streamed read of a Kineto file up to the tables (`Tables`): numpy, no pandas, so that a
    forked child can do it while its parent imports pandas."""
    path = Path(path)
    with files.read_ahead(path, BLOCK) as blocks:
        return _read(_Text(blocks, path), path)


def trace_of_tables(path: Path, t: Tables) -> Trace:
    """The lean Trace of a streamed read's `Tables`."""
    return _trace(Path(path), t.top, t.names, t.api_names, t.domains, t.gpu, t.api, t.markers, t.exact)


def _read(text: _Text, path: Path) -> Tables:
    import gc

    names, api_names, domains = _Names(), _Names(), _Names()
    gpu = {c: _Table() for c in kineto.GPU_KINDS}
    api = {c: _Table() for c in kineto.API_CATS}
    markers: dict[str, dict[str, list]] = {c: {} for c in kineto.MARKER_CATS}
    top: dict[str, Any] = {}
    exact_any, seen, events_found = False, 0, False
    enabled = gc.isenabled()
    gc.disable()  # millions of acyclic objects per chunk, dropped right after
    try:
        text.expect(b"{", 'a Kineto object with a "traceEvents" list')
        text.skip_ws()
        if text.startswith(b"}"):
            text.consume(1)
        else:
            while True:
                key = text.value()
                text.expect(b":", "a ':' after a key")
                text.skip_ws()
                if key == "traceEvents" and text.startswith(b"["):
                    text.consume(1)
                    events_found = True
                    closed = False
                    while not closed:
                        events, closed, chunk = _next_chunk(text)
                        if events:
                            exact_any |= _reduce(events, chunk, seen, path, names, api_names, domains,
                                                 gpu, api, markers)
                            seen += len(events)
                        del events, chunk
                else:
                    top[key] = text.value()
                text.skip_ws()
                if text.startswith(b","):
                    text.consume(1)
                    continue
                text.expect(b"}", "',' or '}' between top-level keys")
                break
    finally:
        if enabled:
            gc.enable()
    if not events_found:
        raise InputError(path, "top level", 'a Kineto object with a "traceEvents" list')
    return Tables(top, names, api_names, domains, gpu, api, markers, exact_any)


def _extract(events: list, path: Path, exact: bool) -> dict[str, Any]:
    return kineto.extract_lean(events) or kineto.extract({"traceEvents": events}, path, exact=exact)


def _reduce(events: list, chunk: bytes, seen: int, path: Path, names: _Names, api_names: _Names, domains: _Names,
            gpu: dict[str, _Table], api: dict[str, _Table], markers: dict[str, dict[str, list]]) -> bool:
    """One chunk's events into the tables; True where it needed decimal text (parsed again exactly)."""
    exact = False
    cols = _extract(events, path, False)
    for table in ("gpu", "api", "markers"):
        cols[table]["index"] = [i + seen for i in cols[table]["index"]]
    try:
        times = {t: kineto._times(cols[t], path) for t in ("gpu", "api")}
        kineto._times(cols["markers"], path)
    except kineto._NeedsText:
        exact = True
        cols = _extract(_loads(chunk, exact=True), path, True)
        for table in ("gpu", "api", "markers"):
            cols[table]["index"] = [i + seen for i in cols[table]["index"]]
        times = {t: kineto._times(cols[t], path) for t in ("gpu", "api")}
    _add(cols, times, names, api_names, domains, gpu, api, markers)
    return exact


def _add(cols: dict[str, Any], times: dict[str, tuple[np.ndarray, np.ndarray]], names: _Names, api_names: _Names,
         domains: _Names, gpu: dict[str, _Table], api: dict[str, _Table], markers: dict[str, dict[str, list]]) -> None:
    """One chunk's columns (`kineto.extract_lean`) and their times into the tables."""
    g = cols["gpu"]
    start, end = times["gpu"]
    code = names.encode(g["name"])
    corr = kineto._ints(g["correlation_id"])
    index = np.asarray(g["index"], dtype=np.int64)
    for cat, rows in _split(g, tuple(kineto.GPU_KINDS)):
        if rows.stop > rows.start:
            gpu[cat].add(code=code[rows], start=start[rows], end=end[rows], corr=corr[rows], index=index[rows])
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


def _trace(path: Path, top: dict[str, Any], names: _Names, api_names: _Names, domains: _Names,
           gpu: dict[str, _Table], api: dict[str, _Table], markers: dict[str, dict[str, list]], exact: bool) -> Trace:
    """The tables, shifted by `baseTimeNanoseconds`, as `kineto.build` makes them."""
    from perflib.traces import schema  # pandas: not in the prefetch child, which stops at the Tables
    top = {k: top.get(k) for k in kineto.TOP_FIELDS}
    base_ns = kineto._base_ns(top, path)
    shift = base_ns or 0
    devices = kineto._devices(top, path)

    def joined(tables: dict[str, _Table], key: str, dtype: Any) -> np.ndarray:
        return np.concatenate([t.column(key, dtype) for t in tables.values()])

    def shifted(tables: dict[str, _Table]) -> tuple[np.ndarray, np.ndarray]:
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
        kineto.SOURCE, path, lambda k: f"traceEvents[{index[k]}]")
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
    return Trace(dispatches, api_frame, marker_frame, clock, kineto.SOURCE, str(path), meta)


def _api_frame(api: dict[str, _Table], api_names: _Names, domains: _Names, shift: int, path: Path,
               shifted: Any) -> pd.DataFrame:
    """The launch calls as a table of the API columns, names and domains categorical, sorted by start."""
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
