"""The raw transport: one streamed request on its own connection, read by a minimal HTTP/1.1 reader.

Client cost: the streamed responses are read by `SSEResponse`, a minimal asyncio protocol, run on
uvloop when it is installed (`perflib.load.loop`). On 2 CPU cores httpx's per-read stack cost ~200 µs
of client CPU per streamed token at 64 streams; this reader ~40 µs on uvloop (~75 µs on the stdlib
loop); see benchmarks/client_overhead.py.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

from perflib.clocks import monotonic_ns
from perflib.load.answer import MAX_ERROR_BODY, StreamState
from perflib.load.frames import is_token_frame
from perflib.load.request import idle_text, request_timeout_text
from perflib.load.sse import SSEError, SSESplitter

MAX_HEAD_BYTES = 64 * 1024
"""The longest HTTP status line and headers the raw reader takes."""

MAX_SIZE_LINE = 1024
"""The longest chunk-size line (with extensions) of chunked transfer encoding the raw reader takes."""


class SSEResponse(asyncio.Protocol):
    """A minimal HTTP/1.1 response reader for one streamed request on its own connection.

    Why not httpx here: on a 2-core box httpx's per-read stack (anyio stream, httpcore, h11 events)
    costs ~200 µs of client CPU per streamed token at 64 streams, four times the goal (see
    benchmarks/client_overhead.py). This reader does only what the hot path needs: parse the status
    line and headers, undo chunked transfer encoding (or read to Content-Length / connection
    close), split SSE on the byte `\\n` (`SSESplitter`) and hand each event to `StreamState` with
    the CLOCK_MONOTONIC time of the read that completed it. Requests still go out with
    `Connection: close`, one connection each.
    """

    def __init__(self, state: StreamState, loop: asyncio.AbstractEventLoop):
        self.state = state
        self.splitter = SSESplitter()
        self.done: asyncio.Future[None] = loop.create_future()
        self.transport: asyncio.Transport | None = None
        self.head = b""
        self.status: int | None = None
        self.in_body = False
        self.chunked = False
        self.length: int | None = None  # Content-Length still to read
        self.chunk_left = 0  # bytes of the current chunk still to read
        self.crlf_left = 0  # CRLF after a chunk's data still to skip
        self.size_line = b""  # a chunk-size line cut by a read
        self.complete = False  # the body's end was seen (last chunk, or Content-Length reached)
        self.error_body = bytearray()
        self.lost: BaseException | None = None
        self.fast = False  # a 200 chunked body with nothing pending: `is_token_frame` reads may skip the rest
        self.last_ns = 0  # when the last read arrived (the idle timeout counts from it)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        t_ns = self.last_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        if self.fast and not self.chunk_left and not self.crlf_left and is_token_frame(data):
            self.state.events += 1  # one whole frame, one token chunk: what the general path would count
            self.state.chunk_ns.append(t_ns)
            return
        if not self.in_body:
            start = max(0, len(self.head) - 3)
            self.head += data
            end = self.head.find(b"\r\n\r\n", start)
            if end < 0:
                if len(self.head) > MAX_HEAD_BYTES:
                    self._fail(f"malformed HTTP response: header longer than {MAX_HEAD_BYTES} bytes "
                               "without its blank line")
                    self._finish()
                return
            data = self.head[end + 4:]
            self._parse_head(self.head[:end])
            self.in_body = True
            if self.state.error or not data:
                if self.complete:  # a bad head, or an empty body: nothing more to wait for
                    self._finish()
                return
        if self.chunked:
            data = self._unchunk(data)
        elif self.length is not None:
            data = data[:self.length]
            self.length -= len(data)
            self.complete = self.length == 0
        if data and not self.state.error:
            if self.status is not None and self.status >= 400:
                self.error_body += data[:MAX_ERROR_BODY - len(self.error_body)]
                if len(self.error_body) >= MAX_ERROR_BODY:
                    self.complete = True  # enough to quote; the rest is not waited for
            else:
                take = self.state.take
                try:
                    payloads = self.splitter.feed(data)
                except SSEError as exc:
                    self._fail(f"malformed SSE: {exc}")
                    payloads = []
                for payload in payloads:
                    take(payload, t_ns)
                    if self.state.error:
                        self.complete = True  # stop at the first bad event: what follows is untrusted
                        break
        if self.complete:
            self._finish()
        elif self.chunked and self.status == 200:
            # the next read may take the fast path only if nothing of this one is left pending
            self.fast = not (self.size_line or self.splitter._tail or self.splitter._data or self.state.error)

    def _fail(self, error: str) -> None:
        """The answer is not one perflib reads on: the record's error, and the connection closed."""
        if not self.state.error:
            self.state.error = error
        self.complete = True

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        code = parts[1] if len(parts) > 1 else b""
        if not (parts[0].startswith(b"HTTP/") and len(code) == 3 and code.isdigit() and 100 <= int(code) <= 599):
            self._fail(f"malformed HTTP status line: expected HTTP/1.x and a 3-digit status, found {lines[0][:80]!r}")
            return
        self.status = int(code)
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"transfer-encoding" and b"chunked" in value.lower():
                self.chunked = True
            elif name == b"content-length":
                value = value.strip()
                if not value.isdigit() or len(value) > 18:
                    self._fail(f"malformed HTTP header Content-Length: expected a non-negative integer, "
                               f"found {value[:40]!r}")
                    return
                self.length = int(value)
        if self.chunked:
            self.length = None
        elif self.length == 0:
            self.complete = True

    def _unchunk(self, data: bytes) -> bytes:
        """Payload bytes of chunked transfer encoding, across reads that cut it anywhere."""
        out: list[bytes] = []
        if self.size_line:
            data = self.size_line + data
            self.size_line = b""
        pos, n = 0, len(data)
        while pos < n:
            if self.chunk_left:
                piece = data[pos:pos + self.chunk_left]
                out.append(piece)
                pos += len(piece)
                self.chunk_left -= len(piece)
                if not self.chunk_left:
                    self.crlf_left = 2
            elif self.crlf_left:
                skip = min(self.crlf_left, n - pos)
                pos += skip
                self.crlf_left -= skip
            else:
                end = data.find(b"\r\n", pos, pos + MAX_SIZE_LINE + 2)
                if end < 0:
                    if n - pos > MAX_SIZE_LINE:
                        self._fail(f"malformed chunked encoding: a chunk-size line longer than {MAX_SIZE_LINE} "
                                   f"bytes: {data[pos:pos + 40]!r}...")
                        break
                    self.size_line = data[pos:]
                    break
                digits = data[pos:end].split(b";", 1)[0].strip()
                if not digits or len(digits) > 15 or digits.strip(b"0123456789abcdefABCDEF"):
                    self._fail(f"malformed chunked encoding: expected a hexadecimal chunk size, "
                               f"found {data[pos:end][:40]!r}")
                    break
                size = int(digits, 16)
                pos = end + 2
                if size == 0:
                    self.complete = True  # trailers, if any, are not read
                    break
                self.chunk_left = size
        return out[0] if len(out) == 1 else b"".join(out)

    def _finish(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if not self.done.done():
            self.done.set_result(None)

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.complete:
            self.lost = exc or ConnectionResetError("the server closed the connection")
            if self.in_body and not self.chunked and self.length is None:
                self.lost = None  # a close-delimited body ends with the connection
                self.complete = True
            if not self.state.error:
                t_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
                try:
                    payloads = self.splitter.close()
                except SSEError as exc:
                    payloads = []
                    self.state.error = f"malformed SSE: {exc}"
                for payload in payloads:
                    self.state.take(payload, t_ns)
                    if self.state.error:
                        break
        if not self.done.done():
            self.done.set_result(None)


async def stream_raw(url: str, content: bytes, state: StreamState, timeout: float,
                      idle: float | None = None) -> tuple[int | None, str | None]:
    """POST `content` to `url` on a new connection and read the SSE response into `state`, for at most
    `timeout` s in all and, once its first SSE event came, `idle` s without a byte.

    Returns (HTTP status or None, error or None); never raises for a network fault.
    """
    parsed = urlsplit(url)
    host = parsed.hostname or "127.0.0.1"
    port = parsed.port or 80
    target = parsed.path + (f"?{parsed.query}" if parsed.query else "")
    head = (f"POST {target} HTTP/1.1\r\nHost: {parsed.netloc}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nConnection: close\r\nContent-Length: {len(content)}\r\n\r\n")
    loop = asyncio.get_running_loop()
    proto = SSEResponse(state, loop)
    try:
        transport, _ = await asyncio.wait_for(loop.create_connection(lambda: proto, host, port), 10.0)
    except (OSError, TimeoutError) as exc:
        return None, f"cannot connect to {url}: {exc or type(exc).__name__} (is the server running?)"
    transport.write(head.encode() + content)
    stalled = await _await_done(proto, state, timeout, idle)
    if stalled is not None:
        transport.abort()
        return proto.status, stalled
    if proto.status is None:
        if state.error:  # a head perflib does not read: its own error
            return None, state.error
        return None, (f"connection lost before the response to {url}: "
                      f"{type(proto.lost).__name__ if proto.lost else 'closed'}: {proto.lost or 'no detail'}")
    if proto.status >= 400:
        snippet = bytes(proto.error_body[:300]).decode("utf-8", "replace").strip()
        return proto.status, f"HTTP {proto.status} from {url}: {snippet}"
    if proto.lost is not None and not state.error:
        return proto.status, (f"connection lost after {len(state.chunk_ns)} token chunks: "
                              f"{type(proto.lost).__name__}: {proto.lost or 'no detail'}")
    return proto.status, None


async def _await_done(proto: SSEResponse, state: StreamState, timeout: float, idle: float | None) -> str | None:
    """Wait for the response to end: None, or the error of the timeout that ended it first. The idle
    timeout counts once the first SSE event came: before it, the queue and the prefill are silent on
    most servers (llama-server sends its headers at once, then nothing until the first token)."""
    deadline = monotonic_ns() + int(timeout * 1e9)
    while True:
        now = monotonic_ns()
        wait = deadline - now
        if idle is not None:
            if state.events and now - proto.last_ns >= idle * 1e9:
                return idle_text(idle, len(state.chunk_ns))
            wait = min(wait, int(idle * 1e9) - (now - proto.last_ns if state.events else 0))
        if wait <= 0:
            return request_timeout_text(timeout, len(state.chunk_ns))
        try:
            await asyncio.wait_for(asyncio.shield(proto.done), wait / 1e9)
            return None
        except TimeoutError:
            continue
        except asyncio.CancelledError:
            if proto.transport is not None:
                proto.transport.abort()
            raise
