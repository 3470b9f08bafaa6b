"""Safe input: what perflib reads from a file someone else may have written, read and checked.

A file is read only when it is a regular file (a FIFO or a device is refused before anything opens it,
so nothing blocks), only as UTF-8, and within a size limit where one is given; JSON and JSON Lines are
parsed with the place of each error; values are checked against a few named kinds (`value_problem`,
`check_fields`) and a value found is named in an error by `describe`. Every failure is an `InputError`
naming the file, the line or field, what was expected and what was found, never a traceback. Only
perflib's own small records (`read_json_object`: server.json, claims) are read leniently, as {}.

It knows no file's layout: the run folder's files are `perflib.rundir`'s, a campaign file is
`perflib.config`'s.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perflib.errors import InputError

MAX_NUMBER = 1e15
"""Largest magnitude of a float in a run folder's records (ms, tok/s): beyond it sums overflow."""
MAX_INT = 2 ** 63 - 1
"""Integers in a run folder fit int64 (nanosecond clocks, counts), as the tables downstream hold them."""


# ------------------------------------------------------------------------------------------- files


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def not_regular(path: Path | str) -> str | None:
    """None for a regular file (or a link to one), else what is there instead ("a FIFO", "no such
    file"): `stat` only, which never blocks, so a FIFO is refused before anything opens it."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror}"
    return None if stat.S_ISREG(mode) else _file_kind(mode)


def read_text(path: Path | str, expected: str, *, missing_ok: bool = False, max_bytes: int | None = None
              ) -> str | None:
    """The UTF-8 text of a regular file. Missing (None with `missing_ok`), unreadable, a folder, a FIFO
    or a device (opened without blocking, then refused), larger than `max_bytes`, or not UTF-8: an
    `InputError` naming the file, saying `expected` and what was found."""
    path = Path(path)
    expected_file = f"{expected} in a regular file"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise InputError(path, None, expected_file, "no such file") from None
    except OSError as exc:
        raise InputError(path, None, expected_file, f"{type(exc).__name__}: {exc.strerror}") from None
    mode = os.fstat(fd)
    if not stat.S_ISREG(mode.st_mode) or (max_bytes is not None and mode.st_size > max_bytes):
        os.close(fd)
        if not stat.S_ISREG(mode.st_mode):
            raise InputError(path, None, expected_file, _file_kind(mode.st_mode))
        raise InputError(path, None, f"{expected} of at most {max_bytes} bytes", f"{mode.st_size} bytes")
    with os.fdopen(fd, "rb") as handle:
        try:
            data = handle.read()
        except OSError as exc:
            raise InputError(path, None, expected_file, f"{type(exc).__name__}: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(path, f"line {line}", f"UTF-8 text ({expected})",
                         f"undecodable byte 0x{data[exc.start]:02x}") from None


# ------------------------------------------------------------------------------------------ values


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -MAX_INT <= value <= MAX_INT


def _is_number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            and abs(value) <= MAX_NUMBER)


VALUE_KINDS: dict[str, tuple[str, Any]] = {
    "int": ("an integer", _is_int),
    "count": ("a non-negative integer", lambda v: _is_int(v) and v >= 0),
    "positive": ("a positive integer", lambda v: _is_int(v) and v >= 1),
    "number": (f"a finite number (magnitude at most {MAX_NUMBER:g})", _is_number),
    "anynumber": ("a number", lambda v: isinstance(v, int | float) and not isinstance(v, bool)),
    "str": ("a string", lambda v: isinstance(v, str)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "dict": ("a JSON object", lambda v: isinstance(v, dict)),
    "list[str]": ("a list of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)),
    "list[int]": ("a list of integers", lambda v: isinstance(v, list) and all(_is_int(x) for x in v)),
    "list[number]": ("a list of finite numbers", lambda v: isinstance(v, list) and all(_is_number(x) for x in v)),
}
"""A kind of value (`"int"`, `"number?"`: `?` admits null) -> (what is expected, the test)."""


def value_problem(value: Any, kind: str) -> str | None:
    """None when `value` is of `kind` (see `VALUE_KINDS`), else what was expected."""
    optional = kind.endswith("?")
    expected, test = VALUE_KINDS[kind.rstrip("?")]
    if value is None and optional:
        return None
    return None if test(value) else expected + (" or null" if optional else "")


def describe(value: Any) -> str:
    """How a found value is named in an error: its JSON kind, and a short text for a scalar."""
    kinds = {dict: "a JSON object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
             float: "a number", type(None): "null"}
    kind = kinds.get(type(value), type(value).__name__)
    if isinstance(value, dict | list) or value is None:
        return kind
    text = repr(value[:60] if isinstance(value, str) else value)
    return f"{kind} {text[:60]}"


def check_fields(obj: Mapping[str, Any], fields: Mapping[str, str], path: Path | str, where: str) -> None:
    """Every key of `fields` present in `obj` holds its kind; else an `InputError` at `where<key>`."""
    for name, kind in fields.items():
        if name in obj:
            expected = value_problem(obj[name], kind)
            if expected:
                raise InputError(path, f"{where}{name}", expected, describe(obj[name]))


# -------------------------------------------------------------------------------------- JSON files


def json_parameter(value: str | Mapping[str, Any], where: str, what: str, known: list[str]) -> Mapping[str, Any]:
    """A notebook's JSON parameter (a level, a run) as an object: its JSON text parsed, or the object itself;
    an `InputError` at `where` where it is not JSON, not an object, or names a field not in `known` (listed
    in that order in the message)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise InputError(where, None, f"a {what} as a JSON object", f"text that is not JSON ({exc})") from None
    if not isinstance(value, Mapping):
        raise InputError(where, None, f"a {what} as a JSON object", describe(value))
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise InputError(where, unknown[0], f"one of the {what}'s fields ({', '.join(known)})", "an unknown field")
    return value


def read_json_object(path: Path | str) -> dict[str, Any]:
    """A small JSON record perflib itself wrote (server.json, a claim), read leniently: {} where it is
    missing, unreadable, not JSON or not an object (a crash between create and write leaves it empty)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def read_jsonl_lines(path: Path | str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) of each line of a JSON Lines file; a missing file reads as empty.

    A last line cut off by a crash (no newline, not JSON) is dropped; any other bad line is an
    `InputError` naming the file and the line.
    """
    path = Path(path)
    text = read_text(path, "a JSON Lines file", missing_ok=True)
    if text is None:
        return []
    lines = text.split("\n")
    out: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines) and not text.endswith("\n"):
                break  # cut off mid-write by a crash
            raise InputError(path, f"{number}:{exc.colno}", "one JSON object per line", exc.msg) from None
        except RecursionError:
            raise InputError(path, f"line {number}", "a JSON object nested a few levels deep",
                             "deeper nesting") from None
        if not isinstance(obj, dict):
            raise InputError(path, str(number), "a JSON object", type(obj).__name__)
        out.append((number, obj))
    return out


def read_jsonl(path: Path | str) -> list[dict[str, Any]]:
    """Objects of a JSON Lines file (`read_jsonl_lines` without the line numbers)."""
    return [obj for _, obj in read_jsonl_lines(path)]
