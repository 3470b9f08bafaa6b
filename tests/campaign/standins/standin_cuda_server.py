#!/usr/bin/env python3
"""STAND-IN for CUPTI injection (not a profiler; see _standin.py). A CPU has no CUDA to inject into,
so this wraps the real server instead: `standin_cuda_server.py program args...` runs the program;
where `CUDA_INJECTION64_PATH` names an existing file, as perflib's `cupti` profiler sets it, it then
prints on its stdout what the CUDA sample `cupti_trace_injection` prints there, the kernel records of
the server's life on the Unix clock, written with perflib's CUPTI text writer."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _standin import made_up_dispatches, run_child


def main(program: list[str]) -> int:
    injected = os.environ.get("CUDA_INJECTION64_PATH")
    if not injected:
        return run_child(program, time.time_ns)[2]
    assert Path(injected).is_file(), f"CUDA_INJECTION64_PATH={injected} does not exist"
    start, end, code = run_child(program, time.time_ns, stdout=subprocess.DEVNULL)
    from perflib.traces.writers.cupti_text import write_cupti_text

    with tempfile.TemporaryDirectory() as tmp:
        path = write_cupti_text(made_up_dispatches(start, end), Path(tmp) / "records.txt")
        sys.stdout.write(path.read_text())
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
