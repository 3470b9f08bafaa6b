"""The httpx transport: one streamed request through an httpx client (`aiter_raw`, never
`aiter_lines`), for https and for comparison with the raw reader (`perflib.load.transport_raw`)."""

from __future__ import annotations

import asyncio

import httpx

from perflib.clocks import monotonic_ns
from perflib.load.answer import MAX_ERROR_BODY, StreamState
from perflib.load.request import idle_text, request_timeout_text
from perflib.load.sse import SSEError, SSESplitter


async def stream_httpx(client: httpx.AsyncClient, url: str, content: bytes, state: StreamState,
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


async def _exchange_httpx(client: httpx.AsyncClient, url: str, content: bytes, state: StreamState,
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
