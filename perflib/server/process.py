"""A server process that perflib starts from a command: free port, health wait, log kept, identity
recorded, stopped with a signal, a grace period, then a kill.

Any server is a `Launch`: the argv, the environment to add, where stdout and stderr go, the health
URL, how long it may take to get ready and how it is stopped. `start(launch)` runs it in its own
process session (so a Ctrl-C at the terminal does not reach it: perflib stops it itself) and waits
for health; the `ServerHandle` it returns knows the server's identity: its version, commit, flags
and the binary's path and SHA-256.

No server outlives perflib (`perflib.server.lifetime`): on Linux the server gets its stop signal when
the process that started it dies, however it dies (`kill -9` included), and `stop()` signals every
descendant it has seen, also one that left the process group with `setsid`.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflib.errors import PerflibError
from perflib.server import lifetime
from perflib.server.build import ensure_llama_server, llama_server_version
from perflib.server.model import ensure_test_model

SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}


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


@dataclass(frozen=True)
class Launch:
    """Everything needed to start one server and to stop it again."""

    argv: tuple[str, ...]
    base_url: str
    log_path: Path
    health: str = "/health"
    env: Mapping[str, str] = field(default_factory=dict)
    stdout_path: Path | None = None
    """Where stdout goes when not into the log (a profiler that prints its records there)."""
    ready_timeout_s: float = 120.0
    stop_signal: str = "SIGTERM"
    grace_s: float = 10.0
    kind: str = "server"
    """The preset's name (`llama-server`, `vllm`, ...) or `command` for a command of the user's."""
    model: str | None = None
    version_argv: tuple[str, ...] = ()
    """argv that prints the server's version (`llama-server --version`); empty where there is none."""
    program_key: str = "server.binary"
    """The campaign key that names `argv[0]` (`profiler.binary` where a profiler wraps the server): what
    an error about a missing program tells to fix."""
    stop_leader: bool = False
    """Stop by signalling `argv[0]`'s process alone, not its whole group: a wrapper that passes the signal
    on to its child (perf record), where a second one from the group would make the server abort."""

    @property
    def health_url(self) -> str:
        return self.health if "://" in self.health else self.base_url.rstrip("/") + "/" + self.health.lstrip("/")

    @property
    def port(self) -> int:
        match = re.search(r":(\d+)$", self.base_url.rstrip("/"))
        return int(match.group(1)) if match else 80


