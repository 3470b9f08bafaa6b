"""What a campaign does about contended runs, said as it happens (issue 22 item 1): the first one
prints one line naming who used the CPUs and how to override, the bar counts redone and kept runs,
the wait for quiet CPUs is bounded over the campaign and stated at the end."""

from __future__ import annotations

import time

import pytest

from perflib import load, rundir
from perflib.campaign.contention import CpuContention
from perflib.commands.campaign import WAIT_BUDGET_S

WHY = ("contended: the server's and client's threads waited 1.40 s on a run queue per CPU second (threshold 0.50); "
       "heaviest others: python3 (pid 4242) 0.9 CPU s")


def contended_run(tmp_path, name: str = "b1_c256_r1"):
    run_dir = tmp_path / name
    run_dir.mkdir()
    rundir.write_manifest(run_dir, {"status": "complete", "contention": {
        "available": True, "contended": True, "seconds": 1.0, "why": WHY, "note": "",
        "top": [{"pid": 4242, "name": "python3", "cpu_s": 0.9}, {"pid": 4243, "name": "cc1plus", "cpu_s": 0.45}]}})
    return run_dir


class Bar:
    postfix = ""

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text


def test_the_first_contended_run_says_who_what_and_how_to_override_once(tmp_path):
    lines: list[str] = []
    bar = Bar()
    cpu = CpuContention(budget_s=0, log=lines.append, bar=bar)
    first, second = contended_run(tmp_path), contended_run(tmp_path, "b2_c256_r1")
    assert cpu.observe(first) == WHY
    assert cpu.should_redo("default/cpu/b1_c256_r1", first, 1) is False  # no wait budget: kept at once
    cpu.keep("default/cpu/b1_c256_r1")
    assert cpu.observe(second) and not cpu.should_redo("default/cpu/b2_c256_r1", second, 1)
    cpu.keep("default/cpu/b2_c256_r1")
    assert len(lines) == 1  # one line, at the first contended run only
    line = lines[0]
    assert line.startswith("default/cpu/b1_c256_r1 contended (the server's and client's threads waited 1.40 s")
    assert "busiest other processes: python3 (pid 4242) 90% of a core, cc1plus (pid 4243) 45% of a core" in line
    assert "keeps contended runs marked contended and leaves them out of medians and verdicts" in line
    assert "--no-contention" in line and "--contention-threshold" in line and "--wait-threshold" in line
    assert "--psi-threshold" in line and "--contention-wait 0" in line
    assert bar.postfix == "default/cpu/b2_c256_r1, 2 kept contended"
    assert cpu.summary() == ("waited 0 s in all for quiet CPUs; 0 attempts redone; 2 runs kept marked contended "
                             "(left out of medians and verdicts)")


def test_the_wait_for_quiet_cpus_is_bounded_over_the_campaign(tmp_path, monkeypatch):
    """Each wait takes what is left of the budget at most; once less than one sampling window is
    left, contended runs are kept without waiting, and the log says so once."""
    asked: list[float] = []

    def busy_machine(timeout_s: float = 120.0, **_: object) -> None:  # the machine never gets quiet
        asked.append(timeout_s)
        time.sleep(min(timeout_s, 0.05))
        return None

    monkeypatch.setattr(load, "wait_quiet", busy_machine)
    lines: list[str] = []
    cpu = CpuContention(budget_s=5.0, log=lines.append)
    run_dir = contended_run(tmp_path)
    assert cpu.should_redo("r1", run_dir, 1)
    assert "up to 3 attempts, at most 5 s of waiting in all" in lines[0]
    cpu.wait("r1")
    cpu.waited_s = 3.5  # as if that wait had lasted 3.5 s
    assert cpu.should_redo("r1", run_dir, 2) is False  # 1.5 s left: less than one window
    assert not cpu.should_redo("r2", run_dir, 3)  # and the attempts are spent anyway
    assert asked == [pytest.approx(5.0)] and cpu.redone == 1
    cpu.waited_s = 2.5
    cpu.wait("r2")  # a later wait is offered what is left of the budget, never more
    assert asked[-1] == pytest.approx(2.5, abs=0.01)


def test_the_budget_spent_is_said_once(tmp_path, monkeypatch):
    monkeypatch.setattr(load, "wait_quiet", lambda timeout_s=120.0, **_: time.sleep(0.01))
    lines: list[str] = []
    cpu = CpuContention(budget_s=2.0, log=lines.append)
    cpu.wait("r1")
    cpu.wait("r2")
    spent = [line for line in lines if "contended runs from now on are kept" in line]
    assert len(spent) == 1 and "--contention-wait 2" in spent[0]


def test_the_help_default_is_the_campaigns_budget():
    from perflib.campaign import contention

    assert WAIT_BUDGET_S == contention.WAIT_BUDGET_S
