"""The fuzz suite's hypothesis profile: a small, reproducible budget by default; more on demand.

`PERFLIB_FUZZ_EXAMPLES=N` runs N examples per reader and mutation kind, from a fresh random seed
each run (the default is a fixed seed, so that CI is stable). No example database is written.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

EXAMPLES = os.environ.get("PERFLIB_FUZZ_EXAMPLES")

settings.register_profile(
    "perflib-fuzz",
    max_examples=int(EXAMPLES) if EXAMPLES else 30,
    deadline=None,
    database=None,
    derandomize=EXAMPLES is None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
