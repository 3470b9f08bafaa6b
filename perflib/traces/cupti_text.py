"""CUPTI activity text, as printed on stdout by the CUDA sample `cupti_trace_injection` (GPU.md).

A record is one line `KIND [ START, END ] duration D, ...` plus tab-started continuation lines
(`deviceId 0, contextId 1, streamId 15, graphId 10, ...`). Fields after the name are read as
`key value` pairs in any order. Kernels (`KERNEL`, `CONCURRENT_KERNEL`), `MEMCPY` and `MEMSET`
are dispatches; `RUNTIME` / `DRIVER` go to the API table; `OVERHEAD` is counted in meta. Lines
that are not records (the server's own log on the same stdout) are skipped. Timestamps are Unix
ns, so `clock` is `realtime`. Mangled names are demangled with `cxxfilt` when it is installed.

The file is read in chunks of whole records (`BLOCK` bytes of gunzipped text, cut before a line that
is no continuation), each reduced to numpy columns and dropped, so memory grows with the records
kept, not with the file. In a chunk, the records laid out as the sample prints them are matched in
bulk (`perflib.traces.cupti_layouts`); every other line that may start a record, with its
continuation lines, goes through the line-by-line path (`_parse`), which knows every quirk. Both give
the same records as `read_cupti_text_by_line`, the whole-file line-by-line read this replaced.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from perflib.errors import InputError
from perflib.traces import cupti_layouts, files, schema
from perflib.traces.trace import ReadMode, Trace

SOURCE = "cupti-text"
DISPATCH_KINDS = {"KERNEL": "kernel", "CONCURRENT_KERNEL": "kernel", "MEMCPY": "memcpy", "MEMSET": "memset"}
API_KINDS = {"RUNTIME": "cuda_runtime", "DRIVER": "cuda_driver"}
KNOWN = (*DISPATCH_KINDS, *API_KINDS, "OVERHEAD")

_HEAD = re.compile(
    r'^(?P<kind>[A-Z_]+)(?:\s+(?P<extra>"[^"]*"|[A-Z_<>]+))?\s*\[\s*(?P<start>\d+)\s*,\s*(?P<end>\d+)\s*\]'
    r"\s*duration\s+(?P<dur>\d+)\s*,?\s*(?P<rest>.*)$"
)
_LOOKS_LIKE_RECORD = re.compile(r"^(" + "|".join(KNOWN) + r')\b\s*("[^"]*"\s*|[A-Z_]+\s*)?\[')
_PAIR = re.compile(r"([A-Za-z][A-Za-z_]*)\s+(-?\d+)\b")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _fits(digits: str) -> bool:
    """Whether a run of digits is an int64 (checked on its length first: a 5000-digit run is not)."""
    digits = digits.lstrip("0") or "0"
    return len(digits) <= 19 and int(digits) <= INT64_MAX


def _pairs(text: str) -> dict[str, int]:
    """`key value` pairs; a value beyond int64 (digits run together) is -1, unknown."""
    out = {}
    for key, raw in _PAIR.findall(text):
        value = int(raw) if len(raw) < 21 else INT64_MAX + 1
        out[key] = value if INT64_MIN <= value <= INT64_MAX else -1
    return out


_TAIL = re.compile(r"(?:\s*,\s*[A-Za-z][A-Za-z_]*\s+-?\d+)*\s*,?\s*")
"""What follows a record's quoted name: `, key value` pairs only (`, correlationId 7, cbid 17, ...`)."""


def _split_name(rest: str) -> tuple[str | None, str]:
    """A leading quoted name and what follows it.

    The sample prints names unescaped, so a name may hold `", `: the name ends at the last quote
    after which only `, key value` pairs follow (every kernel and API record goes on that way); where
    none does, at the first `",`.
    """
    rest = rest.strip()
    if not rest.startswith('"'):
        return None, rest
    last = rest.rfind('"')
    if last > 0 and _TAIL.fullmatch(rest, last + 1):
        return rest[1:last], rest[last + 1 :]
    end = rest.find('",', 1)
    if end < 0:
        end = rest.rfind('"')
    if end <= 0:
        return None, rest
    return rest[1:end], rest[end + 1 :]


