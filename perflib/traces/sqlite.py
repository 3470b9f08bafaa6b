"""SQLite profiler outputs (rocpd, Nsight Systems exports): a read-only connection and the schema."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from perflib.errors import InputError


def connect(path: Path) -> sqlite3.Connection:
    """Read-only connection; an unreadable or non-SQLite file is an `InputError`."""
    try:
        con = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise InputError(path, None, "a readable SQLite database", str(exc)) from exc
    return con


def objects(con: sqlite3.Connection) -> set[str]:
    """Names of all tables and views."""
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def columns(con: sqlite3.Connection, table: str) -> list[str]:
    """Column names of a table or view, in order."""
    return [r[1] for r in con.execute(f"PRAGMA table_info(`{table}`)")]
