"""One streamed request on its own connection, timed per chunk: the SSE/HTTP transport of a level.

Definitions (docs/reference/LOADGEN.md §1):

- clock: CLOCK_MONOTONIC nanoseconds (`perflib.clocks.monotonic_ns`), the clock rocprofv3 can also use.
- `start_ns`: just before the POST; every request opens a new connection, so this is also
  before the connection is opened (mlxcel).
- token-carrying chunk: an SSE event whose `choices` entry has a non-empty `text`
  (completions) or `delta.content` / `delta.reasoning_content` (chat), as mlxcel and
  inference-perf count it. llama.cpp's closing chunk (empty text, `finish_reason`, `usage`,
  `timings`) and the chat role chunk do not count.
- TTFT = first token-carrying chunk − start; ITL = one sample per later token-carrying chunk
  (chunk-weighted, not per token); `last_token_ns` = last token-carrying chunk;
  `end_ns` = stream close; `e2e_ms` = last token − start (vLLM's E2EL).
- `completion_tokens` from the usage chunk (`stream_options.include_usage`), else the server's
  `timings.predicted_n`, else None.
- `decode_tok_s` = (completion_tokens − 1) / (last_token − first_token): the total ends at the
  **last token-carrying chunk** (vLLM), not at stream close as mlxcel's harness does (the two
  differ by the closing chunk and `[DONE]`, well under a step). This makes the denominator the
  request's decode window of docs/SCHEMA.md §4.

Transport pitfalls against a real llama-server (LOADGEN §6): a new connection per request (no
keep-alive reuse, which llama-server drops under load) and SSE split on the byte `\\n` only, never on
Unicode line separators (token text may hold U+2028), so `aiter_lines` is not used.

Client cost: the streamed responses are read by `_SSEResponse`, a minimal asyncio protocol, run on
uvloop when it is installed (`perflib.load.loop`). On 2 CPU cores httpx's per-read stack cost ~200 µs
of client CPU per streamed token at 64 streams; this reader ~40 µs on uvloop (~75 µs on the stdlib
loop); see benchmarks/client_overhead.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from perflib.clocks import monotonic_ns
from perflib.errors import PerflibError
from perflib.load.frames import is_token_frame
from perflib.load.sse import SSEError, SSESplitter
from perflib.safeinput import describe, value_problem

ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
"""`--endpoint` value → path."""

DEFAULT_TIMEOUT_S = 600.0
"""Per-request timeout, the whole request, where no decode length sets it (mlxcel's harness default)."""

REQUEST_TIMEOUT_BASE_S = 300.0
"""The default request timeout (`request_timeout_for`): this for the queue and the prefill..."""

REQUEST_TIMEOUT_PER_TOKEN_S = 1.0
"""...and this per decode token, ten times the slowest decode step perflib has measured."""

DEFAULT_IDLE_TIMEOUT_S = 60.0
"""The longest time without a byte once a stream has begun (its first SSE event), where no key sets it."""


def request_timeout_for(decode_tokens: int) -> float:
    """The default timeout of one request that decodes `decode_tokens` tokens: the whole request, from
    its send to its last byte (`REQUEST_TIMEOUT_BASE_S` + `REQUEST_TIMEOUT_PER_TOKEN_S` a token)."""
    return REQUEST_TIMEOUT_BASE_S + REQUEST_TIMEOUT_PER_TOKEN_S * max(0, decode_tokens)


def idle_text(idle: float, chunks: int) -> str:
    """The error of a stream that stalled: no byte for `idle` s once it had begun."""
    return (f"stalled: no byte from the server for {idle:g} s after {chunks} token chunks (idle timeout: "
            "idle_timeout_s in the campaign, --idle-timeout in sweep)")


def request_timeout_text(timeout: float, chunks: int) -> str:
    """The error of a request that ran past its whole-request timeout."""
    return (f"timed out after {timeout:g} s and {chunks} token chunks (request timeout: request_timeout_s in "
            "the campaign, --request-timeout in sweep)")

MAX_HEAD_BYTES = 64 * 1024
"""The longest HTTP status line and headers the raw reader takes."""

MAX_ERROR_BODY = 4096
"""How much of an error answer's body is kept (and read) for the record's error."""

USAGE_FIELDS = {"completion_tokens": "count?", "prompt_tokens": "count?", "total_tokens": "count?"}
"""The `usage` values perflib reads, and their kinds (`perflib.safeinput.VALUE_KINDS`)."""

TIMINGS_FIELDS = {"predicted_n": "count?", "prompt_n": "count?", "predicted_ms": "number?", "prompt_ms": "number?",
                  "predicted_per_token_ms": "number?", "prompt_per_token_ms": "number?"}
"""The `timings` values (llama.cpp) perflib computes with; the times must also be non-negative."""


@dataclass(frozen=True)
class RequestRecord:
    """One request of a level, field for field as docs/SCHEMA.md §2 (`usage_prompt_tokens` added)."""

    request_id: str
    batch: int
    context: int
    repeat: int
    prompt_tokens: int | None
    prompt_tokens_method: str
    max_tokens: int
    start_ns: int
    first_token_ns: int | None
    last_token_ns: int | None
    end_ns: int | None
    start_unix_ns: int
    ttft_ms: float | None
    e2e_ms: float | None
    itl_ms: list[float]
    chunk_ns: list[int]
    completion_tokens: int | None
    decode_tok_s: float | None
    status: int | None
    ok: bool
    error: str | None
    timings: dict | None
    attempt: int = 1
    usage_prompt_tokens: int | None = None
    """Extension: the prompt tokens the server says it evaluated (`usage.prompt_tokens`)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def decode_tok_s(completion_tokens: int | None, first_token_ns: int | None,
                 last_token_ns: int | None) -> float | None:
    """(completion_tokens − 1) / (last token − first token) in tok/s; None if n ≤ 1 or no span."""
    if completion_tokens is None or completion_tokens <= 1 or first_token_ns is None or last_token_ns is None:
        return None
    span = last_token_ns - first_token_ns
    if span <= 0:
        return None
    return (completion_tokens - 1) * 1e9 / span


class BadValue(ValueError):
    """A value of a server's answer that is not of its kind: names the field, what was expected, what came."""

    def __init__(self, field: str, expected: str, value: Any):
        self.field = field
        super().__init__(f"{field}: expected {expected}, found {describe(value)}")


def _finite_float(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def loads_strict(data: bytes | str) -> Any:
    """`json.loads` that refuses NaN, Infinity and numbers past the float range (1e999), which the
    standard parser turns into non-finite floats: a server's answer never brings one into a record.
    Raises ValueError (RecursionError for nesting too deep)."""
    return json.loads(data, parse_constant=_no_constant, parse_float=_finite_float)


def check_kinds(obj: Any, fields: Mapping[str, str], where: str) -> None:
    """Every key of `fields` present in the object `obj` holds its kind; else `BadValue` at `where<key>`."""
    for name, kind in fields.items():
        if name in obj:
            expected = value_problem(obj[name], kind)
            if expected is None and kind.startswith("number") and obj[name] is not None and obj[name] < 0:
                expected = "a non-negative number" + (" or null" if kind.endswith("?") else "")
            if expected:
                raise BadValue(f"{where}{name}", expected, obj[name])


def _optional_object(obj: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """`obj[name]` when it is a JSON object, None when absent or null; `BadValue` for anything else."""
    value = obj.get(name)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadValue(name, "a JSON object or null", value)
    return value


def _token_text(choices: Any) -> bool:
    """Whether a `choices` list carries token text (completions `text`, chat `delta`), each entry's
    values checked for their kind (`BadValue` names the first that is not)."""
    if choices is None:
        return False
    if not isinstance(choices, list):
        raise BadValue("choices", "a list of objects or null", choices)
    found = False
    for i, choice in enumerate(choices):
        if not isinstance(choice, dict):
            raise BadValue(f"choices[{i}]", "a JSON object", choice)
        text = choice.get("text")
        if text is not None and not isinstance(text, str):
            raise BadValue(f"choices[{i}].text", "a string or null", text)
        delta = choice.get("delta")
        if delta is not None:
            if not isinstance(delta, dict):
                raise BadValue(f"choices[{i}].delta", "a JSON object or null", delta)
            for name in ("content", "reasoning_content"):
                value = delta.get(name)
                if value is not None and not isinstance(value, str):
                    raise BadValue(f"choices[{i}].delta.{name}", "a string or null", value)
                found = found or bool(value)
        found = found or bool(text)
    return found


_FAST_COMPLETION = b'{"choices":[{"text":"'
_FAST_CHAT = b'{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"'
_FAST_PREFIXES = (_FAST_COMPLETION, _FAST_CHAT)
_FAST_CUT = {_FAST_COMPLETION[14:15]: len(_FAST_COMPLETION), _FAST_CHAT[14:15]: len(_FAST_CHAT)}
"""llama-server's token-chunk prefixes (completions, chat), told apart by their 15th byte."""


@dataclass
class _StreamState:
    """Mutable state of one stream while it is read; turned into a `RequestRecord` at the end."""

    chunk_ns: list[int] = field(default_factory=list)
    usage: dict | None = None
    timings: dict | None = None
    done: bool = False
    error: str | None = None
    events: int = 0
    http_status: int | None = None  # the httpx transport's status, kept when the stream fails later

    def take(self, payload: bytes, t_ns: int) -> None:
        """Account one SSE payload that arrived at `t_ns`."""
        self.events += 1
        # Fast path for llama-server's compact token chunks (most events of a stream): the text
        # starts right after a fixed prefix, so a non-empty token is a byte check. A chunk that
        # could carry anything else (usage, timings, an error) or does not end like one (`"}`,
        # the closing `id` string) takes the full parse below, which catches malformed events.
        if payload.startswith(_FAST_PREFIXES) and payload.endswith(b'"}'):
            rest = payload[_FAST_CUT[payload[14:15]]:]
            if (not rest.startswith(b'"') and b'"usage":' not in payload and b'"timings":' not in payload
                    and b'"error":' not in payload):
                self.chunk_ns.append(t_ns)
                return
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            obj = loads_strict(payload)
        except (ValueError, RecursionError) as exc:
            snippet = payload[:120].decode("utf-8", "replace")
            why = "nested too deep" if isinstance(exc, RecursionError) else str(exc)[:120]
            self.error = f"malformed SSE: event {self.events} is not JSON ({why}): data: {snippet!r}"
            return
        if not isinstance(obj, dict):
            snippet = payload[:120].decode("utf-8", "replace")
            self.error = f"malformed SSE: event {self.events} is not a JSON object: data: {snippet!r}"
            return
        try:
            self._take_object(obj, t_ns)
        except BadValue as exc:
            self.error = f"malformed SSE: event {self.events}: {exc}"

    def _take_object(self, obj: dict[str, Any], t_ns: int) -> None:
        """One parsed event: every value perflib reads is checked for its kind before it is kept."""
        if _token_text(obj.get("choices")):
            self.chunk_ns.append(t_ns)
        usage = _optional_object(obj, "usage")
        if usage is not None:
            check_kinds(usage, USAGE_FIELDS, "usage.")
            if usage:
                self.usage = usage
        timings = _optional_object(obj, "timings")
        if timings is not None:
            check_kinds(timings, TIMINGS_FIELDS, "timings.")
            if timings:
                self.timings = timings
        err = obj.get("error")
        if err:
            message = err.get("message", err) if isinstance(err, dict) else err
            text = message if isinstance(message, str) else json.dumps(message)
            self.error = f"server error in stream after {len(self.chunk_ns)} token chunks: {text[:300]}"


MAX_SIZE_LINE = 1024
"""The longest chunk-size line (with extensions) of chunked transfer encoding the raw reader takes."""


class _SSEResponse(asyncio.Protocol):
    """A minimal HTTP/1.1 response reader for one streamed request on its own connection.

    Why not httpx here: on a 2-core box httpx's per-read stack (anyio stream, httpcore, h11 events)
    costs ~200 µs of client CPU per streamed token at 64 streams, four times the goal (see
    benchmarks/client_overhead.py). This reader does only what the hot path needs: parse the status
    line and headers, undo chunked transfer encoding (or read to Content-Length / connection
    close), split SSE on the byte `\\n` (`SSESplitter`) and hand each event to `_StreamState` with
    the CLOCK_MONOTONIC time of the read that completed it. Requests still go out with
    `Connection: close`, one connection each.
    """

    def __init__(self, state: _StreamState, loop: asyncio.AbstractEventLoop):
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


async def _stream_raw(url: str, content: bytes, state: _StreamState, timeout: float,
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
    proto = _SSEResponse(state, loop)
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


async def _await_done(proto: _SSEResponse, state: _StreamState, timeout: float, idle: float | None) -> str | None:
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


async def _stream_httpx(client: httpx.AsyncClient, url: str, content: bytes, state: _StreamState,
                        max_tokens: int, timeout: float, idle: float | None = None) -> tuple[int | None, str | None]:
    """The same exchange through httpx (`aiter_raw`, never `aiter_lines`); for https and comparison.

    httpx's timeout is per read, so `timeout` is also applied to the whole exchange: a server that
    trickles bytes (a comment line a second) cannot hold a request longer than the raw reader would.
    """
    try:
        async with asyncio.timeout(timeout):
            await _exchange_httpx(client, url, content, state, idle)
    except _Stalled:
        return state.http_status, idle_text(idle or 0.0, len(state.chunk_ns))
    except httpx.ConnectError as exc:
        return None, f"cannot connect to {url}: {exc or type(exc).__name__} (is the server running?)"
    except httpx.TimeoutException as exc:
        status = state.http_status
        return status, f"timed out after {len(state.chunk_ns)} token chunks: {type(exc).__name__} {exc}"
    except TimeoutError:
        return state.http_status, request_timeout_text(timeout, len(state.chunk_ns))
    except _ErrorAnswer as exc:
        return exc.status, f"HTTP {exc.status} from {url}: {exc.body.decode('utf-8', 'replace').strip()}"
    except httpx.HTTPError as exc:  # RemoteProtocolError, ReadError: the server went away mid-stream
        return state.http_status, (f"connection lost after {len(state.chunk_ns)} token chunks of {max_tokens} "
                                   f"tokens: {type(exc).__name__}: {exc or 'no detail'}")
    return state.http_status, None


class _Stalled(Exception):
    """No byte for the idle timeout once the stream had begun."""


class _ErrorAnswer(Exception):
    def __init__(self, status: int, body: bytes):
        self.status, self.body = status, body


async def _exchange_httpx(client: httpx.AsyncClient, url: str, content: bytes, state: _StreamState,
                          idle: float | None = None) -> None:
    """POST and read the SSE answer into `state`; an answer ≥ 400 raises `_ErrorAnswer` (its body cut),
    `idle` s without a byte once the first SSE event came raises `_Stalled`."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream", "Connection": "close"}
    splitter = SSESplitter()
    async with client.stream("POST", url, content=content, headers=headers) as response:
        status = state.http_status = response.status_code
        if status >= 400:
            body = b""
            async for data in response.aiter_raw():
                body += data
                if len(body) >= MAX_ERROR_BODY:
                    break
            raise _ErrorAnswer(status, body[:300])
        take = state.take
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(None) as stall:
                async for data in response.aiter_raw():
                    t_ns = monotonic_ns()
                    for payload in splitter.feed(data):
                        take(payload, t_ns)
                        if state.error:  # stop at the first bad event: what follows is untrusted
                            break
                    if state.error:
                        break
                    if idle is not None and state.events:
                        stall.reschedule(loop.time() + idle)
                stall.reschedule(None)
            if not state.error:
                t_ns = monotonic_ns()
                for payload in splitter.close():
                    take(payload, t_ns)
                    if state.error:
                        break
        except SSEError as exc:
            state.error = f"malformed SSE: {exc}"
        except TimeoutError:
            if stall.expired():
                raise _Stalled() from None
            raise


@dataclass(frozen=True)
class RequestSpec:
    """One streamed request: where it goes, what it asks, the level it belongs to and its timeouts.

    `transport`: `raw` (the minimal reader `_SSEResponse`, the hot path), `httpx` (through the client
    `stream_request` is given, one without keep-alive), or `auto` = `raw` for http:// and `httpx` for
    https://. `timeout` bounds the whole request; `idle_timeout` (None: none) the time without a byte once
    the stream's first SSE event came."""

    base_url: str
    prompt: str
    max_tokens: int
    request_id: str
    batch: int
    context: int
    repeat: int
    endpoint: str = "completions"
    prompt_tokens: int | None = None
    prompt_tokens_method: str = "estimate"
    model: str | None = None
    ignore_eos: bool = True
    extra_body: dict[str, Any] | None = None
    attempt: int = 1
    transport: str = "auto"
    timeout: float = DEFAULT_TIMEOUT_S
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT_S

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + ENDPOINTS[self.endpoint]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RequestSpec:
        """The spec back from `to_dict` (a load worker's job: perflib's own JSON, not user input)."""
        return cls(**data)


async def stream_request(client: httpx.AsyncClient | None, spec: RequestSpec) -> RequestRecord:
    """Send one streaming request and time every chunk; never raises for a failed request.

    Both transports (`RequestSpec.transport`) open one connection per request and split SSE on bytes;
    `client` (an httpx client without keep-alive) is used by the httpx transport only.

    Transport and protocol faults become the record's `error` (with `ok` False): HTTP status ≥ 400
    (with a body snippet), connection refused or dropped, timeout, a `data:` line that is not JSON,
    an `error` object in the stream, and a stream that stops early (no `[DONE]`, or fewer than
    `max_tokens` tokens while `ignore_eos` is set).

    A request that hits its `timeout` or `idle_timeout` ends with what it measured and an error that
    names the timeout.
    """
    max_tokens, ignore_eos, timeout, idle_timeout = spec.max_tokens, spec.ignore_eos, spec.timeout, spec.idle_timeout
    url = spec.url
    content = json.dumps(request_body(spec.endpoint, spec.prompt, max_tokens, spec.model, ignore_eos,
                                      spec.extra_body)).encode()
    transport = spec.transport
    if transport == "auto":
        transport = "raw" if url.startswith("http://") else "httpx"
    state = _StreamState()
    start_unix_ns = time.time_ns()
    start_ns = monotonic_ns()
    if transport == "raw":
        status, error = await _stream_raw(url, content, state, timeout, idle_timeout)
    elif transport == "httpx":
        if client is None:
            raise PerflibError("transport='httpx' needs an httpx.AsyncClient")
        status, error = await _stream_httpx(client, url, content, state, max_tokens, timeout, idle_timeout)
    else:
        raise PerflibError(f"transport must be auto, raw or httpx, not {transport!r}")
    end_ns = monotonic_ns()
    usage = state.usage or {}
    completion_tokens = usage.get("completion_tokens")
    if completion_tokens is None and state.timings:
        completion_tokens = state.timings.get("predicted_n")
    error = (error or state.error or _beyond_asked(state, completion_tokens, max_tokens)
             or _early_end(state, status, completion_tokens, max_tokens, ignore_eos))
    chunks = state.chunk_ns
    first = chunks[0] if chunks else None
    last = chunks[-1] if chunks else None
    return RequestRecord(
        request_id=spec.request_id, batch=spec.batch, context=spec.context, repeat=spec.repeat,
        prompt_tokens=spec.prompt_tokens, prompt_tokens_method=spec.prompt_tokens_method, max_tokens=max_tokens,
        start_ns=start_ns, first_token_ns=first, last_token_ns=last, end_ns=end_ns,
        start_unix_ns=start_unix_ns,
        ttft_ms=(first - start_ns) / 1e6 if first is not None else None,
        e2e_ms=(last - start_ns) / 1e6 if last is not None else None,
        itl_ms=[(b - a) / 1e6 for a, b in zip(chunks, chunks[1:], strict=False)], chunk_ns=list(chunks),
        completion_tokens=completion_tokens, decode_tok_s=decode_tok_s(completion_tokens, first, last),
        status=status, ok=error is None and status == 200 and bool(chunks), error=error,
        timings=state.timings, attempt=spec.attempt, usage_prompt_tokens=usage.get("prompt_tokens"),
    )


def request_body(endpoint: str, prompt: str, max_tokens: int, model: str | None, ignore_eos: bool,
                 extra_body: Mapping[str, Any] | None) -> dict[str, Any]:
    """The JSON body of one streamed request: greedy, with the usage chunk asked for, `ignore_eos` so
    that every request decodes its full length, and the server-specific fields last."""
    body: dict[str, Any] = {
        "model": model or "default",
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if ignore_eos:
        body["ignore_eos"] = True
    if extra_body:
        body.update(extra_body)
    return body


def _beyond_asked(state: _StreamState, completion_tokens: int | None, max_tokens: int) -> str | None:
    """A stream that says (or shows) more tokens than were asked for: its numbers are not the request's."""
    if completion_tokens is not None and completion_tokens > max_tokens:
        field = "usage.completion_tokens" if (state.usage or {}).get("completion_tokens") is not None \
            else "timings.predicted_n"
        return f"malformed SSE: {field}: expected at most max_tokens {max_tokens}, found {completion_tokens}"
    if len(state.chunk_ns) > max_tokens:
        return (f"malformed SSE: expected at most max_tokens {max_tokens} token-carrying chunks, "
                f"found {len(state.chunk_ns)}")
    return None


def _early_end(state: _StreamState, status: int | None, completion_tokens: int | None, max_tokens: int,
               ignore_eos: bool) -> str | None:
    """Why a stream that the server answered with success still did not deliver a full request."""
    if status is None or status >= 400:
        return None
    got = completion_tokens if completion_tokens is not None else len(state.chunk_ns)
    if not state.done:
        return f"stream ended after {got} of {max_tokens} tokens (no [DONE])"
    if ignore_eos and got < max_tokens:
        return f"stream ended after {got} of {max_tokens} tokens"
    if not state.chunk_ns:
        return "stream finished without a token-carrying chunk"
    return None

