"""Where the project's own builds and models live, and a host-wide lock around making them."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


def cache_dir() -> Path:
    """Where the sdist, the build and the models live: `$PERFLIB_CACHE` or `~/.cache/perflib`."""
    root = Path(os.environ.get("PERFLIB_CACHE", Path.home() / ".cache" / "perflib"))
    root.mkdir(parents=True, exist_ok=True)
    return root



@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    """A host-wide lock so that two test sessions or a CLI and a test never build at once."""
    with open(cache_dir() / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)

