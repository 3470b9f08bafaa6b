"""One streamed request: token-carrying chunks, the fast path, a real socket, new connections."""

from __future__ import annotations

import asyncio
import json

import pytest

from perflib import load
from perflib.load import http_client
from perflib.load.answer import StreamState, token_text

SEPARATORS = "\u2028\u2029\u0085"


def _event(text: str) -> bytes:
    # ensure_ascii=False keeps the separators as raw UTF-8 bytes inside the JSON string, as
    # llama-server sends them.
    obj = {"choices": [{"text": text, "index": 0, "finish_reason": None}]}
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


def test_stream_state_flags_non_json_data_line():
    state = StreamState()
    state.take(b'{"choices":[{"text":"hi"}]}', 1)
    state.take(b"{not json", 2)
    assert state.chunk_ns == [1]
    assert "malformed SSE" in state.error and "event 2" in state.error and "{not json" in state.error


def test_token_carrying_chunks_follow_loadgen_definition():
    state = StreamState()
    state.take(b'{"choices":[{"delta":{"role":"assistant","content":null}}]}', 10)  # chat role chunk
    state.take(b'{"choices":[{"delta":{"content":"x"}}]}', 20)
    state.take(b'{"choices":[{"delta":{"reasoning_content":"y"}}]}', 30)
    state.take(b'{"choices":[{"text":"","finish_reason":"length"}],"usage":{"completion_tokens":3},'
               b'"timings":{"predicted_n":3}}', 40)  # closing chunk: not a token
    state.take(b"[DONE]", 50)
    assert state.chunk_ns == [20, 30]
    assert state.usage == {"completion_tokens": 3} and state.timings == {"predicted_n": 3} and state.done


# ---------------------------------------------------------------------------------------------
# A stream over a real socket, bytes cut at awkward places


@pytest.mark.parametrize("transport", ["raw", "httpx"])
def test_stream_request_over_socket_with_u2028_split_mid_character(transport):
    texts = ["one", " two\u2028three", "\u2029", " four"]
    final = {"choices": [{"text": "", "finish_reason": "length"}],
             "usage": {"completion_tokens": 4, "prompt_tokens": 9}}
    body = b"".join(_event(t) for t in texts)
    body += b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n"
    sep = "\u2028".encode()
    cut = body.index(sep) + 1  # inside the 3-byte UTF-8 sequence of U+2028

    # chunked transfer encoding (as llama-server sends it), the chunk boundaries cutting through
    # the UTF-8 sequence, an SSE line and a chunk-size line
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:cut], body[cut:cut + 7], body[cut + 7:]))
    chunked += b"0\r\n\r\n"

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        for i in range(0, len(chunked), 13):
            writer.write(chunked[i:i + 13])
            await writer.drain()
            await asyncio.sleep(0.002)
        await asyncio.sleep(0.05)  # keep the connection open: the end of the body is the 0-size chunk
        writer.close()

    async def main() -> load.RequestRecord:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, http_client(10.0) as client:
            return await load.stream_request(client, load.RequestSpec(
                f"http://127.0.0.1:{port}", "p", 4, "r0", batch=1, context=9, repeat=1, transport=transport))

    rec = asyncio.run(main())
    assert rec.ok, rec.error
    assert rec.completion_tokens == 4 and rec.usage_prompt_tokens == 9
    assert len(rec.chunk_ns) == 4 and len(rec.itl_ms) == 3
    assert rec.chunk_ns == sorted(rec.chunk_ns)
    assert rec.ttft_ms == pytest.approx((rec.first_token_ns - rec.start_ns) / 1e6)
    assert rec.decode_tok_s == pytest.approx(3 * 1e9 / (rec.last_token_ns - rec.first_token_ns))


def test_client_opens_a_new_connection_per_request():
    peers: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(writer.get_extra_info("peername")[1])
        while True:  # serve as many requests as the client sends on this connection
            try:
                await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
            await writer.drain()
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, http_client(10.0) as client:
            for _ in range(3):
                resp = await client.get(f"http://127.0.0.1:{port}/x")
                assert resp.status_code == 200

    asyncio.run(main())
    assert len(peers) == 3 and len(set(peers)) == 3  # three requests, three client ports


def test_decode_tok_s_definition():
    assert load.decode_tok_s(11, 1_000_000_000, 2_000_000_000) == pytest.approx(10.0)
    assert load.decode_tok_s(1, 0, 10) is None
    assert load.decode_tok_s(5, 10, 10) is None
    assert load.decode_tok_s(None, 0, 10) is None


@pytest.mark.parametrize("payload,is_token", [
    (b'{"choices":[{"text":" hi","index":0,"logprobs":null,"finish_reason":null}],"created":1,"id":"c"}', True),
    (b'{"choices":[{"text":"\\"q\\u2028","index":0,"logprobs":null,"finish_reason":null}],"id":"c"}', True),
    (b'{"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":null}],"created":1,"id":"c"}', False),
    (b'{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" x"}}],"id":"c"}', True),
    (b'{"choices":[{"finish_reason":null,"index":0,"delta":{"content":""}}],"id":"c"}', False),
    (b'{"choices":[{"text":"t","index":0,"finish_reason":"length"}],"usage":{"completion_tokens":2},"id":"c"}', True),
    (b'{"choices":[{"text":"say \\"usage\\": no","index":0}],"id":"c"}', True),
])
def test_fast_path_agrees_with_full_parse(payload, is_token):
    fast = StreamState()
    fast.take(payload, 7)
    obj = json.loads(payload)
    assert token_text(obj["choices"]) == is_token  # the reference definition
    assert fast.chunk_ns == ([7] if is_token else [])
    assert fast.usage == obj.get("usage") and fast.error is None
