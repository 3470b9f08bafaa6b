#!/usr/bin/env python3
"""STAND-IN for `rocprofv3` (not a profiler; see _standin.py): takes rocprofv3's command line,
`rocprofv3 --kernel-trace --memory-copy-trace --hip-runtime-trace --marker-trace --stats -f csv -d DIR
-o NAME [options] -- program args...` (it refuses a command line without those traces), runs the
program, and when it has exited writes `DIR/<host>/<pid>/NAME_kernel_trace.csv`, `NAME_hip_api_trace.csv`
(a `hipLaunchKernel` 50 us before each kernel, joined by correlation id) and `NAME_kernel_stats.csv` as
rocprofv3 names them, the records on CLOCK_MONOTONIC, the kernels written with perflib's rocprofv3 CSV
writer. `--standin-flush-s S` among the options (a stand-in's own, for fault
tests) makes it take S seconds to "flush" once the program has exited, as a profiler writing a large
capture does."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

from _standin import made_up_dispatches, run_child


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("standin rocprofv3: expected `-- program args...`", file=sys.stderr)
        return 2
    own, program = argv[: argv.index("--")], argv[argv.index("--") + 1:]
    out_dir = Path(own[own.index("-d") + 1])
    name = own[own.index("-o") + 1]
    traced = ("--kernel-trace", "--memory-copy-trace", "--hip-runtime-trace", "--marker-trace")
    assert all(flag in own for flag in traced) and own[own.index("-f") + 1] == "csv", own
    flush_s = float(own[own.index("--standin-flush-s") + 1]) if "--standin-flush-s" in own else 0.0
    start, end, code = run_child(program, lambda: time.clock_gettime_ns(time.CLOCK_MONOTONIC))
    time.sleep(flush_s)
    from perflib.traces.writers import write_kernel_trace_csv

    folder = out_dir / socket.gethostname() / str(os.getpid())
    folder.mkdir(parents=True, exist_ok=True)
    frame = made_up_dispatches(start, end)
    write_kernel_trace_csv(frame, folder / f"{name}_kernel_trace.csv", "D")
    pid = os.getpid()
    with open(folder / f"{name}_hip_api_trace.csv", "w") as handle:
        handle.write('"Domain","Function","Process_Id","Thread_Id","Correlation_Id","Start_Timestamp","End_Timestamp"\n')
        for corr, begin in zip(frame["correlation_id"], frame["start_ns"], strict=True):
            handle.write(f'"HIP_RUNTIME_API_EXT","hipLaunchKernel",{pid},{pid},{corr},{begin - 50_000},{begin - 45_000}\n')
    stats = frame.assign(d=frame.end_ns - frame.start_ns).groupby("kernel", observed=True)["d"].agg(["count", "sum"])
    with open(folder / f"{name}_kernel_stats.csv", "w") as handle:
        handle.write('"Name","Calls","TotalDurationNs"\n')
        for kernel, row in stats.iterrows():
            handle.write(f'"{kernel}",{row["count"]},{row["sum"]}\n')
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
