"""`GET /metrics` over HTTP: the snapshot, the server's start time, and why metrics are off."""

from __future__ import annotations

import json
import math
from typing import Any

from perflib.clocks import now_clocks
from perflib.errors import PerflibError
from perflib.metrics.exposition import Snapshot, parse_exposition

MAX_BODY_BYTES = 64 * 1024 * 1024
"""Largest `/metrics` body read: a server's exposition is kilobytes; a stream past this is refused."""


class MetricsUnavailable(PerflibError):
    """The server answered but serves no metrics (llama.cpp without `--metrics`: HTTP 501; old mlxcel: 404)."""



def classify_metrics_response(status: int, body: str, url: str) -> PerflibError | None:
    """None for HTTP 200; otherwise the error to raise, `MetricsUnavailable` when metrics are switched off.

    llama-server without `--metrics` (and mlxcel 08e09036) answer 501 with a JSON `not_supported_error`;
    mlxcel builds before Jul 2026 did not mount the route (404); router mode needs `?model=` (400).
    """
    if status == 200:
        return None
    detail = ""
    try:
        err = json.loads(body).get("error", {})
        if isinstance(err, dict):
            detail = f"{err.get('type', '')}: {err.get('message', '')}".strip(": ")
    except (ValueError, AttributeError):
        detail = body.strip()[:200]
    said = f" ({detail})" if detail else ""
    if status == 501 or "not_supported_error" in body:
        return MetricsUnavailable(f"{url} answered HTTP {status}{said}: metrics are disabled; "
                                  "start the server with --metrics")
    if status == 404:
        return MetricsUnavailable(f"{url} answered HTTP 404: no /metrics route (mlxcel before Jul 2026 mounts it "
                                  "only when enabled); start the server with --metrics")
    if status == 400 and "model name is missing" in body:
        return PerflibError(f"{url} answered HTTP 400{said}: llama-server in router mode; scrape "
                            "/metrics?model=<id> (scrape(..., model=...))")
    return PerflibError(f"{url} answered HTTP {status}{said}: expected 200 with Prometheus text")


def scrape(base_url: str, *, client: Any = None, timeout: float = 10.0, model: str | None = None) -> Snapshot:
    """GET `<base_url>/metrics` with httpx (sync) and return a `Snapshot`.

    Raises `MetricsUnavailable` when the server serves no metrics (501/404) and `PerflibError` on a
    connection failure or another status. The body is checked where it enters: one that is not
    exposition text (or repeats a series) is an `InputError` naming the URL and the line, one past
    `MAX_BODY_BYTES` a `PerflibError`; a `Process-Start-Time-Unix` header that is not a finite number
    reads as None. `taken` is `now_clocks()` read when the answer arrived. One scraper per server
    during a run: each scrape resets llama.cpp's `*_tokens_seconds` gauges.
    """
    import httpx  # late: 76 ms (measured); `perflib --help` and perflib.config import perflib.metrics

    url = base_url.rstrip("/") + "/metrics"
    params = {"model": model} if model else None
    try:
        with (client or httpx).stream("GET", url, params=params, timeout=timeout) as resp:
            body = _read_capped(resp, url)
    except httpx.HTTPError as exc:
        raise PerflibError(f"{url}: could not scrape ({type(exc).__name__}: {exc}); is the server running?") from exc
    taken = now_clocks()
    text = body.decode(resp.encoding or "utf-8", errors="replace")
    error = classify_metrics_response(resp.status_code, text, url)
    if error is not None:
        raise error
    parse_exposition(text, url)
    return Snapshot(text=text, process_start=_process_start(resp.headers.get("Process-Start-Time-Unix")),
                    taken=taken, url=url)


def _read_capped(resp: Any, url: str) -> bytes:
    """The body of a streamed httpx response, refused past `MAX_BODY_BYTES`."""
    parts: list[bytes] = []
    size = 0
    for part in resp.iter_bytes():
        size += len(part)
        if size > MAX_BODY_BYTES:
            raise PerflibError(f"{url}: expected a /metrics body of at most {MAX_BODY_BYTES} bytes, found more")
        parts.append(part)
    return b"".join(parts)


def _process_start(header: str | None) -> float | None:
    """The `Process-Start-Time-Unix` header as a finite number, else None."""
    try:
        value = float(header) if header is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None
