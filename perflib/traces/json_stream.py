"""A large JSON file read as a stream: whole values where they are small, whole elements of a large
array of objects chunk by chunk, so that memory grows with what a reader keeps, not with the file.

`Text` holds the gunzipped bytes, read block by block (`files.read_ahead`: a thread gunzips ahead).
`members` and `elements` walk an object's keys and an array's elements one at a time; `Text.value`
parses one value whole (the standard parser's `raw_decode`); `next_chunk` gives the next whole
elements of an array in about `PARSE` bytes, parsed at once with orjson; `skip` passes over a value
the reader does not need, checking it as JSON but building at most one chunk of it at a time;
`chunks` gives an array's elements chunk by chunk.
`Table` collects the numpy columns chunks reduce to (their names: `codebook.Names`).

Cutting: JSON text cannot hold `[`+P+`]` as a valid array unless P is whole elements, so a cut at
a `},` (or at a reader's own `marks`) is tried by parsing what lies before it (in a file written one element per line the last
`},` of a chunk ends an element); where that fails (an element's last key holds an object followed
by another key, compact JSON), the chunk is scanned with numpy for quotes and brackets outside
strings and cut where the bracket depth returns to the array's; where no element ends in the chunk,
a chunk four times larger is tried.

Used by `kineto_stream` (Kineto's `traceEvents`) and `rocprof_json_stream` (rocprofv3's buffers).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from perflib.errors import InputError
from perflib.traces import files

_TRIES = 3
"""`},` cuts tried before the numpy scan."""
_WINDOW = 1 << 16
"""Text decoded at a time to read one value whole."""
PARSE = 1 << 18
"""Bytes of elements parsed at a time: a chunk's objects stay in the CPU's caches while they are reduced
to columns, and the next chunk's reuse their memory. On the 29.7 MB H200 Kineto trace, parse and
selection in 256 KiB chunks took 0.15 s against 0.35 s for the whole text at once (4 MiB chunks: 0.36 s)."""
_SPACE = re.compile(rb"[ \t\n\r\x0b\x0c]*")

_QUOTE, _BACKSLASH = 34, 92


class Text:
    """The gunzipped bytes of a file, read block by block; what is not yet consumed starts at `pos` of
    `data` (consuming moves `pos`: the buffer is copied only when a block is appended). Text that is not
    UTF-8, in a value read whole (`value`, `raw`: keys included) or in a chunk, is an `InputError` naming
    its byte, as the whole-file parse says it."""

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
        """One JSON value (a key, or a value small enough to hold whole), by the standard parser."""
        return self._decoded()[0]

    def raw(self) -> bytes:
        """The text of one JSON value, checked by the standard parser (for a reader that parses it as
        its whole-file read does, e.g. with orjson)."""
        return self._decoded()[1]

    def _decoded(self) -> tuple[Any, bytes]:
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
            raw = text[:end].encode("utf-8", "surrogateescape")
            if not raw.isascii():
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise InputError(self.path, f"byte {self.offset + exc.start}", "UTF-8 JSON text",
                                     files.said(exc)) from exc
            self.consume(len(raw))
            return obj, raw


def members(text: Text, between: str = "',' or '}' between keys") -> Iterator[Any]:
    """The keys of the object whose `{` was just consumed, one at a time (each with the text at the
    start of its value): the caller reads (or skips) each key's value before asking for the next key."""
    text.skip_ws()
    if text.startswith(b"}"):
        text.consume(1)
        return
    while True:
        key = text.value()
        text.expect(b":", "a ':' after a key")
        text.skip_ws()
        yield key
        text.skip_ws()
        if text.startswith(b","):
            text.consume(1)
            continue
        text.expect(b"}", between)
        return


def elements(text: Text, between: str = "',' or ']' between elements") -> Iterator[int]:
    """The indices of the elements of the array whose `[` was just consumed, one at a time (each at the
    start of its element's text): the caller reads each element before asking for the next."""
    text.skip_ws()
    if text.startswith(b"]"):
        text.consume(1)
        return
    index = 0
    while True:
        yield index
        text.skip_ws()
        if text.startswith(b","):
            text.consume(1)
            text.skip_ws()
            index += 1
            continue
        text.expect(b"]", between)
        return


