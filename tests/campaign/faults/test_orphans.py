"""No server outlives its runner (issue 21, bad 1): a runner killed with `kill -9` takes its server
with it (PR_SET_PDEATHSIG), a server that ignores its signal is stopped by the next `campaign run`
(found in server.json by pid and start time, never a reused pid), a child that left the process group
with setsid is stopped with the server, and `perflib server start` stops llama-server on SIGINT (also
in the background) and on SIGTERM. Every test checks that nothing it started is left (conftest.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faultkit import STANDIN, alive, arm_dir_of, runner, server_record, wait_for, write_campaign
from support import REPO

from perflib import campaign as pc
from perflib import rundir
from perflib.campaign.servers import ORPHANED, stop_orphans
from perflib.server import Launch, lifetime, start
from perflib.server.process import free_port


def _started(arm_dir: Path) -> dict:
    """The first start's record once its processes are recorded and its first run has begun."""
    record = wait_for(lambda: (server_record(arm_dir).get("starts") or [{}])[0].get("processes") and
                      server_record(arm_dir)["starts"][0], what="the server's record")
    wait_for(lambda: (arm_dir / "b1_c16_r1" / "warmup.jsonl").exists(), what="the first run to start")
    return record


def test_a_server_dies_with_a_runner_killed_by_sigkill(tmp_path):
    path = write_campaign(tmp_path, "--token-interval", "0.5", batches="[1, 2]")
    proc = runner(path, "--no-report", "--no-contention")
    try:
        record = _started(arm_dir_of(path))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        wait_for(lambda: not alive(record["pid"]), timeout=10, what="the server to die with its runner")
    finally:
        proc.kill()
        proc.communicate()
    assert record["runner"]["pid"] == proc.pid and record["processes"][0]["pid"] == record["pid"]


def test_a_server_that_outlives_a_kill_9_is_stopped_by_the_next_run(tmp_path):
    """The stand-in ignores SIGTERM, so the signal its runner's death sends does not stop it: the next
    `campaign run` finds it in server.json, stops it (SIGKILL after the recorded grace period), says so,
    and measures the runs on a server of its own."""
    path = write_campaign(tmp_path, "--ignore-term", "--token-interval", "0.5", batches="[1, 2]", grace_s=1.0)
    arm_dir = arm_dir_of(path)
    first = runner(path, "--no-report", "--no-contention")
    try:
        record = _started(arm_dir)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        first.kill()
        first.communicate()
    time.sleep(1.0)
    assert alive(record["pid"]), "the stand-in should have survived its runner (it ignores SIGTERM)"
    again = runner(path, "--no-report", "--no-contention")
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert not alive(record["pid"])
    assert f"stopped a server left running by a runner that died (pid {first.pid}" in err
    report = json.loads(out)
    assert len(report["orphans_stopped"]) == 1 and str(record["pid"]) in report["orphans_stopped"][0]
    assert sorted(report["done"]) == ["default/standin/b1_c16_r1", "default/standin/b2_c16_r1"]
    starts = server_record(arm_dir)["starts"]
    assert starts[0]["ended"] == ORPHANED and starts[0]["orphan_killed"] == [record["pid"]]
    assert starts[1]["ended"] == "stopped at the end of the arm"


def test_a_reused_pid_or_a_live_runner_is_never_signalled(tmp_path):
    """A record whose runner is gone names a process by pid and start time: a process that now has the
    pid but started at another time is not the server, and is left alone; a start whose runner still
    runs (another runner on this host) is not an orphan."""
    campaign = pc.load_campaign(write_campaign(tmp_path))
    arm_dir = arm_dir_of(campaign.path)
    arm_dir.mkdir(parents=True)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        me = lifetime.Identity.of(bystander.pid)
        dead_runner = {"pid": 2**22 + 12345, "start": 1, "boot": lifetime.boot_id()}  # no such process
        starts = [
            {"segment": 1, "host": pc.servers.host_name(), "runner": dead_runner, "pid": bystander.pid,
             "processes": [{**me.as_record(), "start": me.start + 1}]},  # the pid, another start time
            {"segment": 2, "host": pc.servers.host_name(), "runner": lifetime.own_identity(), "pid": bystander.pid,
             "processes": [me.as_record()]},  # this runner is alive: not an orphan
        ]
        (arm_dir / "server.json").write_text(json.dumps({"starts": starts}))
        assert stop_orphans(campaign, campaign.data_dir) == []
        assert bystander.poll() is None
        starts[1]["runner"] = dead_runner  # now it is the orphan: the same pid and start time
        (arm_dir / "server.json").write_text(json.dumps({"starts": starts}))
        (line,) = stop_orphans(campaign, campaign.data_dir, grace_s=2.0)
        assert f"processes {bystander.pid}" in line or f"process {bystander.pid}" in line
        assert bystander.wait(timeout=10) == -signal.SIGTERM
        recorded = json.loads((arm_dir / "server.json").read_text())["starts"]
        assert "ended" not in recorded[0] or recorded[0]["ended"] != ORPHANED
        assert recorded[1]["ended"] == ORPHANED
    finally:
        bystander.kill()
        bystander.wait()


