"""The GPU guard (LOADGEN.md §7): wait for an idle GPU, watch it during a run, redo contended runs.

A shared GPU box gives noisy numbers. The guard lists the processes holding the GPU
(`nvidia-smi --query-compute-apps` on NVIDIA, `/sys/class/kfd/kfd/proc` on ROCm); any that is not
the runner or its server is contention. A process pinned to some GPUs (a cluster worker's
`CUDA_VISIBLE_DEVICES` / `ROCR_VISIBLE_DEVICES`, `perflib.devices`) is judged on those alone: the
server a sibling worker runs on another GPU of the node is not contention; pinned to none, there is
nothing to guard.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from perflib import devices
from perflib.errors import PerflibError

KFD = Path("/sys/class/kfd/kfd")

GUARD_EXIT = 75
"""The exit status when every attempt was contended, as the seed's rocm_gpu_guard.sh."""


def _gpu_pids() -> tuple[str, set[int]] | None:
    """('nvidia'|'rocm', pids holding the GPUs this process may use) or None where no GPU tooling is
    present."""
    ids = devices.pinned()
    if shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode == 0:
            mine = devices.this_device().uuids if ids is not None else None
            return "nvidia", {int(cells[0]) for line in out.stdout.splitlines()
                              if (cells := [c.strip() for c in line.split(",")])[0].isdigit()
                              and (mine is None or (len(cells) > 1 and cells[1] in mine))}
    if (KFD / "proc").is_dir():
        return "rocm", rocm_pids(KFD, ids)
    return None


def rocm_pids(kfd: Path, ids: tuple[str, ...] | None) -> set[int]:
    """The processes under `kfd/proc`; pinned to GPU indices (`ROCR_VISIBLE_DEVICES`), those with memory
    on one of them (`proc/<pid>/vram_<gpu_id>`, the GPU nodes of `topology/nodes` in order). A pin by
    UUID is not resolved here: every process counts."""
    pids = {int(p.name) for p in (kfd / "proc").iterdir() if p.name.isdigit()}
    if ids is None or not all(i.isdigit() for i in ids):
        return pids
    gpu_ids = []
    nodes = sorted((n for n in (kfd / "topology" / "nodes").glob("*") if n.name.isdigit()), key=lambda n: int(n.name))
    for node in nodes:
        with contextlib.suppress(OSError, ValueError):
            if int((node / "gpu_id").read_text().strip() or 0):
                gpu_ids.append((node / "gpu_id").read_text().strip())
    mine = {gpu_ids[int(i)] for i in ids if int(i) < len(gpu_ids)}
    return {pid for pid in pids if any((kfd / "proc" / str(pid) / f"vram_{g}").exists() for g in mine)}


def _descendants(roots: set[int]) -> set[int]:
    """`roots` and every process below them, read from /proc (no psutil)."""
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            parent[int(stat.parent.name)] = int(text[text.rindex(")") + 2:].split()[1])
    found = set(roots)
    grew = True
    while grew:
        grew = False
        for pid, ppid in parent.items():
            if ppid in found and pid not in found:
                found.add(pid)
                grew = True
    return found


class GpuGuard:
    """Wait for an idle GPU, watch it at 1 Hz during a run, and say whether the run was contended.

    Processes of this runner (and its server) are not contention. With no GPU tooling the guard
    says so once and lets every run through.
    """

    def __init__(self, idle_s: float = 90.0, wait_timeout_s: float = 3600.0, log: Callable[[str], None] = print):
        self.idle_s = idle_s
        self.wait_timeout_s = wait_timeout_s
        self.log = log
        self.vendor = None
        probe = _gpu_pids() if devices.pinned() != () else None  # pinned to no GPU: none to guard
        self.vendor = probe[0] if probe else None
        self.own_roots: set[int] = {os.getpid()}
        self._seen: set[int] = set()
        self._clear_since: float | None = None
        """Since when the GPU has been watched with no foreign process on it (None: not watched yet)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.vendor is None and devices.pinned() == ():
            self.log("perflib: GPU guard: this process is pinned to no GPU (a CPU worker); the guard does nothing")
        elif self.vendor is None:
            self.log("perflib: GPU guard: no GPU found (no nvidia-smi, no /sys/class/kfd); the guard does nothing")

    def foreign(self) -> set[int]:
        probe = _gpu_pids()
        if probe is None:
            return set()
        return probe[1] - _descendants(self.own_roots)

    def wait_idle(self) -> None:
        """Return once the GPU has had no foreign process for `idle_s`, counting the time it was
        watched clear during the runs before (so back-to-back runs on a quiet GPU do not wait again)."""
        if self.vendor is None:
            return
        deadline = time.monotonic() + self.wait_timeout_s
        if self.foreign() or self._clear_since is None:
            self._clear_since = time.monotonic()
        while time.monotonic() - self._clear_since < self.idle_s:
            if time.monotonic() > deadline:
                raise PerflibError(f"GPU guard: the {self.vendor} GPU was not idle for {self.idle_s:.0f} s "
                                   f"within {self.wait_timeout_s:.0f} s")
            time.sleep(1.0)
            if self.foreign():
                self._clear_since = time.monotonic()

    def _watch(self) -> None:
        while not self._stop.wait(1.0):
            found = self.foreign()
            if found:
                self._clear_since = time.monotonic()
            self._seen |= found

    @contextlib.contextmanager
    def watching(self) -> Iterator[set[int]]:
        """Monitor during the block; the yielded set holds the foreign pids seen."""
        self._seen = set()
        if self.vendor is None:
            yield self._seen
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        try:
            yield self._seen
        finally:
            self._stop.set()
            self._thread.join()
            found = self.foreign()
            if found:
                self._clear_since = time.monotonic()
            self._seen |= found
