"""CUPTI activity text: the record lines that `cupti_trace_injection` prints most, matched in bulk.

A layout is the list of tokens of one kind's record line: literal text, an integer, a quoted name,
an upper-case word, the line's end. `match` moves one cursor per candidate line through the tokens
with numpy, each token a few array operations over all candidates (8-byte words gathered at each
cursor), so a chunk costs no Python object per record. A candidate that misses any token is left
to the reader's line-by-line path (`perflib.traces.cupti_text`), and what a layout accepts is read
exactly as that path reads the same line: times and ids of at most 19 digits that fit int64, names
without a quote or a line break, single spaces, the fields in the order the sample prints them
(tests/traces/test_cupti_stream.py compares both). Continuation lines are not matched here: the
reader reads each distinct one with the line-by-line path's own pair parser.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PAD = 64
"""Zero bytes after a chunk, so that the words gathered at its end stay inside the array."""
FRONT = 24
"""Zero bytes before it, so that the 24 bytes ending at a number's end can be gathered anywhere."""
_DIGITS = 20
"""Bytes looked at for a number: 19 digits at most, then the byte that ends them."""
_WORD = 32
"""Bytes looked at for an upper-case word (`PAGEABLE`, `DEVICE_STATIC`)."""
_ZEROS = np.uint64(0x3030303030303030)
_LOW_BYTES = np.array([(1 << (8 * m)) - 1 for m in range(9)], dtype=np.uint64)
"""The low m bytes of a word set, for m = 0..8."""
_MAX_FIRST_19 = ord("8")
"""A 19-digit number surely fits int64 where its first digit is at most 8 (9... goes the long way)."""


@dataclass(frozen=True)
class Token:
    """One piece of a layout: `kind` is lit, int (digits that fit int64, value kept under `field`),
    num (digits, value unused), name (the bytes up to the next quote), word ([A-Z_]+) or eol."""

    kind: str
    text: bytes = b""
    field: str | None = None


def num(field: str | None = None) -> Token:
    """An integer; with `field`, its value is kept (and must fit int64)."""
    return Token("int", field=field) if field else Token("num")


NAME, WORD, EOL = Token("name"), Token("word"), Token("eol")


@dataclass(frozen=True)
class Layout:
    """A record kind's common line, as tokens. The fields it keeps are the only `key value` pairs of
    the line that the line-by-line path reads into perflib's tables."""

    kind: str
    tokens: tuple[Token, ...]

    @property
    def first(self) -> int:
        """The byte a candidate line starts with."""
        return self.tokens[0].text[0]


def _layout(kind: str, *tokens: Token | str) -> Layout:
    return Layout(kind, tuple(Token("lit", t.encode()) if isinstance(t, str) else t for t in tokens))


_TIMES = (" [ ", num("start"), ", ", num("end"), " ] duration ", num())
_API = (*_TIMES, ', "', NAME, '", cbid ', num(), ", processId ", num("pid"), ", threadId ", num("tid"),
        ", correlationId ", num("correlation_id"), EOL)
_KERNEL = (*_TIMES, ', "', NAME, '", correlationId ', num("correlation_id"), ", cacheConfigRequested ", num(),
           ", cacheConfigExecuted ", num(), EOL)

LAYOUTS = (
    _layout("RUNTIME", "RUNTIME", *_API),
    _layout("DRIVER", "DRIVER", *_API),
    _layout("CONCURRENT_KERNEL", "CONCURRENT_KERNEL", *_KERNEL),
    _layout("KERNEL", "KERNEL", *_KERNEL),
    _layout("MEMCPY", 'MEMCPY "', NAME, '"', *_TIMES, ", size ", num(), ", copyCount ", num(),
            ", srcKind ", WORD, ", dstKind ", WORD, ", correlationId ", num("correlation_id"), EOL),
    _layout("MEMSET", "MEMSET", *_TIMES, ", value ", num(), ", size ", num(), ", correlationId ",
            num("correlation_id"), EOL),
)
"""The record lines of `helper_cupti_activity.h` (CUDA 12.x) as the H200 capture prints them. In a
MEMCPY line the quoted name is the copy kind (`"HtoD"`); the other pairs of a line (`cbid`, `size`,
`cacheConfigRequested`) are no field of perflib's tables."""


