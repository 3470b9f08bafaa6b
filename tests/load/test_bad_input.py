"""The load client against hostile answers (issue 12): a bad value from the server fails that
request's record with a clear error, never the level or the process, and never a hang; SSE is split
in linear time with a maximum line length.

The answers come from `hostile.HostileServer`, a real HTTP server on a real socket that sends them on
purpose; nothing here stands in for a server in the collection path.
"""

from __future__ import annotations

import itertools
import json
import threading
import time

import pytest
from hostile import HostileServer, stream, token

from perflib import load
from perflib.errors import PerflibError
from perflib.load import http_client
from perflib.load.sse import MAX_LINE_BYTES, SSEError, SSESplitter


@pytest.fixture(params=["raw", "httpx"])
def transport(request) -> str:
    return request.param


def _one(base_url: str, transport: str = "raw", max_tokens: int = 2, timeout: float = 20.0) -> load.RequestRecord:
    async def go() -> load.RequestRecord:
        async with http_client(timeout) as client:
            return await load.stream_request(client, load.RequestSpec(
                base_url, "p", max_tokens, "r", batch=1, context=5, repeat=1, transport=transport, timeout=timeout))

    started = time.monotonic()
    record = load.run_sync(go())
    assert time.monotonic() - started < 10, "a hostile answer must fail fast, not wait for the timeout"
    return record


def _final(**fields) -> dict:
    return {"choices": [{"text": "", "finish_reason": "length"}], **fields}


HOSTILE_STREAMS = {
    "usage as a list": ((token("a"), token("b"), _final(usage=[2])), "usage"),
    "completion_tokens as text": ((token("a"), token("b"), _final(usage={"completion_tokens": "many"})),
                                  "usage.completion_tokens"),
    "negative completion_tokens": ((token("a"), token("b"), _final(usage={"completion_tokens": -2})),
                                   "usage.completion_tokens"),
    "timings as a list": ((token("a"), token("b"), _final(timings=[1])), "timings"),
    "predicted_ms as text": ((token("a"), token("b"), _final(timings={"predicted_n": 2, "predicted_ms": "x"})),
                             "timings.predicted_ms"),
    "choices as an object": (({"choices": {"text": "a"}},), "choices"),
    "choices of strings": (({"choices": ["a"]},), "choices"),
    "text as a number": (({"choices": [{"text": 5}]},), "choices[0].text"),
    "JSON nested too deep": ((b"data: " + b"[" * 100_000 + b"\n\n",), "not JSON"),
    "NaN completion_tokens": ((token("a"), b'data: {"choices":[],"usage":{"completion_tokens":NaN}}\n\n'),
                              "NaN is not a JSON value"),
    "predicted_ms past the float range": ((token("a"), b'data: {"choices":[],"timings":{"predicted_ms":1e999}}\n\n'),
                                          "out of range"),
    "negative predicted_ms": ((token("a"), token("b"), _final(timings={"predicted_n": 2, "predicted_ms": -1.5})),
                              "timings.predicted_ms"),
    "completion_tokens as true": ((token("a"), token("b"), _final(usage={"completion_tokens": True})),
                                  "usage.completion_tokens"),
    "more tokens than asked": ((token("a"), token("b"), _final(usage={"completion_tokens": 10**6})),
                               "usage.completion_tokens: expected at most max_tokens 2"),
    "more token chunks than asked": ((token("a"), token("b"), token("c"), _final()), "at most max_tokens 2"),
    "delta as a string": (({"choices": [{"delta": "a"}]},), "choices[0].delta"),
    "delta content as a list": (({"choices": [{"delta": {"content": ["a"]}}]},), "choices[0].delta.content"),
}


@pytest.mark.parametrize("case", list(HOSTILE_STREAMS))
def test_bad_value_in_the_stream_fails_the_record_with_its_field(transport, case):
    events, field = HOSTILE_STREAMS[case]
    with HostileServer({"/v1/completions": stream(*events)}) as url:
        rec = _one(url, transport)
    assert not rec.ok and rec.error is not None
    assert "malformed SSE" in rec.error and field in rec.error, rec.error
    json.dumps(rec.to_dict(), allow_nan=False)  # the record itself is clean JSON


def _raw_socket_server(pieces: list[bytes], pause_s: float = 0.0, hold_s: float = 15.0):
    """A listening socket that answers one connection with `pieces` (`pause_s` apart), then holds it
    open for `hold_s`: a client that waits for the close instead of reading what it got hangs."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        try:
            for piece in pieces:
                conn.sendall(piece)
                time.sleep(pause_s)
            time.sleep(hold_s)
        except OSError:  # the client gave up on us: what the test wants
            pass
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener


MALFORMED_HTTP = {  # head → (what the raw reader's error names, what httpx's h11 names)
    "Content-Length as text": (b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n", "Content-Length", "Content-Length"),
    "negative Content-Length": (b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n", "Content-Length", "Content-Length"),
    "endless header": (b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 200_000, "header", "buffer too long"),
    "endless chunk size": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"f" * 70_000,
                           "chunk-size line longer", "timed out"),
    "chunk size not hex": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n",
                           "hexadecimal chunk size", "chunk"),
    "status out of range": (b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n", "status", "status"),
}


@pytest.mark.parametrize("case", list(MALFORMED_HTTP))
def test_malformed_http_from_a_raw_socket_fails_fast(transport, case):
    head, raw_needle, httpx_needle = MALFORMED_HTTP[case]
    listener = _raw_socket_server([head])
    try:
        # h11 waits on an endless chunk-size line; the whole-request deadline still ends it
        rec = _one(f"http://127.0.0.1:{listener.getsockname()[1]}", transport, timeout=3.0)
    finally:
        listener.close()
    needle = raw_needle if transport == "raw" else httpx_needle
    assert not rec.ok and needle.lower() in (rec.error or "").lower(), rec.error


def test_a_trickle_of_comments_is_cut_at_the_request_timeout(transport):
    """httpx's timeout is per read: a comment line every 0.2 s would hold it forever without the
    whole-request deadline."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
    listener = _raw_socket_server([head] + [b": ping\n"] * 100, pause_s=0.2)
    try:
        rec = _one(f"http://127.0.0.1:{listener.getsockname()[1]}", transport, timeout=2.0)
    finally:
        listener.close()
    assert not rec.ok and rec.status == 200 and "timed out" in rec.error, rec.error


