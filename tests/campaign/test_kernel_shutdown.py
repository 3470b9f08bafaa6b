"""Shutting down a notebook's kernel sends it no SIGINT: the cause of the stray
"[IPKernelApp] ERROR | KeyboardInterrupt caught in kernel" lines after runs that completed."""

from __future__ import annotations

import asyncio
import signal

import pytest
from jupyter_client.manager import AsyncKernelManager

from perflib.campaign.kernels import quiet_kernel_manager
from perflib.campaign.notebooks import find_kernel


def signals_sent_on_shutdown(manager_class: type) -> list[int]:
    """Start a real kernel with `manager_class`, shut it down, return the signals sent to it meanwhile."""
    sent: list[int] = []

    class Recording(manager_class):  # type: ignore[misc, valid-type]
        async def _async_signal_kernel(self, signum: int) -> None:
            if self.shutting_down:
                sent.append(signum)
            await super()._async_signal_kernel(signum)

    async def run() -> None:
        km = Recording(kernel_name=find_kernel())
        await km.start_kernel()
        client = km.client()
        client.start_channels()
        await client.wait_for_ready(timeout=60)
        client.stop_channels()
        await km.shutdown_kernel()

    asyncio.run(run())
    return sent


@pytest.mark.slow
def test_the_stock_shutdown_interrupts_the_kernel_and_ours_does_not():
    assert signal.SIGINT in signals_sent_on_shutdown(AsyncKernelManager)  # the cause, as jupyter_client does it
    assert signal.SIGINT not in signals_sent_on_shutdown(quiet_kernel_manager())
