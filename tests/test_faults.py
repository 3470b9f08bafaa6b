"""Faults during a level: each gives a clear message, keeps what was measured, marks the run incomplete.

The server killed mid-level and `/metrics` switched off are tested against a real llama-server.
HTTP errors, malformed SSE and streams that stop early come from a tiny local fault injector: it
stands in for nothing in the collection path, it only speaks the faults a real server rarely shows
on demand.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from perflib import load, rundir, sweep
from perflib.cli import main as cli_main

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


@pytest.fixture()
def injector() -> Callable[[str], str]:
    servers: list[ThreadingHTTPServer] = []

    def start(scenario: str) -> str:
        handler = type("Handler", (_Injector,), {"scenario": scenario})
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


@pytest.fixture(params=["raw", "httpx"])
def transport(request) -> str:
    """Both readers: the minimal one (perflib's hot path) and httpx (https, comparison)."""
    return request.param


def _one(base_url: str, transport: str = "raw", max_tokens: int = 8) -> load.RequestRecord:
    async def go() -> load.RequestRecord:
        async with load._client(10.0) as client:
            return await load.stream_request(client, base_url, endpoint="completions", prompt="p",
                                             max_tokens=max_tokens, request_id="r", batch=1, context=5, repeat=1,
                                             transport=transport)

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
    res = sweep.run_level(url, 3, 16, 4, 1, tmp_path)
    assert res.status == "incomplete" and not res.skipped
    records = rundir.read_jsonl(res.run_dir / "requests.jsonl")
    assert len(records) == 3 and all(r["status"] == 500 and not r["ok"] for r in records)
    assert all("boom: out of memory" in r["error"] for r in records)
    manifest = rundir.read_manifest(res.run_dir)
    assert manifest["status"] == "incomplete"
    assert any("3 of 3 requests failed" in e and "HTTP 500" in e for e in manifest["errors"])
    assert manifest["prompt_tokens"]["method"] == "estimate"  # the injector has no /tokenize
    assert res.summary["ok"] == 0 and res.summary["failed"] == 3


# ---------------------------------------------------------------------------------------------
# Unreachable server and bad arguments


def test_unreachable_server_message_and_manifest(tmp_path, capsys):
    from perflib.server import free_port

    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    code = cli_main(["sweep", "--base-url", url, "--batch", "1", "--context", "16", "--decode-tokens", "4",
                     "--repeats", "1", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"server unreachable at {url}" in err and "--start-server" in err and "b1_c16_r1" in err
    manifest = rundir.read_manifest(tmp_path / "b1_c16_r1")
    assert manifest["status"] == "incomplete" and url in manifest["errors"][0]


def test_no_server_given_is_a_clear_error(tmp_path, capsys):
    code = cli_main(["sweep", "--batch", "1", "--context", "16", "--out", str(tmp_path)])
    assert code == 2
    assert "--base-url" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Real llama-server: /metrics off, and SIGKILL in the middle of a level


@pytest.mark.server
def test_metrics_off_level_runs_but_is_incomplete(llama_server_binary, tiny_model, tmp_path):
    from perflib.server import start_llama_server

    with start_llama_server(tiny_model, parallel=2, ctx_size=2 * 256, threads=1, metrics=False,
                            binary=llama_server_binary, log_path=tmp_path / "server.log") as handle:
        res = sweep.run_level(handle.base_url, 2, 64, 24, 1, tmp_path / "out", server=handle)
    records = rundir.read_jsonl(res.run_dir / "requests.jsonl")
    assert len(records) == 2 and all(r["ok"] and r["completion_tokens"] == 24 for r in records)
    manifest = rundir.read_manifest(res.run_dir)
    # Decision (documented in perflib.sweep.run_level): the client records are kept, but without
    # counters the level is incomplete, so a rerun against a server with --metrics measures it again.
    assert manifest["status"] == "incomplete"
    assert manifest["metrics"]["available"] is False
    assert any("counters unavailable" in e and "/metrics" in e and "501" in e for e in manifest["errors"])
    assert not (res.run_dir / "metrics_before.txt").exists()
    assert res.summary["decode_step_ms"] is None and res.summary["occupancy"] is None
    assert res.summary["ttft_ms"] is not None and res.summary["decode_tok_s"] is not None  # client side still works
    table = sweep.format_level_table(sweep.level_rows([res.summary]))
    assert "n/a (no /metrics)" in table
    assert "--metrics" in manifest["server"]["flags"] or "--metrics" not in handle.flags


@pytest.mark.server
@pytest.mark.slow
def test_server_killed_mid_level_keeps_records_and_rerun_remeasures(llama_server_binary, tiny_model, tmp_path):
    from perflib.server import start_llama_server

    out = tmp_path / "out"
    decode = 160
    # --parallel 2 with batch 4: two requests run, two wait for a slot; kill once two have finished.
    handle = start_llama_server(tiny_model, parallel=2, ctx_size=2 * (64 + decode + 64), threads=1,
                                binary=llama_server_binary, log_path=tmp_path / "server.log")
    requests_file = rundir.run_dir_for(out, 4, 64, 1) / "requests.jsonl"
    results: list[sweep.LevelResult] = []
    worker = threading.Thread(target=lambda: results.append(
        sweep.run_level(handle.base_url, 4, 64, decode, 1, out, server=handle)))
    try:
        worker.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if requests_file.exists() and len(requests_file.read_text().splitlines()) >= 2:
                break
            time.sleep(0.01)
        handle.kill()  # SIGKILL, as a crash would
        worker.join(timeout=120)
    finally:
        handle.kill()
    assert not worker.is_alive() and results
    res = results[0]
    records = rundir.read_jsonl(requests_file)
    assert len(records) == 4
    finished = [r for r in records if r["ok"]]
    failed = [r for r in records if not r["ok"]]
    assert len(finished) >= 2 and all(r["completion_tokens"] == decode for r in finished)
    assert failed, "the kill came after every request had finished; nothing was in flight"
    assert all(r["error"] and ("connection lost" in r["error"] or "cannot connect" in r["error"]) for r in failed)
    manifest = rundir.read_manifest(res.run_dir)
    assert manifest["status"] == "incomplete" and res.status == "incomplete"
    assert any(f"{len(failed)} of 4 requests failed" in e for e in manifest["errors"])
    assert any("/metrics scrape after" in e for e in manifest["errors"])
    assert (res.run_dir / "server.log").stat().st_size > 0  # the level's slice of the log

    # Rerun against a fresh server: the incomplete folder is moved aside, not deleted, and re-measured.
    with start_llama_server(tiny_model, parallel=2, ctx_size=2 * (64 + decode + 64), threads=1,
                            binary=llama_server_binary, log_path=tmp_path / "server2.log") as fresh:
        again = sweep.run_level(fresh.base_url, 4, 64, 16, 1, out, server=fresh)
    assert again.status == "complete", again.errors
    assert again.moved_aside == out / "b4_c64_r1.incomplete-1"
    kept = rundir.read_jsonl(Path(again.moved_aside) / "requests.jsonl")
    assert [r["request_id"] for r in kept] == [r["request_id"] for r in records]
    assert len(rundir.read_jsonl(again.run_dir / "requests.jsonl")) == 4
    # and a complete run is never re-measured
    skipped = sweep.run_level("http://127.0.0.1:9", 4, 64, 16, 1, out)
    assert skipped.skipped and skipped.status == "complete"
