"""The device a process measures on: its host, the GPUs it is pinned to, and its CPU set.

A cluster worker started for one GPU (`perflib cluster worker --gpu N`) pins it for everything it
starts through the vendors' variables (`pin_env`); the servers, the GPU guard and the manifest then
see that device alone. `this_device()` says which device that is (index, name and UUID where
`nvidia-smi` or `rocm-smi` tell them), for each run's manifest and for the guard, which judges the
processes on that device only. Elsewhere than on Linux the CPU set is unknown (None).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import subprocess
from dataclasses import asdict, dataclass

PIN_VARIABLES = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
"""The variables that restrict what a CUDA or ROCm program sees; a pinned worker sets all three."""
NO_GPU = "-1"
"""What `pin_env(None)` sets: an index no device has, so that no GPU is visible (CUDA and ROCm stop at
the first invalid index; an empty value is taken as unset by some ROCm releases)."""
SMI_TIMEOUT_S = 20.0


def host_name() -> str:
    """This machine as runs name it: `$PERFLIB_HOST`, else its host name."""
    return os.environ.get("PERFLIB_HOST") or socket.gethostname()


def pin_env(gpu: str | None) -> dict[str, str]:
    """The environment that pins `gpu` (an index or a UUID; several comma-separated) for every program a
    process starts; None: no GPU at all (a CPU worker). `CUDA_DEVICE_ORDER=PCI_BUS_ID` makes CUDA's
    index the one `nvidia-smi` prints."""
    value = NO_GPU if gpu is None else str(gpu)
    return {**dict.fromkeys(PIN_VARIABLES, value), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def pinned(environ: dict[str, str] | None = None) -> tuple[str, ...] | None:
    """The GPUs this process is pinned to, as the first pin variable set names them (indices or UUIDs;
    () for none); None where none is set (every GPU is visible)."""
    env = os.environ if environ is None else environ
    for name in PIN_VARIABLES:
        if name in env:
            ids = []
            for part in env[name].split(","):
                part = part.strip()
                if not part or part.startswith("-"):  # CUDA and ROCm stop at the first invalid index
                    break
                ids.append(part)
            return tuple(ids)
    return None


def cpu_set() -> tuple[int, ...] | None:
    """The CPUs this process may run on (its affinity), sorted; None where the system does not say."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return None


def cpu_text(cpus: tuple[int, ...] | None) -> str:
    """`0-3,8` for (0, 1, 2, 3, 8); '' for None."""
    if not cpus:
        return ""
    runs: list[list[int]] = []
    for cpu in cpus:
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)


def parse_cpus(text: str) -> tuple[int, ...]:
    """`0-3,8` → (0, 1, 2, 3, 8); ValueError naming what was expected."""
    out: set[int] = set()
    for part in text.split(","):
        low, sep, high = part.strip().partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise ValueError(f"expected CPUs like 0-3,8, found {text!r}")
        first, last = int(low), int(high) if sep else int(low)
        if last < first:
            raise ValueError(f"expected CPUs like 0-3,8 (a range low-high), found {text!r}")
        out.update(range(first, last + 1))
    return tuple(sorted(out))


@dataclass(frozen=True)
class Gpu:
    """One GPU as its vendor's tool lists it."""

    index: str
    name: str
    uuid: str


@dataclass(frozen=True)
class Device:
    """Where a run ran: the host, the GPUs it could see (vendor, their indices, names, UUIDs; empty where
    none), whether a worker pinned them, and the CPU set where it is a part of the machine's ('' for all)."""

    host: str
    vendor: str | None = None
    gpus: tuple[Gpu, ...] = ()
    pinned: tuple[str, ...] | None = None
    cpus: str = ""

    def as_dict(self) -> dict:
        """The manifest's `device` record."""
        out = asdict(self)
        out["gpus"] = [asdict(g) for g in self.gpus]
        out["pinned"] = list(self.pinned) if self.pinned is not None else None
        return out

    @property
    def uuids(self) -> set[str]:
        return {g.uuid for g in self.gpus if g.uuid}

    def describe(self) -> str:
        """`host: NVIDIA H200 #1 (GPU-…)`, `host: no GPU (CPUs 0-3)`: one phrase for a page."""
        if self.gpus:
            what = "; ".join(f"{g.name} #{g.index}" + (f" ({g.uuid})" if g.uuid else "") for g in self.gpus)
        else:
            what = "no GPU" + (" (pinned to none)" if self.pinned == () else "")
        return f"{self.host}: {what}" + (f", CPUs {self.cpus}" if self.cpus else "")


