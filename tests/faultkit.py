"""The fault cases' kit (tests/campaign/faults/): a campaign whose server is the stand-in
(`tests/campaign/standins/standin_server.py`, misbehaving as its flags say), `perflib campaign run` as
a process of its own, and small waits and reads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from support import REPO

STANDIN = REPO / "tests" / "campaign" / "standins" / "standin_server.py"


def campaign_text(*flags: str, arms: str = "", batches: str = "[1]", decode: int = 8, extra: str = "",
                  grace_s: float = 2.0, name: str = "faults", profiler: str = "") -> str:
    """A campaign whose one backend is the stand-in server started with `flags` (and `profiler`, the
    backend's `profiler:` value)."""
    command = json.dumps([sys.executable, str(STANDIN), "--port", "{port}", *flags])
    return textwrap.dedent(f"""\
        name: {name}
        model: {{name: stand-in (no model)}}
        backends:
          - name: standin
            dialect: llamacpp
            server:
              command: {command}
              health: /health
              ready_timeout_s: 20
              shutdown: {{signal: SIGTERM, grace_s: {grace_s}}}
        {"    profiler: " + profiler if profiler else ""}
        batches: {batches}
        contexts: [16]
        decode_tokens: {decode}
        data_dir: data
        reports_dir: reports
        """) + textwrap.dedent(arms) + textwrap.dedent(extra)


def standin_program(folder: Path, name: str) -> Path:
    """An executable in `folder` that runs the stand-in `tests/campaign/standins/<name>` with this
    interpreter (a profiler's binary; its own shebang would not pick this venv)."""
    path = folder / name.removesuffix(".py")
    path.write_text(f"#!/bin/sh\nexec {sys.executable} {STANDIN.parent / name} \"$@\"\n")
    path.chmod(0o755)
    return path


def write_campaign(folder: Path, *flags: str, **kw) -> Path:
    """`campaign_text(*flags, **kw)` written to `folder/faults.yaml`."""
    path = folder / "faults.yaml"
    path.write_text(campaign_text(*flags, **kw))
    return path


def runner(path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`perflib campaign run FILE --json` in its own session, SIGINT at its default (as a terminal
    starts a foreground job)."""
    def as_a_terminal() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    return subprocess.Popen([sys.executable, "-m", "perflib", "campaign", "run", str(path), "--json", *args],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, **(env or {})}, preexec_fn=as_a_terminal)


def wait_for(predicate: Callable[[], object], timeout: float = 60.0, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def server_record(arm_dir: Path) -> dict:
    try:
        return json.loads((arm_dir / "server.json").read_text())
    except (OSError, ValueError):
        return {}


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def arm_dir_of(path: Path, arm: str = "default", name: str = "faults") -> Path:
    return path.parent / "data" / "raw" / name / arm / "standin"
