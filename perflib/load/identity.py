"""Who the server is, asked over HTTP: `GET /props` (llama.cpp) and `GET /v1/models`.

Every value taken from these answers is checked for its kind where it is read: a `build_info`, a
model id or an `owned_by` that is not a string reads as unknown (None), never as a wrong name, and
an answer that is not a JSON object (or not JSON, nested too deep, larger than `MAX_ANSWER_BYTES`)
reads as the endpoint being absent.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import httpx

from perflib.load import tls
from perflib.load.answer import loads_strict

MAX_ANSWER_BYTES = 4 * 1024 * 1024
"""The largest `/props` or `/v1/models` answer read; a larger one reads as absent."""


def parse_object(body: bytes) -> dict[str, Any] | None:
    """The JSON object of an answer's body, or None when it is not one (no NaN/Infinity admitted)."""
    try:
        obj = loads_strict(body)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def json_object(resp: Any) -> dict[str, Any] | None:
    """The JSON object of a 200 answer (an httpx response), or None for any other answer."""
    if resp.status_code != 200:
        return None
    return parse_object(resp.content)


def _text(obj: Mapping[str, Any] | None, name: str) -> str | None:
    """`obj[name]` when it is a non-empty string, else None."""
    value = obj.get(name) if isinstance(obj, Mapping) else None
    return value if isinstance(value, str) and value else None


def _first_model(models: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The first entry of `/v1/models` `data` when `data` is a list of objects, else None."""
    data = models.get("data") if isinstance(models, Mapping) else None
    if isinstance(data, list) and data and isinstance(data[0], Mapping):
        return data[0]
    return None


def server_kind(props: Mapping[str, Any] | None, models: Mapping[str, Any] | None) -> str:
    """`llama.cpp` when `/props` looks like llama-server's, else the `owned_by` of `/v1/models`."""
    if isinstance(props, Mapping) and ("default_generation_settings" in props or "build_info" in props):
        return "llama.cpp"
    return _text(_first_model(models), "owned_by") or "unknown"


def server_identity(base_url: str, *, flags: list[str] | None = None, version: str | None = None,
                    timeout: float = 10.0) -> dict[str, Any]:
    """`{kind, version, flags, model, props, models}` from `GET /props` and `GET /v1/models`.

    `flags` are the command-line flags perflib used when it started the server (None when it
    did not). Raises `httpx.ConnectError` when nothing listens at `base_url`; an endpoint the
    server lacks, or answers with something that is not a JSON object, reads as None. Each answer
    is read for at most about twice `timeout` seconds and `MAX_ANSWER_BYTES` bytes.
    """

    def get(client: httpx.Client, path: str) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        with client.stream("GET", base_url.rstrip("/") + path, headers={"Connection": "close"}) as resp:
            if resp.status_code != 200:
                return None
            body = bytearray()
            for data in resp.iter_bytes():
                body += data
                if len(body) > MAX_ANSWER_BYTES or time.monotonic() > deadline:
                    return None
        return parse_object(bytes(body))

    with httpx.Client(timeout=timeout, trust_env=False, verify=tls.context(),
                      limits=httpx.Limits(max_keepalive_connections=0)) as client:
        props = get(client, "/props")
        models = get(client, "/v1/models")
    model = _text(_first_model(models), "id") or _text(props, "model_alias") or _text(props, "model_path")
    if version is None:
        version = _text(props, "build_info")
    return {"kind": server_kind(props, models), "version": version, "flags": flags, "model": model,
            "props": props, "models": models}
