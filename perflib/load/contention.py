"""What else used the machine while a level ran: other processes' CPU time, load, steal (Linux /proc).

A shared machine gives noisy numbers, and a batch-1 step measured while another job holds the cores
is not the server's step. `ContentionSampler` reads `/proc` every `interval_s` during a level: the CPU
time of every process that is not ours (this client, its ancestors, the server and their children),
the load average, and the steal time the kernel reports. `Contention.contended` says whether others
used more than `threshold` of the machine's CPU capacity, or steal exceeded `steal_threshold`
(LOADGEN.md §7 for the GPU half; this is the same idea for the CPU). Where there is no /proc the
sampler says so and decides nothing. A process whose CPU set is a part of the machine's (a cluster
worker's `--cpus`, `perflib.devices.cpu_set`) is judged on that set alone: its capacity is those
CPUs, and others are the processes allowed to run on one of them (a sibling worker's server pinned
to other CPUs is not contention).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflib import devices
from perflib.load.pressure import WaitMeter, WaitSignals

PROC = Path("/proc")
CPU_THRESHOLD = 0.25
"""Others may use at most this share of the machine's CPU capacity during a level (0.25 on 2 cores:
half a core) before the level is contended."""
STEAL_THRESHOLD = 0.10
"""At most this share of CPU time stolen by the hypervisor."""
WAIT_THRESHOLD = 0.5
"""At most this many seconds waited on a run queue per CPU second, over the server's and the client's
threads (`perflib.load.pressure`); calibrated in benchmarks/contention_calibration.py."""
PSI_THRESHOLD = 0.75
"""At most this share of the window during which some task waited for a CPU (PSI `some` of this
process's cgroup, else the system); calibrated as WAIT_THRESHOLD."""
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(pid: str) -> tuple[int, int, str] | None:
    """(ppid, utime + stime in ticks, comm) of a process, or None where it is gone."""
    try:
        text = (PROC / pid / "stat").read_text()
    except OSError:
        return None
    try:
        comm = text[text.index("(") + 1:text.rindex(")")]
        rest = text[text.rindex(")") + 2:].split()
        return int(rest[1]), int(rest[11]) + int(rest[12]), comm
    except (ValueError, IndexError):
        return None


def _processes() -> dict[int, tuple[int, int, str]]:
    out = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(PROC):
            if entry.name.isdigit():
                fields = _stat_fields(entry.name)
                if fields is not None:
                    out[int(entry.name)] = fields
    return out


def _family(roots: Iterable[int], procs: dict[int, tuple[int, int, str]]) -> set[int]:
    """`roots`, their descendants, and the ancestors of this process (the runner waiting on us)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    stack = [r for r in roots if r > 0]
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, ()))
    pid = os.getpid()
    while pid > 1 and pid in procs:
        found.add(pid)
        pid = procs[pid][0]
    return found


def _cpu_totals() -> tuple[int, int] | None:
    """(all ticks, steal ticks) summed over CPUs from /proc/stat."""
    try:
        first = (PROC / "stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    values = [int(v) for v in first[1:] if v.isdigit()]
    return (sum(values[:8]), values[7] if len(values) > 7 else 0) if values else None


def own_cpus() -> frozenset[int] | None:
    """This process's CPU set where it is a part of the machine's CPUs (None: all of them, or unknown)."""
    cpus = devices.cpu_set()
    return frozenset(cpus) if cpus and len(cpus) < (os.cpu_count() or len(cpus)) else None


def allowed_cpus(pid: int) -> frozenset[int] | None:
    """The CPUs `pid` may run on (`Cpus_allowed_list` of /proc/<pid>/status), or None where unreadable."""
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                return frozenset(devices.parse_cpus(line.split(":", 1)[1].strip()))
    except (OSError, ValueError):
        return None
    return None


def listening_pids(port: int) -> set[int]:
    """Processes with a TCP socket listening on `port` (a server perflib did not start, on this host)."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in (PROC / "net" / table).read_text().splitlines()[1:]:
                parts = line.split()
                if len(parts) > 9 and parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(parts[9])
    pids = set()
    if not inodes:
        return pids
    with contextlib.suppress(OSError):
        for entry in os.scandir(PROC):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                for fd in os.scandir(PROC / entry.name / "fd"):
                    with contextlib.suppress(OSError):
                        link = os.readlink(fd.path)
                        if link.startswith("socket:[") and link[8:-1] in inodes:
                            pids.add(int(entry.name))
                            break
    return pids


@dataclass(frozen=True)
class Contention:
    """What others did to the machine during a level, and whether that makes the level contended."""

    available: bool
    seconds: float = 0.0
    cpus: int = 0
    foreign_cpu_share: float | None = None
    """Other processes' CPU seconds over (seconds × cpus): the share of the machine they used."""
    peak_foreign_cpu_share: float | None = None
    steal_share: float | None = None
    load_max: float | None = None
    top: tuple[tuple[int, str, float], ...] = ()
    """The heaviest other processes: (pid, name, CPU seconds during the level)."""
    threshold: float = CPU_THRESHOLD
    steal_threshold: float = STEAL_THRESHOLD
    note: str = ""
    waits: WaitSignals | None = None
    """What the kernel counted of waiting for a CPU over the window (`perflib.load.pressure`)."""
    wait_threshold: float | None = WAIT_THRESHOLD
    """Above this many seconds waited on a run queue per CPU second (server and client threads) the
    level is contended; None: that signal does not decide."""
    psi_threshold: float | None = PSI_THRESHOLD
    """Above this PSI `some` share of the window the level is contended; None: it does not decide."""

    def exceeded(self) -> list[str]:
        """Each signal over its threshold, as a phrase; empty where the level is quiet."""
        if not self.available:
            return []
        out = []
        if (self.foreign_cpu_share or 0) > self.threshold:
            out.append(f"other processes used {100 * (self.foreign_cpu_share or 0):.0f}% of the {self.cpus} CPUs "
                       f"over {self.seconds:.1f} s (threshold {100 * self.threshold:.0f}%)")
        if (self.steal_share or 0) > self.steal_threshold:
            out.append(f"the hypervisor stole {100 * (self.steal_share or 0):.0f}% of the CPU time "
                       f"(threshold {100 * self.steal_threshold:.0f}%)")
        waits = self.waits
        per_cpu = waits.wait_per_cpu if waits is not None else None
        if self.wait_threshold is not None and per_cpu is not None and per_cpu > self.wait_threshold:
            out.append(f"the server's and client's threads waited {per_cpu:.2f} s on a run queue per CPU second "
                       f"(threshold {self.wait_threshold:.2f})")
        psi = waits.psi_some_share if waits is not None else None
        if self.psi_threshold is not None and psi is not None and psi > self.psi_threshold:
            out.append(f"some task waited for a CPU {100 * psi:.0f}% of the time (PSI, threshold "
                       f"{100 * self.psi_threshold:.0f}%)")
        return out

    @property
    def contended(self) -> bool:
        return bool(self.exceeded())

    def why(self) -> str:
        """One line for a manifest error or a page note."""
        exceeded = self.exceeded()
        if not exceeded:
            return ""
        heavy = ", ".join(f"{name} (pid {pid}) {cpu:.1f} CPU s" for pid, name, cpu in self.top[:3])
        return "contended: " + "; ".join(exceeded) + (f"; heaviest others: {heavy}" if heavy else "")

    def as_dict(self) -> dict[str, Any]:
        return {"available": self.available, "contended": self.contended, "seconds": round(self.seconds, 3),
                "cpus": self.cpus, "foreign_cpu_share": _round(self.foreign_cpu_share),
                "peak_foreign_cpu_share": _round(self.peak_foreign_cpu_share),
                "steal_share": _round(self.steal_share), "load_max": self.load_max,
                "top": [{"pid": p, "name": n, "cpu_s": round(c, 3)} for p, n, c in self.top],
                "threshold": self.threshold, "steal_threshold": self.steal_threshold,
                "wait_threshold": self.wait_threshold, "psi_threshold": self.psi_threshold,
                "signals": self.waits.as_dict() if self.waits is not None else None,
                "why": self.why(), "note": self.note}


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


@dataclass
class ContentionSampler:
    """Sample /proc in a thread while a level runs; `stop()` returns the `Contention` record.

    `own`: processes that are not contention (the client, the server); `server`: the server's own
    processes among them, whose threads' run-queue waits (with the client's) the kernel reports."""

    own: set[int] = field(default_factory=set)
    interval_s: float = 0.5
    threshold: float = CPU_THRESHOLD
    server: set[int] = field(default_factory=set)
    wait_threshold: float | None = WAIT_THRESHOLD
    psi_threshold: float | None = PSI_THRESHOLD
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _first: dict[int, int] = field(default_factory=dict)
    _last: dict[int, tuple[int, str]] = field(default_factory=dict)
    _peak: float = 0.0
    _loads: list[float] = field(default_factory=list)
    _t0: float = 0.0
    _cpu0: tuple[int, int] | None = None
    _meter: WaitMeter = field(default_factory=WaitMeter)
    cpu_set: frozenset[int] | None = field(default_factory=own_cpus)
    """Judge this CPU set alone (None: the whole machine): see the module's docstring."""
    _elsewhere: dict[int, bool] = field(default_factory=dict)

    def start(self) -> ContentionSampler:
        if not (PROC / "stat").is_file():
            return self
        self._t0 = time.monotonic()
        self._cpu0 = _cpu_totals()
        self._meter.start(*self._ours(_processes()))
        self._sample()
        self._thread = threading.Thread(target=self._run, name="perflib-contention", daemon=True)
        self._thread.start()
        return self

    def _ours(self, procs: dict[int, tuple[int, int, str]]) -> tuple[set[int], set[int]]:
        """(the server's processes, the client's): roots and their descendants as they are now."""
        server = _descendants(self.server | (self.own - {os.getpid()}), procs)
        return server, _descendants({os.getpid()}, procs) - server

    def _run(self) -> None:
        prev_t, prev = time.monotonic(), self._foreign_ticks()
        while not self._stop.wait(self.interval_s):
            self._sample()
            now_t, now = time.monotonic(), self._foreign_ticks()
            cpus = self._capacity()
            if now_t > prev_t:
                self._peak = max(self._peak, (now - prev) / TICKS / ((now_t - prev_t) * cpus))
            prev_t, prev = now_t, now

    def _sample(self) -> None:
        procs = _processes()
        ours = _family(self.own | self.server, procs)
        for pid, (_, ticks, comm) in procs.items():
            if pid in ours or self._outside(pid):
                continue
            self._first.setdefault(pid, ticks)
            self._last[pid] = (ticks, comm)
        self._meter.sample(*self._ours(procs))
        with contextlib.suppress(OSError, ValueError, IndexError):
            self._loads.append(float((PROC / "loadavg").read_text().split()[0]))

    def _capacity(self) -> int:
        """The CPUs judged: this CPU set's, else the machine's."""
        return len(self.cpu_set) if self.cpu_set else os.cpu_count() or 1

    def _outside(self, pid: int) -> bool:
        """Whether `pid` may not run on any CPU of the set judged (read once per pid)."""
        if not self.cpu_set:
            return False
        if pid not in self._elsewhere:
            allowed = allowed_cpus(pid)
            self._elsewhere[pid] = allowed is not None and not (allowed & self.cpu_set)
        return self._elsewhere[pid]

    def _foreign_ticks(self) -> int:
        return sum(t - self._first.get(p, t) for p, (t, _) in self._last.items())

    def stop(self) -> Contention:
        if self._thread is None:
            return Contention(False, note="no /proc on this system: contention not sampled")
        self._stop.set()
        self._thread.join()
        self._sample()
        waits = self._meter.stop()
        seconds = time.monotonic() - self._t0
        cpus = self._capacity()
        used = {p: (t - self._first.get(p, t)) / TICKS for p, (t, _) in self._last.items()}
        share = sum(used.values()) / (seconds * cpus) if seconds > 0 else None
        cpu1 = _cpu_totals()
        steal = None
        if self._cpu0 and cpu1 and cpu1[0] > self._cpu0[0]:
            steal = (cpu1[1] - self._cpu0[1]) / (cpu1[0] - self._cpu0[0])
        top = tuple(sorted(((p, self._last[p][1], s) for p, s in used.items() if s > 0.05), key=lambda x: -x[2])[:5])
        note = (f"{waits.note}: contention judged from other processes' CPU share and steal only"
                if waits.note else "")
        return Contention(True, seconds, cpus, share, self._peak or share, steal, max(self._loads, default=None),
                          top, self.threshold, note=note, waits=waits, wait_threshold=self.wait_threshold,
                          psi_threshold=self.psi_threshold)


def _descendants(roots: Iterable[int], procs: dict[int, tuple[int, int, str]]) -> set[int]:
    """`roots` (those still there) and every process below them."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    stack = [r for r in roots if r in procs]
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, ()))
    return found


QUIET_WINDOW_S = 2.0
"""The window `wait_quiet` samples: the shortest wait for quiet CPUs."""


def wait_quiet(own: set[int] | None = None, threshold: float = CPU_THRESHOLD, window_s: float = QUIET_WINDOW_S,
               timeout_s: float = 120.0) -> Contention | None:
    """Wait until one `window_s` window has others below `threshold` of the CPUs (before a run is redone);
    returns the last window's record, or None where /proc is not there or `timeout_s` is shorter than
    one window. Gives up after `timeout_s`. Only others' CPU share decides here: with no level
    running, our own threads' waits say nothing."""
    if not (PROC / "stat").is_file() or timeout_s < window_s:
        return None
    deadline = time.monotonic() + timeout_s
    while True:
        sampler = ContentionSampler(set(own or ()), interval_s=window_s / 4, threshold=threshold,
                                    wait_threshold=None, psi_threshold=None).start()
        time.sleep(window_s)
        seen = sampler.stop()
        if not seen.contended or time.monotonic() + window_s > deadline:
            return seen


_SAID: set[str] = set()


def say_once(note: str) -> None:
    """`note` on stderr once per process: what this kernel cannot tell is said once, not per level."""
    if note and note not in _SAID:
        _SAID.add(note)
        print(f"perflib: {note}", file=sys.stderr)
