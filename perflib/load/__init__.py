"""Load against an OpenAI-compatible server: streamed requests timed per chunk, in levels.

- `perflib.load.sse`: SSE framing on the byte `\\n`.
- `perflib.load.stream`: one streamed request on its own connection (`stream_request`); the
  definitions of TTFT, ITL and decode tok/s are in its docstring.
- `perflib.load.request`: what a request is (`RequestSpec`, its body and timeouts) and what it measured
  (`RequestRecord`).
- `perflib.load.answer`: the server's streamed answer read strictly into a request's state.
- `perflib.load.transport_raw`, `perflib.load.transport_httpx`: the request's bytes, through a minimal
  HTTP/1.1 reader (the hot path) or through httpx (https).
- `perflib.load.spec`: `LevelSpec`, everything one level needs, one typed record through JSON and back.
- `perflib.load.prompts`: prompts of a target token length, sized with the server's `/tokenize`.
- `perflib.load.level`: one level, N requests at once with `/metrics` around them (`run_level_async`);
  what a level's repeats share when measured one after the other (`Repeats`).
- `perflib.load.loop`: the event loop (uvloop where installed), also from inside Jupyter.
- `perflib.load.identity`: the server's identity from `/props` and `/v1/models`.
- `perflib.load.contention`: what else used this machine's CPUs while a level ran.
- `perflib.load.pressure`: what the kernel counted of our threads' waiting for a CPU (PSI, schedstat).

The client-side arithmetic over the records (steady step, decode-window decomposition) is in
`perflib.runs`; writing a level into a run folder is `perflib.sweep`.
"""

from perflib.load.contention import (
    CPU_THRESHOLD,
    PSI_THRESHOLD,
    WAIT_THRESHOLD,
    Contention,
    ContentionSampler,
    listening_pids,
    say_once,
    wait_quiet,
)
from perflib.load.identity import json_object, server_identity, server_kind
from perflib.load.level import (
    LevelOutcome,
    LevelSink,
    MemorySink,
    Repeats,
    http_client,
    run_level_async,
)
from perflib.load.loop import event_loop_name, run_async, run_sync
from perflib.load.prompts import (
    Prompt,
    ServerUnreachable,
    TokenCounter,
    fit_prompt,
    make_prompts,
    prompt_tolerance,
)
from perflib.load.request import (
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    ENDPOINTS,
    RequestRecord,
    RequestSpec,
    decode_tok_s,
    request_timeout_for,
)
from perflib.load.spec import GAUGE_INTERVAL_S, LevelSpec, ServerInfo
from perflib.load.sse import MAX_LINE_BYTES, SSEError, SSESplitter
from perflib.load.stream import stream_request

__all__ = [
    "CPU_THRESHOLD", "Contention", "ContentionSampler", "PSI_THRESHOLD", "WAIT_THRESHOLD", "listening_pids",
    "say_once", "wait_quiet",
    "DEFAULT_IDLE_TIMEOUT_S", "DEFAULT_TIMEOUT_S", "ENDPOINTS", "GAUGE_INTERVAL_S", "LevelOutcome", "LevelSink",
    "LevelSpec", "MemorySink", "Prompt", "Repeats", "RequestSpec", "ServerInfo",
    "MAX_LINE_BYTES", "RequestRecord", "SSEError", "SSESplitter", "ServerUnreachable", "TokenCounter", "decode_tok_s", "event_loop_name", "http_client",
    "fit_prompt", "json_object", "make_prompts", "prompt_tolerance", "run_async", "run_level_async", "run_sync",
    "request_timeout_for", "server_identity", "server_kind", "stream_request",
]
