"""Bad counters (issue 21, bad 5 and weak): a figure that comes out negative or impossible is null with
the reason, never a number; a counter reset or NaN counters are called so (never "not exported by the
server's /metrics") and such a run is measured again by the next `campaign run`; /metrics that stops
answering mid-run says it answered at the first scrape."""

from __future__ import annotations

import json
import re

import pytest
from faultkit import arm_dir_of, write_campaign
from support import DATA

from perflib import campaign as pc
from perflib import metrics, rundir, safeinput
from perflib.cli import main
from perflib.commands.sweep import format_level_table

BEFORE = (DATA / "metrics" / "llamacpp_before.txt").read_text()
AFTER = (DATA / "metrics" / "llamacpp_after.txt").read_text()


def _value(text: str, name: str) -> float:
    return float(re.search(rf"^llamacpp:{name} (\S+)$", text, re.M).group(1))


def test_counters_that_stay_at_zero_over_a_level_that_made_tokens_give_no_figure():
    zero = re.sub(r"^(llamacpp:\w+_total) \S+$", r"\1 0", AFTER, flags=re.M)
    delta = metrics.diff(zero, zero, dialect="llamacpp", requests=2)
    assert delta.decode_tokens is None and delta.decode_step_ms is None  # was -2
    assert delta.problem.startswith("impossible: Δtokens_predicted_total 0 is below the 2 requests given")
    assert delta.to_dict()["problem"] == delta.problem


def test_more_requests_than_tokens_gives_no_figure():
    tokens = _value(AFTER, "tokens_predicted_total") - _value(BEFORE, "tokens_predicted_total")
    delta = metrics.diff(BEFORE, AFTER, dialect="llamacpp", requests=int(tokens) + 1000)
    assert delta.decode_tokens is None and delta.decode_step_ms is None
    assert delta.problem.startswith("impossible:")
    honest = metrics.diff(BEFORE, AFTER, dialect="llamacpp", requests=4)
    assert honest.problem is None and honest.decode_tokens == tokens - 4  # the same counters, a true count


def test_metrics_diff_prints_null_not_a_negative_count(tmp_path, capsys):
    (tmp_path / "b.txt").write_text(BEFORE)
    (tmp_path / "a.txt").write_text(AFTER)
    assert main(["metrics", "diff", str(tmp_path / "b.txt"), str(tmp_path / "a.txt"), "--dialect", "llamacpp",
                 "--requests", "100000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["decode_tokens"] is None and out["decode_step_ms"] is None
    assert any(n.startswith("IMPOSSIBLE") for n in out["notes"])


def test_a_reset_and_a_nan_counter_are_called_so():
    reset = metrics.diff(AFTER, BEFORE, dialect="llamacpp", requests=4)
    assert reset.reset and reset.problem.startswith("reset: counter llamacpp:")
    nan = AFTER.replace(f"llamacpp:tokens_predicted_seconds_total {_value(AFTER, 'tokens_predicted_seconds_total'):g}",
                        "llamacpp:tokens_predicted_seconds_total NaN")
    assert nan != AFTER
    delta = metrics.diff(BEFORE, nan, dialect="llamacpp", requests=4)
    assert delta.problem == "NaN: llamacpp:tokens_predicted_seconds_total not a finite number"
    assert delta.decode_step_ms is None


def test_the_sweep_table_names_why_counters_are_missing():
    row = {"batch": 1, "context": 16, "repeats": 1, "complete": 0, "contended": 0, "counters": "reset"}
    assert "n/a (reset)" in format_level_table([row]) and "no /metrics" not in format_level_table([row])


@pytest.mark.parametrize("mode, said", [("reset", "counters reset: counter llamacpp:"),
                                        ("nan", "counters NaN: llamacpp:tokens_predicted_seconds_total")])
def test_a_run_whose_counters_reset_or_are_nan_is_measured_again(tmp_path, mode, said):
    campaign = pc.load_campaign(write_campaign(tmp_path, "--metrics", mode))
    result = pc.run_campaign(campaign, progress=False, contention_threshold=None)
    ((label, error),) = result.failed
    assert said in error and "measured again on the next run" in error
    run_dir = arm_dir_of(campaign.path) / "b1_c16_r1"
    manifest = rundir.read_manifest(run_dir)
    assert manifest["status"] == "incomplete" and len(safeinput.read_jsonl(run_dir / "requests.jsonl")) == 1
    page = result.page.read_text()
    assert "Not exported by the server's /metrics" not in page
    again = pc.run_campaign(campaign, progress=False, write_page=False, contention_threshold=None)
    assert [lbl for lbl, _ in again.failed] == [label]  # measured again, not skipped as complete
    assert (run_dir.parent / "b1_c16_r1.incomplete-1").is_dir()


def test_counters_that_count_nothing_are_impossible_on_the_page_not_missing(tmp_path):
    campaign = pc.load_campaign(write_campaign(tmp_path, "--metrics", "zero"))
    result = pc.run_campaign(campaign, progress=False, contention_threshold=None)
    assert result.failed == ()  # the client's figures stand; only the counters' are n/a
    runs = (campaign.derived_dir() / "runs.csv").read_text()
    assert "impossible: Δtokens_predicted_total 0 is below the 1 requests given" in runs
    page = result.page.read_text()
    assert "Not exported by the server's /metrics" not in page
    assert "Counters there but not usable, their figures n/a: default/standin/b1\\_c16\\_r1: impossible:" in page


def test_metrics_that_stop_answering_mid_run_say_they_answered_at_the_first_scrape(tmp_path):
    campaign = pc.load_campaign(write_campaign(tmp_path, "--metrics", "vanish"))
    result = pc.run_campaign(campaign, progress=False, write_page=False, contention_threshold=None)
    ((_, error),) = result.failed
    assert "answered at the first scrape, before the level, but not after it" in error
    assert "--metrics)" not in error  # not "start llama-server with --metrics"
