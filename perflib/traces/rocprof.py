"""What every rocprof output (rocprofv3 CSV, JSON, rocpd; legacy results.csv and results.db) shares: a clock
it does not name, and legacy rocprof's kernel-name suffix.

rocprofv3 stamps host CLOCK_MONOTONIC or CLOCK_BOOTTIME ns and does not say which (FORMATS.md §0):
its readers say `unknown` and name both candidates, and the attribution step keeps the one whose
level window holds the most dispatches.
"""

from __future__ import annotations

ROCPROF_CLOCK = "unknown"
ROCPROF_CLOCK_CANDIDATES = ["monotonic", "boottime"]
KD_SUFFIX = r"(\s*\[clone \.kd\]|\.kd)$"
"""What legacy rocprof appends to a kernel's name: ` [clone .kd]`, or `.kd` alone."""
