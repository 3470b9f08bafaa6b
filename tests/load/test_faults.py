"""Faults during a level: each gives a clear message, keeps what was measured, marks the run incomplete.

The server killed mid-level and `/metrics` switched off are tested against a real llama-server.
HTTP errors, malformed SSE and streams that stop early come from a tiny local fault injector: it
stands in for nothing in the collection path, it only speaks the faults a real server rarely shows
on demand.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from perflib import load, rundir, safeinput, sweep
from perflib.load import http_client

# ---------------------------------------------------------------------------------------------
# Fault injector


def _token(text: str) -> bytes:
    return b"data: " + json.dumps({"choices": [{"text": text, "index": 0, "finish_reason": None}]}).encode() + b"\n\n"


def _final(n: int) -> bytes:
    obj = {"choices": [{"text": "", "finish_reason": "length"}], "usage": {"completion_tokens": n, "prompt_tokens": 5}}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


SCENARIOS: dict[str, bytes | tuple[int, bytes]] = {
    "http500": (500, b'{"error":{"code":500,"message":"boom: out of memory","type":"server_error"}}'),
    "http400": (400, b'{"error":{"code":400,"message":"max_tokens must be positive"}}'),
    "malformed": _token("a") + b"data: {\"choices\": [oops\n\n" + _token("b") + b"data: [DONE]\n\n",
    "early_no_done": _token("a") + _token("b") + _token("c"),
    "early_done": _token("a") + _token("b") + _token("c") + _final(3) + b"data: [DONE]\n\n",
    "error_event": _token("a") + b'data: {"error":{"message":"slot crashed"}}\n\n',
    "good": b"".join(_token(f" t{i}") for i in range(8)) + _final(8) + b"data: [DONE]\n\n",
}


class _Injector(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # close-delimited bodies: a stream ends when the socket closes
    scenario = "good"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._send(404, b"not here")

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        if not self.path.startswith("/v1/"):
            self._send(404, b"not here")  # no /tokenize: prompts are estimated
            return
        answer = SCENARIOS[self.scenario]
        if isinstance(answer, tuple):
            self._send(*answer)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for i in range(0, len(answer), 50):  # dribble the stream out
            self.wfile.write(answer[i:i + 50])
            self.wfile.flush()

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _InjectorServer(ThreadingHTTPServer):
    """The injector's server. `socketserver` prints every handler error as a bare traceback on
    stderr, which a test run must not show: a client that hangs up mid-stream (what the malformed and
    early-stop scenarios provoke) is expected and dropped; any other error is kept, and the test that
    met it fails naming it."""

    errors: list[str]

    def handle_error(self, request, client_address) -> None:
        error = sys.exc_info()[1]
        if not isinstance(error, ConnectionError):
            self.errors.append(f"{type(error).__name__}: {error}")


@pytest.fixture()
def injector() -> Callable[[str], str]:
    servers: list[ThreadingHTTPServer] = []

    def start(scenario: str) -> str:
        handler = type("Handler", (_Injector,), {"scenario": scenario})
        srv = _InjectorServer(("127.0.0.1", 0), handler)
        srv.errors = []
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()
    errors = [e for srv in servers for e in srv.errors]
    assert not errors, f"the fault injector itself failed: {errors}"


@pytest.fixture(params=["raw", "httpx"])
def transport(request) -> str:
    """Both readers: the minimal one (perflib's hot path) and httpx (https, comparison)."""
    return request.param


def _one(base_url: str, transport: str = "raw", max_tokens: int = 8) -> load.RequestRecord:
    async def go() -> load.RequestRecord:
        async with http_client(10.0) as client:
            return await load.stream_request(client, load.RequestSpec(
                base_url, "p", max_tokens, "r", batch=1, context=5, repeat=1, transport=transport))

    return load.run_sync(go())


def test_good_stream_from_injector_is_ok(injector, transport):
    rec = _one(injector("good"), transport)
    assert rec.ok and rec.error is None and rec.completion_tokens == 8 and len(rec.chunk_ns) == 8


@pytest.mark.parametrize("scenario,status,needle", [
    ("http500", 500, "HTTP 500 from http://127.0.0.1:"),
    ("http400", 400, "max_tokens must be positive"),
])
def test_http_errors_record_status_and_body_snippet(injector, transport, scenario, status, needle):
    rec = _one(injector(scenario), transport)
    assert not rec.ok and rec.status == status
    assert needle in rec.error
    assert rec.first_token_ns is None and rec.ttft_ms is None and rec.decode_tok_s is None


def test_malformed_sse_names_the_line(injector, transport):
    rec = _one(injector("malformed"), transport)
    assert not rec.ok and rec.status == 200
    assert "malformed SSE" in rec.error and "event 2" in rec.error and '{"choices": [oops' in rec.error
    assert len(rec.chunk_ns) == 1  # the token before the bad line is kept


def test_stream_that_stops_without_done(injector, transport):
    rec = _one(injector("early_no_done"), transport)
    assert not rec.ok and rec.error == "stream ended after 3 of 8 tokens (no [DONE])"
    assert len(rec.chunk_ns) == 3  # timings of what arrived are kept


def test_stream_with_fewer_tokens_than_asked(injector, transport):
    rec = _one(injector("early_done"), transport)
    assert not rec.ok and rec.error == "stream ended after 3 of 8 tokens"
    assert rec.completion_tokens == 3


def test_error_event_inside_stream(injector, transport):
    rec = _one(injector("error_event"), transport)
    assert not rec.ok and "slot crashed" in rec.error


def test_level_with_http_errors_is_incomplete_and_keeps_records(injector, tmp_path):
    url = injector("http500")
    res = sweep.run_level(load.LevelSpec(url, 3, 16, 4, 1, out_dir=tmp_path))
    assert res.status == "incomplete" and not res.skipped
    records = safeinput.read_jsonl(res.run_dir / "requests.jsonl")
    assert len(records) == 3 and all(r["status"] == 500 and not r["ok"] for r in records)
    assert all("boom: out of memory" in r["error"] for r in records)
    manifest = rundir.read_manifest(res.run_dir)
    assert manifest["status"] == "incomplete"
    assert any("3 of 3 requests failed" in e and "HTTP 500" in e for e in manifest["errors"])
    assert manifest["prompt_tokens"]["method"] == "estimate"  # the injector has no /tokenize
    assert res.summary["ok"] == 0 and res.summary["failed"] == 3


# ---------------------------------------------------------------------------------------------
# Unreachable server and bad arguments


