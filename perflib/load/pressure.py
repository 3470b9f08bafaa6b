"""What the kernel says about waiting for a CPU while a level ran (Linux PSI and schedstat).

Other processes' CPU share (`perflib.load.contention`) is sampled every half second, and a short
run can hide between two samples. The kernel itself counts waiting, exactly and per run window:

- pressure stall information (PSI): the `some` line's `total`, in µs, during which at least one
  runnable task waited for a CPU: `cpu.pressure` of this process's cgroup (v2, or the unified
  hierarchy of a hybrid mount), else the whole system's `/proc/pressure/cpu`;
- `/proc/<pid>/task/<tid>/schedstat`: per thread, ns on a CPU (first field) and ns waited on a run
  queue (second field), summed over the server's threads and the client's.

`WaitMeter` reads both at `start()`, at each `sample()` and at `stop()`, and returns `WaitSignals`:
the shares that `perflib.load.contention` compares with its thresholds. Where the kernel gives no
such data the record says which is missing (`note`), and the CPU-share sampler decides alone.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROC = Path("/proc")
CGROUP_ROOT = Path("/sys/fs/cgroup")
MIN_CPU_S = 0.02
"""Below this much CPU time over the window a wait per CPU second is noise, and is not given."""


def psi_source(proc: Path | None = None, cgroup_root: Path | None = None) -> Path | None:
    """The `cpu.pressure` file of this process's cgroup v2 where it is readable, else
    `/proc/pressure/cpu`; None where the kernel has no PSI (before 4.20, or `psi=0`)."""
    proc, cgroup_root = proc or PROC, cgroup_root or CGROUP_ROOT
    with contextlib.suppress(OSError):
        for line in (proc / "self" / "cgroup").read_text().splitlines():
            if line.startswith("0::"):
                rel = line[3:].strip().lstrip("/")
                for base in (cgroup_root, cgroup_root / "unified"):
                    path = base / rel / "cpu.pressure"
                    if _psi_some_us(path) is not None:
                        return path
    path = proc / "pressure" / "cpu"
    return path if _psi_some_us(path) is not None else None


def _psi_some_us(path: Path) -> int | None:
    """The `some ... total=<µs>` of a PSI file, or None where it is missing or unreadable."""
    try:
        text = path.read_text()
    except OSError:  # missing, or EOPNOTSUPP where PSI is compiled in but off
        return None
    for line in text.splitlines():
        if line.startswith("some "):
            for part in line.split():
                if part.startswith("total="):
                    with contextlib.suppress(ValueError):
                        return int(part[6:])
    return None


def thread_times(pids: Iterable[int], proc: Path | None = None) -> dict[int, tuple[int, int]]:
    """Per thread of `pids`: (ns on a CPU, ns waited on a run queue) from its schedstat."""
    proc = proc or PROC
    out: dict[int, tuple[int, int]] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for entry in os.scandir(proc / str(pid) / "task"):
                with contextlib.suppress(OSError, ValueError, IndexError):
                    fields = (proc / str(pid) / "task" / entry.name / "schedstat").read_text().split()
                    out[int(entry.name)] = (int(fields[0]), int(fields[1]))
    return out


def schedstat_available(proc: Path | None = None) -> bool:
    """True where the kernel keeps per-thread run-queue waits (CONFIG_SCHED_INFO)."""
    return ((proc or PROC) / "self" / "schedstat").is_file()


@dataclass(frozen=True)
class WaitSignals:
    """The kernel's waiting figures over one run window; None where not available."""

    seconds: float
    psi_source: str | None = None
    psi_some_share: float | None = None
    """PSI `some` stall time over the window: the share of it during which a runnable task waited."""
    server_wait_s: float | None = None
    server_cpu_s: float | None = None
    client_wait_s: float | None = None
    client_cpu_s: float | None = None
    threads: int = 0
    note: str = ""

    @property
    def wait_per_cpu(self) -> float | None:
        """Seconds the server's and client's threads waited on a run queue per second they ran."""
        wait = (self.server_wait_s or 0.0) + (self.client_wait_s or 0.0)
        cpu = (self.server_cpu_s or 0.0) + (self.client_cpu_s or 0.0)
        if self.server_wait_s is None and self.client_wait_s is None:
            return None
        return wait / cpu if cpu >= MIN_CPU_S else None

    @property
    def server_wait_share(self) -> float | None:
        """Thread-seconds the server's threads waited on a run queue per second of the window."""
        if self.server_wait_s is None or self.seconds <= 0:
            return None
        return self.server_wait_s / self.seconds

    def as_dict(self) -> dict[str, Any]:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 4)

        return {"psi_source": self.psi_source, "psi_some_share": r(self.psi_some_share),
                "server_wait_s": r(self.server_wait_s), "server_cpu_s": r(self.server_cpu_s),
                "client_wait_s": r(self.client_wait_s), "client_cpu_s": r(self.client_cpu_s),
                "wait_per_cpu": r(self.wait_per_cpu), "server_wait_share": r(self.server_wait_share),
                "threads": self.threads, "note": self.note}


