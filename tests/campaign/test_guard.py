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


