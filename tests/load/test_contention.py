"""The contention sampler against real competing processes (CPU burners), and the server's own pids."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from perflib import load
from perflib.load import contention

BURN = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass"

pytestmark = pytest.mark.skipif(not contention.PROC.joinpath("stat").is_file(), reason="needs Linux /proc")


def burners(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(n)]


def test_competing_processes_make_a_level_contended_and_are_named():
    procs = burners(2)
    try:
        time.sleep(0.3)
        sampler = load.ContentionSampler(interval_s=0.25).start()
        time.sleep(1.5)
        seen = sampler.stop()
    finally:
        for p in procs:
            p.kill()
    assert seen.available and seen.contended
    assert seen.foreign_cpu_share >= 0.5  # two busy loops on this machine's CPUs: half of two cores at least
    assert {p.pid for p in procs} <= {pid for pid, _, _ in seen.top}
    assert "contended: other processes used" in seen.why() and "python" in seen.why()
    record = seen.as_dict()
    assert record["contended"] is True and record["threshold"] == load.CPU_THRESHOLD


def test_our_own_processes_are_not_contention():
    procs = burners(2)
    try:
        time.sleep(0.3)
        sampler = load.ContentionSampler({p.pid for p in procs}, interval_s=0.25).start()
        time.sleep(1.0)
        seen = sampler.stop()
    finally:
        for p in procs:
            p.kill()
    assert not ({p.pid for p in procs} & {pid for pid, _, _ in seen.top})


def test_the_process_listening_on_a_port_is_found():
    code = ("import socket, time\ns = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
            "print(s.getsockname()[1], flush=True); time.sleep(30)")
    server = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        assert server.pid in load.listening_pids(port)
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            assert load.listening_pids(free.getsockname()[1]) == set()  # bound, not listening
    finally:
        server.kill()


@pytest.mark.skipif((len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1) < 2,
                    reason="needs two CPUs to pin a burner apart")
def test_a_cpu_set_is_judged_alone_a_burner_pinned_elsewhere_is_not_contention():
    """A cluster worker's CPU set (issue 29): the busy loop pinned to another CPU is not counted, the same
    loop pinned to the set is, against the set's capacity."""
    first, second = sorted(os.sched_getaffinity(0))[:2]
    proc = subprocess.Popen([sys.executable, "-c", BURN], preexec_fn=lambda: os.sched_setaffinity(0, {second}))
    try:
        time.sleep(0.3)
        seen = {}
        for judged in (first, second):
            sampler = load.ContentionSampler(interval_s=0.25, cpu_set=frozenset({judged})).start()
            time.sleep(1.5)
            seen[judged] = sampler.stop()
    finally:
        proc.kill()
        proc.wait()
    assert seen[first].cpus == 1 and seen[second].cpus == 1
    assert proc.pid not in {pid for pid, _, _ in seen[first].top}
    assert proc.pid in {pid for pid, _, _ in seen[second].top}
    assert seen[second].foreign_cpu_share > 0.3  # one busy loop on the one CPU judged


def test_allowed_cpus_reads_a_process_cpu_list():
    assert contention.allowed_cpus(os.getpid()) == frozenset(os.sched_getaffinity(0))
    assert contention.allowed_cpus(2 ** 22 + 12345) is None  # no such process
