"""A server that stalls mid-stream (issue 21, bad 2): each request ends at the idle timeout (or, before
its first token, at the request timeout) with the timeout named; the run is incomplete with the reason
and the campaign goes on to the next run, within seconds instead of 600 s a run."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from faultkit import STANDIN, write_campaign
from support import REPO

from perflib import campaign as pc
from perflib import load, rundir
from perflib.server.process import free_port


@contextmanager
def standin(*flags: str) -> Iterator[str]:
    """The stand-in server with `flags`, its base URL once /health answers; stopped at the end."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(STANDIN), "--port", str(port), *flags],
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=1).read()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        yield url
    finally:
        proc.kill()
        proc.wait()


def _request(url: str, transport: str, timeout: float, idle: float | None) -> load.RequestRecord:
    async def go() -> load.RequestRecord:
        async with load.http_client(timeout) as client:
            return await load.stream_request(client, load.RequestSpec(
                url, "p", 8, "r", batch=1, context=1, repeat=1, transport=transport, timeout=timeout,
                idle_timeout=idle))

    return load.run_sync(go())


@pytest.mark.parametrize("transport", ["raw", "httpx"])
def test_a_stream_that_stalls_after_tokens_ends_at_the_idle_timeout(transport):
    with standin("--stall-after", "2") as url:
        began = time.monotonic()
        rec = _request(url, transport, timeout=30.0, idle=0.5)
        took = time.monotonic() - began
    assert not rec.ok and rec.status == 200 and len(rec.chunk_ns) == 2  # what arrived is kept
    assert rec.error.startswith("stalled: no byte from the server for 0.5 s after 2 token chunks")
    assert "idle_timeout_s" in rec.error and "--idle-timeout" in rec.error
    assert 0.5 <= took < 10, took  # the idle timeout, not the request timeout of 30 s


@pytest.mark.parametrize("transport", ["raw", "httpx"])
def test_headers_then_nothing_ends_at_the_request_timeout(transport):
    """Before the first token the server may be in its prefill (llama-server sends its headers at once,
    then nothing until the first token): the idle timeout does not count there, the request timeout does."""
    with standin("--stall-after", "0") as url:
        began = time.monotonic()
        rec = _request(url, transport, timeout=1.5, idle=0.5)
        took = time.monotonic() - began
    assert not rec.ok and rec.chunk_ns == []
    assert rec.error.startswith("timed out after 1.5 s and 0 token chunks (request timeout"), rec.error
    assert 1.5 <= took < 10, took


def test_a_healthy_stream_is_not_cut_by_the_idle_timeout():
    with standin("--token-interval", "0.1") as url:
        rec = _request(url, "raw", timeout=30.0, idle=0.5)
    assert rec.ok and rec.error is None and len(rec.chunk_ns) == 8


def test_the_default_request_timeout_scales_with_the_decode_tokens():
    assert load.request_timeout_for(128) < load.request_timeout_for(2048)
    assert load.request_timeout_for(2048) - load.request_timeout_for(128) == pytest.approx(1920.0)


def test_a_campaign_against_a_stalling_server_marks_each_run_incomplete_and_goes_on(tmp_path):
    path = write_campaign(tmp_path, "--stall-after", "2", batches="[1, 2]", extra="idle_timeout_s: 1\n")
    campaign = pc.load_campaign(path)
    assert (campaign.idle_timeout_s, campaign.request_timeout_s) == (1.0, None)
    began = time.monotonic()
    result = pc.run_campaign(campaign, progress=False, write_page=False, contention_threshold=None)
    took = time.monotonic() - began
    assert result.done == () and sorted(label for label, _ in result.failed) == [
        "default/standin/b1_c16_r1", "default/standin/b2_c16_r1"]  # the second run was measured too
    for label, error in result.failed:
        assert "stalled: no byte from the server for 1 s after 2 token chunks" in error, error
        manifest = rundir.read_manifest(tmp_path / "data" / "raw" / "faults" / label)
        assert manifest["status"] == "incomplete"
        assert manifest["timeouts"] == {"request_s": load.request_timeout_for(8), "idle_s": 1.0}
        assert any("stalled" in e and "idle timeout" in e for e in manifest["errors"])
    assert took < 120, took  # seconds a run, not the 600 s it was


def test_sweep_takes_the_timeouts_as_flags(tmp_path):
    with standin("--stall-after", "1") as url:
        done = subprocess.run([sys.executable, "-m", "perflib", "sweep", "--base-url", url, "--batch", "1",
                               "--context", "16", "--decode-tokens", "8", "--repeats", "1", "--out",
                               str(tmp_path / "out"), "--idle-timeout", "0.5", "--request-timeout", "20",
                               "--no-contention", "--json"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "incomplete:" in done.stderr and "Traceback" not in done.stderr
    manifest = rundir.read_manifest(tmp_path / "out" / "b1_c16_r1")
    assert manifest["timeouts"] == {"request_s": 20.0, "idle_s": 0.5}
    assert any("stalled: no byte from the server for 0.5 s after 1 token chunks" in e for e in manifest["errors"])
    assert json.loads(done.stdout)["incomplete"]


@pytest.mark.parametrize("key, value, expected", [
    ("idle_timeout_s", "0", "a number above 0"), ("request_timeout_s", "-3", "a number above 0"),
    ("idle_timeout_s", ".nan", "nan"),
])
def test_bad_timeouts_are_refused_with_their_line(tmp_path, key, value, expected):
    from perflib.errors import InputError

    path = write_campaign(tmp_path, extra=f"{key}: {value}\n")
    with pytest.raises(InputError, match=rf"{key} \(line \d+\).*{expected}"):
        pc.load_campaign(path)
