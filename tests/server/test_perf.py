"""The `perf` profiler kind (`perflib.server.perf`): how it wraps a server, what stops it before the
server starts, and the capture it leaves (`perf script` of a real perf.data)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perflib.errors import PerflibError
from perflib.server import perf
from perflib.server.profilers import LIVE_KINDS, Capture, profiler_kind
from perflib.traces import ReadMode, detect_format, read_trace

needs_perf = pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")


@needs_perf
def test_the_server_runs_under_perf_record_on_the_monotonic_clock(tmp_path):
    capture = Capture("perf", tmp_path / "capture", args=("-F", "4999"))
    argv, env, stdout = capture.wrap(("llama-server", "-m", "model.gguf"), {"A": "1"})
    n = len(perf.RECORD)
    assert argv[0] == shutil.which("perf") and argv[1:n + 1] == perf.RECORD
    assert {"cpu-clock", "CLOCK_MONOTONIC", "-g", "--no-buildid"} <= set(perf.RECORD)
    assert argv[n + 1:n + 3] == ("-o", str(tmp_path / "capture" / "perf.data"))
    assert argv[n + 3:] == ("-F", "4999", "--", "llama-server", "-m", "model.gguf")  # the campaign's args after ours
    assert capture.grace_s == perf.GRACE_S and Capture("cupti", tmp_path).grace_s == 0.0
    assert capture.stop_leader and not Capture("nsys", tmp_path).stop_leader  # perf passes the stop on
    assert env == {"A": "1"} and stdout is None and (tmp_path / "capture").is_dir()
    assert "perf" in LIVE_KINDS and profiler_kind("perf").cut == "lifetime" and profiler_kind("perf").method == "wrap"


def test_a_missing_perf_is_said_before_the_server_starts(tmp_path):
    with pytest.raises(PerflibError, match="apt-get install linux-perf"):
        Capture("perf", tmp_path, binary=str(tmp_path / "no-perf-here")).wrap(("server",), {})


def test_a_kernel_that_forbids_sampling_is_said(tmp_path, monkeypatch):
    paranoid = tmp_path / "perf_event_paranoid"
    paranoid.write_text("3\n")
    monkeypatch.setattr(perf, "PARANOID", paranoid)
    monkeypatch.setattr(perf.os, "geteuid", lambda: 1000)
    with pytest.raises(PerflibError, match="is 3: the kernel lets no unprivileged user sample"):
        perf.check_allowed()
    paranoid.write_text("2\n")
    perf.check_allowed()  # allowed: nothing said


def test_a_capture_without_perf_data_says_why(tmp_path):
    with pytest.raises(PerflibError, match="perf wrote no samples"):
        Capture("perf", tmp_path).lifetime_capture()


@needs_perf
def test_the_capture_is_perf_script_of_perf_data_and_is_made_once(tmp_path):
    data = tmp_path / perf.DATA
    busy = "import time\nend = time.monotonic() + 0.2\nwhile time.monotonic() < end: pass\n"
    done = subprocess.run(["perf", *perf.RECORD, "-o", str(data), "--", sys.executable, "-c", busy],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"perf record cannot sample here: {done.stderr.strip()[-200:]}")
    script = Capture("perf", tmp_path).lifetime_capture()
    assert script == tmp_path / perf.SCRIPT and detect_format(script) == "perf-script"
    trace = read_trace(script, ReadMode.LEAN)
    assert trace.clock == "monotonic" and len(trace.dispatches) > 50
    assert any("python" in name for name in trace.meta["threads"].values())
    stamp = script.stat().st_mtime_ns
    assert Capture("perf", tmp_path).lifetime_capture() == script and script.stat().st_mtime_ns == stamp
    assert not Path(str(script) + ".part").exists()
