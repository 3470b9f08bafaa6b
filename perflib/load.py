"""Load levels against an OpenAI-compatible server: N streamed requests sent at once, timed per chunk.

One level = N concurrent streaming requests at (batch N, context C prompt tokens, decode tokens D),
sent in one wave after an unrecorded warm-up, with `/metrics` scraped right before and right after
and gauges sampled in between. Every request yields one record (docs/SCHEMA.md §2), handed to the
caller the moment the request finishes, so a crash loses nothing already measured.

Definitions (reference/LOADGEN.md §1):

- clock: CLOCK_MONOTONIC nanoseconds (`time.clock_gettime_ns`), the clock rocprofv3 can also use;
  `time.perf_counter_ns` is not guaranteed to be CLOCK_MONOTONIC.
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
uvloop when it is installed (`event_loop_name`); httpx (no keep-alive pool) serves every other
call (`/tokenize`, `/apply-template`, `/props`, `/metrics`) and streams over https. On 2 CPU cores
httpx's per-read stack cost ~200 µs of client CPU per streamed token at 64 streams; this reader
~40 µs on uvloop (~75 µs on the stdlib loop); see benchmarks/client_overhead.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from perflib.clocks import now_clocks
from perflib.errors import PerflibError
from perflib.rundir import json_object

ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
"""`--endpoint` value → path."""

DEFAULT_TIMEOUT_S = 600.0
"""Per-request read timeout (mlxcel's harness default)."""

MIN_STEADY_SAMPLES = 8
"""Fewest ITL samples inside the all-decoding span for a client steady step."""

BURST_ITL_MS = 0.1
"""An ITL below this is two chunks read back to back in one burst, not a decode step."""

MAX_BURST_SHARE = 0.25
"""Above this share of burst ITLs the client did not see the steps (starved reader or writer)."""

GAUGE_INTERVAL_S = 0.5
"""Gauge sampling period during a level."""

ESTIMATE_CHARS_PER_TOKEN = 4.0
"""Prompt-size estimate where the server has no `/tokenize`: about 4 characters per token."""

WARMUP_MAX_TOKENS = 4

_FILLER_WORDS = (
    "the quick brown fox jumps over a lazy dog while seven bright lanterns glow above "
    "quiet river towns where people gather each evening to share bread stories and songs "
    "about distant mountains green valleys old bridges cold winters and warm summer nights "
    "under a sky full of stars that sailors once used to find their way home across the sea"
).split()
"""Plain English words: about one Llama-3 token each, so prompt length scales smoothly."""


def monotonic_ns() -> int:
    """CLOCK_MONOTONIC in nanoseconds (the clock of every `*_ns` field in a request record)."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class ServerUnreachable(PerflibError):
    """The server refused or dropped the connection before the level could start."""


# --------------------------------------------------------------------------------------------
# SSE framing


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


# --------------------------------------------------------------------------------------------
# Request records


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


def _token_text(choice: Mapping[str, Any]) -> bool:
    """Whether one `choices` entry carries token text (completions `text`, chat `delta`)."""
    text = choice.get("text")
    if text:
        return True
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return bool(delta.get("content") or delta.get("reasoning_content"))
    return False


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
            obj = json.loads(payload)
        except ValueError:
            snippet = payload[:120].decode("utf-8", "replace")
            self.error = f"malformed SSE: event {self.events} is not JSON: data: {snippet!r}"
            return
        if not isinstance(obj, dict):
            snippet = payload[:120].decode("utf-8", "replace")
            self.error = f"malformed SSE: event {self.events} is not a JSON object: data: {snippet!r}"
            return
        choices = obj.get("choices")
        if choices:
            for choice in choices:
                if _token_text(choice):
                    self.chunk_ns.append(t_ns)
                    break
        if "usage" in obj and obj["usage"]:
            self.usage = obj["usage"]
        if "timings" in obj and obj["timings"]:
            self.timings = obj["timings"]
        if "error" in obj and obj["error"]:
            err = obj["error"]
            message = err.get("message", err) if isinstance(err, dict) else err
            self.error = f"server error in stream after {len(self.chunk_ns)} token chunks: {message}"


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

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        t_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        if not self.in_body:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            data = self.head[end + 4:]
            self._parse_head(self.head[:end])
            self.in_body = True
            if not data:
                return
        if self.chunked:
            data = self._unchunk(data)
        elif self.length is not None:
            data = data[:self.length]
            self.length -= len(data)
            self.complete = self.length == 0
        if data:
            if self.status is not None and self.status >= 400:
                self.error_body += data[:4096 - len(self.error_body)]
            else:
                take = self.state.take
                for payload in self.splitter.feed(data):
                    take(payload, t_ns)
                    if self.state.error:
                        self.complete = True  # stop at the first bad event: what follows is untrusted
                        break
        if self.complete:
            self._finish()

    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        try:
            self.status = int(parts[1])
        except (IndexError, ValueError):
            self.state.error = f"malformed HTTP status line: {lines[0][:80]!r}"
            self.complete = True
            return
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"transfer-encoding" and b"chunked" in value.lower():
                self.chunked = True
            elif name == b"content-length":
                self.length = int(value.strip())
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
                end = data.find(b"\r\n", pos)
                if end < 0:
                    self.size_line = data[pos:]
                    break
                try:
                    size = int(data[pos:end].split(b";", 1)[0], 16)
                except ValueError:
                    self.state.error = f"malformed chunked encoding: size line {data[pos:end][:40]!r}"
                    self.complete = True
                    break
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
                for payload in self.splitter.close():
                    self.state.take(payload, t_ns)
        if not self.done.done():
            self.done.set_result(None)


async def _stream_raw(url: str, content: bytes, state: _StreamState, timeout: float) -> tuple[int | None, str | None]:
    """POST `content` to `url` on a new connection and read the SSE response into `state`.

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
    try:
        await asyncio.wait_for(asyncio.shield(proto.done), timeout)
    except TimeoutError:
        transport.abort()
        return proto.status, f"timed out after {timeout:g} s and {len(state.chunk_ns)} token chunks"
    except asyncio.CancelledError:
        transport.abort()
        raise
    if proto.status is None:
        return None, (f"connection lost before the response to {url}: "
                      f"{type(proto.lost).__name__ if proto.lost else 'closed'}: {proto.lost or 'no detail'}")
    if proto.status >= 400:
        snippet = bytes(proto.error_body[:300]).decode("utf-8", "replace").strip()
        return proto.status, f"HTTP {proto.status} from {url}: {snippet}"
    if proto.lost is not None and not state.error:
        return proto.status, (f"connection lost after {len(state.chunk_ns)} token chunks: "
                              f"{type(proto.lost).__name__}: {proto.lost or 'no detail'}")
    return proto.status, None


async def _stream_httpx(client: httpx.AsyncClient, url: str, content: bytes, state: _StreamState,
                        max_tokens: int) -> tuple[int | None, str | None]:
    """The same exchange through httpx (`aiter_raw`, never `aiter_lines`); for https and comparison."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream", "Connection": "close"}
    splitter = SSESplitter()
    status: int | None = None
    try:
        async with client.stream("POST", url, content=content, headers=headers) as response:
            status = response.status_code
            if status >= 400:
                raw = await response.aread()
                return status, f"HTTP {status} from {url}: {raw[:300].decode('utf-8', 'replace').strip()}"
            take = state.take
            async for data in response.aiter_raw():
                t_ns = monotonic_ns()
                for payload in splitter.feed(data):
                    take(payload, t_ns)
                    if state.error:  # stop at the first bad event: what follows is untrusted
                        break
                if state.error:
                    break
            if not state.error:
                t_ns = monotonic_ns()
                for payload in splitter.close():
                    take(payload, t_ns)
    except httpx.ConnectError as exc:
        return None, f"cannot connect to {url}: {exc or type(exc).__name__} (is the server running?)"
    except httpx.TimeoutException as exc:
        return status, f"timed out after {len(state.chunk_ns)} token chunks: {type(exc).__name__} {exc}"
    except httpx.HTTPError as exc:  # RemoteProtocolError, ReadError: the server went away mid-stream
        return status, (f"connection lost after {len(state.chunk_ns)} token chunks of {max_tokens} tokens: "
                        f"{type(exc).__name__}: {exc or 'no detail'}")
    return status, None


async def stream_request(
    client: httpx.AsyncClient | None,
    base_url: str,
    *,
    endpoint: str,
    prompt: str,
    max_tokens: int,
    request_id: str,
    batch: int,
    context: int,
    repeat: int,
    prompt_tokens: int | None = None,
    prompt_tokens_method: str = "estimate",
    model: str | None = None,
    ignore_eos: bool = True,
    extra_body: Mapping[str, Any] | None = None,
    attempt: int = 1,
    transport: str = "auto",
    timeout: float = DEFAULT_TIMEOUT_S,
) -> RequestRecord:
    """Send one streaming request and time every chunk; never raises for a failed request.

    `transport`: `raw` (the minimal reader `_SSEResponse`, the hot path), `httpx` (through
    `client`, an httpx client without keep-alive), or `auto` = `raw` for http:// and `httpx` for
    https://. Both open one connection per request and split SSE on bytes.

    Transport and protocol faults become the record's `error` (with `ok` False): HTTP status ≥ 400
    (with a body snippet), connection refused or dropped, timeout, a `data:` line that is not JSON,
    an `error` object in the stream, and a stream that stops early (no `[DONE]`, or fewer than
    `max_tokens` tokens while `ignore_eos` is set).
    """
    path = ENDPOINTS[endpoint]
    url = base_url.rstrip("/") + path
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
    content = json.dumps(body).encode()
    if transport == "auto":
        transport = "raw" if url.startswith("http://") else "httpx"

    state = _StreamState()
    start_unix_ns = time.time_ns()
    start_ns = monotonic_ns()
    if transport == "raw":
        status, error = await _stream_raw(url, content, state, timeout)
    elif transport == "httpx":
        if client is None:
            raise PerflibError("transport='httpx' needs an httpx.AsyncClient")
        status, error = await _stream_httpx(client, url, content, state, max_tokens)
    else:
        raise PerflibError(f"transport must be auto, raw or httpx, not {transport!r}")
    end_ns = monotonic_ns()

    chunks = state.chunk_ns
    usage = state.usage or {}
    completion_tokens = usage.get("completion_tokens")
    if completion_tokens is None and state.timings:
        completion_tokens = state.timings.get("predicted_n")
    if error is None and state.error:
        error = state.error
    if error is None and status is not None and status < 400:
        got = completion_tokens if completion_tokens is not None else len(chunks)
        if not state.done:
            error = f"stream ended after {got} of {max_tokens} tokens (no [DONE])"
        elif ignore_eos and got < max_tokens:
            error = f"stream ended after {got} of {max_tokens} tokens"
        elif not chunks:
            error = "stream finished without a token-carrying chunk"
    first = chunks[0] if chunks else None
    last = chunks[-1] if chunks else None
    itl = [(b - a) / 1e6 for a, b in zip(chunks, chunks[1:], strict=False)]
    return RequestRecord(
        request_id=request_id, batch=batch, context=context, repeat=repeat,
        prompt_tokens=prompt_tokens, prompt_tokens_method=prompt_tokens_method, max_tokens=max_tokens,
        start_ns=start_ns, first_token_ns=first, last_token_ns=last, end_ns=end_ns,
        start_unix_ns=start_unix_ns,
        ttft_ms=(first - start_ns) / 1e6 if first is not None else None,
        e2e_ms=(last - start_ns) / 1e6 if last is not None else None,
        itl_ms=itl, chunk_ns=list(chunks), completion_tokens=completion_tokens,
        decode_tok_s=decode_tok_s(completion_tokens, first, last),
        status=status, ok=error is None and status == 200 and bool(chunks), error=error,
        timings=state.timings, attempt=attempt, usage_prompt_tokens=usage.get("prompt_tokens"),
    )


# --------------------------------------------------------------------------------------------
# Prompts of a target token length


@dataclass(frozen=True)
class Prompt:
    """A prompt and its size in tokens as the server will evaluate it (BOS and template included)."""

    text: str
    tokens: int | None
    method: str  # "tokenize" | "estimate"


class TokenCounter:
    """Count prompt tokens with the server's own tokenizer (llama.cpp `/tokenize`), or estimate.

    Completions: `/tokenize` of the prompt with `add_special` (BOS counted, as the server adds it).
    Chat: the server's `/apply-template` renders the messages, then `/tokenize` counts the
    rendered prompt with BOS: the template's header tokens are included, so the count is what
    `usage.prompt_tokens` reports. Without `/tokenize` (or `/apply-template` for chat) the count
    is an estimate of one token per `ESTIMATE_CHARS_PER_TOKEN` characters, method `estimate`.
    """

    def __init__(self, client: httpx.AsyncClient, base_url: str, endpoint: str):
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.endpoint = endpoint
        self.method: str | None = None  # decided by the first call

    async def _post(self, path: str, body: dict) -> dict | None:
        try:
            resp = await self.client.post(self.base_url + path, json=body, headers={"Connection": "close"})
        except httpx.ConnectError as exc:
            raise ServerUnreachable(
                f"cannot connect to {self.base_url}{path}: {exc or 'connection refused'}; is the server "
                "running at that address? (or let perflib start one with --start-server)") from exc
        return json_object(resp)

    async def count(self, text: str) -> int | None:
        """Tokens of `text` as a prompt, or None when the server cannot count them."""
        if self.method == "estimate":
            return None
        content = text
        if self.endpoint == "chat":
            rendered = await self._post("/apply-template", {"messages": [{"role": "user", "content": text}]})
            if not rendered or not isinstance(rendered.get("prompt"), str):
                self.method = "estimate"
                return None
            content = rendered["prompt"]
        obj = await self._post("/tokenize", {"content": content, "add_special": True, "parse_special": True})
        tokens = obj.get("tokens") if obj else None
        if not isinstance(tokens, list):
            self.method = "estimate"
            return None
        self.method = "tokenize"
        return len(tokens)


def prompt_tolerance(target: int) -> int:
    """Allowed |measured − target| tokens: 0.5% of the target, at least 2."""
    return max(2, round(0.005 * target))


def _filler(words: int, offset: int = 0) -> str:
    n = len(_FILLER_WORDS)
    return " ".join(_FILLER_WORDS[(offset + i) % n] for i in range(words))


async def fit_prompt(counter: TokenCounter, prefix: str, target: int, words_hint: int | None = None,
                     max_rounds: int = 12) -> tuple[str, int | None, str, int]:
    """Text = `prefix` + filler words, sized so its token count hits `target` within tolerance.

    Measures with the server, then adjusts the word count by the measured tokens per word
    (secant steps, then ±1 word). Returns (text, measured tokens, method, words used).
    """
    tol = prompt_tolerance(target)
    base = await counter.count(prefix)
    if base is None:  # no tokenizer: estimate from characters
        words = 0
        text = prefix
        while len(text) / ESTIMATE_CHARS_PER_TOKEN < target:
            words += max(1, int((target * ESTIMATE_CHARS_PER_TOKEN - len(text)) / 6))
            text = prefix + _filler(words)
        return text, round(len(text) / ESTIMATE_CHARS_PER_TOKEN), "estimate", words
    if base >= target:
        return prefix, base, "tokenize", 0
    words = words_hint if words_hint is not None else max(1, target - base)
    best: tuple[int, str, int, int] | None = None  # (|error|, text, tokens, words)
    rate = 1.0
    for _ in range(max_rounds):
        text = prefix + " " + _filler(words)
        measured = await counter.count(text)
        if measured is None:  # the tokenizer stopped answering: fall back to an estimate
            return text, round(len(text) / ESTIMATE_CHARS_PER_TOKEN), "estimate", words
        err = measured - target
        if best is None or abs(err) < best[0]:
            best = (abs(err), text, measured, words)
        if abs(err) <= tol:
            break
        if words > 0 and measured > base:
            rate = max(0.2, (measured - base) / words)
        step = round(-err / rate) or (-1 if err > 0 else 1)
        words = max(0, words + step)
    assert best is not None
    return best[1], best[2], "tokenize", best[3]


async def make_prompts(client: httpx.AsyncClient, base_url: str, *, endpoint: str, count: int, target: int,
                       tag: str) -> list[Prompt]:
    """`count` prompts of about `target` tokens, each starting with a unique `[tag i]` prefix.

    The distinct prefix defeats prompt-prefix caching, so every request pays its own prefill
    (`cache_prompt: false` alone is not enough on every server).
    """
    counter = TokenCounter(client, base_url, endpoint)
    prompts: list[Prompt] = []
    hint: int | None = None
    for i in range(count):
        prefix = f"[{tag} request {i}]"
        text, tokens, method, words = await fit_prompt(counter, prefix, target, hint)
        hint = words
        prompts.append(Prompt(text=text, tokens=tokens, method=method))
    return prompts


# --------------------------------------------------------------------------------------------
# Client-side step and the decode-window decomposition (docs/SCHEMA.md §4)


@dataclass(frozen=True)
class SteadyStep:
    """Median ITL while all N requests decode at once; `step_ms` None with `reason` otherwise."""

    step_ms: float | None
    samples: int
    span_start_ns: int | None
    span_end_ns: int | None
    reason: str | None = None
    burst_share: float | None = None


def steady_step(records: Sequence[Mapping[str, Any]], min_samples: int = MIN_STEADY_SAMPLES) -> SteadyStep:
    """The client-side steady decode step of a level.

    Span = [last request's first token, first request's last token]: every request of the level
    is decoding. Samples = ITLs whose both chunk ends lie inside the span (from `chunk_ns`),
    pooled over requests; the median of at least `min_samples` of them, else None with why.

    When more than `MAX_BURST_SHARE` of the samples are under `BURST_ITL_MS`, the chunks reached
    the client in bursts (the client, or the server's HTTP writer, was starved of CPU while the
    steps ran), so their gaps say nothing about the step: None with that reason, never a
    near-zero "step".
    """
    if not records:
        return SteadyStep(None, 0, None, None, "no requests")
    for rec in records:
        if rec.get("first_token_ns") is None or rec.get("last_token_ns") is None:
            return SteadyStep(None, 0, None, None,
                              f"request {rec.get('request_id')} produced no token, so all "
                              f"{len(records)} never decoded together")
    span_start = max(int(r["first_token_ns"]) for r in records)
    span_end = min(int(r["last_token_ns"]) for r in records)
    if span_end <= span_start:
        return SteadyStep(None, 0, span_start, span_end,
                          "no span where all requests decode at once (a request finished before the last "
                          "one produced its first token)")
    samples: list[int] = []
    for rec in records:
        ts = rec.get("chunk_ns") or []
        for a, b in zip(ts, ts[1:], strict=False):
            if a >= span_start and b <= span_end:
                samples.append(b - a)
    if len(samples) < min_samples:
        return SteadyStep(None, len(samples), span_start, span_end,
                          f"only {len(samples)} ITL samples while all requests decode (need {min_samples})")
    burst = sum(1 for x in samples if x < BURST_ITL_MS * 1e6) / len(samples)
    if burst > MAX_BURST_SHARE:
        return SteadyStep(None, len(samples), span_start, span_end,
                          f"chunks arrived in bursts: {100 * burst:.0f}% of {len(samples)} ITL samples are under "
                          f"{BURST_ITL_MS * 1000:.0f} us (client or server HTTP thread starved of CPU)", burst)
    return SteadyStep(statistics.median(samples) / 1e6, len(samples), span_start, span_end, None, burst)


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _overlap(window: tuple[int, int], merged: list[tuple[int, int]]) -> int:
    lo, hi = window
    return sum(max(0, min(hi, b) - max(lo, a)) for a, b in merged)


@dataclass(frozen=True)
class Decomposition:
    """Each request's decode window split into own steps, others' prefill and the rest.

    Shares are medians over the requests (each request's part / its window); `per_request`
    holds `request_id, window_ms, own_ms, prefill_ms, other_ms`.
    """

    own_step_share: float | None
    prefill_share: float | None
    other_share: float | None
    window_ms: float | None
    per_request: list[dict[str, Any]]
    reason: str | None = None


def decode_window_decomposition(records: Sequence[Mapping[str, Any]], step_ms: float | None) -> Decomposition:
    """docs/SCHEMA.md §4: own = (n − 1) × steady step; prefill = the window's overlap with the
    union of the OTHER requests' [start, first token]; other = window − own − prefill (negative
    when the own steps over-explain the window, which is reported, not clamped).

    Requests without a decode window (no tokens, n ≤ 1) are skipped. The prefill intervals of the
    others are taken from every request that reached its first token.
    """
    windows = [r for r in records
               if r.get("first_token_ns") is not None and r.get("last_token_ns") is not None
               and (r.get("completion_tokens") or 0) > 1 and r["last_token_ns"] > r["first_token_ns"]]
    prefill_spans = {id(r): (int(r["start_ns"]), int(r["first_token_ns"]))
                     for r in records if r.get("first_token_ns") is not None}
    per_request: list[dict[str, Any]] = []
    if not windows:
        return Decomposition(None, None, None, None, [], "no request has a decode window")
    for rec in windows:
        lo, hi = int(rec["first_token_ns"]), int(rec["last_token_ns"])
        others = _union([span for key, span in prefill_spans.items() if key != id(rec)])
        window_ns = hi - lo
        prefill_ns = _overlap((lo, hi), others)
        own_ns = (int(rec["completion_tokens"]) - 1) * step_ms * 1e6 if step_ms is not None else None
        per_request.append({
            "request_id": rec.get("request_id"),
            "window_ms": window_ns / 1e6,
            "own_ms": own_ns / 1e6 if own_ns is not None else None,
            "prefill_ms": prefill_ns / 1e6,
            "other_ms": (window_ns - own_ns - prefill_ns) / 1e6 if own_ns is not None else None,
        })
    window_ms = statistics.median(p["window_ms"] for p in per_request)
    prefill_share = statistics.median(p["prefill_ms"] / p["window_ms"] for p in per_request)
    if step_ms is None:
        return Decomposition(None, prefill_share, None, window_ms, per_request, "no steady step")
    own_share = statistics.median(p["own_ms"] / p["window_ms"] for p in per_request)
    other_share = statistics.median(p["other_ms"] / p["window_ms"] for p in per_request)
    return Decomposition(own_share, prefill_share, other_share, window_ms, per_request, None)


# --------------------------------------------------------------------------------------------
# One level


class LevelSink(Protocol):
    """Where a level's outputs go as they are produced (the run folder, in `perflib.sweep`)."""

    def request(self, record: RequestRecord) -> None: ...
    def warmup(self, record: RequestRecord) -> None: ...
    def gauges(self, sample: dict[str, Any]) -> None: ...
    def metrics(self, which: str, text: str) -> None: ...


class MemorySink:
    """A `LevelSink` that keeps everything in lists (tests, notebooks)."""

    def __init__(self) -> None:
        self.records: list[RequestRecord] = []
        self.warmups: list[RequestRecord] = []
        self.gauge_samples: list[dict[str, Any]] = []
        self.metrics_text: dict[str, str] = {}

    def request(self, record: RequestRecord) -> None:
        self.records.append(record)

    def warmup(self, record: RequestRecord) -> None:
        self.warmups.append(record)

    def gauges(self, sample: dict[str, Any]) -> None:
        self.gauge_samples.append(sample)

    def metrics(self, which: str, text: str) -> None:
        self.metrics_text[which] = text


@dataclass
class LevelOutcome:
    """What one level produced besides the records already handed to the sink."""

    records: list[RequestRecord]
    prompt_tokens: dict[str, Any]
    clocks: dict[str, dict[str, int] | None]
    metrics: dict[str, Any]
    errors: list[str]
    warmup_ok: bool | None = None
    gauge_samples: int = 0
    unreachable: bool = False

    @property
    def complete(self) -> bool:
        return not self.errors


def _client(timeout: float) -> httpx.AsyncClient:
    """An httpx client that opens a new connection for every request (no keep-alive pool)."""
    return httpx.AsyncClient(
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=0),
        timeout=httpx.Timeout(timeout, connect=10.0),
        trust_env=False,  # a proxy from the environment must not sit between client and server
    )


