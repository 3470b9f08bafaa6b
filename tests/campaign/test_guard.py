"""The GPU guard: a no-op that says so where there is no GPU, and the process tree it leaves alone."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perflib.campaign import guard as gpu_guard


def test_gpu_guard_without_gpu_is_a_noop_that_says_so():
    if shutil.which("nvidia-smi") or Path("/sys/class/kfd/kfd/proc").is_dir():
        pytest.skip("this machine has GPU tooling; the no-GPU path is not reachable here")
    messages = []
    guard = gpu_guard.GpuGuard(idle_s=0.1, log=messages.append)
    assert guard.vendor is None and any("no GPU" in m for m in messages)
    guard.wait_idle()
    with guard.watching() as seen:
        pass
    assert seen == set()


def test_descendants_include_this_process_children():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        assert child.pid in gpu_guard._descendants({os.getpid()})
    finally:
        child.kill()
        child.wait()




def _standin_nvidia_smi(tmp_path: Path, monkeypatch) -> Path:
    """A STAND-IN `nvidia-smi` on PATH (this machine has no GPU): it answers
    `--query-compute-apps=pid --format=csv,noheader` with the pids listed in a file the test writes."""
    pids = tmp_path / "gpu_pids.txt"
    pids.write_text("")
    tool = tmp_path / "bin" / "nvidia-smi"
    tool.parent.mkdir()
    tool.write_text(f"#!/bin/sh\ncat {pids}\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    return pids


def test_guard_sees_a_foreign_gpu_process_and_not_its_own(tmp_path, monkeypatch):
    pids = _standin_nvidia_smi(tmp_path, monkeypatch)
    guard = gpu_guard.GpuGuard(idle_s=0.5, log=lambda m: None)
    assert guard.vendor == "nvidia"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        pids.write_text(f"{child.pid}\n")  # our own child on the GPU: not contention
        with guard.watching() as seen:
            pass
        assert seen == set()
        pids.write_text(f"{child.pid}\n1\n")  # pid 1 is nobody's child here: contention
        with guard.watching() as seen:
            import time

            time.sleep(1.2)
        assert seen == {1}
        pids.write_text("")
        import time

        start = time.monotonic()
        guard.wait_idle()  # waits idle_s after the last sighting
        assert time.monotonic() - start >= 0.4
        start = time.monotonic()
        guard.wait_idle()  # watched clear since: no second wait
        assert time.monotonic() - start < 0.4 + 1.1
    finally:
        child.kill()
        child.wait()


def test_campaign_guard_redoes_contended_runs_and_refuses_them_at_the_end(tmp_path, monkeypatch):
    """The guard's refusal through the real runner and notebook: every attempt saw pid 1 on the GPU."""
    import json
    import textwrap

    from perflib import campaign as pc

    pids = _standin_nvidia_smi(tmp_path, monkeypatch)
    pids.write_text("1\n")
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent("""\
        name: t
        model: {name: tiny}
        backends:
          - {name: cpu, url: "http://127.0.0.1:9"}
        batches: [1]
        contexts: [64]
        decode_tokens: 8
        """))
    campaign = pc.load_campaign(path)
    data = tmp_path / "data"
    result = pc.run_campaign(campaign, data_dir=data, guard=True, guard_idle_s=0.0, max_attempts=2,
                             progress=False, write_page=False)
    assert result.failed == (("default/cpu/b1_c64_r1", "contended on all 2 attempts"),)
    assert len(result.contended) == 2 and all("GPU pids [1]" in c for c in result.contended)
    run_dir = data / "raw" / "t" / "default" / "cpu" / "b1_c64_r1"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "incomplete" and any("GPU guard" in e for e in manifest["errors"])
    assert (run_dir.parent / "b1_c64_r1.contended-1").is_dir()  # the first attempt kept aside, not lost
