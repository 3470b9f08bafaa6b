"""The campaign's Ctrl-C handler: a swallowed interrupt is raised again between runs, a replaced
handler is put back, and a campaign started with SIGINT ignored keeps it ignored."""

from __future__ import annotations

import signal

import pytest

from perflib.campaign.interrupts import CtrlC


def test_a_swallowed_ctrl_c_is_raised_again_at_the_check():
    with CtrlC() as ctrl_c:
        ctrl_c.check()  # nothing seen: nothing raised
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass  # what the notebook machinery below may do with it
        with pytest.raises(KeyboardInterrupt):
            ctrl_c.check()
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
