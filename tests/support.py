"""Where the tests' inputs live, in one place (tests/README.md says which kind goes where).

- `REPO`: the checkout; committed real captures are under `REPO / "data" / "raw"`.
- `DATA`: `tests/data`, small samples the project made itself (each folder has a README).
- `fixtures_dir()`: the public fixtures, `../shared/fixtures` beside the clone as CI lays them out,
  or `$PERFLIB_FIXTURES`; `fixture(*parts)` is one of them, or a skip that says where it looked.
"""

from __future__ import annotations

import os
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
