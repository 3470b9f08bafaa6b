"""Claims: one runner at a time measures an (arm, backend), whichever host it runs on.

Hosts share one data folder (any shared filesystem). Each runner claims an (arm, backend) folder
before it starts that server: it writes its claim to a file of its own and links it to
`<arm_dir>/.claim.json` (a hard link fails where the name exists: atomic on local filesystems and
NFS, and the claim is never seen half-written), and removes it at the end. A runner that finds a claim
skips that (arm, backend) and says who holds it. A claim is stale, and taken over, where its process
is gone (same host; a pid reused by another process counts as gone), where it was not refreshed for `stale_s` (another host that crashed), or where it
is empty or unreadable (a runner of an older perflib that crashed between creating and writing it: it
never named a holder, so it was never held). Runs
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

from perflib import safeinput
from perflib.campaign.servers import host_name
from perflib.server import lifetime

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


_read = safeinput.read_json_object


def _pid_alive(pid: Any) -> bool:
    return isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 and lifetime.pid_exists(pid)


def _same_process(info: dict[str, Any]) -> bool:
    """Whether the claim's runner still runs on this host: its pid alive and, where the claim records its
    start time, the same process (a pid reused by another program does not hold a claim)."""
    if not _pid_alive(info.get("pid")):
        return False
    recorded = lifetime.Identity.from_record({"pid": info.get("pid"), "start": info.get("start")})
    return recorded is None or recorded.alive()


def holder(path: Path, stale_s: float = STALE_S) -> str | None:
    """Who holds the claim at `path` ("host H, pid P, since T"), or None where it is free or stale."""
    if not path.exists():
        return None
    info = _read(path)
    try:
        age = time.time() - path.stat().st_mtime
    except OSError:
        return None
    if not info.get("host") or not isinstance(info.get("pid"), int):  # empty or unreadable: never held
        return None
    if info.get("host") == host_name() and not _same_process(info):
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
    mine = arm_dir / f".claim.{me.host}.{me.pid}.tmp"
    start = (lifetime.own_identity() or {}).get("start")
    mine.write_text(json.dumps({"host": me.host, "pid": me.pid, "start": start, "since": time.time()}))
    try:
        for _ in range(3):
            try:
                _create(mine, path)
            except FileExistsError:
                seen = _inode(path)
                who = holder(path, stale_s)
                if who is not None:
                    yield who
                    return
                if seen is not None and _inode(path) == seen:  # stale: take it over (not one made since)
                    with contextlib.suppress(OSError):
                        path.unlink()
                continue
            break
        else:
            yield f"unknown (could not create {path})"
            return
    finally:
        with contextlib.suppress(OSError):
            mine.unlink()
    try:
        yield me
    finally:
        me.release()


def _create(mine: Path, path: Path) -> None:
    """`path` made exclusively with the content of `mine`: a hard link (whole, or not at all: never an
    empty claim), else, where the filesystem has no hard links, `O_CREAT | O_EXCL` and a write.
    FileExistsError where `path` exists."""
    try:
        os.link(mine, path)
        return
    except FileExistsError:
        raise
    except OSError:
        pass
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(mine.read_bytes())


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None