def _scrape_client() -> httpx.Client:
    """One sync client for a level's scrapes: building an httpx client loads a CA bundle (tens of
    ms under the GIL), which must not happen every gauge sample while streams are being timed."""
    return httpx.Client(timeout=10.0, trust_env=False, limits=httpx.Limits(max_keepalive_connections=0))


async def _scrape(base_url: str, client: httpx.Client) -> Any:
    """`perflib.metrics.scrape` in a thread, so the event loop keeps reading streams meanwhile."""
    from perflib import metrics

    return await asyncio.to_thread(metrics.scrape, base_url, client=client)


async def _sample_gauges(base_url: str, client: httpx.Client, dialect: str, sink: LevelSink, interval: float,
                         stop: asyncio.Event, counter: list[int]) -> None:
    """Scrape gauges every `interval` s until `stop` is set; a failed scrape is recorded as such.

    Stopping waits for the scrape in flight, so the "after" scrape never overlaps a gauge scrape
    (one scraper per server).
    """
    from perflib import metrics

    while not stop.is_set():
        t_ns = monotonic_ns()
        sample: dict[str, Any] = {"t_ns": t_ns, "unix_ns": time.time_ns()}
        try:
            snap = await _scrape(base_url, client)
            sample["gauges"] = metrics.gauge_values(snap.text, dialect)
        except Exception as exc:  # a failed sample is data, not a crash
            sample["gauges"] = None
            sample["error"] = f"{type(exc).__name__}: {exc}"
        sink.gauges(sample)
        counter[0] += 1
        try:
            await asyncio.wait_for(stop.wait(), max(0.0, interval - (monotonic_ns() - t_ns) / 1e9))
        except TimeoutError:
            pass