def unavailable_note(psi: Path | None, schedstat: bool) -> str:
    """One line saying which of the kernel's waiting figures this system does not give."""
    missing = [what for what, ok in (("no CPU pressure (PSI) data: no /proc/pressure/cpu or cgroup cpu.pressure",
                                      psi is not None),
                                     ("no per-thread run-queue waits: no /proc/<pid>/schedstat", schedstat)) if not ok]
    return "; ".join(missing)


@dataclass
class WaitMeter:
    """Per-thread CPU and run-queue wait of the server's and the client's threads, and PSI, over a window.

    Threads first seen after `start()` began within the window and count from zero; a thread that
    ends within it keeps what the last `sample()` saw of it."""

    server: set[int] = field(default_factory=set)
    client: set[int] = field(default_factory=set)
    _psi: Path | None = None
    _schedstat: bool = False
    _psi0: int | None = None
    _t0: float = 0.0
    _first: dict[int, tuple[int, int]] = field(default_factory=dict)
    _last: dict[int, tuple[int, int]] = field(default_factory=dict)
    _server_tids: set[int] = field(default_factory=set)

    def start(self, server: Iterable[int] = (), client: Iterable[int] = ()) -> WaitMeter:
        self._psi, self._schedstat = psi_source(), schedstat_available()
        self._t0 = time.monotonic()
        self._psi0 = _psi_some_us(self._psi) if self._psi else None
        self.sample(server, client, first=True)
        return self

    def sample(self, server: Iterable[int] = (), client: Iterable[int] = (), first: bool = False) -> None:
        """Read the threads of `server` and `client` (the processes as they are now)."""
        if not self._schedstat:
            return
        self.server |= set(server)
        self.client |= set(client) - self.server
        servers = thread_times(self.server)
        self._server_tids |= set(servers)
        for tid, times in {**thread_times(self.client), **servers}.items():
            self._first.setdefault(tid, times if first else (0, 0))
            self._last[tid] = times

    def stop(self, server: Iterable[int] = (), client: Iterable[int] = ()) -> WaitSignals:
        self.sample(server, client)
        seconds = time.monotonic() - self._t0
        psi1 = _psi_some_us(self._psi) if self._psi else None
        psi_share = ((psi1 - self._psi0) / 1e6 / seconds if psi1 is not None and self._psi0 is not None
                     and seconds > 0 else None)
        note = unavailable_note(self._psi, self._schedstat)
        if not self._schedstat:
            return WaitSignals(seconds, str(self._psi) if self._psi else None, psi_share, note=note)
        sums = {True: [0, 0], False: [0, 0]}
        for tid, (cpu, wait) in self._last.items():
            cpu0, wait0 = self._first.get(tid, (0, 0))
            acc = sums[tid in self._server_tids]
            acc[0] += max(0, cpu - cpu0)
            acc[1] += max(0, wait - wait0)
        server_cpu, server_wait = (x / 1e9 for x in sums[True])
        client_cpu, client_wait = (x / 1e9 for x in sums[False])
        return WaitSignals(seconds, str(self._psi) if self._psi else None, psi_share,
                           server_wait if self.server else None, server_cpu if self.server else None,
                           client_wait, client_cpu, len(self._last), note)
