#!/usr/bin/env python3
"""STAND-IN for `rocprofv3` (not a profiler; see _standin.py): takes rocprofv3's command line,
`rocprofv3 --kernel-trace --stats -f csv -d DIR -o NAME [options] -- program args...`, runs the
program, and when it has exited writes `DIR/<host>/<pid>/NAME_kernel_trace.csv` and
`NAME_kernel_stats.csv` as rocprofv3 names them, the kernel records on CLOCK_MONOTONIC written with
perflib's rocprofv3 CSV writer. `--standin-flush-s S` among the options (a stand-in's own, for fault
tests) makes it take S seconds to "flush" once the program has exited, as a profiler writing a large
capture does."""

from __future__ import annotations

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
    assert "--kernel-trace" in own and own[own.index("-f") + 1] == "csv", own
    flush_s = float(own[own.index("--standin-flush-s") + 1]) if "--standin-flush-s" in own else 0.0
    start, end, code = run_child(program, lambda: time.clock_gettime_ns(time.CLOCK_MONOTONIC))
    time.sleep(flush_s)
    from perflib.traces.writers import write_kernel_trace_csv

    folder = out_dir / socket.gethostname() / str(__import__("os").getpid())
    folder.mkdir(parents=True, exist_ok=True)
    frame = made_up_dispatches(start, end)
    write_kernel_trace_csv(frame, folder / f"{name}_kernel_trace.csv", "D")
    stats = frame.assign(d=frame.end_ns - frame.start_ns).groupby("kernel", observed=True)["d"].agg(["count", "sum"])
    with open(folder / f"{name}_kernel_stats.csv", "w") as handle:
        handle.write('"Name","Calls","TotalDurationNs"\n')
        for kernel, row in stats.iterrows():
            handle.write(f'"{kernel}",{row["count"]},{row["sum"]}\n')
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
