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


class Terminated(KeyboardInterrupt):
    """SIGTERM (a `kill`, a job scheduler's stop, `timeout`) where a long command unwinds as for Ctrl-C:
    the campaign runner stops its servers and keeps the run in progress incomplete; exit status 143."""


def interrupt_text(exc_type: type[BaseException] | None) -> str:
    """What stopped the work, for manifests and server records: Ctrl-C or SIGTERM."""
    return "terminated (SIGTERM)" if exc_type is not None and issubclass(exc_type, Terminated) else "interrupted (Ctrl-C)"
