"""A server's streamed answer read strictly: each SSE event parsed (no NaN, no Infinity), the values
perflib reads checked for their kind, and token-carrying chunks timed into a `StreamState`.

What counts as a token-carrying chunk is defined in `perflib.load.stream`'s docstring.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perflib.safeinput import describe, value_problem

MAX_ERROR_BODY = 4096
"""How much of an error answer's body is kept (and read) for the record's error."""

USAGE_FIELDS = {"completion_tokens": "count?", "prompt_tokens": "count?", "total_tokens": "count?"}
"""The `usage` values perflib reads, and their kinds (`perflib.safeinput.VALUE_KINDS`)."""

TIMINGS_FIELDS = {"predicted_n": "count?", "prompt_n": "count?", "predicted_ms": "number?", "prompt_ms": "number?",
                  "predicted_per_token_ms": "number?", "prompt_per_token_ms": "number?"}
"""The `timings` values (llama.cpp) perflib computes with; the times must also be non-negative."""


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


def token_text(choices: Any) -> bool:
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
class StreamState:
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
        if token_text(obj.get("choices")):
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
