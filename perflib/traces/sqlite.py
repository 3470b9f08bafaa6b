"""SQLite profiler outputs (rocpd, Nsight Systems exports): a read-only connection and the schema.

Read-only means read-only, whatever the file is called and wherever it lies:

- The URI is built with `Path.as_uri()`, so `#`, `?` and `%` in a name are escaped. (A bare
  `f"file:{path}?mode=ro"` loses its `?mode=ro` to a `#` in the name, and SQLite then opens, and
  creates, another file read-write.)
- A WAL-mode database makes even a read-only connection create `-wal` and `-shm` files beside it.
  `reading` notes which existed before it opened the file and, once it has closed it, removes those
  it created (an empty `-wal`, the `-shm`), so reading leaves the folder as it found it.
- On read-only media (a read-only mount, say) a WAL database cannot be opened that way at all: its
  `-shm` cannot be created. Only then, and only because of that, is it reopened with `immutable=1`,
  which reads the main file alone; the connection's `open_note` says so, and the readers put it in
  `meta["sqlite_open"]`. Where a non-empty `-wal` lies beside it, whose changes `immutable=1` would
  not see, that is an `InputError` instead of an incomplete read.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from perflib.errors import InputError
from perflib.traces.files import said

SIDECARS = ("-wal", "-shm")
"""The files SQLite keeps beside a WAL-mode database while it is open."""
_CANTOPEN = 14
_READONLY = 8
ERRORS = (sqlite3.Error, UnicodeDecodeError)
"""What a damaged database raises: SQLite's errors, and a UnicodeDecodeError where the message SQLite
gives quotes bytes of a damaged schema that are not UTF-8."""


class ReadOnlyConnection(sqlite3.Connection):
    """A read-only connection that says how it was opened (`open_note`, empty for plain `mode=ro`)."""

    open_note: str = ""


def _uri(path: Path, immutable: bool = False) -> str:
    return path.as_uri() + "?mode=ro" + ("&immutable=1" if immutable else "")


def _decode(raw: bytes) -> str:
    """TEXT values that are not UTF-8 keep what can be read instead of failing the whole read."""
    return raw.decode("utf-8", errors="replace")


def _open(path: Path, uri: str) -> ReadOnlyConnection:
    con = sqlite3.connect(uri, uri=True, factory=ReadOnlyConnection)
    con.text_factory = _decode
    try:
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except BaseException:
        con.close()
        raise
    return con


def _is_wal(path: Path) -> bool:
    """Whether the database header says WAL mode (file format versions 2 at bytes 18 and 19)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(20)
    except OSError:
        return False
    return len(head) == 20 and head[18] == 2


def _read_only_folder(path: Path) -> bool:
    """Whether nothing can be created beside `path` (a read-only mount; also a folder without write
    permission for a user other than root)."""
    return not os.access(path.parent, os.W_OK)


def connect(path: Path) -> ReadOnlyConnection:
    """Read-only connection; an unreadable or non-SQLite file is an `InputError`.

    Prefer `reading`, which also removes the `-wal`/`-shm` files a WAL database makes SQLite create.
    """
    given = Path(path)
    path = given.resolve()
    try:
        return _open(path, _uri(path))
    except ERRORS as exc:
        code = getattr(exc, "sqlite_errorcode", None)
        refused = code is not None and (code == _CANTOPEN or code & 0xFF == _READONLY)
        if not (refused and _is_wal(path) and _read_only_folder(path)):
            raise InputError(given, None, "a readable SQLite database", said(exc)) from exc
    wal = Path(f"{path}-wal")
    if wal.is_file() and wal.stat().st_size > 0:
        raise InputError(given, None, "a WAL-mode database whose -wal file can be read (its -shm cannot be created in "
                         "this read-only folder: copy the database and its -wal to a writable folder)",
                         f"{wal.name} holding {wal.stat().st_size} bytes of changes not yet in the database")
    try:
        con = _open(path, _uri(path, immutable=True))
    except ERRORS as exc:
        raise InputError(given, None, "a readable SQLite database", said(exc)) from exc
    con.open_note = ("immutable=1: a WAL-mode database in a read-only folder, where its -shm cannot be created; "
                     "read from the main file alone (no -wal file beside it)")
    return con


def _sidecars(path: Path) -> dict[str, int]:
    """The `-wal`/`-shm` files beside `path` and their sizes."""
    out = {}
    for suffix in SIDECARS:
        try:
            out[suffix] = Path(f"{path}{suffix}").stat().st_size
        except OSError:
            pass
    return out


def _remove_new_sidecars(path: Path, before: dict[str, int]) -> None:
    """Remove the `-wal` and `-shm` files that reading created. A read-only connection writes nothing
    into them, so a `-wal` that is not as it was (someone wrote to the database meanwhile) leaves both."""
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    try:
        size = wal.stat().st_size if wal.is_file() else None
        if "-wal" in before:
            if size != before["-wal"]:
                return
        elif size:
            return
        elif size == 0:
            wal.unlink()
        if "-shm" not in before and shm.is_file():
            shm.unlink()
    except OSError:  # a folder that became read-only, a file removed meanwhile: nothing left to tidy
        pass


@contextmanager
def reading(path: Path) -> Iterator[ReadOnlyConnection]:
    """A read-only connection for the block; afterwards the folder holds what it held before."""
    resolved = Path(path).resolve()
    before = _sidecars(resolved)
    con = None
    try:
        con = connect(path)
        yield con
    finally:
        if con is not None:
            con.close()
        _remove_new_sidecars(resolved, before)


def objects(con: sqlite3.Connection) -> set[str]:
    """Names of all tables and views."""
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def columns(con: sqlite3.Connection, table: str, path: Path | None = None) -> list[str]:
    """Column names of a table or view, in order; a view that cannot be resolved is an `InputError`."""
    try:
        return [r[1] for r in con.execute(f"PRAGMA table_info(`{table}`)")]
    except ERRORS as exc:
        raise InputError(path or "sqlite", f"table {table}", "a table or view whose columns can be read",
                         said(exc)) from exc


def fetch(con: sqlite3.Connection, path: Path, sql: str, where: str, expected: str) -> list[tuple]:
    """All rows of `sql`; an SQLite error is an `InputError` naming `where`."""
    try:
        return con.execute(sql).fetchall()
    except ERRORS as exc:
        raise InputError(path, where, expected, said(exc)) from exc
