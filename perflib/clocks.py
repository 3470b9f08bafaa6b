"""Read every clock a profiler might use, at one instant, so traces can be aligned to a level."""

from __future__ import annotations

import time


def now_clocks() -> dict[str, int]:
    """Nanoseconds on CLOCK_MONOTONIC, CLOCK_BOOTTIME and CLOCK_REALTIME, read back to back.

    rocprofv3 stamps with a monotonic or boot-time clock, CUPTI and Kineto (with
    `baseTimeNanoseconds`) with the Unix epoch; keeping all three lets any of them be aligned.
    """
    mono = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    boot = time.clock_gettime_ns(getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC))
    real = time.time_ns()
    return {"monotonic_ns": mono, "boottime_ns": boot, "realtime_ns": real}
