"""One Jupyter kernel for all the runs of an (arm, backend) group, executed through papermill
(`perflib campaign run --papermill`; by default the runner measures in its own process).

A fresh kernel per run cost the demo campaign about 1.5 s a run (start and stop 1.03 s, importing
pandas and perflib in it 0.46 s) against levels of a second or two. `KernelSession` keeps one
started kernel, and papermill executes each run's parameterized notebook in it through the
`perflib-kernel` engine (papermill's own nbclient engine, handed the session's kernel manager).
What a user opens stays the same: papermill writes the executed, parameterized notebook with its
metadata, each cell's status and, on failure, the error banner; rerunning it with papermill gives
a fresh kernel as usual. The notebook's `parameters` and injected cells set every name it uses, so
what one run leaves in the kernel does not reach the next, except imported modules (the point).

The kernel is started by the group's first notebook, after its server is healthy. (Starting it
before the server, to boot and import pandas while the server loads its model, saved about 2 s a
group on the demo; it was taken out after two loaded full test runs in which a Ctrl-C was not acted
on, a fault that later came back without it: see `perflib.campaign.interrupts`.)

A kernel that died (a crash, a Ctrl-C) is replaced by a fresh one at the next run; a session is
closed (its kernel shut down) when its group is done, or on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ENGINE = "perflib-kernel"
"""The papermill engine name `execute_notebook` passes while a session is open."""

_current = threading.local()


class KernelSession:
    """A started kernel that notebooks execute in one after the other, in one working folder.

    The kernel starts at the first notebook (through nbclient, with papermill's arguments) and
    again whenever it is found dead or a notebook wants another folder. Its client (`kc`, the zmq
    channels) is kept too: a new client waits for the kernel to be ready and for its IOPub channel to
    fall silent for 0.2 s, about 0.2 s a notebook (measured: 0.3 s for an empty 5-cell notebook with a
    new client per notebook). nbclient matches every message to its request, so a kept client does not
    mix two notebooks' outputs."""

    def __init__(self, kernel_name: str) -> None:
        self.kernel_name = kernel_name
        self.km: Any = None
        self.kc: Any = None
        self.cwd: str | None = None

    def manager(self, cwd: str) -> Any:
        """The kernel manager for a notebook run in `cwd`: this session's, if its kernel lives there."""
        from jupyter_core.utils import run_sync  # the notebooks extra: only with --papermill

        if self.km is not None and self.km.has_kernel and (self.cwd != cwd or not run_sync(self.km.is_alive)()):
            self.close()
        if self.km is None:
            self.km = quiet_kernel_manager()(kernel_name=self.kernel_name)  # nbclient's class, quiet at shutdown
        if not self.km.has_kernel:  # nbclient starts it, in papermill's `cwd`
            self.cwd = cwd
        return self.km

    def close(self) -> None:
        """Shut the kernel down now; the next notebook starts a new one."""
        from jupyter_core.utils import run_sync  # the notebooks extra: only with --papermill

        km, kc, self.km, self.kc, self.cwd = self.km, self.kc, None, None, None
        if kc is not None:
            with contextlib.suppress(Exception):
                kc.stop_channels()
        if km is not None and km.has_kernel:
            with contextlib.suppress(Exception):
                run_sync(km.shutdown_kernel)(now=True)


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """`env` added to this process's environment (what a kernel started inside inherits), then undone."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@functools.cache
def quiet_kernel_manager() -> type:
    """jupyter_client's kernel manager, but shutting a kernel down does not send it SIGINT first.

    The stock shutdown interrupts the kernel before its shutdown_request, and an idle ipykernel that
    the signal reaches outside a cell logs "[IPKernelApp] ERROR | KeyboardInterrupt caught in kernel":
    an error line after a run that completed (seen twice in 18 runs of the demo). A finished notebook
    has nothing to interrupt, so the shutdown request alone is sent; a kernel still busy at Ctrl-C is
    stopped by the manager's own timeout and kill.
    """
    from jupyter_client.manager import AsyncKernelManager  # the notebooks extra: only with --papermill

    class QuietShutdownKernelManager(AsyncKernelManager):
        async def _async_interrupt_kernel(self) -> None:
            if self.shutting_down:
                return
            await super()._async_interrupt_kernel()

    return QuietShutdownKernelManager


def current() -> KernelSession | None:
    """The session open in this thread, or None (papermill's usual fresh kernel per notebook)."""
    return getattr(_current, "session", None)


@contextlib.contextmanager
def kernel_session(kernel_name: str) -> Iterator[KernelSession]:
    """Open a session for this thread: notebooks executed inside share its kernel; closed at exit."""
    _register()
    session = KernelSession(kernel_name)
    outer = current()
    _current.session = session
    try:
        yield session
    finally:
        _current.session = outer
        session.close()


_registered = False


def _register() -> None:
    """Make `perflib-kernel` known to papermill (once per process)."""
    global _registered
    if _registered:
        return
    # papermill is the notebooks extra, needed only with --papermill (2 s to import)
    from papermill.clientwrap import PapermillNotebookClient
    from papermill.engines import NBClientEngine, papermill_engines
    from papermill.log import logger
    from papermill.utils import merge_kwargs, remove_args

    class SessionEngine(NBClientEngine):
        """papermill's nbclient engine, run in the open session's kernel (nbclient keeps a kernel it
        did not start alive after the notebook)."""

        @classmethod
        def execute_managed_notebook(cls, nb_man: Any, kernel_name: str, log_output: bool = False,
                                     stdout_file: Any = None, stderr_file: Any = None, start_timeout: int = 60,
                                     execution_timeout: int | None = None, **kwargs: Any) -> Any:
            session = current()
            if session is None:
                return super().execute_managed_notebook(nb_man, kernel_name, log_output, stdout_file, stderr_file,
                                                        start_timeout, execution_timeout, **kwargs)
            kwargs = remove_args(["input_path"], **kwargs)
            safe = remove_args(["timeout", "startup_timeout"], **kwargs)
            final = merge_kwargs(safe, timeout=execution_timeout or kwargs.get("timeout"),
                                 startup_timeout=start_timeout, kernel_name=kernel_name, log=logger,
                                 log_output=log_output, stdout_file=stdout_file, stderr_file=stderr_file)
            km = session.manager(str(Path.cwd()))
            client = PapermillNotebookClient(nb_man, km=km, **final)
            if session.kc is not None and km.has_kernel:
                client.kc = session.kc  # nbclient skips its new client's ready wait
            try:
                return client.execute()
            finally:
                if client.kc is not None:  # the kernel stays, and so do its channels, for the next notebook
                    session.kc = client.kc

    papermill_engines.register(ENGINE, SessionEngine)
    _registered = True