def _demangler():
    try:
        import cxxfilt  # optional where it is used: without it names stay mangled (module docstring)
    except ImportError:  # pragma: no cover - cxxfilt is a dependency
        return None
    cache: dict[str, str] = {}

    def demangle(name: str) -> str:
        if not name.startswith("_Z"):
            return name
        if name not in cache:
            try:
                cache[name] = cxxfilt.demangle(name)
            except Exception:  # cxxfilt.InvalidName and friends: keep what the profiler printed
                cache[name] = name
        return cache[name]

    return demangle


@dataclass
class _Parsed:
    """The records of a capture, and what was skipped on the way."""

    records: list[dict[str, Any]] = field(default_factory=list)
    overhead: int = 0
    malformed: list[int] = field(default_factory=list)


def _cut_record(path: Path, number: int, line: str) -> InputError:
    return InputError(path, f"line {number}", "a CUPTI record 'KIND [ START_NS, END_NS ] duration NS, ...'",
                      repr(line[:120]) + " (the file ends mid-record: truncated?)")


def _parse(path: Path, lines: Iterable[tuple[int, str]], cut_line: int | None, out: _Parsed) -> _Parsed:
    """Record lines (numbered) and their tab-started continuation lines; the server's own output is
    skipped, and a record line garbled by it is counted (never guessed at). `cut_line`: the number of
    the file's last line where no line break ends it; a record there that does not parse is a cut file."""
    current: dict[str, Any] | None = None
    for number, line in lines:
        if line.startswith(("\t", "  ")):  # continuation (tab; some record kinds indent with spaces)
            if current is not None:
                current["pairs"].update(_pairs(line))
            continue
        current = None
        if not _LOOKS_LIKE_RECORD.match(line):
            continue
        m = _HEAD.match(line.rstrip("\r"))
        if m is not None and not (_fits(m["start"]) and _fits(m["end"])):
            m = None  # times beyond int64: digits of two numbers run together, garbled as below
        if m is None:
            if number == cut_line:
                raise _cut_record(path, number, line)
            # The injection prints from its own thread into the server's stdout: another writer can
            # land inside a record line.
            out.malformed.append(number)
            continue
        kind = m["kind"]
        if kind == "OVERHEAD":
            out.overhead += 1
            continue
        if kind not in DISPATCH_KINDS and kind not in API_KINDS:
            continue
        name, rest = _split_name(m["rest"])
        extra = (m["extra"] or "").strip('"')
        current = {
            "kind": kind, "line": number, "start": int(m["start"]), "end": int(m["end"]),
            "name": name if name is not None else _unnamed(kind, extra),
            "pairs": _pairs(rest),
        }
        out.records.append(current)
    return out


def _unnamed(kind: str, extra: str) -> str:
    """The name of a record that prints none: a copy by its copy kind (`Memcpy HtoD`), else its kind."""
    return f"Memcpy {extra}".strip() if kind == "MEMCPY" else kind.title()


