"""Every campaign test checks that no process it started outlives it (`support.no_process_left`): a
server, a profiler, a kernel, a child that left its process group. The fault cases are in faults/."""

from __future__ import annotations

import pytest
from support import no_process_left


@pytest.fixture(autouse=True)
def _no_process_left():
    with no_process_left():
        yield