def _unreachable_message(base_url: str, what: str, exc: BaseException) -> str:
    return (f"server unreachable at {base_url} ({what}): {type(exc).__name__}: {exc or 'connection refused'}; "
            "is it running at that address? (or let perflib start one with --start-server)")


async def run_level_async(
    base_url: str,
    batch: int,
    context: int,
    decode_tokens: int,
    repeat: int,
    sink: LevelSink,
    *,
    endpoint: str = "completions",
    model: str | None = None,
    dialect: str = "auto",
    ignore_eos: bool = True,
    extra_body: Mapping[str, Any] | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    gauge_interval: float = GAUGE_INTERVAL_S,
    scrape_metrics: bool = True,
    on_started: Callable[[], None] | None = None,
) -> LevelOutcome:
    """Measure one level: prompts, warm-up, `/metrics` before, N requests at once with gauges
    sampled, `/metrics` after the last request finished. Never raises for a fault of the server:
    every fault lands in `LevelOutcome.errors` (and the failed requests' records).

    `clocks.start` is read just before the N requests are sent, `clocks.end` right after the
    last one finished. `on_started` is called right after they are sent (tests use it).
    """
    if endpoint not in ENDPOINTS:
        raise PerflibError(f"endpoint must be one of {', '.join(ENDPOINTS)}, not {endpoint!r}")
    errors: list[str] = []
    metrics_info: dict[str, Any] = {"available": None, "dialect": dialect, "error": None,
                                    "process_start_before": None, "process_start_after": None}
    outcome = LevelOutcome(records=[], prompt_tokens={"target": context, "measured": [], "method": None},
                           clocks={"start": None, "end": None}, metrics=metrics_info, errors=errors)
    nonce = uuid.uuid4().hex[:8]
    with _scrape_client() as scrape_client:
        async with _client(timeout) as client:
            return await _level(base_url, batch, context, decode_tokens, repeat, sink, outcome, client,
                                scrape_client, nonce, timeout=timeout, endpoint=endpoint, model=model, dialect=dialect,
                                ignore_eos=ignore_eos, extra_body=extra_body, gauge_interval=gauge_interval,
                                scrape_metrics=scrape_metrics, on_started=on_started)


