"""The cluster tests' kit (tests/campaign/test_cluster*.py): a local Dask cluster of Nanny workers on
loopback, each a "host" with its own name (`PERFLIB_HOST`) and data folder, the dashboard off; a
scheduler of its own process where a test must kill it; `perflib campaign run --cluster` as a process."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing import resource_tracker
from pathlib import Path

import pytest
from support import REPO


def distributed_or_skip():
    """Dask distributed, the extra perflib[cluster] that `make install` installs; in CI its absence is a
    failure, elsewhere (a venv without the extra) the cluster tests are skipped, saying so."""
    if os.environ.get("CI"):
        import distributed  # late: the extra is checked where the tests run
    else:
        distributed = pytest.importorskip("distributed", reason="the cluster extra is not installed: "
                                          "pip install -e '.[cluster]'")
    # The Nanny's spawned workers start multiprocessing's resource tracker, one per pytest process for its
    # whole life: started here, before any test looks for the processes it left behind.
    resource_tracker.ensure_running()
    return distributed


@contextmanager
def local_cluster(hosts: dict[str, dict], tmp_path: Path) -> Iterator[tuple[str, dict[str, Path]]]:
    """A scheduler in this process and one Nanny worker per host: `hosts` maps a name to {"backends":
    [...], "env": {...}}; each worker offers `backend-<name>=1` for its backends, has `PERFLIB_HOST` set to
    its name and its own data folder `tmp_path/<name>` (`PERFLIB_CLUSTER_DATA`). Yields (the scheduler's
    address, {name: data folder})."""
    from distributed import Nanny, Scheduler  # late: the optional extra (distributed_or_skip first)
    from distributed.deploy.spec import SpecCluster

    folders = {name: tmp_path / name for name in hosts}
    workers = {name: {"cls": Nanny, "options": {
        "nthreads": 1, "memory_limit": 0, "host": "127.0.0.1", "name": name,
        "resources": {f"backend-{b}": 1 for b in spec["backends"]},
        "env": {"PERFLIB_HOST": name, "PERFLIB_CLUSTER_DATA": str(folders[name]), **spec.get("env", {})}}}
        for name, spec in hosts.items()}
    cluster = SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {
        "host": "127.0.0.1", "dashboard": False}}, silence_logs=logging.ERROR)
    try:
        yield cluster.scheduler_address, folders
    finally:
        cluster.close(timeout=30)


@contextmanager
def scheduler_process(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """`dask scheduler` on loopback as a process of its own (a test may kill it)."""
    file = tmp_path / "scheduler.json"
    proc = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                             "--port", "0", "--no-dashboard", "--scheduler-file", str(file)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.2)  # written whole: read it once it is there
        yield json.loads(file.read_text())["address"], proc
    finally:
        stop(proc)


def worker_process(address: str, *args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.Popen:
    """`perflib cluster worker ADDRESS --host 127.0.0.1 ARGS` as a process (in `cwd`, which `python -m` puts
    first on the import path)."""
    return subprocess.Popen([sys.executable, "-m", "perflib", "cluster", "worker", address, "--host", "127.0.0.1",
                             *args], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})})


def runner(path: Path, address: str, *args: str) -> subprocess.Popen:
    """`perflib campaign run FILE --cluster ADDRESS --json ARGS` as a process."""
    return subprocess.Popen([sys.executable, "-m", "perflib", "campaign", "run", str(path), "--cluster", address,
                             "--json", "--no-contention", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def stop(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL after `timeout`: a Nanny stops its worker on SIGTERM."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def worker_pids(address: str) -> dict[str, int]:
    """{worker name: pid} of the workers (not their nannies) connected to `address`."""
    from distributed import Client  # late: the optional extra

    with Client(address, timeout=30, set_as_default=False) as client:
        info = client.scheduler_info(n_workers=-1)["workers"]
        pids = client.run(os.getpid)
    return {str(info[a]["name"]): pid for a, pid in pids.items()}
