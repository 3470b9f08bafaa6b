"""Claims: one runner at a time measures an (arm, backend), whichever host it runs on.

Hosts share one data folder (any shared filesystem). Each runner claims an (arm, backend) folder
before it starts that server, by creating `<arm_dir>/.claim.json` exclusively (`O_CREAT | O_EXCL`,
atomic on local filesystems and NFSv3+), and removes it at the end. A runner that finds a claim
skips that (arm, backend) and says who holds it. A claim is stale, and taken over, where its process
is gone (same host) or where it was not refreshed for `stale_s` (another host that crashed). Runs
themselves live in separate folders, and every derived file and page is written atomically, so two
hosts never write the same file half-way.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perflib.campaign.servers import host_name

CLAIM = ".claim.json"
STALE_S = 6 * 3600.0
"""A claim not refreshed for this long is taken over: its runner is gone."""


@dataclass
class Claim:
    """A held claim; `refresh()` after each run keeps it from looking stale."""

    path: Path
    host: str
    pid: int

    def refresh(self) -> None:
        with contextlib.suppress(OSError):
            os.utime(self.path)

    def release(self) -> None:
        with contextlib.suppress(OSError):
            if _read(self.path).get("pid") == self.pid and _read(self.path).get("host") == self.host:
                self.path.unlink()


def _read(path: Path) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


def _pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def holder(path: Path, stale_s: float = STALE_S) -> str | None:
    """Who holds the claim at `path` ("host H, pid P, since T"), or None where it is free or stale."""
    if not path.exists():
        return None
    info = _read(path)
    try:
        age = time.time() - path.stat().st_mtime
    except OSError:
        return None
    if info.get("host") == host_name() and not _pid_alive(info.get("pid")):
        return None
    if age > stale_s:
        return None
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("since", 0) or 0))
    return f"host {info.get('host', '?')}, pid {info.get('pid', '?')}, since {since}"


@contextlib.contextmanager
def claim(arm_dir: Path, stale_s: float = STALE_S) -> Iterator[Claim | str]:
    """Claim `arm_dir` for this runner: yields the `Claim`, or the holder's description where another
    live runner has it. A stale claim is replaced."""
    arm_dir.mkdir(parents=True, exist_ok=True)
    path = arm_dir / CLAIM
    me = Claim(path, host_name(), os.getpid())
    body = json.dumps({"host": me.host, "pid": me.pid, "since": time.time()}).encode()
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            who = holder(path, stale_s)
            if who is not None:
                yield who
                return
            with contextlib.suppress(OSError):
                path.unlink()  # stale: take it over
            continue
        with os.fdopen(fd, "wb") as handle:
            handle.write(body)
        try:
            yield me
        finally:
            me.release()
        return
    yield f"unknown (could not create {path})"
