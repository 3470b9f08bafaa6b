"""perflib.load and perflib.rundir without a server: SSE framing, records, steady step, decomposition."""

from __future__ import annotations

import asyncio
import json
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perflib import load, rundir
from perflib.errors import InputError

# ---------------------------------------------------------------------------------------------
# SSE framing

SEPARATORS = "\u2028\u2029\u0085"


def _event(text: str) -> bytes:
    # ensure_ascii=False keeps the separators as raw UTF-8 bytes inside the JSON string, as
    # llama-server sends them.
    obj = {"choices": [{"text": text, "index": 0, "finish_reason": None}]}
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


def test_splitter_keeps_unicode_line_separators_inside_events():
    texts = [f"a{SEPARATORS}b", "line\u2028break", "x\u0085y"]
    stream = b"".join(_event(t) for t in texts) + b"data: [DONE]\n\n"
    assert "\u2028".encode() in stream  # the raw separator really is in the bytes
    payloads = load.SSESplitter().feed(stream)
    assert payloads[-1] == b"[DONE]"
    assert [json.loads(p)["choices"][0]["text"] for p in payloads[:-1]] == texts
    # what aiter_lines-style splitting would do: more "lines" than events, some not JSON
    assert len(stream.decode().splitlines()) > len(payloads) * 2


@given(st.lists(st.text(alphabet=st.sampled_from(list("ab é\u2028\u2029\u0085{}\":")), max_size=12), min_size=1,
                max_size=6),
       st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=30))
def test_splitter_is_independent_of_how_bytes_arrive(texts, cuts):
    stream = b"".join(_event(t) for t in texts)
    splitter = load.SSESplitter()
    got: list[bytes] = []
    pos = 0
    for cut in cuts:  # feed in arbitrary pieces, cutting through UTF-8 sequences and lines
        got += splitter.feed(stream[pos:pos + cut])
        pos += cut
    got += splitter.feed(stream[pos:])
    got += splitter.close()
    assert [json.loads(p)["choices"][0]["text"] for p in got] == texts


def test_splitter_crlf_comments_multiline_and_unterminated_tail():
    s = load.SSESplitter()
    out = s.feed(b": keep-alive\r\n\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\nevent: x\ndata:[DONE]\n")
    assert out == [b'{"a":\n1}']  # two data lines of one event joined with \n; the comment made no event
    assert s.close() == [b"[DONE]"]  # cut off before its blank line, still delivered at close


def test_stream_state_flags_non_json_data_line():
    state = load._StreamState()
    state.take(b'{"choices":[{"text":"hi"}]}', 1)
    state.take(b"{not json", 2)
    assert state.chunk_ns == [1]
    assert "malformed SSE" in state.error and "event 2" in state.error and "{not json" in state.error


def test_token_carrying_chunks_follow_loadgen_definition():
    state = load._StreamState()
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
        async with server, load._client(10.0) as client:
            return await load.stream_request(client, f"http://127.0.0.1:{port}", endpoint="completions",
                                             prompt="p", max_tokens=4, request_id="r0", batch=1, context=9,
                                             repeat=1, transport=transport)

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
        async with server, load._client(10.0) as client:
            for _ in range(3):
                resp = await client.get(f"http://127.0.0.1:{port}/x")
                assert resp.status_code == 200

    asyncio.run(main())
    assert len(peers) == 3 and len(set(peers)) == 3  # three requests, three client ports


# ---------------------------------------------------------------------------------------------
# Records, steady step and the decomposition


def test_decode_tok_s_definition():
    assert load.decode_tok_s(11, 1_000_000_000, 2_000_000_000) == pytest.approx(10.0)
    assert load.decode_tok_s(1, 0, 10) is None
    assert load.decode_tok_s(5, 10, 10) is None
    assert load.decode_tok_s(None, 0, 10) is None


def _rec(rid: str, start: int, chunks: list[int]) -> dict:
    return {"request_id": rid, "start_ns": start, "first_token_ns": chunks[0], "last_token_ns": chunks[-1],
            "chunk_ns": chunks, "completion_tokens": len(chunks)}


