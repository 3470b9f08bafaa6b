"""A dispatch table written as `perf script` text: one sample a row, as perflib's `perf` profiler asks
`perf script` for it (`-F comm,pid,tid,time,period,event,ip,sym,dso --ns --header`).

Each row becomes a `cpu-clock` sample taken at its `end_ns` with the period `end_ns − start_ns`, in the
thread `stream` of the process `queue` (1 where they are unknown), its one frame named `kernel`; the
header says CLOCK_MONOTONIC (`clockid = 1`) and the sample frequency of the median period. Read back
(`perflib.traces.perf_script`), the table's names, starts and ends are the same (kind `sample`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from perflib.atomic import write_atomic


def write_perf_script(dispatches: pd.DataFrame, path: str | Path, comm: str = "perflib") -> Path:
    """`dispatches` as `perf script` text at `path` (gzipped where the name ends in `.gz`)."""
    path = Path(path)
    frame = dispatches.sort_values("end_ns", kind="stable")
    end = frame["end_ns"].to_numpy(np.int64)
    period = end - frame["start_ns"].to_numpy(np.int64)
    pid = frame["queue"].to_numpy(np.int64) if "queue" in frame else np.full(end.size, -1, np.int64)
    tid = frame["stream"].to_numpy(np.int64) if "stream" in frame else frame["correlation_id"].to_numpy(np.int64)
    pid = np.where(pid > 0, pid, 1)
    tid = np.where(tid > 0, tid, pid)
    hz = round(1e9 / float(np.median(period))) if period.size and np.median(period) > 0 else 999
    lines = [
        "# ========",
        "# captured on    : (written by perflib.traces.writers.perf_script)",
        f"# event : name = cpu-clock, , id = {{ 1 }}, type = 1, size = 128, {{ sample_period, sample_freq }} = {hz}, "
        "sample_type = IP|TID|TIME|PERIOD, disabled = 1, inherit = 1, freq = 1, sample_id_all = 1, "
        "use_clockid = 1, clockid = 1",
        "# ========",
        "#",
    ]
    for name, t, p, pr, th in zip(frame["kernel"].astype(str), end.tolist(), period.tolist(), pid.tolist(),
                                  tid.tolist(), strict=True):
        lines.append(f"{comm} {pr}/{th} {t // 1_000_000_000}.{t % 1_000_000_000:09d}: {p} cpu-clock: ")
        lines.append(f"\t    55d0c0de0000 {name} (/usr/bin/{comm})")
        lines.append("")
    text = "\n".join(lines) + "\n"
    data = text.encode()
    if path.name.endswith(".gz"):
        import gzip  # late: only for a gzipped file

        data = gzip.compress(data, mtime=0)
    write_atomic(path, data)
    return path