def skip(text: Text, where: str = "the array", size: int | None = None,
         marks: tuple[bytes, ...] | None = None) -> None:
    """Pass over the next value, checked as JSON: an array in chunks of whole elements (dropped; `size`
    and `marks` as in `next_chunk`), an object key by key, anything else whole. `where` names the value
    in a file-cut error."""
    text.skip_ws()
    if text.startswith(b"["):
        text.consume(1)
        for _ in chunks(text, where, size, marks or CUT_MARKS):
            pass
    elif text.startswith(b"{"):
        text.consume(1)
        for key in members(text):
            skip(text, f"{where}.{key}", size, marks)
    else:
        text.value()


def loads(text: bytes, exact: bool) -> Any:
    """The JSON `text` parsed: orjson, or the standard parser (NaN, or `exact`: Decimal floats)."""
    if not exact:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text, parse_float=Decimal) if exact else json.loads(text)


def scan(region: bytes) -> tuple[int, int | None]:
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


CUT_MARKS = (b"},\n", b"},\r\n", b"},")
"""Where a `}` may end the last whole element: before `,` and a newline first (no JSON string holds a
raw newline, so that `}` is outside any name), then before a bare `,`."""


def cuts(region: bytes, marks: tuple[bytes, ...] = CUT_MARKS) -> Iterator[int]:
    """The last place of each of `marks` in `region`, in the order of `marks` (at most `_TRIES`
    distinct ones, each found only once the one before did not do): where the last whole element may end."""
    seen: list[int] = []
    for mark in marks:
        at = region.rfind(mark)
        if at >= 0 and at not in seen:
            seen.append(at)
            yield at
            if len(seen) == _TRIES:
                return


def next_chunk(text: Text, where: str = "the array", size: int | None = None,
               marks: tuple[bytes, ...] = CUT_MARKS) -> tuple[list, bool, bytes]:
    """The next whole elements of the array being read (parsed), whether the array closed, and their
    text: those that end in the next `size` (default `PARSE`) bytes, or in the first region four,
    sixteen, ... times that which holds one (an element longer than `size`). Cuts are tried at the
    `cuts` of `marks` before the numpy `scan`. `where` names the array in the error for a file that
    ends inside it."""
    size = size or PARSE
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
        for cut in cuts(region, marks):
            doc = b"".join((b"[", memoryview(region)[:cut + 1], b"]"))
            try:
                parsed = orjson.loads(doc)
            except orjson.JSONDecodeError:
                continue
            text.consume(cut + 1)
            return parsed, False, doc
        end, close = scan(region)
        if close is not None or end:
            upto = close if close is not None else end
            doc = b"".join((b"[", memoryview(region)[:upto], b"]"))
            start = text.offset
            text.consume(upto + (close is not None))
            return parse(doc, text, start), close is not None, doc
        if text.left() > size:  # no element ends in the region, and more text is read: a larger region
            size *= 4
        elif not text.more():
            raise InputError(text.path, f"byte {text.offset + text.left()}", "complete JSON",
                             f"the end of the file inside {where} (file cut?)")


def chunks(text: Text, where: str = "the array", size: int | None = None,
           marks: tuple[bytes, ...] = CUT_MARKS) -> Iterator[list]:
    """The elements of the array whose `[` was just consumed, chunk by chunk (`next_chunk`), up to and
    including its `]`."""
    closed = False
    while not closed:
        parsed, closed, _ = next_chunk(text, where, size, marks)
        if parsed:
            yield parsed
        del parsed


def parse(doc: bytes, text: Text, start: int) -> list:
    """The elements of one cut (`[` + its text + `]`, its text from byte `start` of the file); a fault
    is an `InputError` naming its byte of the file."""
    try:
        return loads(doc, exact=False)
    except json.JSONDecodeError as exc:
        raise InputError(text.path, f"byte {start + max(exc.pos - 1, 0)}", "complete JSON", exc.msg) from exc
    except UnicodeDecodeError as exc:
        raise InputError(text.path, f"byte {start + max(exc.start - 1, 0)}", "UTF-8 JSON text",
                         files.said(exc)) from exc
    except ValueError as exc:
        raise InputError(text.path, None, "JSON numbers of a sensible length", files.said(exc)) from exc


class Table:
    """Columns of one table, chunk by chunk (numpy arrays per key, kept in the order added)."""

    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = {}

    def add(self, **cols: np.ndarray) -> None:
        for k, v in cols.items():
            self.parts.setdefault(k, []).append(v)

    def column(self, key: str, dtype: Any) -> np.ndarray:
        got = self.parts.get(key)
        return np.concatenate(got) if got else np.zeros(0, dtype=dtype)
