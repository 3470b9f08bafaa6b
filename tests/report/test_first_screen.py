"""The first screen answers per level (issue 27): each candidate in one line across levels, the question's levels
first; every pair of arms named with its interval; the decode window said where the client's was empty, never
a lost trace; and `perflib campaign report --json` carrying the same per-level decisions."""

from __future__ import annotations

import contextlib
import html
import io
import json
import re

import pytest
import synthetic

from perflib import verdicts as v
from perflib.campaign import load_campaign
from perflib.cli import main


def _report(path) -> tuple[int, dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["campaign", "report", str(path), "--json"])
    return code, json.loads(out.getvalue())


@pytest.fixture(scope="module")
def staggered(tmp_path_factory):
    path = synthetic.shapes_campaign(tmp_path_factory.mktemp("shapes"))
    code, out = _report(path)
    text = open(out["page"]).read()
    return load_campaign(path), code, out, text, text.split("\n## ")[0]


def test_the_report_exits_0_and_calls_no_trace_lost(staggered):
    campaign, code, out, text, head = staggered
    assert code == 0 and out["partial"] == [] and out["failed"] == []
    assert "Trace lost" not in text and "lost, cut short" not in head
    assert "- **Traces.** All 8 traced runs' traces cover their windows" in head


def test_one_line_per_candidate_across_levels_the_questions_first(staggered):
    campaign, code, out, text, head = staggered
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| ([^|]+) \| (\*\*.+) \|$", head, re.M)}
    entries = {e["label"]: e for e in out["answer"]["candidates"]}
    for label, row in rows.items():  # the page's line is the JSON's, outcomes in bold
        assert html.unescape(re.sub(r"\\(.)", r"\1", row.replace("**", ""))) == entries[label]["answer"]
    assert rows["interleaved prefill"].startswith("**confirmed** at ~16K (prefill\\_share ")
    assert "; **ruled out** at ~1K (own\\_step\\_share " in rows["interleaved prefill"]
    # the per-level detail below it: the question's context first, then the others
    grid = next(ln for ln in text.splitlines() if ln.startswith("| candidate | arm |"))
    assert grid == "| candidate | arm | ~16K, batch 1 | ~16K, batch 4 | ~1K, batch 1 | ~1K, batch 4 |"
    prefill = next(ln for ln in text.splitlines() if ln.startswith("| interleaved prefill | slots |"))
    assert re.fullmatch(r"\| interleaved prefill \| slots \| +\| confirmed [\d.]+% \| +\| ruled out [\d.]+% \|", prefill)


def test_every_pair_is_named_with_its_interval_and_each_gate_by_it(staggered):
    campaign, code, out, text, head = staggered
    for arm in ("unified", "nographs", "kvq"):
        # the headline at the level the question names: ~16K, batch 4
        assert re.search(rf"- \*\*Before / after\.\*\* {arm} vs slots: decode step at batch 4, context 16384: "
                         r"[\d.]+ → [\d.]+ ms \(\*\*[-+][\d.]+%\*\*, 95% interval [-+][\d.]+% to [-+][\d.]+%\)", head)
    states = {g["arm"]: g["state"] for g in out["answer"]["gates"]}
    for line in (ln for ln in head.splitlines() if ln.startswith("- **Gate.**")):
        arm = re.search(r"\((\w+) vs slots, gpu, context \d+\)", line).group(1)
        assert line.endswith(f"**{states[arm]}**")
        if states[arm] == v.UNDECIDED:
            assert "repeats per arm would decide it" in line
    assert "Each compared arm against its baseline (unified vs slots, nographs vs slots, kvq vs slots)" in text


def test_the_staggered_level_says_its_window_and_the_decode_tokens_that_would_overlap(staggered):
    campaign, code, out, text, head = staggered
    (line,) = [ln for ln in head.splitlines() if ln.startswith("- **Decode window.**")]
    assert ("No window with every request decoding at gpu b4 c16384 (kvq, nographs, slots, slots-traced, unified; "
            "10 runs): requests staggered: the last first token came ") in line
    suggested = re.search(r"decode_tokens of ([\d,]+) or more would overlap them", line.replace("\\_", "_"))
    assert suggested and int(suggested.group(1).replace(",", "")) > campaign.decode_tokens
    per_level = text.split("## Per level")[1].split("\n## ")[0]
    staggered_rows = [ln for ln in per_level.splitlines() if re.match(r"\| \w[\w-]* \| gpu \| 4 \| 16384 \|", ln)]
    assert len(staggered_rows) == 5
    assert all("n/a: requests staggered: the last first token came" in ln for ln in staggered_rows)
    # the window its traces were read over: the span's decode-only part, its steps and occupancy said
    assert re.search(r"; its traces \(slots-traced\) read over the decode-only part \(no request in prefill\): "
                     r"[\d.]+ ms, [\d.]+% of the span, 63 steps, 1\.0 requests decoding on average", line)


def test_a_coalesced_stream_says_so_on_the_page(tmp_path):
    path = synthetic.shapes_campaign(tmp_path, coalesced=True)
    code, out = _report(path)
    assert code == 0 and out["partial"] == []
    text = open(out["page"]).read()
    per_level = text.split("## Per level")[1].split("\n## ")[0]
    rows = [ln for ln in per_level.splitlines() if ln.startswith("| slots | gpu |")]
    assert len(rows) == 4 and all(ln.count("n/a: stream coalesced: 64 tokens in 1 chunk") == 2 for ln in rows)
    head = text.split("\n## ")[0]
    assert "stream coalesced: 64 tokens in 1 chunk" in head and "Trace lost" not in text
    # read over the span, which the prefill fills: the trace verdicts are not decided, and the page says so
    assert re.search(r"its traces \(slots-traced\) read over the span, up to [\d.]+% of it requests' prefill: "
                     "their verdicts are not decided", head)
    host = next(e for e in out["answer"]["candidates"] if e["candidate"] == "host-gaps")
    assert {x["outcome"] for x in host["levels"] if x["arm"] == "slots"} == {v.INCONCLUSIVE}
    assert all(x["window_prefill"] > 0 for x in host["levels"] if x["arm"] == "slots")
    assert ", not decided at " in host["answer"]
