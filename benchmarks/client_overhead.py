"""Client CPU per streamed token, perflib's client against a minimal raw-socket reader.

Not a test: a measurement. The script starts the project's llama-server (random-weight tiny
model, `--parallel 64`, `-t 1`) and, for each concurrency N, runs each client in its own child
process as a closed loop of N streams (`/v1/completions`, `ignore_eos`, `--max-tokens` tokens
each, distinct prompts). Inside a steady window (after `--warmup` s, for `--duration` s) the child
reads its own process CPU time (`time.process_time()`: user + system, all threads) and counts
token-carrying chunks that arrived; CPU µs per token = ΔCPU / chunks. The server's side of the
same window: the decode step from `/metrics` counters (Δtokens_predicted_seconds /
(Δtokens_predicted − requests completed), SERVERS.md §5) and from the `timings` of the requests
that completed in the window (Σ predicted_ms / Σ(n − 1)); the client's: median ITL of the chunks in
the window. Comparing both clients shows whether perflib's client changes what it measures.

    python benchmarks/client_overhead.py --out results.json

Reference (LOADGEN.md §6, same kind of 2-core machine): a minimal httpx reader spends ~115–176 µs
per token. Goals (issue 14): ≤ 25 µs per token at N = 64 for perflib's client in one process, and the
server step under it within 1% of the step under the minimal reader. `--rounds R` measures each
client R times in alternating order and reports the median of the per-round step ratios; the
`floor` client (a timestamp and an append per read) shows what waking up once per token costs on
the machine, whatever the reader does; `floor-epoll` (one thread, one epoll, at most one wake-up every
`--coalesce-ms`, the kernel's receive time of each read) what waking less often than tokens arrive
would save, and how many reads then hold two tokens of one stream (their ITL lost).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TEXT_TOKEN = b'{"choices":[{"text":"'
EMPTY_TEXT = b'{"choices":[{"text":""'


def mono() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def _timings(tail: bytes) -> dict[str, Any] | None:
    """llama-server's `timings` object from the last bytes of a stream (None where there is none)."""
    at = tail.find(b'"timings":{')
    return json.loads(tail[at + 10:tail.find(b"}", at) + 1]) if at >= 0 else None


def _window_itl(done: list[dict[str, Any]], w0: int, w1: int) -> list[float]:
    """ITL in ms of every pair of consecutive token chunks of a request, both inside [w0, w1]."""
    return [(b - a) / 1e6 for rec in done for a, b in zip(rec["chunk_ns"], rec["chunk_ns"][1:], strict=False)
            if w0 <= a and b <= w1]


def _body(i: int, max_tokens: int) -> bytes:
    return json.dumps({"prompt": f"[{os.getpid()} {i}] tell me about rivers and mountains", "max_tokens": max_tokens,
                       "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
                       "ignore_eos": True, "cache_prompt": False}).encode()


# --------------------------------------------------------------------------------------------
# The minimal raw-socket reader


async def raw_request(host: str, port: int, body: bytes) -> dict[str, Any]:
    """POST over a fresh socket; timestamp every read; count non-empty `text` events in it."""
    start = mono()
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                 b"Connection: close\r\nContent-Length: %d\r\n\r\n" % (host.encode(), len(body)) + body)
    chunk_ns: list[int] = []
    tail = b""
    try:
        await reader.readuntil(b"\r\n\r\n")
        while True:
            data = await reader.read(65536)
            if not data:
                break
            t = mono()
            k = data.count(TEXT_TOKEN) - data.count(EMPTY_TEXT)
            if k:
                chunk_ns.extend([t] * k)
            tail = data
            if b"[DONE]" in data:
                break
    finally:
        writer.close()
    return {"start_ns": start, "end_ns": mono(), "chunk_ns": chunk_ns, "timings": _timings(tail)}


