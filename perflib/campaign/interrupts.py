"""A Ctrl-C that the campaign runner acts on even where something below it swallowed the interrupt.

In about one full test run in four, a SIGINT sent to `perflib campaign run` during a run was not
acted on: the runner finished its runs and exited 0 (tests/campaign/test_started_servers.py). The
cause was not found: the signal was neither ignored nor blocked in any of the runner's threads in 25
tries that reproduced nothing, so the KeyboardInterrupt was most likely caught below, in the notebook
machinery. `CtrlC` keeps its own handler for the campaign, which notes the interrupt before raising
it as Python's does, and `check()`, called between runs, raises it again where it was swallowed (the
run in progress is then kept incomplete, as for any Ctrl-C) and puts the handler back where
something replaced it. A campaign started with SIGINT ignored (a background job) keeps it ignored.
SIGTERM unwinds the same way (`perflib.errors.Terminated`, a KeyboardInterrupt): a `kill` or a
scheduler's stop also stops the servers and keeps the run in progress incomplete. The runner measures
in its own event loop: a signal that lands there is raised from a loop callback of its own, not inside
the callback it interrupted (uvloop logs an interrupt raised in its read callback as an error, with a
traceback, before passing it on).
"""

from __future__ import annotations

import asyncio
import signal
import threading
from types import FrameType
from typing import Any

from perflib.errors import Terminated

SIGNALS = {signal.SIGINT: KeyboardInterrupt, signal.SIGTERM: Terminated}
"""The signals the campaign unwinds on, and what each raises."""


class CtrlC:
    """The campaign's SIGINT and SIGTERM handler (a context manager; only in the main thread)."""

    def __init__(self) -> None:
        self.seen: type[KeyboardInterrupt] | None = None  # what was raised: KeyboardInterrupt or Terminated
        self.ignored = False  # SIGINT was ignored when the campaign started: Ctrl-C cannot stop it
        self._previous: dict[int, Any] = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.seen = SIGNALS[signum]
        loop = _running_loop()
        if loop is not None:
            # A level runs its event loop in this thread, and the signal may land inside one of the loop's
            # callbacks (a stream's read, called from C under uvloop), which would log the interrupt as an
            # error with a traceback before passing it on: it is raised from a callback of its own instead,
            # which the loop lets through unlogged, and the run in progress unwinds as for any Ctrl-C.
            loop.call_soon_threadsafe(self._raise)
            return
        raise self.seen

    def _raise(self) -> None:
        if self.seen is not None:
            raise self.seen

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is threading.main_thread():
            self.ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
            for sig in SIGNALS:
                if signal.getsignal(sig) != signal.SIG_IGN:  # a signal ignored at start stays ignored
                    self._previous[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous = {}

    def check(self) -> None:
        """Between runs: raise the interrupt where one was seen (and swallowed below), and put the
        handlers back where something replaced them."""
        if self.seen is not None:
            raise self.seen
        for sig in self._previous:
            if signal.getsignal(sig) != self._handler:
                signal.signal(sig, self._handler)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, or None."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