async def _level(base_url: str, batch: int, context: int, decode_tokens: int, repeat: int, sink: LevelSink,
                 outcome: LevelOutcome, client: httpx.AsyncClient, scrape_client: httpx.Client, nonce: str, *,
                 timeout: float, endpoint: str, model: str | None, dialect: str, ignore_eos: bool,
                 extra_body: Mapping[str, Any] | None, gauge_interval: float, scrape_metrics: bool,
                 on_started: Callable[[], None] | None) -> LevelOutcome:
    """The body of `run_level_async` with its clients open."""
    errors = outcome.errors
    metrics_info = outcome.metrics
    level = f"b{batch}_c{context}_r{repeat}"
    # 1. prompts, distinct per request, repeat and run
    try:
        prompts = await make_prompts(client, base_url, endpoint=endpoint, count=batch, target=context,
                                     tag=f"{nonce} r{repeat}")
    except ServerUnreachable as exc:
        errors.append(f"level {level}: {exc}")
        outcome.unreachable = True
        return outcome
    except httpx.HTTPError as exc:
        errors.append(f"level {level}: " + _unreachable_message(base_url, "sizing prompts", exc))
        outcome.unreachable = True
        return outcome
    outcome.prompt_tokens = {"target": context, "measured": [p.tokens for p in prompts],
                             "method": prompts[0].method if prompts else None}
    common = dict(endpoint=endpoint, model=model, ignore_eos=ignore_eos, extra_body=extra_body,
                  batch=batch, context=context, repeat=repeat, timeout=timeout)

    # 2. warm-up: one short request, recorded apart
    warm = await stream_request(client, base_url, prompt=f"[{nonce} warm-up] hello", max_tokens=WARMUP_MAX_TOKENS,
                                request_id=f"{level}-warmup", **common)
    sink.warmup(warm)
    outcome.warmup_ok = warm.ok
    if warm.status is None:
        errors.append(f"level {level}: warm-up request failed: {warm.error}")
        outcome.unreachable = True
        return outcome

    # 3. /metrics before
    snap_before = None
    if scrape_metrics:
        snap_before = await _scrape_or_note(base_url, scrape_client, "before", metrics_info, errors, level)
        if snap_before is not None:
            sink.metrics("before", snap_before.text)

    # 4. the wave: N requests at once, each record written as soon as it finishes
    async def one(i: int) -> RequestRecord:
        prompt = prompts[i]
        rec = await stream_request(client, base_url, prompt=prompt.text, max_tokens=decode_tokens,
                                   request_id=f"{level}-{i}", prompt_tokens=prompt.tokens,
                                   prompt_tokens_method=prompt.method, **common)
        sink.request(rec)
        return rec

    gauge_count = [0]
    gauge_task = None
    stop = asyncio.Event()
    if snap_before is not None and gauge_interval > 0:
        gauge_task = asyncio.create_task(
            _sample_gauges(base_url, scrape_client, dialect, sink, gauge_interval, stop, gauge_count))
    outcome.clocks["start"] = now_clocks()
    tasks = [asyncio.create_task(one(i)) for i in range(batch)]
    if on_started is not None:
        on_started()
    try:
        records = list(await asyncio.gather(*tasks))
    finally:
        outcome.clocks["end"] = now_clocks()
        if gauge_task is not None:
            stop.set()
            await gauge_task
    outcome.gauge_samples = gauge_count[0]
    outcome.records = records
    failed = [r for r in records if not r.ok]
    if failed:
        first_error = failed[0].error
        errors.append(f"level {level}: {len(failed)} of {batch} requests failed (first: {first_error})")

    # 5. /metrics after the last request finished
    if snap_before is not None:
        snap_after = await _scrape_or_note(base_url, scrape_client, "after", metrics_info, errors, level)
        if snap_after is not None:
            sink.metrics("after", snap_after.text)
    return outcome


