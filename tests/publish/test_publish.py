"""One publish step: `perflib campaign report`, `campaign run` and `open_campaign` decide each candidate, gate
and level check once, and show the one result they made: the page, `--json` and the terminal agree."""

from __future__ import annotations

import json
import shutil
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from support import DATA

from perflib import checks, derive, open_campaign
from perflib.campaign import load_campaign
from perflib.cli import main
from perflib.config import RunSpec
from perflib.publish import RunStates, end_run, publish
from perflib.verdicts import answer_dict
from perflib.verdicts.evaluate import evaluate_candidate, evaluate_gate

SAMPLE = DATA / "campaign-sample"


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    """A copy of the committed sample capture (two arms, a gate, the playbook's candidates), every run complete."""
    if not (SAMPLE / "raw").is_dir():
        pytest.skip("committed sample capture tests/data/campaign-sample/raw is missing")
    shutil.copytree(SAMPLE, tmp_path / "sample")
    return tmp_path / "sample" / "campaign.yaml"


def _counted(monkeypatch: pytest.MonkeyPatch, func: Callable) -> list[tuple]:
    """Every call of `func` from now on, wherever a perflib module holds it (its own module's name and any
    `from ... import` of it), with its arguments."""
    calls: list[tuple] = []

    def counting(*args, **kwargs):
        calls.append(args)
        return func(*args, **kwargs)

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("perflib") and getattr(module, func.__name__, None) is func:
            monkeypatch.setattr(module, func.__name__, counting)
    return calls


def _evaluations(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[tuple]]:
    return {"candidates": _counted(monkeypatch, evaluate_candidate),
            "gates": _counted(monkeypatch, evaluate_gate),
            "checks": _counted(monkeypatch, checks.level_checks)}


def _once(calls: dict[str, list[tuple]], campaign) -> None:
    assert Counter(args[0].id for args in calls["candidates"]) == Counter(c.id for c in campaign.candidates)
    assert [args[0] for args in calls["gates"]] == list(campaign.gates)
    assert len(calls["checks"]) == 1


def test_campaign_report_decides_each_candidate_gate_and_check_once(sample, monkeypatch, capsys):
    campaign = load_campaign(sample)
    assert campaign.candidates and campaign.gates  # else counting them would prove nothing
    calls = _evaluations(monkeypatch)
    assert main(["campaign", "report", str(sample), "--json"]) == 0
    _once(calls, campaign)
    shown = json.loads(capsys.readouterr().out)
    page = Path(shown["page"]).read_text()
    for entry in shown["answer"]["candidates"]:  # the page shows the answer --json gives, decided that once
        if any(level["outcome"] != "not measured" for level in entry["levels"]):
            assert entry["label"] in page


def test_campaign_run_gives_the_answer_of_the_tables_it_wrote_decided_once(sample, monkeypatch, capsys):
    """Every run complete: `campaign run --json` measures nothing, publishes the page and answers from the
    same decisions, as the derived tables it wrote read back would answer (what it did before)."""
    campaign = load_campaign(sample)
    calls = _evaluations(monkeypatch)
    assert main(["campaign", "run", str(sample), "--json", "--no-contention"]) == 0
    _once(calls, campaign)
    shown = json.loads(capsys.readouterr().out)
    assert shown["done"] == [] and shown["page"] and Path(shown["page"]).is_file()
    assert shown["answer"] == json.loads(json.dumps(answer_dict(campaign, derive.read(campaign.derived_dir()))))
    assert (shown["runs_complete"], shown["runs_total"]) == (len(campaign.expand()), len(campaign.expand()))


def test_open_campaign_decides_once_for_all_its_accessors(sample, monkeypatch):
    view = open_campaign(sample)
    calls = _evaluations(monkeypatch)
    verdicts, gates, summary, table = view.verdict_list(), view.gates(), view.summary(), view.verdicts()
    page = view.write_report()
    _once(calls, view.campaign)
    rows = [line for line in summary.splitlines() if line.startswith("| ")]  # each candidate's answer
    assert len(table) == len(verdicts) and gates and rows and all(row in page.read_text() for row in rows)


def test_run_states_name_each_run_by_its_label(sample):
    campaign = load_campaign(sample)
    run = campaign.expand()[0]
    folder = run.run_dir(campaign.data_dir)
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "status": "incomplete"}))
    states = RunStates.of(derive.build(campaign))
    assert states.failed == (run.label,) and states.complete == states.total - 1 == len(campaign.expand()) - 1
    rows = derive.build(campaign).runs.itertuples(index=False)
    assert sorted(RunSpec.label_of(row) for row in rows) == sorted(r.label for r in campaign.expand())


def test_end_run_splits_this_runs_failures_as_the_page_does(sample):
    """A failure of a run whose folder is complete (its capture or profile failed) is partial; one whose folder
    is not complete, or that has none, failed. Without the page nothing is derived."""
    campaign = load_campaign(sample)
    complete = campaign.expand()[0]
    failures = [(complete.label, "profile failed: x"), ("after/cpu/b9_c128_r1", "server died")]
    end = end_run(campaign, campaign.data_dir, None, failures, write_page=False)
    assert end.partial == ((complete.label, "profile failed: x"),) and end.failed == (failures[1],)
    assert end.published is None and end.page is None and end.on_disk is None
    assert not campaign.derived_dir().exists()
    written = end_run(campaign, campaign.data_dir, None, failures, write_page=True)
    assert written.page is not None and written.page.is_file() and written.on_disk == (8, 8) == (len(campaign.expand()),) * 2
    assert written.published.page == written.page and written.published.inputs is not None


def test_publish_rebuilds_the_same_page_from_what_a_notebook_decided(sample):
    campaign = load_campaign(sample)
    first = publish(campaign, date="2026-01-01")
    text = first.page.read_text()
    first.page.unlink()
    again = publish(campaign, date="2026-01-01", decided=open_campaign(sample).published)
    assert again.page == first.page and again.page.read_text() == text and again.answer == first.answer
