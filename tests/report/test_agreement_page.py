"""The page of one run of a campaign says where its answer agrees with another run of the same campaign, and
beside each place where it does not, the measured facts of both runs (issue 30). Two runs are made here from the
committed sample campaign (real llama-server runs, `tests/data/campaign-sample`): "parallel", whose arms recorded
different CPUs of one host, and "sequential", whose arms shared the host, with one arm's batch-1 counter step
shifted and one repeat contended by another process. Each run is also reported on its own (`--json`), and the
Agreement section is held against those two answers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from agreekit import (
    changes,
    contended_record,
    copy_run,
    cpu_device,
    edit_manifest,
    scale_counter_step,
    section,
    table_rows,
    verdict_outcomes,
    within_both_ways,
)
from support import DATA

from perflib import derive, pageinputs, report
from perflib.campaign import load_campaign
from perflib.cli import main
from perflib.publish import agreement_of
from perflib.verdicts import Decisions

SAMPLE = DATA / "campaign-sample"
THREADS = """\
  - id: threads
    label: two threads take a third off the step
    measure: change_pct
    column: decode_step_ms
    confirmed: "<= -30"
    ruled_out: "> -10"
"""
FOREIGN, PSI, WAIT = 0.61, 0.42, 0.93


@pytest.fixture()
def runs(tmp_path) -> Path:
    """tmp/campaign.yaml (the sample, data_dir parallel, with a change_pct candidate) and its two runs."""
    text = (SAMPLE / "campaign.yaml").read_text().replace("data_dir: .\n", "data_dir: parallel\n")
    text = text.replace('    ruled_out: "< 1.5"\n', '    ruled_out: "< 1.5"\n' + THREADS, 1)
    (tmp_path / "campaign.yaml").write_text(text)
    for name in ("parallel", "sequential"):
        copy_run(SAMPLE, tmp_path / name, "sample")
    for arm, cpus in (("before", "0"), ("after", "1")):
        for run in sorted((tmp_path / "parallel" / "raw" / "sample" / arm / "cpu").glob("b*_c*_r*")):
            edit_manifest(run, device=cpu_device("h", cpus))
    sequential = tmp_path / "sequential" / "raw" / "sample"
    for run in sorted(sequential.glob("*/cpu/b*_c*_r*")):
        edit_manifest(run, device=cpu_device("h"))
    for repeat in (1, 2):  # the after arm's batch-1 counter step, a hundredth of what it measured
        scale_counter_step(sequential / "after" / "cpu" / f"b1_c128_r{repeat}", 0.01)
    edit_manifest(sequential / "after" / "cpu" / "b2_c128_r1", contention=contended_record(FOREIGN, PSI, WAIT, 0.0))
    return tmp_path / "campaign.yaml"


def _report(capsys, path: Path, *args: str) -> dict:
    assert main(["campaign", "report", str(path), "--json", *args]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _cell(outcome: str) -> str:
    return "n/m" if outcome == "not measured" else outcome


def test_the_agreement_section_matches_the_two_runs_reported_apart(runs, capsys):
    folder = runs.parent
    alone = {name: _report(capsys, runs, "--data", str(folder / name), "--reports", str(folder / f"r-{name}"))
             for name in ("parallel", "sequential")}
    ours, theirs = (verdict_outcomes(alone[n]["answer"]) for n in ("parallel", "sequential"))
    assert ours.keys() == theirs.keys() and ours != theirs  # the shift changed some verdict
    doc = _report(capsys, runs, "--agree-with", str(folder / "sequential"))
    agreement = doc["agreement"]
    assert (agreement["this"], agreement["with"]) == ("parallel", "sequential")
    rows = {(r["candidate"], r["arm"], r["baseline"], r["backend"], r["batch"], r["context"]): r
            for r in agreement["verdicts"]}
    assert rows.keys() == ours.keys()
    for key, row in rows.items():
        assert (row["this"]["outcome"], row["other"]["outcome"]) == (ours[key], theirs[key])
        assert row["agree"] is (ours[key] == theirs[key])
    a, b = changes(alone["parallel"]["answer"]), changes(alone["sequential"]["answer"])
    judged = {k: within_both_ways(a[k], b[k]) for k in a}
    assert {(c["baseline"], c["arm"], c["backend"], c["batch"], c["context"], c["measure"]): c["agree"]
            for c in agreement["changes"]} == judged
    assert False in judged.values()  # the shifted counter step moved a change out of the other's interval

    page = Path(doc["page"]).read_text()
    same = sum(ours[k] == theirs[k] for k in ours)
    agreeing = sum(v is True for v in judged.values())
    count = sum(v is not None for v in judged.values())
    differ = len(ours) - same + sum(v is False for v in judged.values())
    assert (f"- **Agreement with sequential.** {same} of {len(ours)} verdicts agree; {agreeing} of {count} changes "
            f"agree within their intervals; {differ} differ") in page
    shown = section(page, "Agreement")
    by_label = {(c["label"], level["scope"]): level for c in alone["parallel"]["answer"]["candidates"]
                for level in c["levels"]}
    grid = table_rows(shown, "candidate")
    assert len(grid) == len(ours)
    for label, where, par, seq, agree in grid:
        level = by_label[(label.replace("\\", ""), where.replace("\\", ""))]
        key = (level["candidate"], level["arm"], level["baseline"], level["backend"], level["batch"], level["context"])
        assert par.startswith(_cell(ours[key])) and seq.startswith(_cell(theirs[key]))
        assert agree == ("yes" if ours[key] == theirs[key] else "**no**")
    assert len(table_rows(shown, "pair")) == len(judged)


def test_each_difference_stands_beside_the_measured_facts_of_both_runs(runs, capsys):
    folder = runs.parent
    doc = _report(capsys, runs, "--agree-with", str(folder / "sequential"))
    page = Path(doc["page"]).read_text()
    shown = section(page, "Agreement")
    blocks = shown.split("### Where they differ", 1)[1].split("\n**")[1:]
    (paired,) = [b for b in blocks if "two threads take a third off the step, arm after against before, backend "
                 "cpu, batch 1" in b.splitlines()[0]]
    # where each run's compared arms ran, as their manifests say
    assert ("- Devices: parallel: before on h: no GPU, CPUs 0; after on h: no GPU, CPUs 1; not paired on one "
            "device; sequential: before and after paired on one device (h: no GPU).") in paired
    (block,) = [b for b in blocks if "batched step far above single-stream, arm after" in b.splitlines()[0]]
    assert "- Devices: parallel: after on h: no GPU, CPUs 1; sequential: after on h: no GPU." in block
    # the contended repeat, by its own record, in the list over a limit and in its row
    assert f"sequential: after b2 c128 r1: contended: other processes used {100 * FOREIGN:.0f}% of the 2 CPUs" in block
    rows = {(r[0], r[1], r[2]): r for r in table_rows(block, "run")}
    head = next(line for line in block.splitlines() if line.startswith("| run |"))
    columns = [c.strip() for c in head.strip().strip("|").split(" | ")]
    contended = dict(zip(columns, rows[("sequential", "after", "b2 c128")], strict=True))
    assert contended["repeats used"] == "1 of 2 (r1 contended)"
    assert f"r1 {100 * FOREIGN:.0f}%" in contended["others' CPU share"] and f"r1 {100 * PSI:.0f}%" in contended["PSI some"]
    assert f"r1 {WAIT:.2f}" in contended["run-queue wait (s per CPU s)"]
    # the counter step over the client's, per run, as each run's own runs.csv gives it
    for name in ("parallel", "sequential"):
        runs_csv = derive.build(load_campaign(runs), folder / name).runs
        at = runs_csv[(runs_csv["arm"] == "after") & (runs_csv["batch"] == 1)]
        expected = at["decode_step_ms"].median() / at["steady_step_ms"].median()
        row = dict(zip(columns, rows[(name, "after", "b1 c128")], strict=True))
        assert row["counter / client step"] == f"{expected:.2f}x"
    par, seq = (dict(zip(columns, rows[(n, "after", "b1 c128")], strict=True)) for n in ("parallel", "sequential"))
    assert par["counter / client step"] != seq["counter / client step"]  # the shift, seen by the counter check
    # and --json carries the same facts
    (diff,) = [d for d in doc["agreement"]["differences"] if d["what"].startswith("batched step far above "
                                                                                  "single-stream, arm after")]
    (fact,) = [f for f in diff["facts"] if (f["run"], f["arm"], f["batch"]) == ("sequential", "after", 2)]
    record = {c["repeat"]: c for c in fact["contention"]}
    assert record[1]["contended"] and record[1]["foreign_cpu_share"] == FOREIGN and record[1]["wait_per_cpu"] == WAIT
    assert not record[2]["sampled"] and record[2]["foreign_cpu_share"] is None  # the sample recorded none


def test_the_page_is_drawn_again_from_data_derived_alone(runs, capsys):
    folder = runs.parent
    doc = _report(capsys, runs, "--agree-with", str(folder / "sequential"))
    written = Path(doc["page"]).read_bytes()
    Path(doc["page"]).unlink()
    shutil.rmtree(folder / "parallel" / "raw")
    shutil.rmtree(folder / "sequential" / "raw")
    derived = folder / "parallel" / "derived" / "sample"
    spec, tables = load_campaign(runs), derive.read(derived)
    inputs = pageinputs.read(derived)
    assert inputs.agree is not None and inputs.agree.label == "sequential"
    decisions = Decisions.of(spec, tables)
    again = report.write_report(spec, tables, inputs, decisions, agreement=agreement_of(spec, tables, decisions, inputs))
    assert again.read_bytes() == written


def test_a_run_held_against_itself_agrees_everywhere(runs, capsys):
    folder = runs.parent
    copy_run(folder / "parallel", folder / "again", "sample")
    doc = _report(capsys, runs, "--agree-with", str(folder / "again"), "--agree-label", "the same run again")
    agreement = doc["agreement"]
    assert agreement["with"] == "the same run again" and agreement["differences"] == []
    assert agreement["verdicts_agree"] == agreement["verdicts_total"] > 0
    page = Path(doc["page"]).read_text()
    assert "- **Agreement with the same run again.**" in page and "nothing differs" in page
    assert "The two runs agree on every verdict and on every change judged." in section(page, "Agreement")


def test_the_agree_with_key_of_the_campaign_file_does_it_for_every_report(runs, capsys):
    runs.write_text(runs.read_text() + "agree_with: {data: sequential, label: one GPU}\n")
    doc = _report(capsys, runs)
    assert doc["agreement"]["with"] == "one GPU"
    assert "- **Agreement with one GPU.**" in Path(doc["page"]).read_text()


def test_an_other_run_without_the_campaigns_folders_is_an_error_naming_it(runs, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["campaign", "report", str(runs), "--agree-with", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "empty" / "raw" / "sample") in err and "--agree-with" in err and "no such folder" in err
    assert main(["campaign", "report", str(runs), "--agree-label", "x"]) == 2
    assert "--agree-label names the --agree-with run" in capsys.readouterr().err


def test_each_run_folder_gives_its_device_and_contention_record(runs):
    frame = pageinputs.signal_rows("parallel", pageinputs.manifests(load_campaign(runs)))
    assert len(frame) == 8 and set(frame["run"]) == {"parallel"}
    assert dict(zip(frame["arm"], frame["device"], strict=True)) == {"before": "h: no GPU, CPUs 0",
                                                                     "after": "h: no GPU, CPUs 1"}
    assert frame["foreign_cpu_share"].isna().all() and not frame["sampled"].any()  # the sample sampled none