def _run(argv: list[str]) -> str | None:
    """A vendor tool's stdout, or None where it is missing, fails or hangs."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def nvidia_gpus() -> list[Gpu] | None:
    """Every NVIDIA GPU of the machine (nvidia-smi's order, which pin_env's PCI order matches), or None."""
    text = _run(["nvidia-smi", "--query-gpu=index,name,uuid", "--format=csv,noheader"])
    if text is None:
        return None
    gpus = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= 3 and cells[0].isdigit():
            gpus.append(Gpu(cells[0], ",".join(cells[1:-1]), cells[-1]))
    return gpus


def rocm_gpus() -> list[Gpu] | None:
    """Every AMD GPU as `rocm-smi --json` lists it (card N: its product name and unique id), or None."""
    text = _run(["rocm-smi", "--showproductname", "--showuniqueid", "--json"])
    if text is None:
        return None
    try:
        cards = json.loads(text)
    except json.JSONDecodeError:
        return None
    gpus = []
    for key, info in sorted(cards.items()) if isinstance(cards, dict) else ():
        if key.startswith("card") and key[4:].isdigit() and isinstance(info, dict):
            name = info.get("Card Series") or info.get("Card series") or info.get("Card model") or "AMD GPU"
            gpus.append(Gpu(key[4:], str(name), str(info.get("Unique ID") or "")))
    return gpus


def select(gpus: list[Gpu], ids: tuple[str, ...] | None) -> tuple[Gpu, ...]:
    """The GPUs of `gpus` that `ids` (indices or UUIDs, as a pin variable names them) leave visible."""
    if ids is None:
        return tuple(gpus)
    by_index = {g.index: g for g in gpus}
    by_uuid = {g.uuid: g for g in gpus if g.uuid}
    return tuple(g for i in ids if (g := by_index.get(i) or by_uuid.get(i)) is not None)


def own_cpus_text() -> str:
    """This process's CPU set as text where it is a part of the machine's CPUs ('' for all of them)."""
    cpus = cpu_set()
    return cpu_text(cpus) if cpus and len(cpus) < (os.cpu_count() or len(cpus)) else ""


@functools.lru_cache(maxsize=1)
def this_device() -> Device:
    """This process's device, asked of nvidia-smi (else rocm-smi) once per process."""
    ids = pinned()
    for vendor, lister in (("nvidia", nvidia_gpus), ("rocm", rocm_gpus)):
        gpus = lister()
        if gpus is not None:
            return Device(host_name(), vendor, select(gpus, ids), ids, own_cpus_text())
    return Device(host_name(), None, (), ids, own_cpus_text())


def from_record(record: object) -> Device | None:
    """A manifest's `device` record back as a `Device` (None where the run recorded none)."""
    if not isinstance(record, dict) or not isinstance(record.get("host"), str):
        return None
    gpus = tuple(Gpu(str(g.get("index", "")), str(g.get("name", "")), str(g.get("uuid", "")))
                 for g in record.get("gpus") or () if isinstance(g, dict))
    pin = record.get("pinned")
    return Device(record["host"], record.get("vendor"), gpus, tuple(str(p) for p in pin) if isinstance(pin, list)
                  else None, str(record.get("cpus") or ""))


def describe_record(record: object) -> str:
    """`Device.describe` of a manifest's `device` record ('' where the run recorded none)."""
    device = from_record(record)
    return device.describe() if device is not None else ""


def kind(record: object) -> str:
    """What kind of device a record names, whichever one of that kind: the GPUs' names, or `CPU`."""
    device = from_record(record)
    if device is None:
        return ""
    return ", ".join(sorted(g.name for g in device.gpus)) or "CPU"
