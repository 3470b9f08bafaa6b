"""The one-token read (`perflib.load.frames.is_token_frame`) counts exactly what the general path counts."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perflib.load.answer import StreamState
from perflib.load.frames import is_token_frame
from perflib.load.transport_raw import SSEResponse

LLAMA_TOKEN = (b'{"choices":[{"text":" SAP","index":0,"logprobs":null,"finish_reason":null}],"created":1796133768,'
               b'"model":"m.gguf","system_fingerprint":"b11434","object":"text_completion","id":"chatcmpl-x"}')
LLAMA_LAST = (b'{"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}],"created":1,'
              b'"usage":{"completion_tokens":3,"prompt_tokens":3},"id":"chatcmpl-x","timings":{"predicted_n":3}}')


def frame(payload: bytes) -> bytes:
    event = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


def general(payload: bytes) -> StreamState:
    state = StreamState()
    state.take(payload, 7)
    return state


@pytest.mark.parametrize("payload", [
    LLAMA_TOKEN, LLAMA_LAST,
    b'{"choices":[{"text":"","index":0,"finish_reason":null}],"id":"c"}',
    b'{"choices":[{"text":"t","index":0}],"usage":{"completion_tokens":2},"id":"c"}',
    b'{"choices":[{"text":"t","index":0}],"error":"boom","id":"c"}',
    b'{"choices":[{"text":"t","index":0}],"error":{"message":"boom"},"id":"c"}',
    b'{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" x"}}],"id":"c"}',
    b'{"choices":[{"text":"\\"q\\u2028","index":0}],"id":"c"}',
])
def test_a_token_frame_is_what_the_general_path_counts_as_one_chunk_and_nothing_else(payload):
    ref = general(payload)
    if is_token_frame(frame(payload)):
        assert ref.chunk_ns == [7] and ref.usage is None and ref.timings is None and ref.error is None


def test_llama_token_frames_take_the_fast_path_and_others_do_not():
    assert is_token_frame(frame(LLAMA_TOKEN))
    assert not is_token_frame(frame(LLAMA_LAST))
    assert not is_token_frame(frame(LLAMA_TOKEN)[:-3])  # cut by the read
    assert not is_token_frame(frame(LLAMA_TOKEN) + frame(LLAMA_TOKEN))  # two frames in one read
    two_events = b"data: " + LLAMA_TOKEN + b"\n\ndata: " + LLAMA_TOKEN + b"\n\n"
    assert not is_token_frame(b"%x\r\n%s\r\n" % (len(two_events), two_events))
    wrong_size = frame(LLAMA_TOKEN).replace(b"%x\r\n" % (len(LLAMA_TOKEN) + 8), b"%x\r\n" % (len(LLAMA_TOKEN) + 9), 1)
    assert not is_token_frame(wrong_size)


def _read(reads: list[bytes]) -> StreamState:
    loop = asyncio.new_event_loop()
    try:
        state = StreamState()
        proto = SSEResponse(state, loop)
        for data in reads:
            proto.data_received(data)
        return state
    finally:
        loop.close()


texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)


@given(st.lists(texts, min_size=1, max_size=12), st.integers(min_value=1, max_value=40))
def test_a_stream_read_frame_by_frame_gives_the_records_of_the_same_bytes_cut_anywhere(tokens, cut):
    payloads = [json.dumps({"choices": [{"text": t, "index": 0, "logprobs": None, "finish_reason": None}],
                            "id": "c"}, ensure_ascii=False, separators=(",", ":")).encode() for t in tokens]
    payloads.append(LLAMA_LAST)
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    frames = [frame(p) for p in payloads] + [frame(b"[DONE]"), b"0\r\n\r\n"]
    by_frame = _read([head, *frames])
    body = b"".join(frames)
    by_cut = _read([head, *(body[i:i + cut] for i in range(0, len(body), cut))])
    assert len(by_frame.chunk_ns) == len(by_cut.chunk_ns) == sum(1 for t in tokens if t)
    assert by_frame.usage == by_cut.usage and by_frame.timings == by_cut.timings and by_frame.done and by_cut.done
    assert by_frame.events == by_cut.events