async def _scrape_or_note(base_url: str, client: httpx.Client, which: str, info: dict[str, Any], errors: list[str],
                          level: str) -> Any:
    """Scrape `/metrics`; a 501/404 or a lost connection is noted in `info` and `errors`."""
    try:
        from perflib import metrics
    except ImportError as exc:
        info["available"] = False
        info["error"] = f"perflib.metrics is not importable: {exc}"
        errors.append(f"level {level}: counters unavailable: {info['error']}")
        return None
    try:
        snap = await _scrape(base_url, client)
    except metrics.MetricsUnavailable as exc:
        info["available"] = False
        info["error"] = f"/metrics unavailable ({which} the level): {exc}"
        errors.append(f"level {level}: counters unavailable: {base_url}/metrics: {exc} "
                      "(start llama-server with --metrics)")
        return None
    except (httpx.HTTPError, OSError, PerflibError) as exc:
        info["available"] = info["available"] if which == "after" else False
        info["error"] = f"/metrics scrape {which} the level failed: {type(exc).__name__}: {exc}"
        errors.append(f"level {level}: {info['error']}")
        return None
    info["available"] = True
    info[f"process_start_{which}"] = getattr(snap, "process_start", None)
    return snap


def event_loop_name() -> str:
    """The event loop `run_sync` uses: `uvloop <version>` when installed, else `asyncio`.

    uvloop halves the client's CPU per streamed token (its reads and callbacks run in C); set
    `PERFLIB_EVENT_LOOP=asyncio` to use the standard loop anyway.
    """
    if os.environ.get("PERFLIB_EVENT_LOOP", "auto") != "asyncio":
        try:
            import uvloop
        except ImportError:
            return "asyncio"
        return f"uvloop {uvloop.__version__}"
    return "asyncio"


def run_async(coro: Any) -> Any:
    """`asyncio.run` on the loop `event_loop_name()` names."""
    if event_loop_name().startswith("uvloop"):
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


def run_sync(coro: Any) -> Any:
    """Run a coroutine to completion from sync code, also inside Jupyter's running event loop
    (there in a worker thread with its own loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run_async(coro)
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run_async, coro).result()
