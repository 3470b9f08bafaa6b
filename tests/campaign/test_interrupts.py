"""The campaign's Ctrl-C handler: a swallowed interrupt is raised again between runs, a replaced
handler is put back, a campaign started with SIGINT ignored keeps it ignored, and SIGTERM unwinds as
Ctrl-C does, as `Terminated`."""

from __future__ import annotations

import signal

import pytest

from perflib.campaign.interrupts import CtrlC
from perflib.errors import Terminated, interrupt_text


@pytest.fixture(autouse=True)
def sigint_as_a_shell_gives_it():
    """SIGINT at Python's default, as a foreground shell starts a program: a test suite started in the
    background (`cmd &` in a script) inherits it ignored, and CtrlC rightly keeps an ignored SIGINT
    ignored, which is not what these tests are about (the ignored case has its own test)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_a_swallowed_ctrl_c_is_raised_again_at_the_check():
    with CtrlC() as ctrl_c:
        ctrl_c.check()  # nothing seen: nothing raised
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass  # what the notebook machinery below may do with it
        with pytest.raises(KeyboardInterrupt) as raised:
            ctrl_c.check()
        assert raised.type is KeyboardInterrupt
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # pytest's, put back


def test_a_replaced_handler_is_put_back_at_the_check():
    with CtrlC() as ctrl_c:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # something below took it over
        ctrl_c.check()
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        assert ctrl_c.seen


def test_a_campaign_started_with_sigint_ignored_keeps_it_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with CtrlC() as ctrl_c:
            ctrl_c.check()
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
            signal.raise_signal(signal.SIGINT)  # ignored: nothing raised
            assert not ctrl_c.seen
    finally:
        signal.signal(signal.SIGINT, previous)


def test_sigterm_unwinds_as_terminated_and_is_raised_again_at_the_check():
    before = signal.getsignal(signal.SIGTERM)
    with CtrlC() as ctrl_c:
        with pytest.raises(Terminated):
            signal.raise_signal(signal.SIGTERM)
        with pytest.raises(Terminated) as raised:  # swallowed below: raised again, still a Terminated
            ctrl_c.check()
        assert isinstance(raised.value, KeyboardInterrupt)
    assert signal.getsignal(signal.SIGTERM) == before
    assert interrupt_text(Terminated) == "terminated (SIGTERM)"
    assert interrupt_text(KeyboardInterrupt) == "interrupted (Ctrl-C)"


def test_the_runner_says_when_ctrl_c_cannot_stop_it():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with CtrlC() as ctrl_c:
            assert ctrl_c.ignored
    finally:
        signal.signal(signal.SIGINT, previous)
    with CtrlC() as ctrl_c:
        assert not ctrl_c.ignored


def test_a_signal_inside_an_event_loop_callback_unwinds_the_loop_without_an_error_logged():
    """The runner measures in its own event loop (uvloop where installed): a Ctrl-C or SIGTERM that lands
    in a stream's read callback is raised from a callback of its own, so the loop passes it on without
    logging it as an error with a traceback (uvloop does, for one raised inside its read callback), and
    the level unwinds as for any Ctrl-C."""
    import asyncio

    from perflib import load

    logged: list[dict] = []

    class Reader(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            signal.raise_signal(signal.SIGTERM)  # the signal arrives while the loop reads

    async def level() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: logged.append(context))

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"token")
            await writer.drain()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        await loop.create_connection(Reader, "127.0.0.1", server.sockets[0].getsockname()[1])
        await asyncio.sleep(5)  # the interrupt ends the level before this does
        server.close()

    with CtrlC() as ctrl_c:
        with pytest.raises(Terminated):
            load.run_async(level())
        assert ctrl_c.seen is Terminated
    assert [c for c in logged if isinstance(c.get("exception"), KeyboardInterrupt)] == []
