"""An (arm, backend) folder moved between machines as files, arriving whole or not used.

A cluster worker measures a group into its own data folder; the runner then needs the same files in
its own. `listing` names every file of the group's folder (its run folders, their attempt copies,
`server.json`, the worker's log) with its size and SHA-256; the lifetime captures (`capture/`, which
the cut traces in the run folders already hold) and dot files (claims, staging) stay where they are.
`read_chunk` is what a worker answers: at most `CHUNK` bytes of one listed file, so a trace of
hundreds of MB never travels as one message. `pull` fetches what the local copy lacks into a staging
folder, checks each written file's size and SHA-256 against the listing, and moves each unit (a run
folder, or a file beside them) into place only where all its files match; a unit that does not match
is not used, and its name comes back so that the run is measured again. Where both sides are the same
storage (a shared `--data`), every file already matches and nothing is copied.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from perflib import rundir
from perflib.errors import PerflibError

CHUNK = 8 * 1024 * 1024
"""Bytes of one chunk a worker sends (8 MiB): bounded messages whatever the file's size."""
KEPT_THERE = ("capture",)
"""Folders of a group that stay on the worker: the server's lifetime captures (GB of profiler text)."""
STAGING = ".pull"


@dataclass(frozen=True)
class Entry:
    """One file of a listing: its path below the data folder (POSIX), size in bytes and SHA-256 (hex)."""

    path: str
    size: int
    sha256: str

    def as_list(self) -> list:
        return [self.path, self.size, self.sha256]


@dataclass(frozen=True)
class Pulled:
    """What `pull` did: files copied, bytes copied, files that already matched, units installed, and the
    units not used, each with why."""

    copied: int = 0
    bytes: int = 0
    unchanged: int = 0
    installed: tuple[str, ...] = ()
    rejected: tuple[tuple[str, str], ...] = ()
    kept: tuple[str, ...] = ()
    """Run folders complete here that differ from the worker's copy: a complete run is kept as it is."""


def group_path(campaign: str, arm: str, backend: str) -> str:
    """The group's folder below a data folder, as a listing names it: `raw/<campaign>/<arm>/<backend>`."""
    return rundir.backend_dir(Path("."), campaign, arm, backend).as_posix().removeprefix("./")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def listing(root: Path, group: str) -> list[Entry]:
    """Every file of `root/group` but the kept-there folders and dot files, sorted by path."""
    base = Path(root) / group
    out = []
    for folder, dirs, files in os.walk(base):
        here = Path(folder)
        dirs[:] = [d for d in dirs if not d.startswith(".") and not (here == base and d in KEPT_THERE)]
        for name in files:
            if not name.startswith("."):
                path = here / name
                out.append(Entry(path.relative_to(root).as_posix(), path.stat().st_size, sha256_file(path)))
    return sorted(out, key=lambda e: e.path)


def entries(rows: Iterable[Iterable]) -> list[Entry]:
    """A listing back from its lists (`Entry.as_list`), each checked: a relative path that stays below the
    data folder, a size, a SHA-256."""
    out = []
    for row in rows:
        path, size, digest = list(row)
        _check_path(str(path))
        if not isinstance(size, int) or size < 0 or not isinstance(digest, str) or len(digest) != 64:
            raise PerflibError(f"a worker's listing: expected [path, size, sha256], found {row!r}")
        out.append(Entry(str(path), size, digest))
    return out


def _check_path(path: str) -> PurePosixPath:
    parts = PurePosixPath(path)
    if parts.is_absolute() or ".." in parts.parts or not parts.parts or "\\" in path:
        raise PerflibError(f"a listed path must stay below the data folder, found {path!r}")
    return parts


def read_chunk(root: str, path: str, offset: int, size: int) -> bytes:
    """At most `min(size, CHUNK)` bytes of `root/path` from `offset` (what a worker sends back); the path
    must stay below `root`."""
    _check_path(path)
    with open(Path(root) / path, "rb") as handle:
        handle.seek(offset)
        return handle.read(min(size, CHUNK))


def _unit(group: str, path: str) -> str:
    """The unit a file belongs to: the first part of its path below the group (a run folder, or a file)."""
    return PurePosixPath(path).relative_to(group).parts[0]


def _matches(local: Path, entry: Entry) -> bool:
    try:
        return local.stat().st_size == entry.size and sha256_file(local) == entry.sha256
    except OSError:
        return False


def _fetch(entry: Entry, target: Path, read: Callable[[str, int, int], bytes], local: Path) -> str | None:
    """`entry` written to `target` (from the identical local file where there is one, else in chunks
    through `read`), then read back from disk and checked; why it does not match, or None."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if _matches(local, entry):
        shutil.copyfile(local, target)
    else:
        with open(target, "wb") as handle:
            offset = 0
            while offset < entry.size:
                block = read(entry.path, offset, min(CHUNK, entry.size - offset))
                if not block:
                    break
                handle.write(block)
                offset += len(block)
            handle.flush()
            os.fsync(handle.fileno())
    size = target.stat().st_size
    if size != entry.size:
        return f"{entry.path}: {size} bytes arrived, the listing says {entry.size}"
    digest = sha256_file(target)
    if digest != entry.sha256:
        return f"{entry.path}: SHA-256 {digest[:12]}… arrived, the listing says {entry.sha256[:12]}…"
    return None


def pull(listed: list[Entry], data: Path, group: str, read: Callable[[str, int, int], bytes]) -> Pulled:
    """Long: the group's files that `data` lacks fetched through `read(path, offset, size)`, checked, and
    installed unit by unit (see the module's docstring). A complete run folder here is never replaced (a
    complete run is not measured again); an incomplete one is moved aside first."""
    data = Path(data)
    units: dict[str, list[Entry]] = {}
    for entry in listed:
        units.setdefault(_unit(group, entry.path), []).append(entry)
    stage = data / group / f"{STAGING}-{os.getpid()}"
    copied = nbytes = unchanged = 0
    installed: list[str] = []
    rejected: list[tuple[str, str]] = []
    kept: list[str] = []
    try:
        for unit, files in sorted(units.items()):
            here = data / group / unit
            if all(_matches(data / e.path, e) for e in files):
                unchanged += len(files)
                continue
            if rundir.parse_run_name(unit) and rundir.is_complete(here):
                kept.append(unit)
                continue
            why = None
            for entry in files:
                target = stage / PurePosixPath(entry.path).relative_to(group)
                why = _fetch(entry, target, read, data / entry.path)
                if why:
                    break
                copied += 1
                nbytes += entry.size
            if why:
                rejected.append((unit, why))
                continue
            _install(stage / unit, here)
            installed.append(unit)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return Pulled(copied, nbytes, unchanged, tuple(installed), tuple(rejected), tuple(kept))


def _install(staged: Path, here: Path) -> None:
    """A checked unit moved into place: a file replaced whole, a folder after the one here is moved aside
    (an incomplete run) or removed (a copy of an attempt or other folder the worker has anew)."""
    if staged.is_file():
        os.replace(staged, here)
        return
    if here.exists():
        if rundir.parse_run_name(here.name):
            rundir.move_aside(here)
        else:
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(here)
    here.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staged, here)
