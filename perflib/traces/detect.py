"""What format detection looks at in a file: its first bytes, its (gunzipped) head, its name and, for
a SQLite database, its tables; never a guess. Which format each of those means is the registry's
business (`perflib.traces.formats`): this module only reads.

Light on purpose (no pandas or numpy): `perflib.traces.prefetch` detects before the heavy imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from perflib.errors import InputError
from perflib.safeinput import not_regular
from perflib.traces import files

SQLITE_MAGIC = b"SQLite format 3\x00"
PARQUET_MAGIC = b"PAR1"


@dataclass(frozen=True)
class Probe:
    """One file or directory as detection sees it. `magic`: the first 16 raw bytes; `head`: the first
    64 KiB, gunzipped where gzip, read only for a file that is neither Parquet nor SQLite (their magic
    says enough); `name`: the lower-cased name without `.gz`. `sqlite_tables` opens a database on first
    use only."""

    path: Path
    is_dir: bool
    magic: bytes = b""
    head: bytes = b""
    name: str = ""

    @property
    def parquet(self) -> bool:
        return self.magic.startswith(PARQUET_MAGIC)

    @property
    def sqlite(self) -> bool:
        return self.magic.startswith(SQLITE_MAGIC)

    @property
    def binary(self) -> bool:
        """Parquet or SQLite: told by the magic, never by the name or the text."""
        return self.parquet or self.sqlite

    @cached_property
    def sqlite_tables(self) -> frozenset[str]:
        """The tables and views of a SQLite file; a damaged one (the header read, its schema does not)
        is an `InputError`."""
        from perflib.traces import sqlite  # sqlite3 only for databases: not before the Kineto prefetch forks

        try:
            with sqlite.reading(self.path) as con:
                return frozenset(sqlite.objects(con))
        except sqlite.ERRORS as exc:
            raise InputError(self.path, "sqlite_master", "a readable SQLite database", files.said(exc)) from exc


def probe(path: str | Path) -> Probe:
    """Read what detection needs of `path`: a directory as it is; a file only where it exists and is
    regular (a FIFO would block the read forever, a device never end), else an `InputError`."""
    path = Path(path)
    if path.is_dir():
        return Probe(path, True)
    if not path.exists():
        raise InputError(path, None, "an existing trace file or rocprofv3 output directory", "nothing there")
    problem = not_regular(path)
    if problem is not None:
        raise InputError(path, None, "a trace file (a regular file) or rocprofv3 output directory", problem)
    with open(path, "rb") as fh:
        magic = fh.read(16)
    found = Probe(path, False, magic, name=files.base_name(path))
    if found.binary:
        return found
    return Probe(path, False, magic, files.read_head(path), found.name)