@dataclass
class ServerHandle:
    """A server that perflib started; stop it with `stop()` or use it as a context manager."""

    launch: Launch
    process: subprocess.Popen
    _identity: dict[str, Any] | None = None
    tree: lifetime.Tree | None = None
    """Its processes: the root and every descendant seen (`track`), stopped together."""
    forced: bool = False
    """`stop` had to SIGKILL it: it did not exit within the grace period (a profiler still flushing?)."""

    def __post_init__(self) -> None:
        if self.tree is None:
            self.tree = lifetime.Tree(self.process.pid)

    @property
    def base_url(self) -> str:
        return self.launch.base_url

    @property
    def log_path(self) -> Path:
        return self.launch.log_path

    @property
    def flags(self) -> list[str]:
        """The command line after the program."""
        return list(self.launch.argv[1:])

    @property
    def binary(self) -> Path:
        return Path(self.launch.argv[0])

    @property
    def model(self) -> Path | None:
        return Path(self.launch.model) if self.launch.model else None

    @property
    def port(self) -> int:
        return self.launch.port

    @property
    def pid(self) -> int:
        """The process perflib started (a wrapping profiler's, where one wraps the server)."""
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def track(self) -> list[lifetime.Identity]:
        """Note the server's descendants of now (a child it started since), so that `stop` stops them
        even once they are orphaned; returns every process of the server seen so far."""
        assert self.tree is not None
        self.tree.update()
        return self.tree.members()

    def stop(self, timeout: float | None = None) -> int | None:
        """The stop signal to the whole process group (a wrapping profiler and its server alike; to the
        wrapper alone where it passes it on, `Launch.stop_leader`) and to every descendant outside it (one
        that called `setsid`), the grace period for them to exit and flush, then SIGKILL to whatever is
        left; returns the exit code."""
        assert self.tree is not None
        grace = self.launch.grace_s if timeout is None else timeout
        sig = SIGNALS.get(self.launch.stop_signal, signal.SIGTERM)
        deadline = time.monotonic() + grace
        self.tree.update()
        if self.process.poll() is None:
            if self.launch.stop_leader:
                self.process.send_signal(sig)
            else:
                _signal_group(self.process, sig)
            for ident in self.tree.alive():
                if _group_of(ident.pid) != self.process.pid:  # escaped the group: signalled on its own
                    ident.signal(sig)
            while self.process.poll() is None and time.monotonic() < deadline:
                self.tree.update()
                time.sleep(0.05)
            if self.process.poll() is None:
                self.forced = True
                _signal_group(self.process, signal.SIGKILL)
                self.process.wait()
        if lifetime.stop(self.tree.alive(), sig, max(0.0, deadline - time.monotonic())):
            self.forced = True
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL, as a crash would, to the server and every descendant; used by the fault tests."""
        assert self.tree is not None
        self.tree.update()
        if self.process.poll() is None:
            _signal_group(self.process, signal.SIGKILL)
            self.process.wait()
        lifetime.stop(self.tree.alive(), signal.SIGKILL, 0.0)

    def identity(self) -> dict[str, Any]:
        """`{kind, version, commit, flags, model, binary, binary_sha256}`, read once per server."""
        if self._identity is None:
            self._identity = server_identity_of(self.launch)
        return self._identity

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def exit_text(code: int | None) -> str:
    """`exit code 1`, `killed by SIGKILL (signal 9)`, or `running` for None."""
    if code is None:
        return "running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name} (signal {-code})"
    return f"exit code {code}"


_CAUSE = re.compile(r"error|fail|cannot|can't|unable|not found|no such|denied|refused|address already in use|"
                    r"out of memory|abort|fatal|exception|invalid|missing|no gpu|no .*device|not supported", re.I)
"""What a line that says why a server could not start looks like (bind errors, a missing model, no GPU)."""


def log_cause(path: Path, lines: int = 3) -> str:
    """The last meaningful lines of a server's log, joined by ` | `: the last ones that look like a cause
    (`_CAUSE`: a bind error, a missing model, no GPU agent) among its last 200 lines, else its last
    lines; `(the log is empty)` where it has none."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 64 * 1024))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return f"(no log at {path})"
    tail = [ln.strip() for ln in text.splitlines() if ln.strip()][-200:]
    if not tail:
        return "(the log is empty)"
    causes = [ln for ln in tail if _CAUSE.search(ln)]
    chosen = (causes or tail)[-lines:]
    return " | ".join(ln[:300] for ln in chosen)


