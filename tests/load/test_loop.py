"""The client's event loop: uvloop where installed, asyncio on request, and from inside a running loop."""

from __future__ import annotations

import asyncio

from perflib import load


def test_event_loop_choice_and_run_sync(monkeypatch):
    async def loop_module() -> str:
        return type(asyncio.get_running_loop()).__module__

    monkeypatch.setenv("PERFLIB_EVENT_LOOP", "asyncio")
    assert load.event_loop_name() == "asyncio"
    assert load.run_sync(loop_module()).startswith("asyncio")
    monkeypatch.delenv("PERFLIB_EVENT_LOOP")
    name = load.event_loop_name()
    assert load.run_sync(loop_module()).startswith("uvloop" if name.startswith("uvloop") else "asyncio")

    async def inside_a_running_loop() -> str:  # as in Jupyter: run_sync hands off to a thread
        return load.run_sync(loop_module())

    assert asyncio.run(inside_a_running_loop())
