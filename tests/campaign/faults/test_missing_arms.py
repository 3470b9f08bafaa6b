"""A page with arms that have no runs yet (issue 21, bad 3): `--only arm=...`, `campaign report`, and
two runners that split a 3-arm campaign each write the page, saying which arms have no runs, with their
cells and verdicts "not measured", never a KeyError."""

from __future__ import annotations

import shutil

from faultkit import write_campaign
from support import DATA

from perflib import campaign as pc
from perflib.cli import main
from perflib.config import parse_only

THIRD_ARM = """\
  - name: after
    description: llama-server --threads 2
    extra_args: ["--threads", "2"]
"""


def test_campaign_report_with_a_compared_arm_that_has_no_runs(tmp_path, capsys):
    sample = tmp_path / "sample"
    shutil.copytree(DATA / "campaign-sample", sample)
    text = (sample / "campaign.yaml").read_text()
    assert THIRD_ARM in text
    (sample / "campaign.yaml").write_text(text.replace(THIRD_ARM, THIRD_ARM + "  - name: c\n"
                                                       "    extra_args: [\"--threads\", \"3\"]\n"))
    assert main(["campaign", "report", str(sample / "campaign.yaml"), "--reports", str(tmp_path / "r")]) == 0
    page = next((tmp_path / "r").glob("sample-*.md")).read_text()
    assert "Traceback" not in capsys.readouterr().err
    assert "No complete run yet of arm c: not measured, left out of the tables and figures." in page
    # each arm against the first compared arm, its baseline: c's before/after cells say it has no runs
    assert "| c vs before | " in page and "not measured: no runs of arm c yet" in page
    assert "not measured (no runs of arm c on backend cpu yet)" in page  # its verdicts and the gate
    assert "| after vs before | " in page and "![" in page  # the arms that have runs are compared, with the figure


def test_two_runners_that_split_a_three_arm_campaign_each_write_the_page(tmp_path):
    arms = "arms:\n  - {name: a}\n  - {name: b, extra_args: [--token-interval, '0.001']}\n  - {name: c}\n"
    campaign = pc.load_campaign(write_campaign(tmp_path, arms=arms))
    first = pc.run_campaign(campaign, only=parse_only(["arm=a"]), progress=False, contention_threshold=None)
    assert first.failed == () and first.done == ("a/standin/b1_c16_r1",)
    page = first.page.read_text()
    assert "No complete run yet of arms b, c" in page
    second = pc.run_campaign(campaign, only=parse_only(["arm=b"]), progress=False, contention_threshold=None)
    assert second.done == ("b/standin/b1_c16_r1",)
    page = second.page.read_text()
    assert "No complete run yet of arm c:" in page and "not measured: no runs of arm c yet" in page
