"""Split work (issue 21, bad 4): a claim left empty or unreadable by a crash between creating and writing
it was never held and is taken over; a claim whose pid now belongs to another process is stale; and a
runner that finds every (arm, backend) held by another says so on stderr and in --json, with the exit
status that tells "nothing done"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from support import MINIMAL_CAMPAIGN

from perflib.campaign import claims
from perflib.cli import main
from perflib.commands.campaign import NOTHING_DONE_EXIT


@pytest.mark.parametrize("body", [b"", b"{\"host\": ", b"[1, 2]", b"\xff\xfe", b"{}"],
                         ids=["empty", "cut", "not-an-object", "not-utf8", "no-holder"])
def test_an_empty_or_unreadable_claim_was_never_held_and_is_taken_over(tmp_path, monkeypatch, body):
    monkeypatch.setenv("PERFLIB_HOST", "host-a")
    (tmp_path / claims.CLAIM).write_bytes(body)  # fresh: not stale by its age
    with claims.claim(tmp_path) as taken:
        assert isinstance(taken, claims.Claim)
        held = json.loads((tmp_path / claims.CLAIM).read_text())
        assert held["host"] == "host-a" and held["pid"] == os.getpid() and isinstance(held["start"], int)
    assert not (tmp_path / claims.CLAIM).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temp file left beside it


def test_a_claim_whose_pid_is_another_process_now_is_stale(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLIB_HOST", "host-a")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / claims.CLAIM).write_text(json.dumps({"host": "host-a", "pid": other.pid, "start": 1,
                                                         "since": time.time()}))
        with claims.claim(tmp_path) as taken:  # the pid lives, but it is not the runner that claimed it
            assert isinstance(taken, claims.Claim)
        (tmp_path / claims.CLAIM).write_text(json.dumps({"host": "host-a", "pid": other.pid, "since": time.time()}))
        with claims.claim(tmp_path) as held:  # an older claim without a start time: its live pid holds it
            assert isinstance(held, str) and f"pid {other.pid}" in held
    finally:
        other.kill()
        other.wait()


def test_a_runner_that_finds_everything_held_says_so_and_exits_nothing_done(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(MINIMAL_CAMPAIGN)
    arm_dir = tmp_path / "data" / "raw" / "t" / "default" / "cpu"
    arm_dir.mkdir(parents=True)
    (arm_dir / claims.CLAIM).write_text(json.dumps({"host": "far-host", "pid": 4242, "since": time.time()}))
    code = main(["campaign", "run", str(path), "--json", "--no-report", "--no-contention"])
    captured = capsys.readouterr()
    assert code == NOTHING_DONE_EXIT == 3
    report = json.loads(captured.out)
    assert report["done"] == [] and report["failed"] == [] and report["nothing_done"] is True
    assert report["claimed"] == [{"group": "default/cpu", "holder": report["claimed"][0]["holder"]}]
    assert "host far-host, pid 4242" in report["claimed"][0]["holder"]
    assert "default/cpu not measured here: another runner holds it (host far-host, pid 4242" in captured.err
    assert "nothing done" in captured.err
    assert (arm_dir / claims.CLAIM).is_file()  # another runner's claim is left alone


def test_the_exit_codes_are_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["campaign", "run", "--help"])
    text = capsys.readouterr().out
    assert "exit status:" in text and f"{NOTHING_DONE_EXIT}    nothing done" in text and "75" in text
