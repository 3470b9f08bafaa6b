"""SSE framing: split on the byte `\\n` only, whatever the bytes and however they arrive (LOADGEN.md §6)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from perflib.load.sse import SSESplitter

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
    payloads = SSESplitter().feed(stream)
    assert payloads[-1] == b"[DONE]"
    assert [json.loads(p)["choices"][0]["text"] for p in payloads[:-1]] == texts
    # what aiter_lines-style splitting would do: more "lines" than events, some not JSON
    assert len(stream.decode().splitlines()) > len(payloads) * 2


@given(st.lists(st.text(alphabet=st.sampled_from(list("ab é\u2028\u2029\u0085{}\":")), max_size=12), min_size=1,
                max_size=6),
       st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=30))
def test_splitter_is_independent_of_how_bytes_arrive(texts, cuts):
    stream = b"".join(_event(t) for t in texts)
    splitter = SSESplitter()
    got: list[bytes] = []
    pos = 0
    for cut in cuts:  # feed in arbitrary pieces, cutting through UTF-8 sequences and lines
        got += splitter.feed(stream[pos:pos + cut])
        pos += cut
    got += splitter.feed(stream[pos:])
    got += splitter.close()
    assert [json.loads(p)["choices"][0]["text"] for p in got] == texts


def test_splitter_crlf_comments_multiline_and_unterminated_tail():
    s = SSESplitter()
    out = s.feed(b": keep-alive\r\n\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\nevent: x\ndata:[DONE]\n")
    assert out == [b'{"a":\n1}']  # two data lines of one event joined with \n; the comment made no event
    assert s.close() == [b"[DONE]"]  # cut off before its blank line, still delivered at close
