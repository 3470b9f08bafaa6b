"""What every rocprofv3 output (CSV, JSON, rocpd) shares: a clock it does not name.

rocprofv3 stamps host CLOCK_MONOTONIC or CLOCK_BOOTTIME ns and does not say which (FORMATS.md §0):
its readers say `unknown` and name both candidates, and the attribution step keeps the one whose
level window holds the most dispatches.
"""

from __future__ import annotations

ROCPROF_CLOCK = "unknown"
ROCPROF_CLOCK_CANDIDATES = ["monotonic", "boottime"]
