"""Processes perflib starts, kept from outliving it: who a process is, its descendants, and a child's
life tied to its parent's.

A pid alone does not name a process: pids are reused. `Identity` is a pid with the process's start
time (field 22 of `/proc/<pid>/stat`, clock ticks since boot) and the boot it belongs to, so a record
written by one run names the same process to the next one, or none. `descendants` walks the process
tree (`/proc/*/stat`), which finds a child that left its process group with `setsid`, as a process-group
signal does not. `tie_to_parent` makes a started server receive a signal when the process that started
it dies, even by SIGKILL (Linux `PR_SET_PDEATHSIG`). Elsewhere than on Linux these are no-ops: there is
no `/proc` to read, and `alive` falls back to the pid alone.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROC = Path("/proc")

PR_SET_PDEATHSIG = 1
"""prctl(2): the signal a process receives when the thread that created it exits."""


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time in clock ticks) of `pid` from /proc, or None where it is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text[text.rfind(")") + 2:].split()  # the command name may hold spaces and parentheses
    try:
        return int(fields[1]), fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def boot_id() -> str | None:
    """This boot's id (`/proc/sys/kernel/random/boot_id`): start times count from the boot."""
    try:
        return (PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return None


@dataclass(frozen=True)
class Identity:
    """One process: its pid, its start time (clock ticks since boot) and the boot; `start` None where
    /proc cannot tell (not Linux)."""

    pid: int
    start: int | None
    boot: str | None = None

    @classmethod
    def of(cls, pid: int) -> Identity | None:
        """The process `pid` now, or None where there is none."""
        stat = _stat(pid)
        if stat is None:
            return cls(pid, None, None) if not PROC.is_dir() and pid_exists(pid) else None
        return cls(pid, stat[2], boot_id())

    @classmethod
    def from_record(cls, record: Any) -> Identity | None:
        """An identity written by `as_record`, or None where `record` is not one (an older record)."""
        if not isinstance(record, dict):
            return None
        pid, start = record.get("pid"), record.get("start")
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 1:
            return None
        if isinstance(start, bool) or not isinstance(start, int):
            return None
        boot = record.get("boot")
        return cls(pid, start, boot if isinstance(boot, str) else None)

    def as_record(self) -> dict[str, Any]:
        return {"pid": self.pid, "start": self.start, "boot": self.boot}

    def alive(self) -> bool:
        """Whether this very process still runs: the same pid, start time and boot, and not a zombie."""
        stat = _stat(self.pid)
        if stat is None:
            return self.start is None and not PROC.is_dir() and pid_exists(self.pid)
        if stat[1] in ("Z", "X"):
            return False
        if self.boot is not None and boot_id() not in (None, self.boot):
            return False
        return self.start is None or stat[2] == self.start

    def signal(self, sig: int) -> bool:
        """Send `sig` where this process still runs (never to a reused pid); False where it does not."""
        if not self.alive():
            return False
        try:
            os.kill(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True


def pid_exists(pid: int) -> bool:
    """Whether a process of that pid exists (any owner; a zombie counts: /proc-free fallback)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def descendants(pid: int) -> list[Identity]:
    """Every live descendant of `pid` (children, theirs, and so on), found by parent pid in /proc:
    also those that left the process group or the session."""
    if not PROC.is_dir():
        return []
    parents: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        if stat is None or stat[1] in ("Z", "X"):
            continue
        parents.setdefault(stat[0], []).append(int(entry.name))
        starts[int(entry.name)] = stat[2]
    boot = boot_id()
    out: list[Identity] = []
    todo = list(parents.get(pid, ()))
    while todo:
        child = todo.pop()
        out.append(Identity(child, starts[child], boot))
        todo.extend(parents.get(child, ()))
    return out


class Tree:
    """The processes of one started server: its root and every descendant seen so far. A process seen
    once stays in the tree, so a child whose parent exited (reparented to init) is still stopped."""

    def __init__(self, root: int):
        self.root = Identity.of(root)
        self.seen: dict[int, Identity] = {}
        self.update()

    def update(self) -> None:
        """Add the root's descendants of now."""
        if self.root is not None and self.root.alive():
            for ident in descendants(self.root.pid):
                self.seen.setdefault(ident.pid, ident)

    def members(self) -> list[Identity]:
        """The root and every descendant seen, as recorded (alive or not)."""
        return [*([self.root] if self.root is not None else []), *self.seen.values()]

    def alive(self) -> list[Identity]:
        """The descendants seen that still run (the root left out: its `Popen` knows about it)."""
        return [ident for ident in self.seen.values() if ident.alive()]


def stop(processes: Iterable[Identity], sig: int, grace_s: float, poll_s: float = 0.05) -> list[Identity]:
    """`sig` to each process that still runs, up to `grace_s` for them to exit, then SIGKILL to those
    left; returns those that got SIGKILL."""
    pending = [p for p in processes if p.signal(sig)]
    deadline = time.monotonic() + grace_s
    while pending and time.monotonic() < deadline:
        time.sleep(poll_s)
        pending = [p for p in pending if p.alive()]
    killed = [p for p in pending if p.signal(signal.SIGKILL)]
    deadline = time.monotonic() + 5.0
    while killed and any(p.alive() for p in killed) and time.monotonic() < deadline:
        time.sleep(poll_s)
    return killed


def _prctl() -> Callable[..., int] | None:
    """libc's prctl, loaded in the parent (not in the child between fork and exec), or None."""
    if not PROC.is_dir():
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def tie_to_parent(sig: int) -> Callable[[], None] | None:
    """A `preexec_fn` that makes the child receive `sig` when this process dies, however it dies (a
    SIGKILL included; Linux only, else None). `PR_SET_PDEATHSIG` fires when the *thread* that forked
    the child exits, not the process: only the main thread lives as long as the process, so from any
    other thread this returns None (the runner's tree walk at stop and the next run's check of
    `server.json` remain). A parent that died before the child got to `prctl` is caught too: the child
    then signals itself."""
    if _PRCTL is None or threading.current_thread() is not threading.main_thread():
        return None
    prctl, parent = _PRCTL, os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died between fork and prctl
            os.kill(os.getpid(), sig)

    return preexec


def tie_to_waiting_thread(sig: int) -> Callable[[], None] | None:
    """`tie_to_parent` for a child started by a thread other than the main one that waits for the child
    until it exits (a cluster worker's task thread, `perflib.campaign.worker`): that thread then lives
    as long as the child does, so `PR_SET_PDEATHSIG` fires only when the process dies (Linux only, else
    None)."""
    if _PRCTL is None:
        return None
    prctl, parent = _PRCTL, os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return preexec


def own_identity() -> dict[str, Any] | None:
    """This process's identity as a record, for what it starts to name it by."""
    ident = Identity.of(os.getpid())
    return ident.as_record() if ident is not None else None

