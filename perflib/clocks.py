"""Every clock a profiler might use, read at one instant, so that a trace can be aligned to a level."""

from __future__ import annotations

import time

CLOCK_KEYS = {"monotonic": "monotonic_ns", "boottime": "boottime_ns", "realtime": "realtime_ns"}
"""Trace clock name -> its key in a `now_clocks()` reading."""


def monotonic_ns() -> int:
    """CLOCK_MONOTONIC in nanoseconds: the clock of every `*_ns` field of a request record.

    `time.perf_counter_ns` is not guaranteed to be CLOCK_MONOTONIC, and rocprofv3 can stamp with it.
    """
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def now_clocks() -> dict[str, int]:
    """Nanoseconds on CLOCK_MONOTONIC, CLOCK_BOOTTIME and CLOCK_REALTIME, read back to back.

    rocprofv3 stamps with a monotonic or boot-time clock, CUPTI and Kineto (with
    `baseTimeNanoseconds`) with the Unix epoch; keeping all three lets any of them be aligned.
    """
    mono = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    boot = time.clock_gettime_ns(getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC))
    real = time.time_ns()
    return {"monotonic_ns": mono, "boottime_ns": boot, "realtime_ns": real}
