"""One streamed request's spec and record: where it goes and what it asks (`RequestSpec`), the body
sent, its timeouts and their errors, and what was measured (`RequestRecord`, docs/SCHEMA.md §2)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

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


@dataclass(frozen=True)
class RequestSpec:
    """One streamed request: where it goes, what it asks, the level it belongs to and its timeouts.

    `transport`: `raw` (the minimal HTTP/1.1 reader of `perflib.load.transport_raw`, the hot path),
    `httpx` (through the client `stream_request` is given, one without keep-alive), or `auto` = `raw`
    for http:// and `httpx` for https://. `timeout` bounds the whole request; `idle_timeout` (None:
    none) the time without a byte once the stream's first SSE event came."""

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
