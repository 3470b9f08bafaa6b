"""Errors that the command line prints as one clear line instead of a traceback."""

from __future__ import annotations


class PerflibError(Exception):
    """A failure the user can act on: the message names the file, the place and the expectation."""


class InputError(PerflibError):
    """Bad input file: names the file, the line or column, and what was expected."""

    def __init__(self, path: object, where: str | None, expected: str, found: str | None = None):
        self.path = str(path)
        self.where = where
        self.expected = expected
        self.found = found
        loc = f"{self.path}:{where}" if where else self.path
        msg = f"{loc}: expected {expected}"
        if found is not None:
            msg += f", found {found}"
        super().__init__(msg)
