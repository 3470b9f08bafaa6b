"""Campaign files: each key checked against its declaration, with the line and a suggestion; the matrix."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from support import DATA, MINIMAL_CAMPAIGN, REPO

from perflib import config
from perflib.campaign import load_campaign
from perflib.errors import InputError, PerflibError

SAMPLE = DATA / "campaign-sample"

MINIMAL = MINIMAL_CAMPAIGN


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# ------------------------------------------------------------------------------ validation


def test_unknown_key_names_path_line_and_suggestion(tmp_path):
    text = MINIMAL.replace("batches:", "batchs:")
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_campaign(path)
    msg = str(err.value)
    assert str(path) in msg and "batchs" in msg and "did you mean 'batches'" in msg
    line = next(i for i, t in enumerate(text.splitlines(), start=1) if t.startswith("batchs:"))
    assert f"(line {line})" in msg


def test_nested_wrong_type_names_key_path(tmp_path):
    text = MINIMAL.replace("    url: http://127.0.0.1:9\n", "    url: http://127.0.0.1:9\n"
                           "  - name: gpu\n    url: http://x\n    profiler: {kind: 3}\n")
    with pytest.raises(InputError) as err:
        load_campaign(write(tmp_path, text))
    msg = str(err.value)
    assert "backends[1].profiler.kind" in msg and "expected a string" in msg and "found an integer 3" in msg


def test_bad_choice_suggests_nearest(tmp_path):
    text = MINIMAL.replace("    url: http://127.0.0.1:9\n", "    url: http://127.0.0.1:9\n    profiler: {kind: rocprof}\n")
    with pytest.raises(InputError) as err:
        load_campaign(write(tmp_path, text))
    assert "backends[0].profiler.kind" in str(err.value) and "rocprofv3" in str(err.value)


def test_list_item_type_and_missing_required(tmp_path):
    with pytest.raises(InputError, match=r"batches\[1\].*expected an integer.*found a string"):
        load_campaign(write(tmp_path, MINIMAL.replace("[1, 2]", "[1, two]")))
    with pytest.raises(InputError, match="required key 'decode_tokens'"):
        load_campaign(write(tmp_path, MINIMAL.replace("decode_tokens: 8\n", "")))
    with pytest.raises(InputError, match="a 'url' .*a 'server'.*'start: none'"):
        load_campaign(write(tmp_path, MINIMAL.replace("    url: http://127.0.0.1:9\n", "")))


def test_bad_yaml_and_candidates(tmp_path):
    with pytest.raises(InputError, match="valid YAML"):
        load_campaign(write(tmp_path, MINIMAL + "contexts: [\n"))
    bad_measure = MINIMAL + "candidates:\n  - {id: x, measure: step_ratoi, confirmed: '>= 2', ruled_out: '< 1'}\n"
    with pytest.raises(InputError, match="did you mean 'step_ratio'"):
        load_campaign(write(tmp_path, bad_measure))
    bad_threshold = MINIMAL + "candidates:\n  - {id: x, measure: step_ratio, confirmed: 'big', ruled_out: '< 1'}\n"
    with pytest.raises(InputError, match=r"candidates\[0\]\.confirmed"):
        load_campaign(write(tmp_path, bad_threshold))
    with pytest.raises(InputError, match="playbook"):
        load_campaign(write(tmp_path, MINIMAL + "playbook: nope\n"))


def test_committed_campaigns_load():
    demo = load_campaign(REPO / "campaigns" / "demo.yaml")
    assert demo.backends[0].start == "llama-server-local"
    ids = {c.id for c in demo.candidates}
    assert {"gemm-dequant-route", "batched-gemv-per-row", "host-gaps", "interleaved-prefill"} <= ids
    assert demo.data_dir == (REPO / "data").resolve()
    sample = load_campaign(SAMPLE / "campaign.yaml")
    assert [a.name for a in sample.arms] == ["before", "after"] and sample.gates[0].max_regression_pct == 3


# ------------------------------------------------------------------------------ matrix and resume


def test_expand_is_the_full_product_and_only_filters(tmp_path):
    text = MINIMAL.replace("contexts: [64]", "contexts: [64, 128]") + (
        "repeats: 3\narms:\n  - {name: before}\n  - {name: after}\n")
    campaign = load_campaign(write(tmp_path, text))
    runs = campaign.expand()
    assert len(runs) == 2 * 1 * 2 * 2 * 3
    assert len({r.run_dir(tmp_path) for r in runs}) == len(runs)
    assert runs[0].run_dir(tmp_path) == tmp_path / "raw" / "t" / "before" / "cpu" / "b1_c64_r1"
    only = campaign.expand(config.parse_only(["arm=after", "batch=2", "repeat=1,3"]))
    assert {(r.arm, r.batch, r.repeat) for r in only} == {("after", 2, 1), ("after", 2, 3)}
    assert len(only) == 4
    with pytest.raises(PerflibError, match="KEY=V1,V2"):
        config.parse_only(["size=2"])




def test_workers_key_defaults_to_one_and_must_be_positive(tmp_path):
    assert load_campaign(write(tmp_path, MINIMAL)).workers == 1
    assert load_campaign(write(tmp_path, MINIMAL.replace("decode_tokens: 8\n", "decode_tokens: 8\nworkers: 4\n"))).workers == 4
    with pytest.raises(InputError, match="workers .*expected a positive integer, found 0"):
        load_campaign(write(tmp_path, MINIMAL.replace("decode_tokens: 8\n", "decode_tokens: 8\nworkers: 0\n")))


def test_a_playbook_that_cannot_be_read_is_an_error_not_an_empty_question(tmp_path, monkeypatch):
    """The page opens with the playbook's question where the campaign gives none: a playbook file that
    is broken is an error naming it (it used to be swallowed, and the page opened with nothing)."""
    import shutil

    from perflib.config import loader

    shutil.copytree(loader.PLAYBOOKS, tmp_path / "playbooks")
    monkeypatch.setattr(loader, "PLAYBOOKS", tmp_path / "playbooks")
    assert "batched decode" in loader.playbook_question("batched-decode").lower()
    (tmp_path / "playbooks" / "batched-decode.yaml").write_text("description: [unclosed\n")
    with pytest.raises(InputError, match="batched-decode.yaml"):
        loader.playbook_question("batched-decode")
    with pytest.raises(PerflibError, match="no built-in playbook 'nothere'"):
        loader.playbook_question("nothere")
