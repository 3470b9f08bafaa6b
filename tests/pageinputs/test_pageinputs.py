"""The page's inputs beyond the derived tables (`perflib.pageinputs`): resolved from the files before the
page is drawn, written beside the derived tables so the page can be drawn from `data/derived` alone, and
an unreadable input is an error naming its file, never a blank on the page."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from support import DATA

from perflib import derive, pageinputs, report
from perflib.campaign import load_campaign
from perflib.errors import InputError
from perflib.publish import publish
from perflib.verdicts import Decisions

SAMPLE = DATA / "campaign-sample"


@pytest.fixture()
def rich(tmp_path) -> Path:
    """The sample campaign with every input the page reads beside its runs: a `compare_with` campaign
    (a copy of the sample under another name), an environment file, notes with links and see-also pages."""
    root = tmp_path / "project"
    shutil.copytree(SAMPLE / "raw" / "sample", root / "data" / "raw" / "sample")
    shutil.copytree(SAMPLE / "raw" / "sample", root / "data" / "raw" / "ref")
    (root / "campaigns").mkdir()
    text = (SAMPLE / "campaign.yaml").read_text().replace("data_dir: .\nreports_dir: reports\n", "")
    (root / "campaigns" / "ref.yaml").write_text(text.replace("name: sample", "name: ref"))
    (root / "data" / "raw" / "sample" / "capture.json").write_text(
        json.dumps({"gpu": "none", "server": {"build": "cpu", "threads": 2}, "list": [1, 2]}))
    (root / "reports").mkdir()
    (root / "reports" / "other-2026-01-02.md").write_text("another campaign's page\n")
    text += (
        "compare_with:\n  - {campaign: ref.yaml, backend: cpu, label: the reference copy}\n"
        "environment_files:\n  - {file: '{data_dir}/raw/sample/capture.json', label: capture record,"
        " keys: [gpu, server.threads, server.missing]}\n"
        "  - {file: '{data_dir}/raw/sample/capture.json'}\n"
        "notes:\n  - {text: 'Captured on a laptop.', link: '{data_dir}/raw/sample/capture.json'}\n"
        "  - {text: A note without a link.}\n"
        "see_also: [other-*.md, not-yet-*.md, 'https://example.org/page']\n")
    (root / "campaigns" / "sample.yaml").write_text(text)
    return root / "campaigns" / "sample.yaml"


def _page(campaign, tables, inputs) -> str:
    return report.write_report(campaign, tables, inputs, Decisions.of(campaign, tables)).read_text()


def test_every_input_is_resolved_and_shown(rich):
    campaign = load_campaign(rich)
    inputs = pageinputs.build(campaign)
    assert len(inputs.folders) == 8 and set(inputs.folders["status"]) == {"complete"}
    assert inputs.folders["end_ns"].notna().all() and not inputs.folders["contended"].any()
    facts = inputs.facts.set_index("key")["value"].to_dict()
    assert facts["gpu"] == "none" and facts["server.threads"] == "2"
    assert facts["server.missing"] == "n/a (not in the file)"
    assert "server.build" in facts and "list" not in facts  # every scalar leaf of the file without keys
    (ref,) = inputs.references
    assert (ref.label, ref.campaign, ref.backend, ref.arm, ref.batches) == ("the reference copy", "ref", "cpu",
                                                                            "after", (1, 2))
    assert len(ref.runs) == 8
    assert inputs.see_also == (("other-*.md", "other-2026-01-02.md"), ("not-yet-*.md", ""),
                               ("https://example.org/page", "https://example.org/page"))
    body = _page(campaign, derive.rebuild(campaign), inputs)
    ratio = body.split("## Cross-backend reference ratio")[1].split("\n## ")[0]
    (own,) = [ln for ln in ratio.splitlines() if ln.startswith("| cpu | this campaign |")]
    (copy,) = [ln for ln in ratio.splitlines() if ln.startswith("| cpu | the reference copy |")]
    assert own.split("|")[3:] == copy.split("|")[3:] and "x |" in copy  # the same raw data, the same ratio
    assert "Recorded in the capture record ([../data/raw/sample/capture.json](../data/raw/sample/capture.json))" in body
    assert "- server.threads: 2" in body
    assert "Captured on a laptop. ([capture.json](../data/raw/sample/capture.json))" in body
    assert "- [other-2026-01-02.md](other-2026-01-02.md)" in body and "- not-yet-\\*.md (not present yet)" in body


def test_the_page_is_drawn_from_data_derived_alone(rich, tmp_path):
    """What `perflib campaign report` writes in data/derived/<campaign>/ is all a page needs: read back,
    it draws the same bytes, and the raw data is not needed any more."""
    campaign = load_campaign(rich)
    first = publish(campaign).page
    written = first.read_bytes()
    out = campaign.derived_dir()
    assert {p.name for p in out.iterdir()} >= {"folders.csv", "trace_files.csv", "environment.csv",
                                              "environment_facts.csv", "reference_runs.csv", "page.json", "runs.csv"}
    moved = tmp_path / "elsewhere" / "data"  # the derived folder alone, in another place
    shutil.copytree(out, moved / "derived" / "sample")
    shutil.rmtree(rich.parent.parent / "data" / "raw")
    again = pageinputs.read(moved / "derived" / "sample")
    assert again.data_dir == moved and len(again.references[0].runs) == 8
    first.unlink()
    tables = derive.read(out)
    page = report.write_report(campaign, tables, pageinputs.read(out), Decisions.of(campaign, tables))
    assert page == first and page.read_bytes() == written


def test_an_environment_file_that_cannot_be_read_is_an_error_naming_it(rich):
    campaign = load_campaign(rich)
    capture = rich.parent.parent / "data" / "raw" / "sample" / "capture.json"
    capture.write_text('{"gpu": ')
    with pytest.raises(InputError, match=r"capture\.json:1:9: expected a JSON file \(named by .*sample\.yaml: "
                                         r"environment_files\[0\]\.file \(line \d+\)\)"):
        pageinputs.build(campaign)
    capture.unlink()
    with pytest.raises(InputError, match=r"capture\.json: expected a JSON file .* found no such file"):
        pageinputs.build(campaign)


def test_a_damaged_manifest_is_shown_not_hidden(rich):
    """A run folder whose manifest cannot be read is named on the page with why, beside the others (it
    used to read as a folder with no manifest at all)."""
    campaign = load_campaign(rich)
    bad = rich.parent.parent / "data" / "raw" / "sample" / "after" / "cpu" / "b2_c128_r2" / "manifest.json"
    bad.write_text("{not json")
    inputs = pageinputs.build(campaign)
    row = inputs.folders[inputs.folders["run"] == "b2_c128_r2"]
    row = row[row["arm"] == "after"].iloc[0]
    assert row["status"] == "unreadable manifest" and "manifest.json:1:2: expected JSON" in row["errors"]
    body = _page(campaign, derive.build(campaign), inputs)
    assert "Runs on disk: 7 complete of 8." in body
    raw = body.split("## Raw data")[1]
    assert "b2\\_c128\\_r2](" in raw and "(unreadable manifest: " in raw


class _Opened:
    """Files opened for reading and folders listed under `root` while it records (a `sys.addaudithook`
    hook cannot be removed, so it stays installed and records only between `start` and `stop`)."""

    installed = False
    root: str | None = None
    seen: list[str] = []

    @classmethod
    def start(cls, root: Path) -> None:
        if not cls.installed:
            sys.addaudithook(cls._hook)
            cls.installed = True
        cls.root, cls.seen = str(root.resolve()), []

    @classmethod
    def stop(cls) -> list[str]:
        cls.root = None
        return cls.seen

    @classmethod
    def _hook(cls, event: str, args: tuple) -> None:
        if cls.root is None or event not in ("open", "os.listdir", "os.scandir", "glob.glob"):
            return
        path = args[0]
        if not isinstance(path, str | bytes | os.PathLike):
            return
        path = os.path.abspath(os.fsdecode(path))
        if event == "open":
            mode, flags = args[1], args[2]
            writing = any(c in (mode or "") for c in "wax+") or bool(flags & (os.O_WRONLY | os.O_RDWR))
            name = os.path.basename(path)
            if writing or (name.startswith(".") and name.endswith(".tmp")):  # an atomic write's own temp file
                return
        if path.startswith(cls.root):
            cls.seen.append(f"{event} {path}")


def test_drawing_the_page_opens_no_file_of_the_project(rich):
    """The architecture test reads the code; this one watches it run: while the page is drawn from the
    tables and inputs, nothing under the project (campaign files, raw data, derived tables, pages) is
    opened for reading or listed."""
    campaign = load_campaign(rich)
    tables, inputs = derive.build(campaign), pageinputs.build(campaign)
    decisions = Decisions.of(campaign, tables)
    _Opened.start(rich.parent.parent)
    try:
        page = report.write_report(campaign, tables, inputs, decisions)
    finally:
        seen = _Opened.stop()
    assert page.is_file() and seen == []
    _Opened.start(rich.parent.parent)  # the hook sees a read where there is one
    try:
        pageinputs.build(campaign)
    finally:
        seen = _Opened.stop()
    assert any("capture.json" in s for s in seen) and any("manifest.json" in s for s in seen)


def test_arms_that_ran_on_different_devices_are_said_to_have(tmp_path):
    """Issue 29: compared arms on two GPUs of one kind, or on two kinds; nothing where they shared one."""
    import pandas as pd  # late: only this test builds an environment table by hand

    gpu = {"vendor": "nvidia", "pinned": ["0"], "cpus": ""}
    rows = [{"arm": "before", "backend": "cuda", "device": {**gpu, "host": "node", "gpus": [
                {"index": "0", "name": "NVIDIA H200", "uuid": "GPU-a"}]}},
            {"arm": "after", "backend": "cuda", "device": {**gpu, "host": "node", "gpus": [
                {"index": "1", "name": "NVIDIA H200", "uuid": "GPU-b"}]}},
            {"arm": "before", "backend": "rocm", "device": {**gpu, "host": "box", "gpus": [
                {"index": "0", "name": "AMD Radeon 8060S", "uuid": ""}]}},
            {"arm": "after", "backend": "rocm", "device": {**gpu, "host": "box2", "gpus": [
                {"index": "0", "name": "AMD Radeon 890M", "uuid": ""}]}},
            {"arm": "before", "backend": "cpu", "device": None}, {"arm": "after", "backend": "cpu", "device": None}]
    frame = pd.DataFrame([{"arm": r["arm"], "backend": r["backend"],
                           "device": pageinputs.devices.describe_record(r["device"]),
                           "device_kind": pageinputs.devices.kind(r["device"])} for r in rows])
    lines = pageinputs.device_lines(frame)
    assert lines[0] == ("The arms of cuda ran on different devices of one kind (NVIDIA H200): before on node: "
                        "NVIDIA H200 #0 (GPU-a); after on node: NVIDIA H200 #1 (GPU-b).")
    assert lines[1].startswith("The arms of rocm ran on different kinds of device (AMD Radeon 8060S, AMD Radeon "
                               "890M), so comparing them compares the devices too")
    assert len(lines) == 2  # cpu recorded no device: nothing said
    assert pageinputs.ran_on(frame)[("after", "cuda")] == "node: NVIDIA H200 #1 (GPU-b)"
    assert ("before", "cpu") not in pageinputs.ran_on(frame)


def _record_device(raw: Path, device: dict | None) -> None:
    """Every manifest of a campaign's run folders with `device` recorded as given (or none at all)."""
    for path in raw.rglob("manifest.json"):
        doc = json.loads(path.read_text())
        doc.pop("device", None)
        path.write_text(json.dumps({**doc, **({"device": device} if device else {})}))


