"""The hot path of a streamed read: one whole chunked-encoding frame holding one token chunk.

llama-server writes each token as its own HTTP/1.1 chunk (`<hex size>\\r\\n data: {...}\\n\\n \\r\\n`),
and a client that keeps up reads it in one `recv`. `is_token_frame` recognises exactly that read
with a handful of C-level bytes operations, so that the reader (`perflib.load.transport_raw.SSEResponse`)
can count the token chunk at the read's timestamp without undoing the chunked encoding, splitting
SSE lines or parsing JSON. Anything else (a frame cut across reads, two events in one read, a
chunk with usage, timings or an error, an empty text, chat chunks) returns False and takes the
general path, which counts tokens by the same definition (`perflib.load.stream` docstring).
"""

from __future__ import annotations

_TEXT_EVENT = b'data: {"choices":[{"text":"'
"""The start of a completions token event, as llama-server writes it (compact JSON)."""



def is_token_frame(data: bytes) -> bool:
    """True where `data` is exactly one chunked-encoding frame whose payload is one SSE event with
    a non-empty completions `text` and nothing a record keeps besides its arrival (no usage,
    timings or error): the general path would count it as one token chunk and change nothing else.
    """
    head = data.find(b"\r\n", 0, 10)
    if head <= 0 or not data.endswith(b'"}\n\n\r\n') or data.count(b"\n") != 4:
        return False
    start = head + 2
    if not data.startswith(_TEXT_EVENT, start) or data[start + 27:start + 28] == b'"':
        return False
    try:
        size = int(data[:head], 16)
    except ValueError:
        return False
    if size != len(data) - start - 2:
        return False
    # usage, timings and an error object all open with `":{`; an error may also be a plain string
    return b'":{' not in data and b'"error"' not in data