class Chunk:
    """A chunk's bytes as numpy, zero-padded, with the positions of its quotes, line breaks and
    carriage returns (each list ends with the chunk's size, so that a search past the last finds it)."""

    def __init__(self, data: bytes) -> None:
        self.size = len(data)
        padded = np.frombuffer(bytes(FRONT) + data + bytes(PAD), dtype=np.uint8)
        self.bytes = padded[FRONT:]
        body = self.bytes[:self.size]
        end = np.array([self.size], dtype=np.int64)
        marks = np.flatnonzero((body == 10) | (body == 34))  # line breaks and quotes, in one pass
        is_break = body[marks] == 10
        self.newlines = np.concatenate((marks[is_break], end))
        self.quotes = np.concatenate((marks[~is_break], end))
        self.returns = (np.concatenate((np.flatnonzero(body == 13), end)) if data.find(b"\r") >= 0 else end)
        # Every 8 bytes from each offset as one little-endian word (an unaligned, overlapping view);
        # the word at position p of the chunk is words[p + FRONT].
        self.words = np.ndarray(shape=(padded.size - 7,), dtype="<u8", buffer=padded, strides=(1,))

    def line_starts(self) -> np.ndarray:
        """The start of every line (a last line without a line break included, none after a final one)."""
        starts = np.concatenate(([0], self.newlines[:-1] + 1))
        return starts[starts < self.size]

    def window(self, pos: np.ndarray, width: int) -> np.ndarray:
        """At least `width` bytes from each position (at most `size`), one row each."""
        out = np.empty((pos.size, -(-width // 8)), dtype="<u8")
        for k in range(out.shape[1]):
            out[:, k] = self.words[pos + (FRONT + 8 * k)]
        return out.view(np.uint8)

    def literal(self, pos: np.ndarray, text: bytes) -> np.ndarray:
        """Whether `text` stands at each position, compared 8 bytes at a time."""
        ok = np.ones(pos.size, dtype=bool)
        for k in range(0, len(text), 8):
            piece = text[k:k + 8]
            expected = int.from_bytes(piece, "little")
            word = self.words[pos + (FRONT + k)]
            if len(piece) < 8:
                word &= np.uint64((1 << (8 * len(piece))) - 1)
            ok &= word == np.uint64(expected)
        return ok


def _number(chunk: Chunk, pos: np.ndarray, fits: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(ok, length, value) of the digit run at each position: 1 to 19 digits; with `fits`, its value
    (surely int64: 19 digits only where the first is at most 8)."""
    window = chunk.window(pos, _DIGITS)[:, :_DIGITS]
    length = np.argmin(window - np.uint8(48) < 10, axis=1)  # the first byte that is no digit; 0 where all 20 are
    ok = length >= 1
    if not fits:
        return ok, length, None
    ok &= (length <= 18) | ((length == 19) & (window[:, 0] <= _MAX_FIRST_19))
    return ok, length, _value(chunk, pos, length)


def _value(chunk: Chunk, pos: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The value of `length` (1 to 19) digits at each position: the 24 bytes that end with the digits,
    those before them read as '0', parsed 8 digits a word (Lemire's SWAR parse, as simdjson does)."""
    begin = pos + length - 24 + FRONT
    value = np.zeros(pos.size, dtype=np.uint64)
    for k, scale in enumerate((10**16, 10**8, 1)):
        word = chunk.words[begin + 8 * k]
        before = _LOW_BYTES[np.clip(24 - 8 * k - length, 0, 8)]  # the bytes of this word before the digits
        word = (word & ~before) | (_ZEROS & before)
        word -= _ZEROS
        word = word * np.uint64(10) + (word >> np.uint64(8))
        word = ((word & np.uint64(0x000000FF000000FF)) * np.uint64(100 + (1000000 << 32))
                + ((word >> np.uint64(16)) & np.uint64(0x000000FF000000FF)) * np.uint64(1 + (10000 << 32))
                ) >> np.uint64(32)
        value += word * np.uint64(scale)
    return value.view(np.int64)


def match(chunk: Chunk, layout: Layout, at: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Which candidate lines (starting at `at`, each with `layout.first`) are the layout's, and their
    fields: int64 values by field name, and the name's bytes as `name_start` / `name_end`."""
    pos = np.asarray(at, dtype=np.int64).copy()
    ok = np.ones(pos.size, dtype=bool)
    fields: dict[str, np.ndarray] = {}
    size = chunk.size
    for token in layout.tokens:
        if token.kind == "lit":
            ok &= chunk.literal(pos, token.text)
            pos += len(token.text)
        elif token.kind in ("int", "num"):
            good, length, value = _number(chunk, pos, token.kind == "int")
            ok &= good
            if token.field is not None:
                fields[token.field] = value
            pos += length
        elif token.kind == "name":
            close = chunk.quotes[np.searchsorted(chunk.quotes, pos)]
            ok &= close < chunk.newlines[np.searchsorted(chunk.newlines, pos)]  # the quote is on this line
            if chunk.returns.size > 1:
                ok &= close < chunk.returns[np.searchsorted(chunk.returns, pos)]
            fields["name_start"], fields["name_end"] = pos.copy(), close
            pos = close.copy()
        elif token.kind == "word":
            window = chunk.window(pos, _WORD)[:, :_WORD]
            upper = ((window >= 65) & (window <= 90)) | (window == 95)
            length = np.argmin(upper, axis=1)  # 0 where all 32 are: too long, left to the other path
            ok &= length >= 1
            pos += length
        elif token.kind == "eol":
            ok &= (chunk.bytes[pos] == 10) | (pos == size)
        else:  # pragma: no cover - the layouts above use only these
            raise AssertionError(token.kind)
        np.minimum(pos, size, out=pos)
    return ok, fields