def _too_garbled(path: Path, malformed: int, first: int, records: int) -> None:
    if malformed and malformed > max(10, records // 100):
        raise InputError(path, f"line {first}", "CUPTI records, with at most 1% of record lines garbled "
                         "by interleaved output", f"{malformed} garbled record lines of {records + malformed}")


def read_cupti_text_by_line(path: Path) -> Trace:
    """The whole capture in memory, every line through `_parse`: what `read_cupti_text` did before it
    read in chunks. Kept as the reference that the chunked read is tested against, and as the
    benchmark's before (benchmarks/trace_summary.py)."""
    path = Path(path)
    text = files.read_bytes(path).decode("utf-8", errors="replace")
    lines = text.split("\n")
    parsed = _parse(path, enumerate(lines, start=1), None if text.endswith("\n") else len(lines), _Parsed())
    records, malformed = parsed.records, parsed.malformed
    _too_garbled(path, len(malformed), malformed[0] if malformed else 0, len(records))
    demangle = _demangler()
    gpu = [r for r in records if r["kind"] in DISPATCH_KINDS]
    host = [r for r in records if r["kind"] in API_KINDS]

    def col(recs: list[dict], key: str) -> np.ndarray:
        return np.asarray([r["pairs"].get(key, -1) for r in recs], dtype=np.int64)

    names = [r["name"] for r in gpu]
    if demangle is not None:
        names = [demangle(n) for n in names]
    dispatches = schema.dispatch_frame({
        "kernel": names,
        "start_ns": np.asarray([r["start"] for r in gpu], dtype=np.int64),
        "end_ns": np.asarray([r["end"] for r in gpu], dtype=np.int64),
        "device": col(gpu, "deviceId"), "stream": col(gpu, "streamId"), "correlation_id": col(gpu, "correlationId"),
        "kind": [DISPATCH_KINDS[r["kind"]] for r in gpu],
    }, SOURCE, path, lambda i: f"line {gpu[i]['line']}")
    api = schema.api_frame({
        "name": [r["name"] for r in host],
        "start_ns": np.asarray([r["start"] for r in host], dtype=np.int64),
        "end_ns": np.asarray([r["end"] for r in host], dtype=np.int64),
        "pid": col(host, "processId"), "tid": col(host, "threadId"), "correlation_id": col(host, "correlationId"),
        "domain": [API_KINDS[r["kind"]] for r in host],
    }, SOURCE, path, lambda i: f"line {host[i]['line']}")
    meta = {
        "malformed_record_lines": len(malformed),
        "malformed_record_line_numbers": malformed[:20],
        "demangled": demangle is not None,
        "overhead_records": parsed.overhead,
        "graph_launched": int(np.count_nonzero(col(gpu, "graphId") > 0)),
    }
    return Trace(dispatches, api, schema.empty_markers(SOURCE), "realtime", SOURCE, str(path), meta)


# --- the chunked read --------------------------------------------------------------------------------

BLOCK = 4 << 20
"""Bytes of (gunzipped) text read at a time; a chunk is cut from them before a line that starts a record."""
_STARTS = np.frombuffer(b"KCMRDO", dtype=np.uint8)
"""First bytes of the lines that may start a record (`KNOWN`); every other line is skipped."""
API_DOMAINS = tuple(API_KINDS.values())
_GPU_FIELDS = ("start", "end", "correlation_id", "device", "stream", "graph")
_API_FIELDS = ("start", "end", "correlation_id", "pid", "tid")
_PAIR_KEYS = {"correlation_id": "correlationId", "device": "deviceId", "stream": "streamId", "graph": "graphId",
              "pid": "processId", "tid": "threadId"}


def _cut(buf: bytes) -> int:
    """Where the last whole record of `buf` ends: after a line break followed by a line that is no
    continuation (known from its first two bytes); 0 where there is none yet."""
    at = buf.rfind(b"\n", 0, len(buf) - 2)
    while at >= 0 and (buf[at + 1] == 9 or buf[at + 1:at + 3] == b"  "):
        at = buf.rfind(b"\n", 0, at)
    return at + 1


def _chunks(blocks: files.ReadAhead, path: Path) -> Iterator[tuple[bytes, bool]]:
    """The text in chunks of whole records, the last one flagged (it may be empty)."""
    buf = b""
    while True:
        try:
            piece = blocks.read()
        except (EOFError, zlib.error, OSError) as exc:
            raise files.stream_error(path, exc) from exc
        if not piece:
            yield buf, True
            return
        buf = buf + piece if buf else piece
        del piece
        cut = _cut(buf)
        if cut:
            chunk, buf = buf[:cut], buf[cut:]  # the block itself is dropped before the chunk is read
            yield chunk, False
            del chunk


class _Names:
    """A running dictionary: text -> int32 code, first seen first."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}

    def encode(self, local: np.ndarray, texts: list[str]) -> np.ndarray:
        """Codes of `local` (indices into `texts`, a chunk's own dictionary) in this dictionary."""
        if not local.size:
            return np.zeros(0, dtype=np.int32)
        seen, first = np.unique(local, return_index=True)
        mapping = np.zeros(len(texts), dtype=np.int32)
        for i in seen[np.argsort(first, kind="stable")].tolist():
            mapping[i] = self.codes.setdefault(texts[i], len(self.codes))
        return mapping[local]


def _distinct(data: bytes, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
    """Indices of the byte spans `data[start:end]` (in order, none overlapping) into their distinct
    values, first seen first: hashed by Arrow, no Python object per span."""
    n = start.size
    if not n:
        return np.zeros(0, dtype=np.int64), []
    offsets = np.empty(2 * n + 2, dtype=np.int64)  # the spans and the text between them, one row each
    offsets[0], offsets[-1] = 0, len(data)
    offsets[1:-1:2], offsets[2:-1:2] = start, end
    rows = pa.Array.from_buffers(pa.large_binary(), 2 * n + 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    encoded = rows.take(pa.array(np.arange(1, 2 * n, 2))).dictionary_encode()
    return encoded.indices.to_numpy().astype(np.int64), encoded.dictionary.to_pylist()


def _local(values: list) -> tuple[np.ndarray, list]:
    """Indices into the distinct values, first seen first."""
    distinct = {v: i for i, v in enumerate(dict.fromkeys(values))}
    return np.fromiter(map(distinct.__getitem__, values), dtype=np.int64, count=len(values)), list(distinct)


@dataclass
class _Bad:
    """The first record of a table whose end is before its start (file order), and how many there are."""

    count: int = 0
    line: int = 0
    start: int = 0
    end: int = 0

    def check(self, start: np.ndarray, end: np.ndarray, lines: np.ndarray) -> None:
        bad = np.flatnonzero(end < start)
        if bad.size and not self.count:
            i = int(bad[0])
            self.line, self.start, self.end = int(lines[i]), int(start[i]), int(end[i])
        self.count += int(bad.size)

    def raise_if_any(self, path: Path, what: str) -> None:
        """The error `schema.check_intervals` gives for the same table."""
        if self.count:
            raise InputError(path, f"line {self.line}", f"an end timestamp >= its start{what}",
                             f"start {self.start} ns, end {self.end} ns ({self.count} such rows)")


class _Table:
    """One table's columns, chunk by chunk: name codes, kind codes, int64 fields."""

    def __init__(self, fields: tuple[str, ...]) -> None:
        self.fields = fields
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in ("code", "kind", *fields)}
        self.names = _Names()
        self.bad = _Bad()
        self.rows = 0

    def add(self, lines: np.ndarray, kinds: np.ndarray, local: np.ndarray, texts: list[str],
            cols: dict[str, np.ndarray]) -> None:
        """A chunk's records (in any order: put in file order by their line numbers)."""
        if not lines.size:
            return
        order = np.argsort(lines, kind="stable")
        lines, cols = lines[order], {k: v[order] for k, v in cols.items()}
        self.bad.check(cols["start"], cols["end"], lines)
        self.parts["code"].append(self.names.encode(local[order], texts))
        self.parts["kind"].append(kinds[order].astype(np.int8))
        for key in self.fields:
            self.parts[key].append(cols[key])
        self.rows += lines.size

    def column(self, key: str) -> np.ndarray:
        got = self.parts[key]
        dtype = np.int32 if key == "code" else np.int8 if key == "kind" else np.int64
        return np.concatenate(got) if got else np.zeros(0, dtype=dtype)


class _Reader:
    """The records of a capture, chunk by chunk, as columns; what `_parse` counts on the way."""

    def __init__(self, path: Path, lean: bool, ids: bool = False) -> None:
        self.path, self.lean, self.ids = path, lean, ids
        self.gpu = _Table(("start", "end", "correlation_id") + (() if lean and not ids else ("device", "stream")))
        self.api = _Table(_API_FIELDS)
        self.lines_before = 0
        self.overhead = self.malformed = self.graph_launched = 0
        self.malformed_lines: list[int] = []

    def add(self, data: bytes, final: bool) -> None:
        """One chunk of whole records (the last one of the file where `final`)."""
        if not data:
            return
        if not data.isascii():
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:  # as the whole-file read decodes it (no line break is inside a character)
                data = data.decode("utf-8", errors="replace").encode("utf-8")
        chunk = cupti_layouts.Chunk(data)
        starts = chunk.line_starts()
        first, second = chunk.bytes[starts], chunk.bytes[starts + 1]
        cont = (first == 9) | ((first == 32) & (second == 32))
        candidates = np.flatnonzero(~cont & np.isin(first, _STARTS))
        matched = np.zeros(starts.size, dtype=bool)
        found = []
        for layout in cupti_layouts.LAYOUTS:
            at = candidates[first[candidates] == layout.first]
            at = at[~matched[at]]
            if not at.size:
                continue
            ok, fields = cupti_layouts.match(chunk, layout, starts[at])
            if ok.any():
                matched[at[ok]] = True
                found.append((layout, at[ok], {k: v[ok] for k, v in fields.items()}))
        if found:
            self._continued(data, chunk, starts, cont, matched, found)
        general = self._general(data, chunk, starts, cont, candidates[~matched[candidates]], final)
        self._tables(data, [(layout.kind, at + 1 + self.lines_before, fields) for layout, at, fields in found],
                     general)
        self.lines_before += starts.size

    @staticmethod
    def _continued(data: bytes, chunk: cupti_layouts.Chunk, starts: np.ndarray, cont: np.ndarray,
                   matched: np.ndarray, found: list) -> None:
        """The fields of the matched records as their continuation lines leave them: each distinct
        continuation line read once by `_pairs`, the pairs of the record line first, then each line's
        in order (a later one wins), as `_parse` updates a record's pairs."""
        lines = np.flatnonzero(cont)
        breaks = np.flatnonzero(~cont)
        k = np.searchsorted(breaks, lines, side="right") - 1
        owner = np.where(k >= 0, breaks[np.maximum(k, 0)], -1) if breaks.size else np.full(lines.size, -1)
        mine = owner >= 0
        mine[mine] = matched[owner[mine]]
        lines, owner = lines[mine], owner[mine]
        keys = tuple(_PAIR_KEYS.values())
        for _, at, fields in found:  # the fields a layout's record line does not hold: unknown unless continued
            for key in _PAIR_KEYS:
                if key not in fields:
                    fields[key] = np.full(at.size, -1, dtype=np.int64)
        if not lines.size:
            return
        local, distinct = _distinct(data, starts[lines], chunk.newlines[lines])
        pairs = [_pairs(line.decode("utf-8")) for line in distinct]
        present = np.array([[key in p for key in keys] for p in pairs], dtype=bool).reshape(len(pairs), len(keys))
        values = np.array([[p.get(key, -1) for key in keys] for p in pairs], dtype=np.int64).reshape(present.shape)
        field_of = {pair: key for key, pair in _PAIR_KEYS.items()}
        for _, at, fields in found:
            j = np.searchsorted(at, owner)
            ours = at[np.minimum(j, at.size - 1)] == owner
            if not ours.any():
                continue
            record, code = j[ours][::-1], local[ours][::-1]  # last line first: its pair wins
            for column, pair in enumerate(keys):
                has = present[code, column]
                if not has.any():
                    continue
                rec, first = np.unique(record[has], return_index=True)
                fields[field_of[pair]][rec] = values[code[has][first], column]

    def _general(self, data: bytes, chunk: cupti_layouts.Chunk, starts: np.ndarray, cont: np.ndarray,
                 heads: np.ndarray, final: bool) -> _Parsed:
        """The candidate lines no layout matched, each with its continuation lines, through `_parse`."""
        out = _Parsed()
        if not heads.size:
            return out
        breaks = np.flatnonzero(~cont)
        upto = np.append(breaks, starts.size)[np.searchsorted(breaks, heads, side="right")]
        cut_line = self.lines_before + starts.size if final and not data.endswith(b"\n") else None
        lines = np.concatenate([np.arange(h, u) for h, u in zip(heads.tolist(), upto.tolist(), strict=True)])

        def numbered() -> Iterator[tuple[int, str]]:
            for i, s, e in zip(lines.tolist(), starts[lines].tolist(), chunk.newlines[lines].tolist(), strict=True):
                yield self.lines_before + i + 1, data[s:e].decode("utf-8")

        _parse(self.path, numbered(), cut_line, out)
        self.overhead += out.overhead
        self.malformed += len(out.malformed)
        self.malformed_lines.extend(out.malformed[:20 - len(self.malformed_lines)])
        return out

    def _tables(self, data: bytes, found: list, general: _Parsed) -> None:
        """A chunk's records of both paths into the two tables, in file order."""
        gpu: dict[str, list] = {"lines": [], "kinds": [], "local": [], "texts": [], **{k: [] for k in _GPU_FIELDS}}
        api: dict[str, list] = {"lines": [], "kinds": [], "local": [], "texts": [], **{k: [] for k in _API_FIELDS}}

        def put(table: dict[str, list], lines: np.ndarray, kind: np.ndarray, local: np.ndarray, texts: list[str],
                cols: dict[str, np.ndarray]) -> None:
            table["lines"].append(lines)
            table["kinds"].append(kind)
            table["local"].append(local + sum(len(t) for t in table["texts"]))
            table["texts"].append(texts)
            for key in (_GPU_FIELDS if table is gpu else _API_FIELDS):
                table[key].append(cols[key])

        for kind, lines, fields in found:
            n = lines.size
            if kind == "MEMSET":
                local, texts = np.zeros(n, dtype=np.int64), ["Memset"]
            else:
                local, raw = _distinct(data, fields["name_start"], fields["name_end"])
                texts = [b.decode("utf-8") for b in raw]
                if kind == "MEMCPY":
                    texts = [_unnamed(kind, t) for t in texts]
            if kind in API_KINDS:
                put(api, lines, np.full(n, API_DOMAINS.index(API_KINDS[kind])), local, texts, fields)
            else:
                put(gpu, lines, np.full(n, schema.DISPATCH_KINDS.index(DISPATCH_KINDS[kind])), local, texts, fields)
        for table, kinds in ((gpu, DISPATCH_KINDS), (api, API_KINDS)):
            recs = [r for r in general.records if r["kind"] in kinds]
            if not recs:
                continue
            local, texts = _local([r["name"] for r in recs])
            code = (schema.DISPATCH_KINDS.index(DISPATCH_KINDS[r["kind"]]) if table is gpu
                    else API_DOMAINS.index(API_KINDS[r["kind"]]) for r in recs)
            cols = {key: np.asarray([r["start"] if key == "start" else r["end"] if key == "end"
                                     else r["pairs"].get(_PAIR_KEYS[key], -1) for r in recs], dtype=np.int64)
                    for key in (_GPU_FIELDS if table is gpu else _API_FIELDS)}
            put(table, np.asarray([r["line"] for r in recs], dtype=np.int64),
                np.fromiter(code, dtype=np.int64, count=len(recs)), local, texts, cols)
        for table, target in ((gpu, self.gpu), (api, self.api)):
            if not table["lines"]:
                continue
            cols = {k: np.concatenate(table[k]) for k in (_GPU_FIELDS if table is gpu else _API_FIELDS)}
            if table is gpu:
                self.graph_launched += int(np.count_nonzero(cols["graph"] > 0))
            target.add(np.concatenate(table["lines"]), np.concatenate(table["kinds"]), np.concatenate(table["local"]),
                       [t for texts in table["texts"] for t in texts], cols)

    def trace(self) -> Trace:
        """The tables, after the checks the whole-file read makes, in its order."""
        path = self.path
        _too_garbled(path, self.malformed, self.malformed_lines[0] if self.malformed_lines else 0,
                     self.gpu.rows + self.api.rows)
        self.gpu.bad.raise_if_any(path, "")
        self.api.bad.raise_if_any(path, " (API call)")
        demangle = _demangler()
        names = list(self.gpu.names.codes)
        codes = self.gpu.column("code")
        if demangle is not None:  # two mangled names may read the same once demangled: one category
            shown: dict[str, int] = {}
            remap = np.asarray([shown.setdefault(demangle(n), len(shown)) for n in names], dtype=np.int32)
            names, codes = list(shown), remap[codes] if codes.size else codes
        kinds = self.gpu.column("kind")
        if self.lean:
            dispatches = schema.lean_dispatch_frame(
                codes, names, self.gpu.column("start"), self.gpu.column("end"), self.gpu.column("correlation_id"),
                kinds, SOURCE, path,
                ids={"device": self.gpu.column("device"), "stream": self.gpu.column("stream")} if self.ids else None)
            api = _lean_api(self.api)
        else:
            dispatches = schema.dispatch_frame({
                "kernel": np.asarray(names, dtype=object)[codes], "start_ns": self.gpu.column("start"),
                "end_ns": self.gpu.column("end"), "device": self.gpu.column("device"),
                "stream": self.gpu.column("stream"), "correlation_id": self.gpu.column("correlation_id"),
                "kind": np.asarray(schema.DISPATCH_KINDS, dtype=object)[kinds],
            }, SOURCE, path)
            api = schema.api_frame({
                "name": np.asarray(list(self.api.names.codes), dtype=object)[self.api.column("code")],
                "start_ns": self.api.column("start"), "end_ns": self.api.column("end"),
                "pid": self.api.column("pid"), "tid": self.api.column("tid"),
                "correlation_id": self.api.column("correlation_id"),
                "domain": np.asarray(API_DOMAINS, dtype=object)[self.api.column("kind")],
            }, SOURCE, path)
        meta = {
            "malformed_record_lines": self.malformed,
            "malformed_record_line_numbers": self.malformed_lines,
            "demangled": demangle is not None,
            "overhead_records": self.overhead,
            "graph_launched": self.graph_launched,
        }
        if self.lean:
            meta["lean"] = True
        return Trace(dispatches, api, schema.empty_markers(SOURCE), "realtime", SOURCE, str(path), meta)


def _lean_api(table: _Table) -> pd.DataFrame:
    """The API calls with names and domains as categoricals, sorted by start (as `schema.api_frame` sorts)."""
    start, end = table.column("start"), table.column("end")
    n = start.size
    frame = pd.DataFrame({
        "name": pd.Categorical.from_codes(table.column("code"), categories=pd.Index(list(table.names.codes),
                                                                                    dtype=object), validate=False),
        "start_ns": start, "end_ns": end, "pid": table.column("pid"), "tid": table.column("tid"),
        "correlation_id": table.column("correlation_id"),
        "domain": pd.Categorical.from_codes(table.column("kind"), categories=list(API_DOMAINS), validate=False),
        "source": pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[SOURCE], validate=False),
    })
    if n > 1 and not bool(np.all(start[1:] >= start[:-1])):
        frame = frame.take(np.argsort(start, kind="stable")).reset_index(drop=True)
    return frame


def read_cupti_text(path: Path, mode: ReadMode = ReadMode.FULL) -> Trace:
    """A `cupti_trace_injection` stdout capture (`.txt`, `.log`, `.gz`) -> Trace, read in chunks.

    A lean `mode`: the dispatches as `schema.LEAN_DISPATCH_COLUMNS` (names as a categorical, no device or
    stream; LEAN_IDS: with them) and the API names and domains as categoricals, what `trace summary` reads."""
    path = Path(path)
    reader = _Reader(path, mode.lean, mode.ids)
    with files.read_ahead(path, BLOCK) as blocks:
        for data, final in _chunks(blocks, path):
            reader.add(data, final)
    return reader.trace()
