"""A hostile test server: a real HTTP server on a real socket that answers what a test tells it to,
on purpose wrong (a garbage `/metrics` body, `/v1/models` of the wrong shape, a stream whose
`usage` is a list). It stands in for no server in the collection path: it only speaks answers a
real server sends rarely, so that the client's checks at the boundary can be tested.

    with HostileServer({"/metrics": (200, b"garbage {"), "/v1/completions": stream(b"data: ...")}) as url:
        ...

Each route is `(status, body)`, `(status, body, headers)`, or a callable `(path, request_body) ->
(status, body[, headers])`. A body given as a list of bytes is sent piece by piece, close-delimited
(HTTP/1.0), as a server streams SSE; a route not given answers 404.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = tuple[Any, ...]
Route = Answer | Callable[[str, bytes], Answer]


def sse(*events: Any) -> list[bytes]:
    """SSE pieces: each event a JSON-able object (sent as `data: <json>`) or raw bytes; `[DONE]` last."""
    pieces = [e if isinstance(e, bytes) else b"data: " + json.dumps(e).encode() + b"\n\n" for e in events]
    return [*pieces, b"data: [DONE]\n\n"]


def token(text: str) -> dict[str, Any]:
    """One token-carrying completions chunk."""
    return {"choices": [{"text": text, "index": 0, "finish_reason": None}]}


def stream(*events: Any) -> Answer:
    """A 200 `text/event-stream` answer of these events."""
    return 200, sse(*events), {"content-type": "text/event-stream"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # close-delimited bodies: a stream ends when the socket closes
    routes: Mapping[str, Route] = {}

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._answer(b"")

    def do_POST(self) -> None:
        self._answer(self.rfile.read(int(self.headers.get("content-length") or 0)))

    def _answer(self, body: bytes) -> None:
        path = self.path.split("?", 1)[0]
        route = self.routes.get(path)
        answer = route(path, body) if callable(route) else route
        if answer is None:
            answer = (404, b'{"error": {"message": "not here"}}')
        status, content, headers = (*answer, {})[:3]
        self.send_response(status)
        for name, value in {"content-type": "application/json", **headers}.items():
            self.send_header(name, value)
        pieces = content if isinstance(content, list) else [content]
        if not isinstance(content, list):
            self.send_header("content-length", str(len(content)))
        self.end_headers()
        try:
            for piece in pieces:
                self.wfile.write(piece)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client stopped reading: fine
            pass


class HostileServer:
    """`with HostileServer(routes) as base_url:` serves `routes` on 127.0.0.1 in a thread."""

    def __init__(self, routes: Mapping[str, Route]):
        handler = type("Handler", (_Handler,), {"routes": dict(routes)})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> str:
        self.thread.start()
        return self.url

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