def test_steady_step_uses_only_the_span_where_all_decode():
    ms = 1_000_000
    # request a decodes alone every 5 ms until b's first token at 100 ms, then both step at 10 ms;
    # b finishes at 200 ms, a continues alone at 5 ms.
    a = _rec("a", 0, [*range(0, 100 * ms, 5 * ms), *range(100 * ms, 200 * ms + 1, 10 * ms),
                      *range(205 * ms, 300 * ms, 5 * ms)])
    b = _rec("b", 50 * ms, list(range(100 * ms, 200 * ms + 1, 10 * ms)))
    steady = load.steady_step([a, b])
    assert steady.span_start_ns == 100 * ms and steady.span_end_ns == 200 * ms
    assert steady.step_ms == pytest.approx(10.0)  # the 5 ms solo steps are outside the span
    assert steady.samples == 20


def test_steady_step_none_with_reason():
    ms = 1_000_000
    a = _rec("a", 0, list(range(0, 50 * ms, 5 * ms)))
    b = _rec("b", 0, list(range(60 * ms, 100 * ms, 5 * ms)))  # starts decoding after a finished
    assert load.steady_step([a, b]).step_ms is None
    assert "no span" in load.steady_step([a, b]).reason
    few = load.steady_step([_rec("c", 0, [0, ms, 2 * ms])])
    assert few.step_ms is None and "only 2" in few.reason
    failed = {"request_id": "d", "start_ns": 0, "first_token_ns": None, "last_token_ns": None}
    assert "produced no token" in load.steady_step([a, failed]).reason


def test_steady_step_refuses_bursty_delivery():
    ms, us = 1_000_000, 1_000
    # 30 steps of 3 ms, but the client read them in bursts of 3: two of every three gaps are 20 us
    chunks, t = [], 0
    for _ in range(10):
        chunks += [t, t + 20 * us, t + 40 * us]
        t += 9 * ms
    steady = load.steady_step([_rec("a", 0, chunks)])
    assert steady.step_ms is None and "bursts" in steady.reason
    assert steady.burst_share == pytest.approx(20 / 29)
    # a few bunched pairs among regular steps are tolerated and reported
    regular = list(range(0, 60 * ms, 3 * ms))
    regular.insert(5, regular[4] + 30 * us)
    ok = load.steady_step([_rec("b", 0, regular)])
    assert ok.step_ms == pytest.approx(3.0) and ok.burst_share == pytest.approx(1 / 20)


def test_decomposition_matches_hand_computed_overlaps():
    ms = 1_000_000
    # a: prefill [0, 10], decodes 11 tokens over [10, 110]; b: prefill [0, 40] overlaps a's window
    # by 30 ms; c: prefill [0, 60] overlaps it by 50 ms; union of the others' prefill = 50 ms.
    a = {"request_id": "a", "start_ns": 0, "first_token_ns": 10 * ms, "last_token_ns": 110 * ms,
         "completion_tokens": 11}
    b = {"request_id": "b", "start_ns": 0, "first_token_ns": 40 * ms, "last_token_ns": 140 * ms,
         "completion_tokens": 11}
    c = {"request_id": "c", "start_ns": 0, "first_token_ns": 60 * ms, "last_token_ns": 160 * ms,
         "completion_tokens": 11}
    parts = load.decode_window_decomposition([a, b, c], step_ms=4.0)
    by_id = {p["request_id"]: p for p in parts.per_request}
    assert by_id["a"]["prefill_ms"] == pytest.approx(50.0)
    assert by_id["b"]["prefill_ms"] == pytest.approx(20.0)  # c's prefill [0, 60] ∩ [40, 140]
    assert by_id["c"]["prefill_ms"] == pytest.approx(0.0)
    assert by_id["a"]["own_ms"] == pytest.approx(40.0)  # (11 − 1) × 4 ms
    assert by_id["a"]["other_ms"] == pytest.approx(100.0 - 40.0 - 50.0)
    assert parts.own_step_share == pytest.approx(0.4)  # each window is 100 ms, own 40 ms
    assert parts.prefill_share == pytest.approx(statistics.median([0.5, 0.2, 0.0]))
    assert parts.window_ms == pytest.approx(100.0)
    no_step = load.decode_window_decomposition([a, b, c], step_ms=None)
    assert no_step.own_step_share is None and no_step.prefill_share == parts.prefill_share


# ---------------------------------------------------------------------------------------------
# Prompt fitting (the sizing arithmetic; the server's real /tokenize is exercised in
# test_sweep_server.py, where measured counts are checked against usage.prompt_tokens)