class _FloorProtocol(asyncio.Protocol):
    """The least a reader can do per read: take the timestamp and keep the bytes (parsed after the stream)."""

    def __init__(self, done: asyncio.Future) -> None:
        self.reads: list[tuple[int, bytes]] = []
        self.done = done

    def data_received(self, data: bytes) -> None:
        self.reads.append((mono(), data))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def floor_request(host: str, port: int, body: bytes) -> dict[str, Any]:
    """The floor: one wake-up, one timestamp and one append per read (perflib's loop, a bare Protocol);
    the token events are counted from the kept reads once the server closed the connection."""
    loop = asyncio.get_running_loop()
    start = mono()
    done = loop.create_future()
    transport, proto = await loop.create_connection(lambda: _FloorProtocol(done), host, port)
    transport.write(b"POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                    b"Connection: close\r\nContent-Length: %d\r\n\r\n" % (host.encode(), len(body)) + body)
    await done
    chunk_ns: list[int] = []
    for t, data in proto.reads:
        k = data.count(TEXT_TOKEN) - data.count(EMPTY_TEXT)
        if k:
            chunk_ns.extend([t] * k)
    tail = b"".join(data for _, data in proto.reads[-3:])
    return {"start_ns": start, "end_ns": mono(), "chunk_ns": chunk_ns, "timings": _timings(tail)}


async def perflib_request(client: Any, base_url: str, i: int, max_tokens: int, transport: str) -> dict[str, Any]:
    from perflib import load

    rec = await load.stream_request(client, load.RequestSpec(
        base_url, f"[{os.getpid()} {i}] tell me about rivers and mountains", max_tokens, str(i), batch=0, context=0,
        repeat=0, extra_body={"cache_prompt": False}, transport=transport))
    return {"start_ns": rec.start_ns, "end_ns": rec.end_ns, "chunk_ns": rec.chunk_ns, "timings": rec.timings,
            "error": rec.error}


# --------------------------------------------------------------------------------------------
# A reader that wakes less often than tokens arrive (benchmark only)

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


def epoll_child(base_url: str, concurrency: int, warmup: float, duration: float, max_tokens: int,
                coalesce_ms: float) -> dict[str, Any]:
    """`floor-epoll`: what waking less often than tokens arrive would save. One thread, one epoll over N
    raw sockets, at most one wake-up every `coalesce_ms` (a sleep after each), one `recvmsg` per ready
    socket with the kernel's receive time of the data (SO_TIMESTAMPNS, CLOCK_REALTIME moved to
    CLOCK_MONOTONIC by the offset read at that wake-up) instead of the time of the read. It counts the
    reads that held more than one token event of a stream: their tokens arrived within one sleep and
    share one time, so their ITL is lost (why this is not a design for perflib's client)."""
    host, port = base_url.split("//")[1].split(":")
    ep = select.epoll()
    live: dict[int, tuple[socket.socket, dict[str, Any], list[bytes]]] = {}
    done: list[dict[str, Any]] = []
    counter = [0]
    merged = [0]

    def start() -> None:
        counter[0] += 1
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        body = _body(counter[0], max_tokens)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\nContent-Length: %d\r\n\r\n" % (host.encode(), len(body)) + body)
        sock.setblocking(False)
        ep.register(sock.fileno(), select.EPOLLIN)
        live[sock.fileno()] = (sock, {"start_ns": mono(), "chunk_ns": [], "timings": None}, [])

    from perflib import metrics

    before = metrics.scrape(base_url)
    t_before = mono()
    for _ in range(concurrency):
        start()
    w0 = mono() + int(warmup * 1e9)
    w1 = w0 + int(duration * 1e9)
    cpu0 = cpu1 = None
    while True:
        now = mono()
        if cpu0 is None and now >= w0:
            cpu0 = time.process_time()
        if now >= w1:
            cpu1 = time.process_time()
            break
        events = ep.poll(1.0)
        offset = time.clock_gettime_ns(time.CLOCK_REALTIME) - mono()
        for fd, _ in events:
            sock, rec, tail = live[fd]
            try:
                data, ancillary, _, _ = sock.recvmsg(65536, 64)
            except BlockingIOError:
                continue
            if not data:
                ep.unregister(fd)
                sock.close()
                del live[fd]
                rec["timings"] = _timings(b"".join(tail))
                rec["end_ns"] = mono()
                done.append(rec)
                start()
                continue
            t = mono()
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("qq", value[:16])
                    t = sec * 1_000_000_000 + nsec - offset
            k = data.count(TEXT_TOKEN) - data.count(EMPTY_TEXT)
            if k:
                rec["chunk_ns"].extend([t] * k)
                merged[0] += k > 1
            tail[:] = (tail + [data])[-3:]
        if coalesce_ms:
            time.sleep(coalesce_ms / 1e3)
    for sock, rec, _ in live.values():  # the ones in flight: their tokens in the window count
        sock.close()
        rec["end_ns"] = mono()
        done.append(rec)
    after = metrics.scrape(base_url)
    chunks = [t for rec in done for t in rec["chunk_ns"] if w0 <= t <= w1]
    completed = [rec for rec in done if rec["timings"] and t_before <= rec["end_ns"]]
    delta = metrics.diff(before, after, requests=len(completed)).to_dict()
    itl = _window_itl(done, w0, w1)
    return {
        "client": "floor-epoll", "event_loop": f"epoll, {coalesce_ms:g} ms", "concurrency": concurrency,
        "window_s": (w1 - w0) / 1e9, "cpu_s": cpu1 - cpu0, "tokens": len(chunks),
        "cpu_us_per_token": (cpu1 - cpu0) * 1e6 / len(chunks) if chunks else None,
        "client_itl_median_ms": statistics.median(itl) if itl else None,
        "server_step_ms_counters": delta.get("decode_step_ms"), "server_step_ms_timings": None,
        "occupancy": delta.get("occupancy"), "requests_completed": len(completed), "errors": 0, "first_error": None,
        "coalesce_ms": coalesce_ms, "reads_with_several_tokens": merged[0],
    }


# --------------------------------------------------------------------------------------------
# One client, one concurrency (child process)


async def _one(kind: str, client: Any, base_url: str, i: int, max_tokens: int) -> dict[str, Any]:
    """One streamed request by client `kind`."""
    host, port = base_url.split("//")[1].split(":")
    if kind in ("raw", "raw-uvloop"):
        return await raw_request(host, int(port), _body(i, max_tokens))
    if kind in ("floor", "floor-asyncio"):
        return await floor_request(host, int(port), _body(i, max_tokens))
    transport = "httpx" if kind == "perflib-httpx" else "raw"
    return await perflib_request(client, base_url, i, max_tokens, transport)


async def lockstep_child(kind: str, base_url: str, concurrency: int, batches: int, max_tokens: int) -> dict[str, Any]:
    """`batches` batches of N requests started together, each waited for whole, after one warm-up batch:
    every batch asks the server for the same work (N prefills of distinct prompts of one length, then N
    streams decoding `max_tokens` in lockstep), so the server step under two clients differs only by
    what the clients do to it and by the machine's noise, not by where a window falls in a closed
    loop's cycle of context lengths. Step from the counters between a scrape after the warm-up batch
    and one after the last; per batch too, for the spread."""
    import httpx

    from perflib import load, metrics

    loop_name = type(asyncio.get_running_loop()).__module__.split(".")[0]
    scrape_client = httpx.Client(trust_env=False)
    steps, tokens, cpu, errors, counter = [], 0, 0.0, [], 0
    first = last = None
    async with load.http_client(600.0) as client:
        for b in range(batches + 1):
            before = await asyncio.to_thread(metrics.scrape, base_url, client=scrape_client)
            c0 = time.process_time()
            recs = await asyncio.gather(*(_one(kind, client, base_url, counter + i, max_tokens)
                                          for i in range(concurrency)))
            c1 = time.process_time()
            counter += concurrency
            after = await asyncio.to_thread(metrics.scrape, base_url, client=scrape_client)
            errors += [r.get("error") for r in recs if r.get("error")]
            if b == 0:
                first = after
                continue
            last = after
            steps.append(metrics.diff(before, after, requests=concurrency).to_dict().get("decode_step_ms"))
            tokens += sum(len(r["chunk_ns"]) for r in recs)
            cpu += c1 - c0
    whole = metrics.diff(first, last, requests=concurrency * batches).to_dict()
    return {
        "client": kind, "event_loop": loop_name, "concurrency": concurrency, "mode": "lockstep", "batches": batches,
        "cpu_s": cpu, "tokens": tokens, "cpu_us_per_token": cpu * 1e6 / tokens if tokens else None,
        "client_itl_median_ms": None, "server_step_ms_counters": whole.get("decode_step_ms"),
        "server_step_ms_per_batch": steps, "server_step_ms_timings": None, "occupancy": whole.get("occupancy"),
        "requests_completed": concurrency * batches, "errors": len(errors), "first_error": errors[0] if errors else None,
    }


async def child(kind: str, base_url: str, concurrency: int, warmup: float, duration: float,
                max_tokens: int) -> dict[str, Any]:
    import httpx

    from perflib import load, metrics

    loop_name = type(asyncio.get_running_loop()).__module__.split(".")[0]
    done: list[dict[str, Any]] = []
    counter = [0]
    stop = asyncio.Event()

    async with load.http_client(600.0) as client:
        async def worker() -> None:
            while not stop.is_set():
                counter[0] += 1
                done.append(await _one(kind, client, base_url, counter[0], max_tokens))

        scrape_client = httpx.Client(trust_env=False)
        t_before = mono()
        before = await asyncio.to_thread(metrics.scrape, base_url, client=scrape_client)
        tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
        await asyncio.sleep(warmup)
        w0, cpu0, ru0 = mono(), time.process_time(), os.times()
        await asyncio.sleep(duration)
        w1, cpu1, ru1 = mono(), time.process_time(), os.times()
        stop.set()  # no new requests; the ones in flight finish, so their chunks in the window count
        await asyncio.gather(*tasks, return_exceptions=True)
        after = await asyncio.to_thread(metrics.scrape, base_url, client=scrape_client)
        t_after = mono()

    chunks = [t for rec in done for t in rec["chunk_ns"] if w0 <= t <= w1]
    itl = _window_itl(done, w0, w1)
    # the scrapes bracket the whole run, so every request's tokens are in the counter deltas
    completed = [rec for rec in done if rec["timings"] and t_before <= rec["end_ns"] <= t_after]
    delta = metrics.diff(before, after, requests=len(completed)).to_dict()
    timed = [rec["timings"] for rec in completed]
    intervals = sum(t["predicted_n"] - 1 for t in timed)
    errors = [rec.get("error") for rec in done if rec.get("error")]
    return {
        "client": kind, "event_loop": loop_name, "concurrency": concurrency, "window_s": (w1 - w0) / 1e9, "cpu_s": cpu1 - cpu0,
        "user_s": ru1.user - ru0.user, "sys_s": ru1.system - ru0.system,
        "tokens": len(chunks), "cpu_us_per_token": (cpu1 - cpu0) * 1e6 / len(chunks) if chunks else None,
        "client_itl_median_ms": statistics.median(itl) if itl else None,
        "server_step_ms_counters": delta.get("decode_step_ms"),
        "server_step_ms_timings": sum(t["predicted_ms"] for t in timed) / intervals if intervals else None,
        "occupancy": delta.get("occupancy"), "requests_completed": len(completed), "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


# --------------------------------------------------------------------------------------------
# The client's ceiling: a local token source that streams as fast as it can


def _frame(payload: bytes) -> bytes:
    event = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


TOKEN_FRAME = _frame(b'{"choices":[{"text":" tok","index":0,"logprobs":null,"finish_reason":null}],"created":1,'
                     b'"model":"source","object":"text_completion","id":"chatcmpl-source"}')


class _TokenSource(asyncio.Protocol):
    """One connection of the token source: read the POST, stream `max_tokens` llama-server-shaped token
    chunks (one write each, as a server that flushes every token does), then usage, [DONE], close."""

    def connection_made(self, transport: Any) -> None:
        self.transport, self.buf = transport, b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        length = int(self.buf[:end].lower().split(b"content-length:")[1].split(b"\r\n")[0])
        if len(self.buf) < end + 4 + length:
            return
        body = json.loads(self.buf[end + 4:end + 4 + length])
        asyncio.get_running_loop().create_task(self.stream(int(body["max_tokens"])))

    async def stream(self, n: int) -> None:
        t = self.transport
        t.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                b"Connection: close\r\n\r\n")
        for i in range(n):
            t.write(TOKEN_FRAME)
            if i % 8 == 7:
                await asyncio.sleep(0)  # let the other streams write too
                if t.get_write_buffer_size() > 1 << 16:
                    await asyncio.sleep(0.0005)  # the client is behind: do not buffer without bound
        usage = {"completion_tokens": n, "prompt_tokens": 1, "total_tokens": n + 1}
        t.write(_frame(json.dumps({"choices": [{"text": "", "index": 0, "finish_reason": "length"}],
                                   "usage": usage, "id": "chatcmpl-source"}).encode()))
        t.write(_frame(b"[DONE]") + b"0\r\n\r\n")
        t.close()


def serve_tokens(port: int) -> None:
    """One token source process: listen on `port` (SO_REUSEPORT, so several processes share it and the
    kernel spreads connections over them), print `ready`, serve until killed."""
    from perflib import load

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_TokenSource, "127.0.0.1", port, backlog=1024,
                                                                reuse_port=True)
        print("ready", flush=True)
        await server.serve_forever()

    load.run_async(main())


