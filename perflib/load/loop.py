"""The event loop the client runs on: uvloop where installed, else asyncio; also inside Jupyter."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from typing import Any


def event_loop_name() -> str:
    """The event loop `run_sync` uses: `uvloop <version>` when installed, else `asyncio`.

    uvloop halves the client's CPU per streamed token (its reads and callbacks run in C); set
    `PERFLIB_EVENT_LOOP=asyncio` to use the standard loop anyway.
    """
    if os.environ.get("PERFLIB_EVENT_LOOP", "auto") != "asyncio":
        try:
            import uvloop  # optional (not on Windows), and not loaded where PERFLIB_EVENT_LOOP=asyncio
        except ImportError:
            return "asyncio"
        return f"uvloop {uvloop.__version__}"
    return "asyncio"


def run_async(coro: Any) -> Any:
    """`asyncio.run` on the loop `event_loop_name()` names."""
    if event_loop_name().startswith("uvloop"):
        import uvloop  # late: see event_loop_name

        return uvloop.run(coro)
    return asyncio.run(coro)


def run_sync(coro: Any) -> Any:
    """Run a coroutine to completion from sync code, also inside Jupyter's running event loop
    (there in a worker thread with its own loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run_async(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run_async, coro).result()