def _group_of(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            process.send_signal(sig)
        except ProcessLookupError:
            pass


def binary_sha256(path: str | Path) -> str | None:
    """SHA-256 of the executable `path` names (found on PATH where it is a bare name), or None."""
    found = shutil.which(str(path)) or (str(path) if Path(path).is_file() else None)
    if found is None:
        return None
    digest = hashlib.sha256()
    with open(found, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_COMMIT = re.compile(r"commit[:\s]+([0-9a-zA-Z][\w.+-]*)|\(([0-9a-zA-Z][\w.+-]*)\)")
"""llama.cpp prints `version: 0.6.0-dev (build 11434, commit abc123)`; older builds `version: N (abc123)`."""


def server_identity_of(launch: Launch) -> dict[str, Any]:
    """The identity of the server a launch starts: its version line (from `version_argv`), the commit
    named in it (`_COMMIT`), the flags, the binary and its hash."""
    version = None
    if launch.version_argv:
        try:
            out = subprocess.run(list(launch.version_argv), capture_output=True, text=True, timeout=60,
                                 env={**os.environ, **launch.env})
            lines = [ln.strip() for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
            version = next((ln for ln in lines if "version" in ln.lower()), lines[-1] if lines else None)
        except (OSError, subprocess.TimeoutExpired) as exc:
            version = f"unknown ({type(exc).__name__})"
    commit = _COMMIT.search(version or "")
    binary = launch.argv[0]
    return {"kind": launch.kind, "version": version, "commit": (commit.group(1) or commit.group(2)) if commit else None,
            "flags": list(launch.argv[1:]), "model": launch.model,
            "binary": shutil.which(binary) or binary, "binary_sha256": binary_sha256(binary)}


HEALTH_POLL_S = 0.05
"""Seconds between health polls while a server starts."""


def wait_healthy(launch: Launch, process: subprocess.Popen | None = None) -> None:
    """Poll the health URL until it answers 200; a process that exits first is an error with its log."""
    # late: httpx and perflib.load, 84 ms (measured); perflib.config imports this module for SIGNALS
    import httpx

    from perflib.load import tls

    deadline = time.monotonic() + launch.ready_timeout_s
    last = "no answer"
    # one client (a new one per poll loaded the CA bundle each time: 60 ms), polled often: every
    # 0.2 s of interval cost 0.1 s of a campaign's start on average
    with httpx.Client(timeout=2.0, trust_env=False, verify=tls.context()) as client:
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise PerflibError(f"{launch.kind} exited before it was healthy ({exit_text(process.returncode)}; "
                                   f"{' '.join(launch.argv[:3])} ...): {log_cause(launch.log_path)} "
                                   f"(log {launch.log_path})")
            try:
                resp = client.get(launch.health_url, headers={"Connection": "close"})
                if resp.status_code == 200:
                    return
                last = f"HTTP {resp.status_code}"
            except httpx.HTTPError as exc:
                last = type(exc).__name__
            time.sleep(HEALTH_POLL_S)
    raise PerflibError(f"{launch.health_url} did not answer 200 within {launch.ready_timeout_s:.0f} s "
                       f"(last: {last}); the log ends: {log_cause(launch.log_path)} (log {launch.log_path})")


def start(launch: Launch) -> ServerHandle:
    """Start the server of `launch` in its own session, its output in its log, and wait for health."""
    launch.log_path.parent.mkdir(parents=True, exist_ok=True)
    if launch.stdout_path is not None:
        launch.stdout_path.parent.mkdir(parents=True, exist_ok=True)
    program = shutil.which(launch.argv[0]) or launch.argv[0]
    if not (Path(program).is_file() or shutil.which(program)):
        fix = ("give the profiler's path as profiler.binary in the campaign file"
               if launch.program_key == "profiler.binary" else
               "give the binary in the campaign file (server.binary), or build it with perflib server build")
        raise PerflibError(f"cannot start {launch.kind}: {launch.argv[0]!r} is not an executable file or a "
                           f"program on PATH ({fix})")
    log = open(launch.log_path, "ab")
    out = open(launch.stdout_path, "ab") if launch.stdout_path is not None else log
    try:
        # its stop signal when this process dies, even by SIGKILL (`lifetime.tie_to_parent`)
        process = subprocess.Popen([program, *launch.argv[1:]], stdout=out, stderr=log, stdin=subprocess.DEVNULL,
                                   start_new_session=True, env={**os.environ, **launch.env},
                                   preexec_fn=lifetime.tie_to_parent(SIGNALS.get(launch.stop_signal,
                                                                                 signal.SIGTERM)))
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte (refused where the campaign is read)
        raise PerflibError(f"cannot start {launch.kind} {program}: {exc}") from None
    finally:
        log.close()
        if out is not log:
            out.close()
    handle = ServerHandle(launch, process)
    try:
        wait_healthy(launch, process)
    except BaseException:
        handle.stop()
        raise
    return handle


def llama_launch(model: Path, *, parallel: int, ctx_size: int, log_path: Path, binary: Path,
                 threads: int | None = None, extra_args: Sequence[str] = (), metrics: bool = True,
                 port: int | None = None, env: Mapping[str, str] | None = None,
                 health_timeout: float = 120.0) -> Launch:
    """The launch of llama-server on 127.0.0.1 (`--parallel`, `--ctx-size`, `--metrics`)."""
    port = port or free_port()
    argv = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--parallel", str(parallel), "--ctx-size", str(ctx_size)]
    if metrics:
        argv.append("--metrics")
    if threads:
        argv += ["--threads", str(threads)]
    argv += list(extra_args)
    return Launch(tuple(argv), f"http://127.0.0.1:{port}", Path(log_path), env=dict(env or {}),
                  ready_timeout_s=health_timeout, kind="llama-server", model=str(model),
                  version_argv=(str(binary), "--version"))


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
    return start(llama_launch(model, parallel=parallel, ctx_size=ctx_size, log_path=log_path,
                              binary=binary or ensure_llama_server(), threads=threads, extra_args=extra_args,
                              metrics=metrics, port=port, env=env, health_timeout=health_timeout))


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
    """The project's llama-server for a matrix of levels (`perflib sweep --start-server`).

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


__all__ = ["Launch", "ServerHandle", "binary_sha256", "ctx_size_for", "exit_text", "free_port", "llama_launch", "log_cause",
           "llama_server_version", "server_identity_of", "start", "start_llama_server", "start_local_llama",
           "wait_healthy"]