def ceiling(base_url: str, streams: int, workers: int, max_tokens: int) -> dict[str, Any]:
    """Streamed tokens/s that perflib's client sustains from `workers` processes against the token
    source: one level's wave (`perflib.load.workers`, or this process for 1), its records written to
    a run folder's requests.jsonl; CPU of this process and its workers per token."""
    import resource
    import tempfile

    from perflib import load, rundir, safeinput
    from perflib.load import workers as worker_pool
    from perflib.load.request import RequestSpec
    from perflib.load.stream import stream_request

    out = Path(tempfile.mkdtemp(prefix="perflib-ceiling-"))
    sink = rundir.RunWriter(out)
    clocks: dict[str, int] = {}

    def spec(i: int) -> RequestSpec:
        return RequestSpec(base_url, f"p{i}", max_tokens, str(i), batch=streams, context=1, repeat=1, prompt_tokens=1,
                           timeout=600.0)

    def go() -> None:
        clocks["start"] = mono()

    async def one_process() -> list[Any]:
        go()

        async def one(i: int) -> Any:
            rec = await stream_request(None, spec(i))
            sink.request(rec)
            return rec

        return list(await asyncio.gather(*(one(i) for i in range(streams))))

    async def in_workers() -> list[Any]:
        jobs = [[spec(i) for i in share] for share in worker_pool.split(streams, workers)]
        return await worker_pool.run_wave(jobs, sink.request, go)

    r0, c0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    records = load.run_async(one_process() if workers == 1 else in_workers())
    end = mono()
    r1, c1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = sum(b - a for a, b in ((r0.ru_utime, r1.ru_utime), (r0.ru_stime, r1.ru_stime),
                                 (c0.ru_utime, c1.ru_utime), (c0.ru_stime, c1.ru_stime)))
    tokens = sum(len(r.chunk_ns) for r in records)
    first = min(r.first_token_ns for r in records if r.first_token_ns)
    last = max(r.last_token_ns for r in records if r.last_token_ns)
    written = len(safeinput.read_jsonl(out / rundir.REQUESTS))
    return {"workers": workers, "streams": streams, "max_tokens": max_tokens, "tokens": tokens,
            "failed": sum(1 for r in records if not r.ok), "records_in_file": written,
            "tokens_per_s": tokens * 1e9 / (last - first), "level_s": (end - clocks["start"]) / 1e9,
            "client_cpu_s": cpu, "cpu_us_per_token": cpu * 1e6 / tokens if tokens else None}