def _ratio_rows(page: str) -> dict[str, set[str]]:
    """The cross-backend ratio table's `ran on` cells by source."""
    section = page.split("## Cross-backend reference ratio")[1].split("\n## ")[0]
    out: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| cpu |") and len(cells) >= 8:
            out.setdefault(cells[1], set()).add(cells[-1])
    return out


@pytest.mark.parametrize("theirs", [{"host": "lab-box", "gpus": [], "cpus": "0-7"}, None])
def test_a_compared_campaign_is_said_to_have_run_where_its_own_manifests_say(rich, theirs):
    """A `compare_with` campaign was made elsewhere, often long before: its rows of the ratio table name the
    host and device its own run folders recorded, or "not recorded", never this campaign's (issue 29)."""
    root = rich.parent.parent
    _record_device(root / "data" / "raw" / "sample", {"host": "here", "gpus": [], "pinned": [], "cpus": "4-15"})
    _record_device(root / "data" / "raw" / "ref", theirs)
    campaign = load_campaign(rich)
    inputs = pageinputs.build(campaign)
    (ref,) = inputs.references
    expected = pageinputs.devices.describe_record(theirs) if theirs else ""
    assert ref.ran_on == expected and ref.ran_on != "here: no GPU (pinned to none), CPUs 4-15"
    page = _page(campaign, derive.build(campaign), inputs)
    rows = _ratio_rows(page)
    assert rows["this campaign"] == {"here: no GPU (pinned to none), CPUs 4-15"}
    assert rows["the reference copy"] == {expected or "not recorded"}
    pageinputs.write(inputs, campaign.derived_dir())  # and back from data/derived, as the page is drawn there
    assert pageinputs.read(campaign.derived_dir()).references[0].ran_on == expected


def test_where_no_run_recorded_a_device_the_ran_on_column_is_left_out(rich):
    campaign = load_campaign(rich)
    page = _page(campaign, derive.build(campaign), pageinputs.build(campaign))
    section = page.split("## Cross-backend reference ratio")[1].split("\n## ")[0]
    assert "| cpu | the reference copy |" in section and "ran on (host: device)" not in section
    assert "not recorded" not in section
