#!/usr/bin/env python3
"""STAND-IN for CUPTI injection (not a profiler; see _standin.py). A CPU has no CUDA to inject into,
so this wraps the real server instead: `standin_cuda_server.py program args...` runs the program;
where `CUDA_INJECTION64_PATH` names an existing file, as perflib's `cupti` profiler sets it, it then
prints what the CUDA sample `cupti_trace_injection` prints, the kernel records of the server's life on
the Unix clock, written with perflib's CUPTI text writer: into the file `PERFLIB_CUPTI_OUTPUT` names,
with the counts in `PERFLIB_CUPTI_STATS`, as perflib's own library does (the server's stdout then stays
its own); else on stdout, as the CUDA sample does.

Faults a real capture has, on request (environment, set by a test's campaign file):
- `STANDIN_CAPTURE_ENDS_IN=<run folder>` with `STANDIN_ARM_DIR`: the records stop halfway through that
  run's decode window (read from its request records and clocks once the server has stopped), as when
  CUPTI runs out of buffer memory mid-run;
- `STANDIN_LOSS_LINE`: a line printed on stderr (the server log) at exit, e.g. a CUPTI error;
- `STANDIN_STDOUT_LINE`: a line printed among the records (the CUDA sample's `Dropped N activity records`);
- `STANDIN_STATS` with `STANDIN_CAPTURE_DIR`: JSON written as the capture's `cupti-stats.json`;
- `STANDIN_EXIT`: the exit code instead of the server's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _standin import made_up_dispatches, run_child


def decode_midpoint_unix_ns(run_dir: Path) -> int:
    """The middle of a run's decode window (last first token to first last token), on the Unix clock."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    start = manifest["clocks"]["start"]
    offset = int(start["realtime_ns"]) - int(start["monotonic_ns"])
    records = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines() if line.strip()]
    lo = max(int(r["first_token_ns"]) for r in records if r.get("ok"))
    hi = min(int(r["last_token_ns"]) for r in records if r.get("ok"))
    return (lo + hi) // 2 + offset


def main(program: list[str]) -> int:
    injected = os.environ.get("CUDA_INJECTION64_PATH")
    if not injected:
        return run_child(program, time.time_ns)[2]
    assert Path(injected).is_file(), f"CUDA_INJECTION64_PATH={injected} does not exist"
    output = os.environ.get("PERFLIB_CUPTI_OUTPUT")
    start, end, code = run_child(program, time.time_ns, stdout=None if output else subprocess.DEVNULL)
    from perflib.traces.writers.cupti_text import write_cupti_text

    frame = made_up_dispatches(start, end)
    if os.environ.get("STANDIN_CAPTURE_ENDS_IN"):
        cut = decode_midpoint_unix_ns(Path(os.environ["STANDIN_ARM_DIR"]) / os.environ["STANDIN_CAPTURE_ENDS_IN"])
        frame = frame[frame["end_ns"] <= cut].reset_index(drop=True)
    with tempfile.TemporaryDirectory() as tmp:
        text = write_cupti_text(frame, Path(tmp) / "records.txt").read_text()
    if os.environ.get("STANDIN_STDOUT_LINE"):
        lines = text.splitlines(keepends=True)
        text = "".join([*lines[: len(lines) // 2], os.environ["STANDIN_STDOUT_LINE"] + "\n", *lines[len(lines) // 2:]])
    if output:
        with open(output, "a") as out:
            out.write(text)
        records = sum(line.startswith(("CONCURRENT_KERNEL", "RUNTIME")) for line in text.splitlines())
        Path(os.environ["PERFLIB_CUPTI_STATS"]).write_text(json.dumps(
            {"library": "perflib-cupti (stand-in)", "records": records, "dropped_records": 0, "buffers": 1,
             "flushes": 1, "errors": [], "complete": True, "ended_by": "exit"}))
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    if os.environ.get("STANDIN_STATS"):
        (Path(os.environ["STANDIN_CAPTURE_DIR"]) / "cupti-stats.json").write_text(os.environ["STANDIN_STATS"])
    if os.environ.get("STANDIN_LOSS_LINE"):
        print(os.environ["STANDIN_LOSS_LINE"], file=sys.stderr, flush=True)
    return int(os.environ.get("STANDIN_EXIT", code))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
