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

The request is a `perflib.load.request.RequestSpec` and comes back as a `RequestRecord`; its bytes go
through one of two transports (`transport_raw`, the hot path, or `transport_httpx`), and its events
are read into a `perflib.load.answer.StreamState`.
"""

from __future__ import annotations

import json
import time

import httpx

from perflib.clocks import monotonic_ns
from perflib.errors import PerflibError
from perflib.load.answer import StreamState
from perflib.load.request import RequestRecord, RequestSpec, decode_tok_s, request_body
from perflib.load.transport_httpx import stream_httpx
from perflib.load.transport_raw import stream_raw


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
    state = StreamState()
    start_unix_ns = time.time_ns()
    start_ns = monotonic_ns()
    if transport == "raw":
        status, error = await stream_raw(url, content, state, timeout, idle_timeout)
    elif transport == "httpx":
        if client is None:
            raise PerflibError("transport='httpx' needs an httpx.AsyncClient")
        status, error = await stream_httpx(client, url, content, state, max_tokens, timeout, idle_timeout)
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


def _beyond_asked(state: StreamState, completion_tokens: int | None, max_tokens: int) -> str | None:
    """A stream that says (or shows) more tokens than were asked for: its numbers are not the request's."""
    if completion_tokens is not None and completion_tokens > max_tokens:
        field = "usage.completion_tokens" if (state.usage or {}).get("completion_tokens") is not None \
            else "timings.predicted_n"
        return f"malformed SSE: {field}: expected at most max_tokens {max_tokens}, found {completion_tokens}"
    if len(state.chunk_ns) > max_tokens:
        return (f"malformed SSE: expected at most max_tokens {max_tokens} token-carrying chunks, "
                f"found {len(state.chunk_ns)}")
    return None


def _early_end(state: StreamState, status: int | None, completion_tokens: int | None, max_tokens: int,
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
