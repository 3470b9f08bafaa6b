"""`baseline:` (campaign and arm): each compared arm against its baseline, the first compared arm by default, a
chain only where an arm asks for one; and the levels a `question:` names (issue 27)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import MINIMAL_CAMPAIGN

from perflib import config
from perflib.errors import InputError

ARMS = """\
arms:
  - {name: slots}
  - {name: unified}
  - {name: nographs}
  - {name: kvq}
  - {name: slots-cupti, role: traced, of: slots}
"""


def _campaign(tmp_path: Path, arms: str, top: str = "") -> config.Campaign:
    path = tmp_path / "c.yaml"
    path.write_text(MINIMAL_CAMPAIGN + top + arms)
    return config.read_campaign(path)


def test_every_variant_against_the_first_compared_arm_by_default(tmp_path):
    campaign = _campaign(tmp_path, ARMS)
    assert campaign.comparisons == (("slots", "unified"), ("slots", "nographs"), ("slots", "kvq"))
    assert campaign.baseline_of("slots") is None and campaign.baseline_of("slots-cupti") is None


def test_the_campaign_names_its_baseline_and_an_arm_asks_for_a_chain(tmp_path):
    arms = ARMS.replace("{name: kvq}", "{name: kvq, baseline: unified}")
    campaign = _campaign(tmp_path, arms, top="baseline: nographs\n")
    assert campaign.comparisons == (("nographs", "slots"), ("nographs", "unified"), ("unified", "kvq"))
    assert campaign.default_baseline == "nographs"


@pytest.mark.parametrize("top, arms, where, found", [
    ("baseline: fast\n", ARMS, "baseline (line", "'fast'"),
    ("baseline: slots-cupti\n", ARMS, "baseline (line", "'slots-cupti'"),  # a traced arm is no baseline
    ("", ARMS.replace("{name: kvq}", "{name: kvq, baseline: kvq}"), "arms[3].baseline", "'kvq'"),
    ("", ARMS.replace("{name: unified}", "{name: unified, baseline: kvq}")
     .replace("{name: kvq}", "{name: kvq, baseline: unified}"), "arms[1].baseline", "unified -> kvq -> unified"),
])
def test_a_baseline_that_is_no_compared_arm_or_comes_round_is_an_error(tmp_path, top, arms, where, found):
    with pytest.raises(InputError) as err:
        _campaign(tmp_path, arms, top)
    assert where in str(err.value) and found in str(err.value)


def test_against_is_gone_and_says_so(tmp_path):
    """The old key is unknown: named with the file's line, not silently ignored."""
    with pytest.raises(InputError, match=r"arms\[1\]\.against .*unknown key 'against'"):
        _campaign(tmp_path, ARMS.replace("{name: unified}", "{name: unified, against: slots}"))


@pytest.mark.parametrize("question, contexts, batches", [
    ("Where does the ~16K batch-4 step go, and does prefill interfere at ~1K?", (16384, 1024), (4,)),
    ("batch 16 and 4 at 16k tokens; bs=1 too", (16384,), (16, 4, 1)),
    ("Does the batch-B decode step cost more at context 1024 than at 16384 tokens?", (1024, 16384), ()),
    ("Why is batched decode slower per request than single-stream decode?", (), ()),
    ("at ~2K and batch 8", (), ()),  # levels the matrix does not have are not named
])
def test_the_levels_a_question_names_in_its_order(question, contexts, batches):
    assert config.question_levels(question, (1, 4, 16), (1024, 16384)) == (contexts, batches)


def test_a_k_names_the_context_of_1024_or_1000_tokens():
    assert config.question_levels("~16K", (1,), (16000,)) == ((16000,), ())
    assert [config.context_label(c) for c in (256, 1024, 16384, 32000, 1500)] == [
        "256 tokens", "~1K", "~16K", "~32K", "1500 tokens"]
