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
per token; perflib's goal is ≤ 50 µs at N = 64.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TEXT_TOKEN = b'{"choices":[{"text":"'
EMPTY_TEXT = b'{"choices":[{"text":""'


def mono() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


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
    timings = None
    at = tail.find(b'"timings":{')
    if at >= 0:
        end = tail.find(b"}", at)
        timings = json.loads(tail[at + 10:end + 1])
    return {"start_ns": start, "end_ns": mono(), "chunk_ns": chunk_ns, "timings": timings}


async def perflib_request(client: Any, base_url: str, i: int, max_tokens: int, transport: str) -> dict[str, Any]:
    from perflib import load

    rec = await load.stream_request(client, base_url, endpoint="completions",
                                    prompt=f"[{os.getpid()} {i}] tell me about rivers and mountains",
                                    max_tokens=max_tokens, request_id=str(i), batch=0, context=0, repeat=0,
                                    extra_body={"cache_prompt": False}, transport=transport)
    return {"start_ns": rec.start_ns, "end_ns": rec.end_ns, "chunk_ns": rec.chunk_ns, "timings": rec.timings,
            "error": rec.error}


# --------------------------------------------------------------------------------------------
# One client, one concurrency (child process)


async def child(kind: str, base_url: str, concurrency: int, warmup: float, duration: float,
                max_tokens: int) -> dict[str, Any]:
    import httpx

    from perflib import load, metrics

    loop_name = type(asyncio.get_running_loop()).__module__.split(".")[0]
    host, port = base_url.split("//")[1].split(":")
    done: list[dict[str, Any]] = []
    counter = [0]
    stop = asyncio.Event()

    async with load.http_client(600.0) as client:
        async def worker() -> None:
            while not stop.is_set():
                counter[0] += 1
                if kind == "raw":
                    rec = await raw_request(host, int(port), _body(counter[0], max_tokens))
                else:
                    transport = "httpx" if kind == "perflib-httpx" else "raw"
                    rec = await perflib_request(client, base_url, counter[0], max_tokens, transport)
                done.append(rec)

        scrape_client = httpx.Client(trust_env=False)
        t_before = mono()
        before = await asyncio.to_thread(metrics.scrape, base_url, client=scrape_client)
        tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
        await asyncio.sleep(warmup)
        w0, cpu0 = mono(), time.process_time()
        await asyncio.sleep(duration)
        w1, cpu1 = mono(), time.process_time()
        stop.set()  # no new requests; the ones in flight finish, so their chunks in the window count
        await asyncio.gather(*tasks, return_exceptions=True)
        after = await asyncio.to_thread(metrics.scrape, base_url, client=scrape_client)
        t_after = mono()

    chunks = [t for rec in done for t in rec["chunk_ns"] if w0 <= t <= w1]
    itl = [(b - a) / 1e6 for rec in done for a, b in zip(rec["chunk_ns"], rec["chunk_ns"][1:], strict=False)
           if w0 <= a and b <= w1]
    # the scrapes bracket the whole run, so every request's tokens are in the counter deltas
    completed = [rec for rec in done if rec["timings"] and t_before <= rec["end_ns"] <= t_after]
    delta = metrics.diff(before, after, requests=len(completed)).to_dict()
    timed = [rec["timings"] for rec in completed]
    intervals = sum(t["predicted_n"] - 1 for t in timed)
    errors = [rec.get("error") for rec in done if rec.get("error")]
    return {
        "client": kind, "event_loop": loop_name, "concurrency": concurrency, "window_s": (w1 - w0) / 1e9, "cpu_s": cpu1 - cpu0,
        "tokens": len(chunks), "cpu_us_per_token": (cpu1 - cpu0) * 1e6 / len(chunks) if chunks else None,
        "client_itl_median_ms": statistics.median(itl) if itl else None,
        "server_step_ms_counters": delta.get("decode_step_ms"),
        "server_step_ms_timings": sum(t["predicted_ms"] for t in timed) / intervals if intervals else None,
        "occupancy": delta.get("occupancy"), "requests_completed": len(completed), "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


# --------------------------------------------------------------------------------------------
# Driver


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="1,4,16,64")
    parser.add_argument("--clients", default="perflib,perflib-httpx,raw",
                        help="perflib (its default reader and loop), perflib-httpx (its httpx transport), raw")
    parser.add_argument("--warmup", type=float, default=3.0, help="s before the window (prefills, ramp-up)")
    parser.add_argument("--duration", type=float, default=10.0, help="window length in s")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        from perflib import load

        coro = child(args.child, args.base_url, int(args.concurrency), args.warmup, args.duration, args.max_tokens)
        # perflib's client runs on perflib's loop (uvloop when installed); the minimal reader on stdlib asyncio
        result = load.run_async(coro) if args.child.startswith("perflib") else asyncio.run(coro)
        print(json.dumps(result))
        return 0

    from tabulate import tabulate

    from perflib import server

    levels = [int(x) for x in args.concurrency.split(",")]
    parallel = max(levels)
    out_dir = Path(args.out).resolve().parent if args.out else Path.cwd()
    handle = server.start_llama_server(server.ensure_test_model(), parallel=parallel,
                                       ctx_size=parallel * (64 + args.max_tokens + 64), threads=1,
                                       log_path=out_dir / "client_overhead_server.log")
    results = []
    try:
        for n in levels:
            for kind in args.clients.split(","):
                cmd = [sys.executable, __file__, "--child", kind, "--base-url", handle.base_url,
                       "--concurrency", str(n), "--warmup", str(args.warmup), "--duration", str(args.duration),
                       "--max-tokens", str(args.max_tokens)]
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    raise SystemExit(f"child {kind} N={n} failed:\n{proc.stderr[-2000:]}")
                row = json.loads(proc.stdout.strip().splitlines()[-1])
                results.append(row)
                print(f"N={n:>2} {kind:>7}: {row['cpu_us_per_token']} us/token, {row['tokens']} tokens, "
                      f"{row['errors']} failed requests ({row['first_error']})", file=sys.stderr)
    finally:
        handle.stop()

    def f(value: Any, fmt: str) -> str:
        return "n/a" if value is None else fmt.format(value)

    table = [[r["concurrency"], f"{r['client']} ({r['event_loop']})", r["tokens"], f(r["cpu_s"], "{:.3f}"), f(r["cpu_us_per_token"], "{:.1f}"),
              f(r["client_itl_median_ms"], "{:.2f}"), f(r["server_step_ms_counters"], "{:.2f}"),
              f(r["server_step_ms_timings"], "{:.2f}"), f(r["occupancy"], "{:.2f}"), r["errors"]] for r in results]
    print(tabulate(table, headers=["N", "client", "tokens in window", "client CPU (s)", "CPU per token (us)",
                                   "client ITL median (ms)", "server step, counters (ms)",
                                   "server step, timings (ms)", "occupancy (slots/step)", "failed requests"],
                   disable_numparse=True))
    method = (f"closed loop of N streams per client, {args.max_tokens} tokens each, /v1/completions, ignore_eos; "
          f"window {args.duration:.0f} s after {args.warmup:.0f} s warm-up; CPU = time.process_time() of the "
          "client's own process over the window (user+sys, all threads) / token-carrying chunks in the window; "
          "server step: whole run, counters = 1000*dtokens_predicted_seconds/(dtokens_predicted - requests), "
          "timings = sum predicted_ms / sum (n-1); client ITL median over chunks in the window; server: llama-server --parallel "
          f"{parallel} -t 1, random-weight {server.ensure_test_model().name}; goal for perflib: <= 50 us/token at N=64")
    print("\n" + method)
    if args.out:
        Path(args.out).write_text(json.dumps({"results": results, "max_tokens": args.max_tokens,
                                              "window_s": args.duration, "warmup_s": args.warmup,
                                              "server_flags": handle.flags, "method": method}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
