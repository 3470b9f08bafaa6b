"""The kernel's waiting figures (PSI, schedstat): where they are read from, what they sum, and what a
kernel without them leaves (said once, and the CPU-share sampler decides alone)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from perflib import load
from perflib.load import contention, pressure

LINUX = pytest.mark.skipif(not pressure.schedstat_available(), reason="needs Linux /proc/<pid>/schedstat")


def _psi(path, total_us: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"some avg10=1.00 avg60=0.50 avg300=0.10 total={total_us}\n"
                    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")


def test_the_cgroups_pressure_is_read_before_the_systems(tmp_path):
    proc, cgroup = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("4:memory:/job\n0::/user.slice/job-1\n")
    _psi(proc / "pressure" / "cpu", 5)
    assert pressure.psi_source(proc, cgroup) == proc / "pressure" / "cpu"  # no cgroup file: the system's
    _psi(cgroup / "unified" / "user.slice" / "job-1" / "cpu.pressure", 7)  # a hybrid mount's v2 hierarchy
    assert pressure.psi_source(proc, cgroup) == cgroup / "unified" / "user.slice" / "job-1" / "cpu.pressure"
    _psi(cgroup / "user.slice" / "job-1" / "cpu.pressure", 9)  # a pure v2 mount
    assert pressure.psi_source(proc, cgroup) == cgroup / "user.slice" / "job-1" / "cpu.pressure"
    (proc / "pressure" / "cpu").write_text("garbage\n")
    (proc / "self" / "cgroup").write_text("1:cpu:/\n")  # v1 only, and a system file without a `some` total
    assert pressure.psi_source(proc, cgroup) is None
    note = pressure.unavailable_note(None, False)
    assert "no CPU pressure (PSI) data" in note and "no per-thread run-queue waits" in note


@LINUX
def test_the_clients_threads_are_summed_with_their_cpu_and_waits():
    def spin(cpu_s: float) -> None:  # CPU time, not wall time: on a loaded machine the two part
        end = time.thread_time() + cpu_s
        while time.thread_time() < end:
            pass

    meter = pressure.WaitMeter().start(client={os.getpid()})
    spin(0.2)  # this thread, there at the start
    done, spinner_spun = threading.Event(), threading.Event()
    spinner = threading.Thread(target=lambda: (spin(0.2), spinner_spun.set(), done.wait(60)))
    spinner.start()  # a thread born inside the window counts from zero...
    assert spinner_spun.wait(60)
    meter.sample(client={os.getpid()})  # ... and keeps what a sample saw of it once it has ended
    done.set()
    spinner.join()
    seen = meter.stop(client={os.getpid()})
    assert seen.client_cpu_s >= 0.3 and seen.client_wait_s >= 0 and seen.threads >= 2
    assert seen.server_wait_s is None and seen.server_wait_share is None  # no server given: not 0
    assert seen.wait_per_cpu == pytest.approx(seen.client_wait_s / seen.client_cpu_s)
    assert 0 < seen.seconds < 60
    if pressure.psi_source() is not None:  # this kernel gives both: nothing to say
        assert seen.note == "" and 0 <= seen.psi_some_share <= 1.5


def test_a_wait_over_the_threshold_decides_and_says_so():
    waits = pressure.WaitSignals(0.6, "/proc/pressure/cpu", 0.9, server_wait_s=0.6, server_cpu_s=0.5,
                                 client_wait_s=0.02, client_cpu_s=0.01, threads=6)
    seen = load.Contention(True, 0.6, 2, 0.05, 0.05, 0.0, top=((812, "python3", 0.3),), waits=waits)
    assert seen.contended and seen.foreign_cpu_share < seen.threshold  # the CPU share alone: quiet
    assert seen.why() == ("contended: the server's and client's threads waited 1.22 s on a run queue per CPU second "
                          f"(threshold {load.WAIT_THRESHOLD:.2f}); some task waited for a CPU 90% of the time (PSI, "
                          f"threshold {100 * load.PSI_THRESHOLD:.0f}%); heaviest others: python3 (pid 812) 0.3 CPU s")
    record = seen.as_dict()
    assert record["signals"]["wait_per_cpu"] == 1.2157 and record["signals"]["psi_some_share"] == 0.9
    assert record["wait_threshold"] == load.WAIT_THRESHOLD and record["psi_threshold"] == load.PSI_THRESHOLD
    psi_only = load.Contention(True, 0.6, 2, 0.05, waits=waits, wait_threshold=None)
    assert psi_only.contended and "waited 1.22" not in psi_only.why() and "(PSI, threshold" in psi_only.why()
    off = load.Contention(True, 0.6, 2, 0.05, waits=waits, wait_threshold=None, psi_threshold=None)
    assert not off.contended and off.why() == ""  # neither kernel signal decides: the CPU share alone
    tiny = pressure.WaitSignals(0.6, None, None, 0.01, 0.001, 0.0, 0.001)
    assert tiny.wait_per_cpu is None  # 2 ms of CPU: no ratio, not a huge one


def test_a_kernel_without_pressure_data_says_so_once_and_samples_cpu_share(tmp_path, monkeypatch, capsys):
    if not contention.PROC.joinpath("stat").is_file():
        pytest.skip("needs Linux /proc")
    monkeypatch.setattr(pressure, "PROC", tmp_path)  # a /proc with neither PSI nor schedstat
    monkeypatch.setattr(pressure, "CGROUP_ROOT", tmp_path / "cgroup")
    monkeypatch.setattr(contention, "_SAID", set())
    records = []
    for _ in range(2):
        sampler = load.ContentionSampler(interval_s=0.1).start()
        time.sleep(0.2)
        seen = sampler.stop()
        if seen.note:
            load.say_once(seen.note)
        records.append(seen)
    err = capsys.readouterr().err
    assert err.count("perflib: no CPU pressure (PSI) data") == 1 and "judged from other processes' CPU share" in err
    for seen in records:
        assert seen.available and seen.foreign_cpu_share is not None  # the CPU-share sampler still decides
        assert seen.waits.wait_per_cpu is None and seen.waits.psi_some_share is None
        assert "no per-thread run-queue waits" in seen.as_dict()["note"]