def test_an_endless_error_body_is_cut_and_quoted(transport):
    head = b"HTTP/1.1 503 Busy\r\nContent-Type: text/plain\r\n\r\n"
    listener = _raw_socket_server([head] + [b"busy " * 1000] * 20, pause_s=0.05)
    try:
        rec = _one(f"http://127.0.0.1:{listener.getsockname()[1]}", transport, timeout=30.0)
    finally:
        listener.close()
    assert not rec.ok and rec.status == 503 and rec.error.startswith("HTTP 503") and len(rec.error) < 500


def test_one_bad_answer_fails_one_record_not_the_level():
    served = itertools.count()

    def completions(path: str, body: bytes):
        if json.loads(body)["max_tokens"] != 2:  # the warm-up
            return stream(token("w"), _final(usage={"completion_tokens": 1}))
        usage = [2] if next(served) == 1 else {"completion_tokens": 2}
        return stream(token("a"), token("b"), _final(usage=usage))

    sink = load.MemorySink()
    with HostileServer({"/v1/completions": completions}) as url:
        outcome = load.run_sync(load.run_level_async(load.LevelSpec(url, 3, 8, 2, 1, scrape_metrics=False), sink))
    assert sorted(r.ok for r in sink.records) == [False, True, True]
    bad = next(r for r in sink.records if not r.ok)
    assert "usage" in bad.error
    assert any("1 of 3 requests failed" in e for e in outcome.errors)


MODELS = {
    "data as an object": {"data": {"id": "m"}},
    "data of strings": {"data": ["m"]},
    "id as a list": {"data": [{"id": ["m"], "owned_by": 3}]},
    "empty": {"data": []},
}


@pytest.mark.parametrize("case", list(MODELS))
def test_v1_models_of_the_wrong_shape_reads_as_unknown(case):
    props = {"build_info": {"commit": 1}, "model_alias": ["x"], "default_generation_settings": {}}
    with HostileServer({"/v1/models": (200, json.dumps(MODELS[case]).encode()),
                        "/props": (200, json.dumps(props).encode())}) as url:
        ident = load.server_identity(url)
    assert ident["model"] is None and ident["version"] is None
    assert ident["kind"] == "llama.cpp"


def test_v1_models_nested_too_deep_reads_as_absent():
    with HostileServer({"/v1/models": (200, b"[" * 100_000)}) as url:
        ident = load.server_identity(url)
    assert ident["models"] is None and ident["model"] is None


# ------------------------------------------------------------------------------------------ SSE splitter


def _feed_with_deadline(splitter: SSESplitter, piece: bytes, count: int, deadline_s: float) -> float:
    started = time.monotonic()
    for _ in range(count):
        assert splitter.feed(piece) == []
        assert time.monotonic() - started < deadline_s, "splitting one long line is not linear"
    return time.monotonic() - started


def test_one_long_line_is_split_in_linear_time():
    splitter = SSESplitter()
    line_bytes = MAX_LINE_BYTES - 1024
    piece = b"x" * 1024
    splitter.feed(b"data: ")
    _feed_with_deadline(splitter, piece, (line_bytes - 16) // 1024, deadline_s=5.0)
    events = splitter.feed(b"\n\n")
    assert len(events) == 1 and len(events[0]) == (line_bytes - 16) // 1024 * 1024


def test_a_line_past_the_maximum_is_a_clear_error_and_fast():
    splitter = SSESplitter()
    started = time.monotonic()
    with pytest.raises(SSEError, match=f"longer than {MAX_LINE_BYTES} bytes"):
        for _ in range(200 * 16):  # 200 MiB in 64 KiB reads; refused after the first MAX_LINE_BYTES
            splitter.feed(b"y" * 65536)
    assert time.monotonic() - started < 5
    assert issubclass(SSEError, PerflibError)


def test_an_event_of_many_data_lines_past_the_maximum_is_refused():
    splitter = SSESplitter()
    with pytest.raises(SSEError, match="event"):
        for _ in range(MAX_LINE_BYTES // 65536 + 2):
            splitter.feed(b"data: " + b"z" * 65536 + b"\n")


def test_a_line_past_the_maximum_inside_one_read_is_refused():
    with pytest.raises(SSEError):
        SSESplitter().feed(b"data: " + b"q" * (MAX_LINE_BYTES + 10) + b"\n\n")


def test_stream_with_an_endless_line_fails_the_record(transport):
    def endless(path: str, body: bytes):
        return 200, [b"data: "] + [b"w" * 65536] * (MAX_LINE_BYTES // 65536 + 4), {"content-type": "text/event-stream"}

    with HostileServer({"/v1/completions": endless}) as url:
        rec = _one(url, transport)
    assert not rec.ok and "longer than" in rec.error
