"""SSE framing: a byte stream split into event payloads, on the byte `\\n` only (LOADGEN.md §6)."""

from __future__ import annotations

from perflib.errors import PerflibError

MAX_LINE_BYTES = 8 * 1024 * 1024
"""The longest SSE line, and the largest event (its `data` lines together), that a stream may send.

llama-server's largest event (the closing chunk with `usage` and `timings`) is well under 4 KiB; a
line past 8 MiB is a server gone wrong, and reading it on would only hold memory until the timeout.
"""


class SSEError(PerflibError):
    """The byte stream is not SSE that perflib will read: a line or an event past `MAX_LINE_BYTES`."""


class SSESplitter:
    """Split a byte stream into SSE event payloads, on the byte `\\n` only, in linear time.

    `feed(bytes)` returns the `data` payloads of the events completed by these bytes (several
    `data:` lines of one event are joined with `\\n`, as the SSE spec says). A trailing `\\r` is
    dropped from each line; comment lines (`:`) and other fields are ignored. Splitting bytes
    (not text) keeps U+2028/U+2029/U+0085 inside token text where they belong.

    Each byte fed is searched and copied a bounded number of times (the unfinished line is kept
    in a `bytearray` that grows in place), so one long line costs its length, not its length
    squared. A line or an event longer than `max_line_bytes` raises `SSEError`.
    """

    __slots__ = ("_tail", "_data", "_data_bytes", "_events", "max_line_bytes")

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._tail = bytearray()
        self._data: list[bytes] = []
        self._data_bytes = 0
        self._events = 0
        self.max_line_bytes = max_line_bytes

    def _too_long(self, what: str, size: int) -> SSEError:
        return SSEError(f"SSE {what} longer than {self.max_line_bytes} bytes (at least {size} bytes, "
                        f"after {self._events} events): not a stream perflib reads on")

    def feed(self, chunk: bytes) -> list[bytes]:
        # Fast path, the usual read from llama-server: exactly one whole `data: ...\n\n` event.
        if (not self._tail and not self._data and chunk.startswith(b"data: ") and chunk.endswith(b"\n\n")
                and chunk.count(b"\n") == 2 and not chunk.endswith(b"\r\n\n")
                and len(chunk) <= self.max_line_bytes):
            self._events += 1
            return [chunk[6:-2]]
        end = chunk.rfind(b"\n")
        if end < 0:  # no line ends here: the unfinished line grows, in place
            if len(self._tail) + len(chunk) > self.max_line_bytes:
                raise self._too_long("line", len(self._tail) + len(chunk))
            self._tail += chunk
            return []
        if self._tail:
            self._tail += chunk[:end]
            block = bytes(self._tail)
        else:
            block = chunk[:end]
        rest = chunk[end + 1:]
        if len(rest) > self.max_line_bytes:
            raise self._too_long("line", len(rest))
        self._tail = bytearray(rest)
        return self._lines(block.split(b"\n"))

    def _lines(self, lines: list[bytes]) -> list[bytes]:
        events: list[bytes] = []
        data = self._data
        limit = self.max_line_bytes
        for line in lines:
            if len(line) > limit:
                raise self._too_long("line", len(line))
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if data:
                    events.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data.clear()
                    self._data_bytes = 0
                    self._events += 1
            elif line.startswith(b"data:"):
                value = line[5:]
                value = value[1:] if value.startswith(b" ") else value
                self._data_bytes += len(value) + 1
                if self._data_bytes > limit:
                    raise self._too_long("event (its data lines together)", self._data_bytes)
                data.append(value)
        return events

    def close(self) -> list[bytes]:
        """Payloads of an event cut off by the end of the stream (no blank line after it)."""
        events = self.feed(b"\n\n") if (self._tail or self._data) else []
        return events
