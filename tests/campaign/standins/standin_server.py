#!/usr/bin/env python3
"""STAND-IN for a server, for FAULT cases only (not a server; no figure of it is a measurement).

It speaks what perflib's collection path asks of llama-server (`/health`, `/metrics` in the llama.cpp
dialect, `/props`, `/v1/models`, streamed `/v1/completions`; no `/tokenize`, so prompts are
estimated), with made-up tokens, and misbehaves on demand the way real servers do on a bad day:

    --stall-after N     send the headers and N tokens of each measured request, then nothing
    --metrics MODE      ok (counters count the tokens sent), zero (stay at 0), reset (go backwards at
                        every scrape), nan (tokens_predicted_seconds_total is NaN), vanish (answers the
                        first scrape, then 501), off (501, as llama-server without --metrics)
    --escape PIDFILE    fork a child that calls setsid (leaving the process group) and sleeps; its pid
                        in PIDFILE
    --ignore-term       ignore SIGTERM and SIGINT: only SIGKILL stops it
    --fail TEXT         print TEXT (lines split on `|`) on stderr, as a server that cannot start does, and
                        exit 1
    --die-after N       after N measured requests, kill itself with --die-signal (default KILL)
    --pidfile PATH      its own pid, written once it listens

It is standard library only, so that it starts in a few tens of milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WARMUP_MAX_TOKENS = 4  # perflib's warm-up request (`perflib.load.level.WARMUP_MAX_TOKENS`): never stalled


class State:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.lock = threading.Lock()
        self.tokens = 0
        self.requests = 0
        self.seconds = 0.0
        self.decodes = 0
        self.scrapes = 0
        self.measured = 0


def metrics_text(state: State) -> tuple[int, str]:
    mode = state.args.metrics
    with state.lock:
        state.scrapes += 1
        scrape = state.scrapes
        tokens, seconds, decodes = state.tokens, state.seconds, state.decodes
    if mode == "off" or (mode == "vanish" and scrape > 1):
        return 501, json.dumps({"error": {"code": 501, "message": "This server does not support metrics endpoint. "
                                          "Start it with `--metrics`", "type": "not_supported_error"}})
    if mode == "zero":
        tokens, seconds, decodes = 0, 0.0, 0
    elif mode == "reset":
        tokens, seconds, decodes = 10_000_000 - 1000 * scrape, 1000.0 - scrape, 10_000_000 - 1000 * scrape
    seconds_text = "nan" if mode == "nan" else f"{seconds:g}"
    lines = [
        ("prompt_tokens_total", "counter", tokens), ("prompt_seconds_total", "counter", 0.001 * tokens),
        ("tokens_predicted_total", "counter", tokens), ("tokens_predicted_seconds_total", "counter", seconds_text),
        ("n_decode_total", "counter", decodes), ("requests_processing", "gauge", 0),
        ("requests_deferred", "gauge", 0), ("n_busy_slots_per_decode", "gauge", 1),
    ]
    return 200, "".join(f"# TYPE llamacpp:{name} {kind}\nllamacpp:{name} {value}\n" for name, kind, value in lines)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # close-delimited: a stream ends when the connection closes
    state: State

    def log_message(self, fmt: str, *args: object) -> None:
        sys.stderr.write(f"standin: {fmt % args}\n")

    def _send(self, status: int, body: str, kind: str = "application/json") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == "/health":
            self._send(200, '{"status": "ok"}')
        elif path == "/metrics":
            status, text = metrics_text(self.state)
            self._send(status, text, "text/plain; version=0.0.4")
        elif path == "/props":
            self._send(200, json.dumps({"build_info": "standin-0 (not a server)", "model_path": "standin.gguf"}))
        elif path == "/v1/models":
            self._send(200, json.dumps({"data": [{"id": "standin", "owned_by": "standin"}]}))
        else:
            self._send(404, '{"error": {"message": "not here"}}')

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        if self.path != "/v1/completions":
            self._send(404, '{"error": {"message": "not here"}}')
            return
        args, state = self.state.args, self.state
        n = int(body.get("max_tokens") or 1)
        measured = n > WARMUP_MAX_TOKENS
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.flush()
        stall = args.stall_after if measured and args.stall_after is not None else None
        for i in range(n):
            if stall is not None and i >= stall:
                time.sleep(3600)  # the stall: headers (and some tokens) sent, then nothing
            chunk = {"choices": [{"text": f" t{i}", "index": 0, "finish_reason": None}]}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()
            time.sleep(args.token_interval)
        final = {"choices": [{"text": "", "index": 0, "finish_reason": "length"}],
                 "usage": {"completion_tokens": n, "prompt_tokens": 8}}
        self.wfile.write(b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n")
        with state.lock:
            state.tokens += n
            state.seconds += n * args.token_interval
            state.decodes += n
            state.measured += measured
            count = state.measured
        if measured and args.die_after is not None and count >= args.die_after:
            self.wfile.flush()
            os.kill(os.getpid(), getattr(signal, f"SIG{args.die_signal}"))


def escape(pidfile: str) -> None:
    """A child that leaves the process group (setsid) and sleeps: what a server's helper may do."""
    pid = os.fork()
    if pid == 0:
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with open(pidfile + ".tmp", "w") as handle:
            handle.write(str(os.getpid()))
        os.replace(pidfile + ".tmp", pidfile)
        while True:
            time.sleep(3600)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--metrics", default="ok", choices=("ok", "zero", "reset", "nan", "vanish", "off"))
    parser.add_argument("--stall-after", type=int, default=None)
    parser.add_argument("--token-interval", type=float, default=0.002)
    parser.add_argument("--escape", default=None)
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--fail", default=None)
    parser.add_argument("--die-after", type=int, default=None)
    parser.add_argument("--die-signal", default="KILL")
    parser.add_argument("--pidfile", default=None)
    args = parser.parse_args()
    if args.fail is not None:
        for line in args.fail.split("|"):
            print(line, file=sys.stderr)
        return 1
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if args.escape:
        escape(args.escape)
    Handler.state = State(args)
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    if args.pidfile:
        with open(args.pidfile, "w") as handle:
            handle.write(str(os.getpid()))
    print(f"standin: listening on {args.host}:{args.port} (pid {os.getpid()})", file=sys.stderr, flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