# --------------------------------------------------------------------------------------------
# Driver


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="1,4,16,64")
    parser.add_argument("--clients", default="perflib,perflib-httpx,raw",
                        help="perflib (its default reader and loop), perflib-httpx (its httpx transport), raw (a "
                             "minimal raw-socket reader on stdlib asyncio), floor (a timestamp and an append per read "
                             "on perflib's loop: the least a reader can cost); raw-uvloop and floor-asyncio: those two on the other "
                             "loop, which tells the reader's effect on the server's step from its loop's; floor-epoll: "
                             "a reader that wakes at most every --coalesce-ms and takes the kernel's receive times")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure every client this many times at each N, the order reversed every other "
                             "round; the server step of perflib against raw is then a median of paired ratios")
    parser.add_argument("--warmup", type=float, default=3.0, help="s before the window (prefills, ramp-up)")
    parser.add_argument("--duration", type=float, default=10.0, help="window length in s")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--coalesce-ms", type=float, default=20.0,
                        help="floor-epoll: the least time between its wake-ups (default 20 ms)")
    parser.add_argument("--lockstep", type=int, default=0, metavar="B",
                        help="instead of a closed loop over a time window: B batches of N requests started "
                             "together (after one warm-up batch), each waited for whole; every batch asks the "
                             "server for the same work, so paired rounds compare the step without the closed "
                             "loop's drift of context lengths")
    parser.add_argument("--ceiling-workers", default="",
                        help="also measure the client's ceiling against a local token source, with each of "
                             "these worker counts, e.g. 1,2 (off by default)")
    parser.add_argument("--ceiling-streams", type=int, default=64)
    parser.add_argument("--ceiling-tokens", type=int, default=2000, help="tokens per stream of the ceiling")
    parser.add_argument("--skip-server", action="store_true", help="only the ceiling, no llama-server")
    parser.add_argument("--ceiling-sources", type=int, default=1, help="token source processes (one port)")
    parser.add_argument("--serve-tokens", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.lockstep and "floor-epoll" in args.clients.split(","):
        parser.error("--lockstep: floor-epoll runs only as a closed loop over a time window")
    if args.serve_tokens:
        serve_tokens(args.serve_tokens)
        return 0
    if args.child:
        from perflib import load

        if args.child == "floor-epoll":
            print(json.dumps(epoll_child(args.base_url, int(args.concurrency), args.warmup, args.duration,
                                         args.max_tokens, args.coalesce_ms)))
            return 0
        coro = (lockstep_child(args.child, args.base_url, int(args.concurrency), args.lockstep, args.max_tokens)
                if args.lockstep else
                child(args.child, args.base_url, int(args.concurrency), args.warmup, args.duration, args.max_tokens))
        # perflib's client runs on perflib's loop (uvloop when installed); the minimal reader on stdlib asyncio;
        # raw-uvloop and floor-asyncio swap the loop, to tell the reader's effect from the loop's
        result = load.run_async(coro) if args.child in UVLOOP_CLIENTS else asyncio.run(coro)
        print(json.dumps(result))
        return 0

    import compileall

    # perflib's bytecode, as an installed package has it (with PYTHONDONTWRITEBYTECODE set, as on the
    # development machine, the editable checkout has none and every process would compile perflib again)
    compileall.compile_dir(str(REPO / "perflib"), quiet=1)
    results = [] if args.skip_server else llama_rows(args)
    ceilings = ceiling_rows(args) if args.ceiling_workers else []
    if args.out:
        Path(args.out).write_text(json.dumps({**({"results": results, "paired": PAIRED} if results else {}),
                                              "ceiling": ceilings, "rounds": args.rounds,
                                              "max_tokens": args.max_tokens, "lockstep_batches": args.lockstep,
                                              "window_s": args.duration,
                                              "warmup_s": args.warmup, "server_flags": SERVER_FLAGS,
                                              "method": METHOD, "ceiling_method": CEILING_METHOD,
                                              "ceiling_sources": args.ceiling_sources,
                                              "cpus": os.cpu_count()}, indent=2))
    return 0


SERVER_FLAGS: list[str] = []
METHOD = ""
UVLOOP_CLIENTS = ("perflib", "perflib-httpx", "floor", "raw-uvloop")
"""The clients run on perflib's loop (uvloop where installed); the others on stdlib asyncio."""
CEILING_METHOD = ("N streams of T tokens from a local token source (a uvloop process of this script writing "
                  "llama-server-shaped chunks as fast as it can, one write per token) read by perflib's client "
                  "from W worker processes (perflib.load.workers; W=1: one process, no workers) with records "
                  "written to one requests.jsonl; tokens/s = token chunks / (last token - first token); CPU = "
                  "user+sys of the client and its workers (getrusage SELF + CHILDREN) / token chunks")


def _f(value: Any, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def llama_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Each client at each N against the local llama-server, in its own child process; prints the table."""
    global METHOD
    from tabulate import tabulate

    from perflib import server

    levels = [int(x) for x in args.concurrency.split(",")]
    parallel = max(levels)
    # the server's log is a by-product, kept out of the checkout (it once was committed by mistake)
    log_path = Path(tempfile.gettempdir()) / "perflib-client_overhead-server.log"
    print(f"llama-server log: {log_path}", file=sys.stderr)
    # a SIGTERM (`timeout`, a job scheduler) unwinds like Ctrl-C, so that the server is stopped, not left behind
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    handle = server.start_llama_server(server.ensure_test_model(), parallel=parallel,
                                       ctx_size=parallel * (64 + args.max_tokens + 64), threads=1,
                                       log_path=log_path)
    SERVER_FLAGS[:] = handle.flags
    results = []
    try:
        for n, rnd, kind in _schedule(levels, args.clients.split(","), args.rounds):
            cmd = [sys.executable, __file__, "--child", kind, "--base-url", handle.base_url,
                   "--concurrency", str(n), "--warmup", str(args.warmup), "--duration", str(args.duration),
                   "--max-tokens", str(args.max_tokens), "--lockstep", str(args.lockstep),
                   "--coalesce-ms", str(args.coalesce_ms)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise SystemExit(f"child {kind} N={n} failed:\n{proc.stderr[-2000:]}")
            row = {**json.loads(proc.stdout.strip().splitlines()[-1]), "round": rnd}
            results.append(row)
            if args.out:  # what is measured so far survives a stop or a crash; the final write replaces it
                Path(args.out).write_text(json.dumps({"results": results, "partial": True}, indent=2))
            print(f"N={n:>2} round {rnd} {kind:>7}: {row['cpu_us_per_token']} us/token, {row['tokens']} tokens, "
                  f"{row['errors']} failed requests ({row['first_error']})", file=sys.stderr)
    finally:
        handle.stop()

    f = _f
    table = [[r["concurrency"], r["round"], f"{r['client']} ({r['event_loop']})", r["tokens"], f(r["cpu_s"], "{:.3f}"),
              f(r["cpu_us_per_token"], "{:.1f}"), f(r["client_itl_median_ms"], "{:.2f}"),
              f(r["server_step_ms_counters"], "{:.2f}"), f(r["server_step_ms_timings"], "{:.2f}"),
              f(r["occupancy"], "{:.2f}"), r["errors"]] for r in results]
    print(tabulate(table, headers=["N", "round", "client", "tokens in window", "client CPU (s)", "CPU per token (us)",
                                   "client ITL median (ms)", "server step, counters (ms)",
                                   "server step, timings (ms)", "occupancy (slots/step)", "failed requests"],
                   disable_numparse=True))
    shape = (f"{args.lockstep} lockstep batches of N requests started together, after one warm-up batch, "
             f"{args.max_tokens} tokens each, /v1/completions, ignore_eos; CPU = time.process_time() of the client's "
             "own process over the batches / token chunks of the batches; server step: counters between a scrape "
             "after the warm-up batch and one after the last, "
             if args.lockstep else
             f"closed loop of N streams per client, {args.max_tokens} tokens each, /v1/completions, ignore_eos; "
             f"window {args.duration:.0f} s after {args.warmup:.0f} s warm-up; CPU = time.process_time() of the "
             "client's own process over the window (user+sys, all threads) / token-carrying chunks in the window; "
             "server step: whole run, ")
    METHOD = (shape + "counters = 1000*dtokens_predicted_seconds/(dtokens_predicted - requests), "
              "timings = sum predicted_ms / sum (n-1); client ITL median over chunks in the window; server: "
              f"llama-server --parallel {parallel} -t 1, random-weight {server.ensure_test_model().name}; goals for "
              "perflib: <= 25 us/token at N=64, server step within 1% of the step under the raw reader")
    print("\n" + METHOD)
    PAIRED[:] = paired_steps(results)
    for p in PAIRED:
        print(f"N={p['concurrency']}: {p['client']} per token {p['cpu_us_per_token_median']:.1f} us (median of "
              f"{p['rounds']}); server step / under raw, per round: "
              + ", ".join(f"{x:.4f}" for x in p["step_ratios"])
              + f"; median {p['step_ratio_median']:.4f} ({100 * (p['step_ratio_median'] - 1):+.2f}%)")
    return results


PAIRED: list[dict[str, Any]] = []


def _schedule(levels: list[int], clients: list[str], rounds: int) -> list[tuple[int, int, str]]:
    """(N, round, client) in the order run: every client once per round, the order reversed every other
    round (ABBA), so that a drift of the machine's load weighs on each client alike."""
    return [(n, r, kind) for n in levels for r in range(1, rounds + 1)
            for kind in (clients if r % 2 else clients[::-1])]


def paired_steps(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per N and client other than raw: the server step (counters) under it / under raw in the same round,
    per round and their median; and the client's CPU per token, median over rounds."""
    out = []
    for n in sorted({r["concurrency"] for r in results}):
        at = [r for r in results if r["concurrency"] == n]
        raw = {r["round"]: r["server_step_ms_counters"] for r in at if r["client"] == "raw"}
        for kind in dict.fromkeys(r["client"] for r in at if r["client"] != "raw"):
            rows = [r for r in at if r["client"] == kind]
            ratios = [r["server_step_ms_counters"] / raw[r["round"]] for r in rows
                      if r["server_step_ms_counters"] and raw.get(r["round"])]
            cpu = [r["cpu_us_per_token"] for r in rows if r["cpu_us_per_token"] is not None]
            if ratios and cpu:
                out.append({"concurrency": n, "client": kind, "rounds": len(rows), "step_ratios": ratios,
                            "step_ratio_median": statistics.median(ratios),
                            "cpu_us_per_token_median": statistics.median(cpu)})
    return out


def ceiling_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The client's ceiling at each worker count against the token source; prints the table."""
    from tabulate import tabulate

    from perflib.server import free_port

    port = free_port()
    sources = [subprocess.Popen([sys.executable, __file__, "--serve-tokens", str(port)], stdout=subprocess.PIPE,
                                text=True) for _ in range(args.ceiling_sources)]
    base_url = f"http://127.0.0.1:{port}"
    rows = []
    try:
        for source in sources:
            assert source.stdout is not None and source.stdout.readline().strip() == "ready"
        for w in (int(x) for x in args.ceiling_workers.split(",")):
            row = ceiling(base_url, args.ceiling_streams, w, args.ceiling_tokens)
            rows.append(row)
            print(f"ceiling W={w}: {row['tokens_per_s']:.0f} tokens/s, {row['cpu_us_per_token']:.1f} us/token, "
                  f"{row['failed']} failed", file=sys.stderr)
    finally:
        for source in sources:
            source.kill()
            source.wait()
    print(tabulate([[r["workers"], r["streams"], r["max_tokens"], r["tokens"], r["records_in_file"], r["failed"],
                     f"{r['tokens_per_s']:.0f}", f"{r['level_s']:.2f}", _f(r["cpu_us_per_token"], "{:.1f}")]
                    for r in rows],
                   headers=["workers", "streams", "tokens each", "tokens", "records in file", "failed",
                            "tokens/s", "level (s)", "client CPU per token (us)"], disable_numparse=True))
    print(f"\n{CEILING_METHOD}; {args.ceiling_sources} token source process(es); {os.cpu_count()} CPUs here, "
          "shared by the client and the source")
    return rows


if __name__ == "__main__":
    sys.exit(main())
