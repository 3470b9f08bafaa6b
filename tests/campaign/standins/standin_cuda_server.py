#!/usr/bin/env python3
"""STAND-IN for CUPTI injection (not a profiler; see _standin.py). A CPU has no CUDA to inject into,
so this wraps the real server instead: `standin_cuda_server.py program args...` runs the program;
where `CUDA_INJECTION64_PATH` names an existing file, as perflib's `cupti` profiler sets it, it then
writes the kernel records of the server's life on the Unix clock, with perflib's CUPTI text writer,
where the injected library would: into the file `PERFLIB_CUPTI_OUTPUT` names, with the counts in
`PERFLIB_CUPTI_STATS`, as perflib's own library does (the server's stdout then stays its own); else on
stdout, as the CUDA sample `cupti_trace_injection` prints them."""

from __future__ import annotations

import json
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
    output = os.environ.get("PERFLIB_CUPTI_OUTPUT")
    start, end, code = run_child(program, time.time_ns, stdout=None if output else subprocess.DEVNULL)
    from perflib.traces.writers.cupti_text import write_cupti_text

    with tempfile.TemporaryDirectory() as tmp:
        text = write_cupti_text(made_up_dispatches(start, end), Path(tmp) / "records.txt").read_text()
    if not output:
        sys.stdout.write(text)
        sys.stdout.flush()
        return code
    with open(output, "a") as out:
        out.write(text)
    records = sum(line.startswith(("CONCURRENT_KERNEL", "RUNTIME")) for line in text.splitlines())
    Path(os.environ["PERFLIB_CUPTI_STATS"]).write_text(json.dumps(
        {"library": "perflib-cupti (stand-in)", "records": records, "dropped_records": 0, "buffers": 1,
         "flushes": 1, "errors": [], "complete": True, "ended_by": "exit"}))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