class _WordCounter:
    """Counts like a tokenizer that gives each word 1 token and each digit run 1 more, plus BOS."""

    method = "tokenize"

    async def count(self, text: str) -> int:
        return 1 + sum(1 + sum(ch.isdigit() for ch in word) // 3 for word in text.split())


@pytest.mark.parametrize("target", [40, 333, 2048])
def test_fit_prompt_hits_target_within_tolerance(target):
    text, tokens, method, _ = asyncio.run(load.fit_prompt(_WordCounter(), "[abc request 12]", target))
    assert method == "tokenize"
    assert tokens == asyncio.run(_WordCounter().count(text))
    assert abs(tokens - target) <= load.prompt_tolerance(target)


def test_token_counter_against_a_server_without_tokenize_falls_back_to_estimate():
    async def main() -> list[load.Prompt]:
        server = await asyncio.start_server(_not_found, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, load._client(5.0) as client:
            return await load.make_prompts(client, f"http://127.0.0.1:{port}", endpoint="completions",
                                           count=2, target=100, tag="t")

    prompts = asyncio.run(main())
    assert [p.method for p in prompts] == ["estimate", "estimate"]
    assert prompts[0].text != prompts[1].text and prompts[0].text.startswith("[t request 0]")
    assert all(abs(len(p.text) / load.ESTIMATE_CHARS_PER_TOKEN - 100) < 10 for p in prompts)


async def _not_found(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    if length:
        await reader.readexactly(length)
    writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 9\r\nconnection: close\r\n\r\nnot found")
    await writer.drain()
    writer.close()


# ---------------------------------------------------------------------------------------------
# Run folders


def test_manifest_atomic_write_and_is_complete(tmp_path):
    run = tmp_path / rundir.run_name(4, 1024, 2)
    assert run.name == "b4_c1024_r2"
    assert not rundir.is_complete(run)
    rundir.write_manifest(run, {"status": "incomplete", "errors": ["x"]})
    assert not rundir.is_complete(run)
    rundir.write_manifest(run, {"status": "complete", "errors": []})
    assert rundir.is_complete(run) and rundir.read_manifest(run)["schema"] == rundir.SCHEMA_VERSION
    assert [p.name for p in run.iterdir()] == ["manifest.json"]  # no temp file left behind
    (run / "manifest.json").write_text("{\"status\": \"comp")  # a torn manifest is not complete
    assert not rundir.is_complete(run)
    with pytest.raises(InputError, match="manifest.json:1:"):
        rundir.read_manifest(run)


def test_move_aside_numbers_folders(tmp_path):
    run = tmp_path / "b1_c8_r1"
    run.mkdir()
    first = rundir.move_aside(run)
    run.mkdir()
    second = rundir.move_aside(run)
    assert (first.name, second.name) == ("b1_c8_r1.incomplete-1", "b1_c8_r1.incomplete-2")
    assert not run.exists()


def test_jsonl_append_and_torn_last_line(tmp_path):
    path = tmp_path / "requests.jsonl"
    rundir.append_jsonl(path, {"a": 1})
    rundir.append_jsonl(path, {"a": 2})
    with open(path, "a") as handle:
        handle.write('{"a": 3, "b"')  # a crash in the middle of a line
    assert rundir.read_jsonl(path) == [{"a": 1}, {"a": 2}]
    path.write_text('{"a": 1}\nnot json\n{"a": 3}\n')
    with pytest.raises(InputError, match=r"requests.jsonl:2:1: expected one JSON object per line"):
        rundir.read_jsonl(path)



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
    fast = load._StreamState()
    fast.take(payload, 7)
    obj = json.loads(payload)
    assert any(load._token_text(c) for c in obj["choices"]) == is_token  # the reference definition
    assert fast.chunk_ns == ([7] if is_token else [])
    assert fast.usage == obj.get("usage") and fast.error is None


def test_event_loop_choice_and_run_sync(monkeypatch):
    async def loop_module() -> str:
        return type(asyncio.get_running_loop()).__module__

    monkeypatch.setenv("PERFLIB_EVENT_LOOP", "asyncio")
    assert load.event_loop_name() == "asyncio"
    assert load.run_sync(loop_module()).startswith("asyncio")
    monkeypatch.delenv("PERFLIB_EVENT_LOOP")
    name = load.event_loop_name()
    assert load.run_sync(loop_module()).startswith("uvloop" if name.startswith("uvloop") else "asyncio")

    async def inside_a_running_loop() -> str:  # as in Jupyter: run_sync hands off to a thread
        return load.run_sync(loop_module())

    assert asyncio.run(inside_a_running_loop())
