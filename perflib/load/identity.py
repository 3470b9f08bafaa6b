"""Who the server is, asked over HTTP: `GET /props` (llama.cpp) and `GET /v1/models`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def json_object(resp: Any) -> dict[str, Any] | None:
    """The JSON object of a 200 answer (an httpx response), or None for any other answer."""
    if resp.status_code != 200:
        return None
    try:
        obj = resp.json()
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def server_kind(props: Mapping[str, Any] | None, models: Mapping[str, Any] | None) -> str:
    """`llama.cpp` when `/props` looks like llama-server's, else the `owned_by` of `/v1/models`."""
    if props and ("default_generation_settings" in props or "build_info" in props):
        return "llama.cpp"
    data = (models or {}).get("data") or []
    if data and isinstance(data[0], dict) and data[0].get("owned_by"):
        return str(data[0]["owned_by"])
    return "unknown"


def server_identity(base_url: str, *, flags: list[str] | None = None, version: str | None = None,
                    timeout: float = 10.0) -> dict[str, Any]:
    """`{kind, version, flags, model, props, models}` from `GET /props` and `GET /v1/models`.

    `flags` are the command-line flags perflib used when it started the server (None when it
    did not). Raises `httpx.ConnectError` when nothing listens at `base_url`; an endpoint the
    server lacks reads as None.
    """
    import httpx

    def get(client: httpx.Client, path: str) -> dict[str, Any] | None:
        return json_object(client.get(base_url.rstrip("/") + path, headers={"Connection": "close"}))

    with httpx.Client(timeout=timeout, trust_env=False,
                      limits=httpx.Limits(max_keepalive_connections=0)) as client:
        props = get(client, "/props")
        models = get(client, "/v1/models")
    data = (models or {}).get("data") or []
    model = data[0].get("id") if data and isinstance(data[0], dict) else None
    if model is None and props:
        model = props.get("model_alias") or props.get("model_path")
    if version is None and props:
        version = props.get("build_info")
    return {"kind": server_kind(props, models), "version": version, "flags": flags, "model": model,
            "props": props, "models": models}
