"""A level's streams spread over worker processes, for servers faster than one client process.

One Python process reads a few thousand streamed tokens per second per core (benchmarks/
client_overhead.py). `run_wave` sends a level's N requests from W worker processes instead: the
parent keeps everything that defines the level (prompts, warm-up, `/metrics` before and after,
gauges, the level's start and end clocks) and the workers only send requests and time chunks.

- Timestamps stay on one clock: every worker times with CLOCK_MONOTONIC, which all processes of
  a Linux host share, so records from different workers compare directly with each other and with
  the parent's `clocks.start`/`clocks.end`.
- Records stay in one file: each worker writes every finished request as one JSON line to its
  stdout; the parent turns it back into a `RequestRecord` and hands it to the level's sink (the run
  folder's `requests.jsonl`) the moment it arrives, as in one process.
- The workers start, import and report ready before the parent reads `clocks.start` and tells them
  to go, so process start-up is never inside the level.

The worker is `python -m perflib.load.workers`: one JSON job (its `RequestSpec`s) on stdin, `ready` on
stdout, then the line `go` on stdin; it then streams its share and writes one `{"record": ...}` line per
request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from perflib.errors import PerflibError
from perflib.load import tls
from perflib.load.loop import run_async
from perflib.load.request import RequestRecord, RequestSpec
from perflib.load.stream import stream_request

READY = b"ready\n"
GO = b"go\n"
START_TIMEOUT_S = 60.0
"""How long a worker may take to start and import before the level gives up on it."""


def split(count: int, workers: int) -> list[list[int]]:
    """Request indices 0..count-1 dealt round-robin to at most `workers` non-empty shares."""
    workers = max(1, min(workers, count))
    return [list(range(w, count, workers)) for w in range(workers)]


def _record(data: dict[str, Any]) -> RequestRecord:
    return RequestRecord(**data)


class WorkerFailed(PerflibError):
    """A worker process could not start, or died before it reported all of its requests."""


async def _start(job: Sequence[RequestSpec], env: dict[str, str]) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "perflib.load.workers", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, limit=1 << 24)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps([spec.to_dict() for spec in job]).encode() + b"\n")
    await proc.stdin.drain()
    return proc


async def _stderr_tail(proc: asyncio.subprocess.Process) -> str:
    """The last line a worker wrote to stderr (a traceback's exception), for a one-line error."""
    if proc.stderr is None:
        return ""
    with contextlib.suppress(Exception):
        data = await asyncio.wait_for(proc.stderr.read(), 5.0)
        lines = data.decode("utf-8", "replace").strip().splitlines()
        return lines[-1][:300] if lines else ""
    return ""


async def run_wave(jobs: Sequence[Sequence[RequestSpec]], on_record: Callable[[RequestRecord], None],
                   on_go: Callable[[], None]) -> list[RequestRecord]:
    """Start one worker per job, wait until every one is ready, call `on_go` (the level's start
    clock), let them go, and hand each record to `on_record` as it arrives; returns all records.

    Raises `WorkerFailed` when a worker cannot start or ends without reporting all of its requests
    (the records already handed on stay handed on). Cancelling (Ctrl-C) kills the workers.
    """
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    procs: list[asyncio.subprocess.Process] = []
    try:
        for job in jobs:
            procs.append(await _start(job, env))
        for proc in procs:
            assert proc.stdout is not None
            try:
                line = await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT_S)
            except TimeoutError:
                line = b""
            if line != READY:
                raise WorkerFailed(f"a load worker did not start ({line[:200]!r}): {await _stderr_tail(proc)}")
        on_go()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(GO)
        await asyncio.gather(*(p.stdin.drain() for p in procs if p.stdin is not None))
        shares = await asyncio.gather(*(_read_records(p, len(job), on_record)
                                        for p, job in zip(procs, jobs, strict=True)))
        return [rec for share in shares for rec in share]
    finally:
        for proc in procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(proc.wait(), 5.0)


async def _read_records(proc: asyncio.subprocess.Process, expected: int,
                        on_record: Callable[[RequestRecord], None]) -> list[RequestRecord]:
    assert proc.stdout is not None
    records: list[RequestRecord] = []
    while len(records) < expected:
        line = await proc.stdout.readline()
        if not line:
            raise WorkerFailed(f"a load worker ended after {len(records)} of {expected} requests: "
                               f"{await _stderr_tail(proc) or 'no message'}")
        rec = _record(json.loads(line)["record"])
        records.append(rec)
        on_record(rec)
    await proc.wait()
    return records


async def _serve(job: Sequence[RequestSpec], stdin: asyncio.StreamReader, write: Callable[[bytes], None]) -> None:
    """The worker's side: wait for `go`, then send every request of the job at once."""
    client = None
    if job and not job[0].base_url.startswith("http://"):  # https goes through httpx, as in one process
        client = httpx.AsyncClient(limits=httpx.Limits(max_connections=None, max_keepalive_connections=0),
                                   timeout=httpx.Timeout(job[0].timeout, connect=10.0), trust_env=False,
                                   verify=tls.context())
    write(READY)
    if await stdin.readline() != GO:
        return

    async def one(spec: RequestSpec) -> None:
        rec = await stream_request(client, spec)
        write(json.dumps({"record": rec.to_dict()}).encode() + b"\n")

    try:
        await asyncio.gather(*(one(spec) for spec in job))
    finally:
        if client is not None:
            await client.aclose()


def main() -> int:
    """Entry point of one worker process (`python -m perflib.load.workers`)."""
    job = [RequestSpec.from_dict(spec) for spec in json.loads(sys.stdin.buffer.readline())]
    out = sys.stdout.buffer

    def write(data: bytes) -> None:
        out.write(data)
        out.flush()

    async def run() -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        await _serve(job, reader, write)

    try:
        run_async(run())
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group; the parent reports it
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
