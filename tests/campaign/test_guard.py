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


def kfd_tree(root: Path, gpu_ids: list[str], procs: dict[int, list[str]]) -> Path:
    """A /sys/class/kfd/kfd layout as the amdgpu driver writes it: a CPU node (gpu_id 0) then the GPU
    nodes, and per process a `vram_<gpu_id>` file for each GPU it holds memory on."""
    for node, gpu_id in enumerate(["0", *gpu_ids]):
        (root / "topology" / "nodes" / str(node)).mkdir(parents=True)
        (root / "topology" / "nodes" / str(node) / "gpu_id").write_text(f"{gpu_id}\n")
    for pid, on in procs.items():
        (root / "proc" / str(pid)).mkdir(parents=True)
        for gpu_id in on:
            (root / "proc" / str(pid) / f"vram_{gpu_id}").write_text("1048576\n")
    return root


def test_a_worker_pinned_to_one_rocm_gpu_judges_the_processes_on_it_alone(tmp_path):
    """Issue 29: the server a sibling worker runs on GPU 1 is not contention for the worker of GPU 0."""
    kfd = kfd_tree(tmp_path, ["51234", "60001"], {100: ["51234"], 200: ["60001"], 300: ["51234", "60001"]})
    assert gpu_guard.rocm_pids(kfd, ("0",)) == {100, 300}
    assert gpu_guard.rocm_pids(kfd, ("1",)) == {200, 300}
    assert gpu_guard.rocm_pids(kfd, None) == {100, 200, 300}  # not pinned: every GPU of the machine
    assert gpu_guard.rocm_pids(kfd, ("GPU-7f3a",)) == {100, 200, 300}  # a UUID pin is not resolved here


def test_a_process_pinned_to_no_gpu_has_nothing_to_guard(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    messages = []
    guard = gpu_guard.GpuGuard(idle_s=0.1, log=messages.append)
    assert guard.vendor is None and any("pinned to no GPU" in m for m in messages)
    guard.wait_idle()
