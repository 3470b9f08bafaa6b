"""Where the tests' inputs live, in one place (tests/README.md says which kind goes where).

- `REPO`: the checkout; committed real captures are under `REPO / "data" / "raw"`.
- `DATA`: `tests/data`, small samples the project made itself (each folder has a README).
- `fixtures_dir()`: the public fixtures, `../shared/fixtures` beside the clone as CI lays them out,
  or `$PERFLIB_FIXTURES`; `fixture(*parts)` is one of them, or a skip that says where it looked.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"


def fixtures_dir() -> Path:
    """The public fixtures folder: `$PERFLIB_FIXTURES`, else `../shared/fixtures` beside the clone."""
    return Path(os.environ.get("PERFLIB_FIXTURES", REPO.parent / "shared" / "fixtures"))


def fixture(*parts: str) -> Path:
    """One public fixture file or folder; the test is skipped, saying where, when it is absent."""
    path = fixtures_dir().joinpath(*parts)
    if not path.exists():
        pytest.skip(f"public fixture {path} not found (CI lays ../shared/fixtures beside the clone; "
                    "or set PERFLIB_FIXTURES)")
    return path


def fixture_paths(pattern: str) -> list[Path]:
    """Public fixtures matching a glob below the fixtures folder, for parametrize (empty when absent)."""
    root = fixtures_dir()
    return sorted(root.glob(pattern)) if root.is_dir() else []


MINIMAL_CAMPAIGN = """\
name: t
model: {name: tiny}
backends:
  - name: cpu
    url: http://127.0.0.1:9
batches: [1, 2]
contexts: [64]
decode_tokens: 8
"""
"""The smallest valid campaign file: one backend by URL, two batches, one context."""


class Hang(AssertionError):
    """An example that ran past its time limit: a failure, never a perflib error."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise `Hang` in the main thread if the block takes longer than `seconds` (SIGALRM)."""
    def expire(signum, frame):  # noqa: ANN001, ARG001
        raise Hang(f"took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
