"""A server process that perflib starts: free port, `/health` wait, log kept, stop with a grace period."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from perflib.errors import PerflibError
from perflib.server.build import ensure_llama_server, llama_server_version
from perflib.server.model import ensure_test_model


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ctx_size_for(parallel: int, context: int, decode_tokens: int, margin: int = 64) -> int:
    """`--ctx-size` that gives every slot room for its prompt and its decode.

    llama-server splits `--ctx-size` evenly across `--parallel` slots.
    """
    return parallel * (context + decode_tokens + margin)


@dataclass
class ServerHandle:
    """A llama-server that perflib started; stop it with `stop()` or use it as a context manager."""

    base_url: str
    process: subprocess.Popen
    log_path: Path
    flags: list[str]
    binary: Path
    model: Path
    port: int

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        """SIGKILL, as a crash would; used by the fault tests."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def identity(self) -> dict:
        return {"kind": "llama-server", "version": llama_server_version(self.binary),
                "flags": self.flags, "model": str(self.model), "binary": str(self.binary)}

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_healthy(base_url: str, timeout: float, process: subprocess.Popen | None = None,
                 log_path: Path | None = None) -> None:
    """Poll `/health` until it answers 200; a process that exits first is an error with its log."""
    import httpx

    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:] if log_path else ""
            raise PerflibError(f"llama-server exited with code {process.returncode} before it was healthy; "
                               f"log {log_path}:\n{tail}")
        try:
            resp = httpx.get(f"{base_url}/health", timeout=2.0)
            if resp.status_code == 200:
                return
            last = f"HTTP {resp.status_code}"
        except httpx.HTTPError as exc:
            last = type(exc).__name__
        time.sleep(0.2)
    raise PerflibError(f"{base_url}/health did not answer 200 within {timeout:.0f} s (last: {last}); log {log_path}")


def start_llama_server(
    model: Path,
    *,
    parallel: int,
    ctx_size: int,
    log_path: Path,
    threads: int | None = None,
    extra_args: Sequence[str] = (),
    metrics: bool = True,
    binary: Path | None = None,
    port: int | None = None,
    health_timeout: float = 120.0,
    env: Mapping[str, str] | None = None,
) -> ServerHandle:
    """Start llama-server on 127.0.0.1 at a free port, wait for `/health`, keep its log.

    `env` is added to this process's environment for the server only.
    """
    binary = binary or ensure_llama_server()
    port = port or free_port()
    flags = ["-m", str(model), "--host", "127.0.0.1", "--port", str(port),
             "--parallel", str(parallel), "--ctx-size", str(ctx_size)]
    if metrics:
        flags.append("--metrics")
    if threads:
        flags += ["--threads", str(threads)]
    flags += list(extra_args)
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")
    process = subprocess.Popen([str(binary), *flags], stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, start_new_session=True,
                               env={**os.environ, **env} if env else None)
    log.close()
    base_url = f"http://127.0.0.1:{port}"
    handle = ServerHandle(base_url=base_url, process=process, log_path=log_path, flags=flags,
                          binary=binary, model=Path(model), port=port)
    try:
        wait_healthy(base_url, health_timeout, process, log_path)
    except BaseException:
        handle.stop()
        raise
    return handle


def start_local_llama(
    *,
    parallel: int,
    context: int,
    decode_tokens: int,
    log_path: Path,
    model: Path | None = None,
    random_shape: Mapping[str, int | str] | None = None,
    binary: Path | None = None,
    threads: int | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> ServerHandle:
    """The project's llama-server for a matrix of levels: the one start path of `perflib sweep
    --start-server` and of a campaign's `llama-server-local` backend.

    Builds (or reuses) the binary unless one is given, serves `model` or the random-weight model of
    `random_shape`, gives every one of `parallel` slots room for `context` prompt and
    `decode_tokens` decode tokens (llama-server splits `--ctx-size` evenly across slots), and waits
    for `/health`.
    """
    binary = binary or ensure_llama_server(progress=True)
    model_path = Path(model) if model else ensure_test_model(**(random_shape or {}))
    if not model_path.is_file():
        raise PerflibError(f"{model_path}: model file not found (expected a GGUF file)")
    ctx = ctx_size_for(parallel, context, decode_tokens)
    return start_llama_server(model_path, parallel=parallel, ctx_size=ctx, log_path=log_path, threads=threads,
                              extra_args=extra_args, binary=binary, env=env)