def test_a_child_that_left_the_process_group_is_stopped_with_the_server(tmp_path):
    pidfile = tmp_path / "escaped.pid"
    port = free_port()
    launch = Launch((sys.executable, str(STANDIN), "--port", str(port), "--escape", str(pidfile)),
                    f"http://127.0.0.1:{port}", tmp_path / "server.log", grace_s=2.0)
    handle = start(launch)
    try:
        escaped = int(wait_for(lambda: pidfile.is_file() and pidfile.read_text(), what="the escaped child"))
        assert os.getpgid(escaped) != handle.process.pid  # out of the server's process group
        assert escaped in {p.pid for p in handle.track()}
    finally:
        handle.stop()
    assert not alive(escaped) and not alive(handle.process.pid)


def test_a_campaign_stops_the_escaped_child_and_records_a_server_that_died_as_died(tmp_path):
    """The stand-in forks a child that calls setsid, and is killed by SIGKILL during the arm's last run:
    the record says it died (and how), not that it was stopped at the end of the arm, and its escaped
    child is gone."""
    pidfile = tmp_path / "escaped.pid"
    path = write_campaign(tmp_path, "--escape", str(pidfile), "--die-after", "1", "--die-signal", "KILL")
    result = pc.run_campaign(pc.load_campaign(path), progress=False, write_page=False, contention_threshold=None)
    (start_record,) = server_record(arm_dir_of(path))["starts"]
    assert start_record["ended"] == "died" and start_record["exit"] == "killed by SIGKILL (signal 9)"
    assert start_record["exit_code"] == -9
    assert not alive(int(pidfile.read_text()))
    assert [label for label, _ in result.failed] == ["default/standin/b1_c16_r1"]
    assert "server killed by SIGKILL (signal 9)" in result.failed[0][1]


# ------------------------------------------------------------------------- perflib server start


def _server_start(tmp_path: Path, sigint_ignored: bool) -> tuple[subprocess.Popen, int]:
    """`perflib server start` as a background job starts it (SIGINT ignored) or a terminal does; its
    pid and its llama-server's, once ready."""
    def background() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN if sigint_ignored else signal.SIG_DFL)

    proc = subprocess.Popen([sys.executable, "-m", "perflib", "server", "start", "--parallel", "1", "--context",
                             "32", "--decode-tokens", "8", "--threads", "1", "--log", str(tmp_path / "server.log")],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=background)
    line = proc.stdout.readline()
    assert "ready at" in line, line + proc.stderr.read()
    return proc, int(line.rsplit("pid ", 1)[1].rstrip(")\n"))


@pytest.mark.server
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint-in-the-background", "sigterm"])
def test_server_start_stops_llama_server_on_sigint_in_the_background_and_on_sigterm(
        tmp_path, llama_server_binary, tiny_model, sig):
    proc, server_pid = _server_start(tmp_path, sigint_ignored=True)
    try:
        assert alive(server_pid)
        os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "llama-server stopped" in err and "Traceback" not in err
    assert not alive(server_pid)


@pytest.mark.server
def test_server_start_killed_by_sigkill_takes_llama_server_with_it(tmp_path, llama_server_binary, tiny_model):
    proc, server_pid = _server_start(tmp_path, sigint_ignored=False)
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        wait_for(lambda: not alive(server_pid), timeout=15, what="llama-server to die with perflib server start")
    finally:
        proc.kill()
        proc.communicate()
    assert rundir.SERVER_LOG  # the log stays where it was asked to be
    assert (tmp_path / "server.log").stat().st_size > 0
