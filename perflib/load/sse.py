"""SSE framing: a byte stream split into event payloads, on the byte `\\n` only (LOADGEN.md §6)."""

from __future__ import annotations


class SSESplitter:
    """Split a byte stream into SSE event payloads, on the byte `\\n` only.

    `feed(bytes)` returns the `data` payloads of the events completed by these bytes (several
    `data:` lines of one event are joined with `\\n`, as the SSE spec says). A trailing `\\r` is
    dropped from each line; comment lines (`:`) and other fields are ignored. Splitting bytes
    (not text) keeps U+2028/U+2029/U+0085 inside token text where they belong.
    """

    __slots__ = ("_tail", "_data")

    def __init__(self) -> None:
        self._tail = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        # Fast path, the usual read from llama-server: exactly one whole `data: ...\n\n` event.
        if (not self._tail and not self._data and chunk.startswith(b"data: ") and chunk.endswith(b"\n\n")
                and chunk.count(b"\n") == 2 and not chunk.endswith(b"\r\n\n")):
            return [chunk[6:-2]]
        if self._tail:
            chunk = self._tail + chunk
        lines = chunk.split(b"\n")
        self._tail = lines.pop()
        events: list[bytes] = []
        data = self._data
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if data:
                    events.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data.clear()
            elif line.startswith(b"data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(b" ") else value)
        return events

    def close(self) -> list[bytes]:
        """Payloads of an event cut off by the end of the stream (no blank line after it)."""
        events = self.feed(b"\n\n") if (self._tail or self._data) else []
        return events

