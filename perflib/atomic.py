"""Atomic output: a file is written whole or not at all, a JSON Lines record appended whole.

A file is written to a temp file beside it, fsynced, then renamed over it (`write_atomic`,
`write_json_atomic`, `atomic_target` for writers that need a file name), so a reader on another host,
or the next run after a crash, sees the old file or the new one, never half of one. A record is
appended as one flushed line (`append_jsonl`), so a crash keeps every finished line. An OSError
raised while writing names the file it was writing (`naming`).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any


def write_json_atomic(path: Path | str, obj: Any) -> Path:
    """Write JSON to a temp file beside `path`, fsync it, then rename it over `path`."""
    return write_atomic(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def write_atomic(path: Path | str, data: str | bytes) -> Path:
    """Write text or bytes to a temp file beside `path`, fsync it, then rename it over `path`: a
    reader (another host's report, a crash) sees the old file or the new one, never half of one."""
    with atomic_target(path) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)
    return Path(path)


@contextlib.contextmanager
def atomic_target(path: Path | str) -> Iterator[Path]:
    """A temp path beside `path` for a writer that needs a file name (pyarrow, matplotlib); once the
    block ends it is fsynced and renamed over `path`. A failure leaves `path` as it was and no temp
    file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        with naming(path):  # a full disk names the file being written, not the temp file or nothing
            os.fchmod(fd, 0o644)  # mkstemp makes it 0600; a run folder is meant to be shared
            os.close(fd)
            yield tmp
            with open(tmp, "rb") as handle:
                os.fsync(handle.fileno())
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def naming(path: Path | str) -> Iterator[None]:
    """An OSError in the block names `path` where it names no file (a write to a full disk fails on
    the open file: `[Errno 28] No space left on device` alone would not say which)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise


def append_jsonl(path: Path | str, obj: Mapping[str, Any]) -> None:
    """Append one JSON object as one line and flush it, so a crash keeps every finished line."""
    line = json.dumps(obj, separators=(",", ":"), default=str)
    with naming(path), open(path, "a") as handle:
        handle.write(line + "\n")
        handle.flush()
