"""What the stand-in profilers share: run the real server as a child for its whole life, pass the
stop signal on, and make a dispatch table that covers that life.

These are STAND-INS, not profilers: CI has no GPU, no rocprofv3, no nsys and no CUPTI. They take the
command line the real profiler takes, run the real llama-server under it, and once it has stopped
write the file the real profiler would, with perflib's own writers, so that the campaign's wrapping,
flushing, collecting, cutting and profiling are tested end to end. Their kernels are made up: a
"gemm" and an "rms_norm" every millisecond of the server's life. No figure of theirs is a
measurement.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # this checkout's perflib


def run_child(argv: list[str], clock: Callable[[], int], env: dict[str, str] | None = None,
              stdout: int | None = None) -> tuple[int, int, int]:
    """Run `argv` until it exits, passing SIGTERM/SIGINT on where the child has not exited 5 s later;
    returns (start_ns, end_ns, exit code). perflib signals the whole process group, which reaches the
    child too: a second signal at once would make llama-server terminate immediately, with exit code 1,
    which no real injected profiler causes."""
    import threading

    start = clock()
    child = subprocess.Popen(argv, env=env, stdout=stdout)

    def forward(signum: int, _frame: object) -> None:
        def again() -> None:
            if child.poll() is None:
                child.send_signal(signum)

        timer = threading.Timer(5.0, again)
        timer.daemon = True
        timer.start()

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    code = child.wait()
    return start, clock(), code


def made_up_dispatches(start_ns: int, end_ns: int, period_ns: int = 1_000_000) -> pd.DataFrame:
    """A 'gemm' (600 us) and an 'rms_norm' (100 us) each period, from start to end: clearly not real."""
    starts = np.arange(start_ns, max(end_ns - period_ns, start_ns + 1), period_ns, dtype=np.int64)
    gemm = pd.DataFrame({"kernel": "standin_gemm_f16", "start_ns": starts, "end_ns": starts + 600_000})
    norm = pd.DataFrame({"kernel": "standin_rms_norm_f32", "start_ns": starts + 700_000,
                         "end_ns": starts + 800_000})
    frame = pd.concat([gemm, norm]).sort_values("start_ns", kind="stable").reset_index(drop=True)
    n = len(frame)
    frame["device"] = np.int64(0)
    frame["queue"] = np.int64(0)
    frame["stream"] = np.int64(7)
    frame["correlation_id"] = np.arange(1, n + 1, dtype=np.int64)
    frame["kind"] = pd.Categorical(["kernel"] * n, categories=["kernel", "memcpy", "memset"])
    frame["source"] = pd.Categorical(["standin"] * n)
    return frame


