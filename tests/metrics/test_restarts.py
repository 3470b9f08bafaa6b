"""A restart between two scrapes (issue 27, item 7) is flagged from every piece of evidence the texts carry:
a changed `process_start_time_seconds`, a different model in the `model_name` (old SGLang: `name`) labels,
a changed `Process-Start-Time-Unix` header, or a counter going back, and the flag says which.

The texts are real scrapes (vLLM's three consecutive snapshots and SGLang's documentation pages in
../shared/fixtures/external, SOURCES.md) and the project's own samples (tests/data/metrics), edited only
where a test says: a start time moved, a model renamed. Expected values are read from the texts with
SERVERS.md §0's minimal parser, not perflib's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support import DATA

from perflib import metrics
from perflib.cli import main

VLLM = "vllm-metrics/qwen2.5-3b_3snapshots"
SGLANG_OLD = "sglang-metrics/sglang-docs-2024-11_gemma-2-9b-it.txt"
SGLANG_NEW = "sglang-metrics/sglang-docs-2025-03_llama-3.1-8b_loaded.txt"
RESTARTED = "server restarted between the scrapes"


def _snap(fixtures: Path, n: int) -> str:
    (path,) = (fixtures / "external" / VLLM).glob(f"snap{n}-*.prom")
    return path.read_text()


def _minimal(body: str, name: str) -> float:
    """SERVERS.md §0's minimal parser: the value of the one unlabelled sample `name`."""
    (value,) = [float(line.rpartition(" ")[2]) for line in body.splitlines()
                if line.startswith(f"{name} ")]
    return value


def _moved_start(body: str, seconds: float) -> tuple[str, float, float]:
    """The text with its process start `seconds` later, and the start before and after."""
    start = _minimal(body, "process_start_time_seconds")
    line = next(x for x in body.splitlines() if x.startswith("process_start_time_seconds "))
    moved = body.replace(line, f"process_start_time_seconds {start + seconds!r}")
    assert moved != body
    return moved, start, start + seconds


def _shown(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def test_consecutive_scrapes_of_one_server_are_no_restart(fixtures):
    before, after = _snap(fixtures, 1), _snap(fixtures, 2)
    assert _minimal(before, "process_start_time_seconds") == _minimal(after, "process_start_time_seconds")
    d = metrics.diff(before, after, requests=1)
    assert not d.reset and d.restarted == () and d.problem is None
    assert d.decode_tokens is not None


def test_a_changed_process_start_time_is_a_restart_though_no_counter_went_back(fixtures):
    before, after = _snap(fixtures, 1), _snap(fixtures, 2)
    moved, start, later = _moved_start(after, 450.0)
    d = metrics.diff(before, moved, requests=1)
    evidence = f"{RESTARTED}: process_start_time_seconds {_shown(start)} → {_shown(later)}"
    assert d.reset and d.restarted == (evidence,)
    assert d.problem == f"reset: {evidence}"
    assert not any("went backwards" in n for n in d.notes)  # the counters alone would not have told
    for name in metrics.FIGURES:
        assert getattr(d, name) is None, name
    assert all(v is None for v in d.deltas.values())


def test_a_different_model_is_a_restart(fixtures):
    before, after = _snap(fixtures, 2), _snap(fixtures, 3)
    assert 'model_name="Qwen/Qwen2.5-3B-Instruct"' in after
    other = after.replace('model_name="Qwen/Qwen2.5-3B-Instruct"', 'model_name="Qwen/Qwen2.5-7B-Instruct"')
    d = metrics.diff(before, other, requests=1)
    assert d.reset and d.restarted == (
        f"{RESTARTED}: the model changed, Qwen/Qwen2.5-3B-Instruct → Qwen/Qwen2.5-7B-Instruct",)
    assert metrics.diff(before, after, requests=1).restarted == ()


@pytest.mark.parametrize(("rel", "label"), [(SGLANG_OLD, "name"), (SGLANG_NEW, "model_name")])
def test_sglang_names_its_model_in_either_label(fixtures, rel, label):
    body = (fixtures / "external" / rel).read_text()
    (model,) = set(re.findall(rf'{label}="([^"]+)"', body))
    other = body.replace(f'{label}="{model}"', f'{label}="someone/else"')
    assert other != body
    d = metrics.diff(body, other, dialect="sglang")
    assert d.reset and d.restarted == (f"{RESTARTED}: the model changed, {model} → someone/else",)
    assert metrics.diff(body, body, dialect="sglang").restarted == ()


def test_every_piece_of_evidence_is_named_and_counters_going_back_follow():
    """The project's vLLM samples (model_name labels, no process collector) in the wrong order: the
    counters went back; with the header changed too, the header is named first, then the counters."""
    before = (DATA / "metrics" / "vllm_after.txt").read_text()
    after = (DATA / "metrics" / "vllm_before.txt").read_text()
    d = metrics.diff(before, after, process_start_before=1733300000, process_start_after=1733300450)
    assert d.restarted == (f"{RESTARTED}: Process-Start-Time-Unix 1733300000 → 1733300450",)
    assert d.problem == f"reset: {d.restarted[0]}"
    assert d.notes[0] == f"RESET: {d.restarted[0]}" and "went backwards" in d.notes[1]
    counters_only = metrics.diff(before, after)
    assert counters_only.reset and counters_only.restarted == ()
    assert counters_only.problem.startswith("reset: counter vllm:")
    # another model: its series are other series, so no counter can go back; the labels tell
    other = after.replace("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct")
    assert metrics.diff(before, other).restarted == (
        f"{RESTARTED}: the model changed, meta-llama/Llama-3.1-8B-Instruct → meta-llama/Llama-3.2-1B-Instruct",)


def test_llamacpp_carries_no_model_so_only_its_header_and_counters_can_tell():
    before = (DATA / "metrics" / "llamacpp_before.txt").read_text()
    after = (DATA / "metrics" / "llamacpp_after.txt").read_text()
    assert "{" not in "".join(x for x in after.splitlines() if not x.startswith("#"))  # no labels at all
    assert metrics.diff(before, after, requests=4).restarted == ()
    d = metrics.diff(before, after, requests=4, process_start_before=1733300000.5, process_start_after=1733300450)
    assert d.restarted == (f"{RESTARTED}: Process-Start-Time-Unix 1733300000.5 → 1733300450",)


def test_metrics_diff_says_which_evidence(fixtures, tmp_path, capsys):
    before, after = _snap(fixtures, 1), _snap(fixtures, 2)
    moved, start, later = _moved_start(after, 450.0)
    (tmp_path / "before.prom").write_text(before)
    (tmp_path / "after.prom").write_text(moved)
    evidence = f"{RESTARTED}: process_start_time_seconds {_shown(start)} → {_shown(later)}"
    assert main(["metrics", "diff", str(tmp_path / "before.prom"), str(tmp_path / "after.prom")]) == 0
    assert f"RESET: {evidence}: no figures" in capsys.readouterr().out
    assert main(["metrics", "diff", str(tmp_path / "before.prom"), str(tmp_path / "after.prom"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["reset"] and out["restarted"] == [evidence] and out["problem"] == f"reset: {evidence}"
    assert out["decode_tokens"] is None
