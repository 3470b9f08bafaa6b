"""`perflib trace cut`: a server-lifetime trace cut into the level windows of run folders.

The real case is the H200 traced pass: one CUPTI trace of llama-server's whole life, cut into six level
windows. Here two of those committed cuts are joined back into one "lifetime" trace, the run folders are
copied without their trace, and the cut must give back exactly the committed dispatches.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from support import REPO

from perflib.cli import main
from perflib.traces import read_trace
from perflib.traces.parquet import write_trace_parquet

TRACED = REPO / "data/raw/cuda-h200/after-cupti/llamacpp-cuda"
LEVELS = ("b1_c1024_r1", "b4_c1024_r1")


@pytest.fixture()
def lifetime(tmp_path: Path) -> tuple[Path, Path]:
    """(one trace file holding both levels' dispatches, a sweep folder with the two runs minus their traces)."""
    parts = [read_trace(TRACED / level / "trace.parquet") for level in LEVELS]
    joined = pd.concat([p.dispatches for p in parts], ignore_index=True).sort_values("start_ns", kind="stable")
    trace = replace(parts[0], dispatches=joined.reset_index(drop=True), path="lifetime.cupti.txt")
    path = write_trace_parquet(trace, tmp_path / "lifetime.parquet")
    runs = tmp_path / "sweep"
    for level in LEVELS:
        shutil.copytree(TRACED / level, runs / level, ignore=shutil.ignore_patterns("trace.parquet"))
        manifest = json.loads((runs / level / "manifest.json").read_text())
        for key in ("trace_path", "trace_cut"):
            manifest.pop(key)
        (runs / level / "manifest.json").write_text(json.dumps(manifest))
    return path, runs


def test_cut_gives_back_each_level_window(lifetime, capsys):
    path, runs = lifetime
    assert main(["trace", "cut", str(path), str(runs), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["clock"] == "realtime" and len(out["runs"]) == 2
    for level in LEVELS:
        committed = json.loads((TRACED / level / "manifest.json").read_text())["trace_cut"]
        manifest = json.loads((runs / level / "manifest.json").read_text())
        assert manifest["trace_path"] == "trace.parquet"
        cut = manifest["trace_cut"]
        assert (cut["start_ns"], cut["end_ns"], cut["clock"]) == (committed["start_ns"], committed["end_ns"], "realtime")
        mine = read_trace(runs / level / "trace.parquet").dispatches
        theirs = read_trace(TRACED / level / "trace.parquet").dispatches
        pd.testing.assert_frame_equal(mine.reset_index(drop=True), theirs.reset_index(drop=True))
        row = next(r for r in out["runs"] if r["run_dir"].endswith(level))
        assert row["dispatches"] == len(theirs) and row["kernels"] == int((theirs["kind"] == "kernel").sum()) > 0


def test_cut_keeps_repeats_and_skips_levels_without_clocks(lifetime, capsys):
    path, runs = lifetime
    second = json.loads((runs / LEVELS[1] / "manifest.json").read_text())
    second["repeat"] = 2
    (runs / LEVELS[1] / "manifest.json").write_text(json.dumps(second))
    shutil.copytree(runs / LEVELS[0], runs / "b8_c1024_r1")
    never = json.loads((runs / "b8_c1024_r1" / "manifest.json").read_text())
    never.pop("clocks")
    (runs / "b8_c1024_r1" / "manifest.json").write_text(json.dumps(never))
    assert main(["trace", "cut", str(path), str(runs), "--repeats", "1"]) == 0
    text = capsys.readouterr().out
    assert "b8_c1024_r1: skipped, no level clocks" in text and "2 level windows" not in text
    assert (runs / LEVELS[0] / "trace.parquet").is_file()
    assert not (runs / LEVELS[1] / "trace.parquet").exists()
    assert "only repeats 1..1" in json.loads((runs / LEVELS[1] / "manifest.json").read_text())["trace_note"]


def test_cut_of_a_trace_from_another_time_warns_and_exits_1(lifetime, capsys):
    path, runs = lifetime
    trace = read_trace(path)
    shifted = trace.dispatches.assign(start_ns=trace.dispatches.start_ns - 3_600_000_000_000,
                                      end_ns=trace.dispatches.end_ns - 3_600_000_000_000)
    other = write_trace_parquet(replace(trace, dispatches=shifted), path.with_name("an-hour-earlier.parquet"))
    assert main(["trace", "cut", str(other), str(runs)]) == 1
    assert capsys.readouterr().out.count("WARNING: no kernel dispatch inside the level window") == 2


def test_cut_names_the_folder_without_runs(tmp_path, capsys):
    path = write_trace_parquet(read_trace(TRACED / LEVELS[0] / "trace.parquet"), tmp_path / "t.parquet")
    (tmp_path / "empty").mkdir()
    assert main(["trace", "cut", str(path), str(tmp_path / "empty")]) == 2
    assert "no run folder with a manifest.json" in capsys.readouterr().err


def test_report_reads_a_lifetime_trace_once_for_all_its_runs(lifetime, monkeypatch):
    """A server profiled once for a sweep: every run windows the same file, which is read once."""
    from perflib import derive, traces

    path, _ = lifetime
    calls = []
    real = traces.read_trace
    monkeypatch.setattr(traces, "read_trace", lambda p, **kw: calls.append(p) or real(p, **kw))
    derive._read_trace_keyed.cache_clear()
    first = derive._read_trace_cached(path)
    assert derive._read_trace_cached(path) is first and len(calls) == 1
    os.utime(path, ns=(1, 1))  # the file changed: read again
    assert derive._read_trace_cached(path) is not first and len(calls) == 2
    derive._read_trace_keyed.cache_clear()


@pytest.fixture()
def committed(tmp_path: Path) -> Path:
    """The two committed run folders as they are in data/raw: manifests pointing at their cuts."""
    runs = tmp_path / "committed"
    for level in LEVELS:
        shutil.copytree(TRACED / level, runs / level)
    return runs


def snapshot(runs: Path) -> dict[str, bytes]:
    return {str(p.relative_to(runs)): p.read_bytes() for p in sorted(runs.rglob("*")) if p.is_file()}


def an_hour_earlier(path: Path) -> Path:
    trace = read_trace(path)
    hour = 3_600_000_000_000
    shifted = trace.dispatches.assign(start_ns=trace.dispatches.start_ns - hour, end_ns=trace.dispatches.end_ns - hour)
    return write_trace_parquet(replace(trace, dispatches=shifted), path.with_name("an-hour-earlier.parquet"))


def test_a_committed_cut_survives_a_cut_from_a_trace_of_another_time(lifetime, committed, capsys):
    """Cutting a trace of another time onto committed run folders once replaced each cut by an empty one
    (and only warned afterwards). Now every committed file and manifest stays byte for byte, the command
    says which folders were kept and why, and exits 1."""
    path, _ = lifetime
    before = snapshot(committed)
    other = an_hour_earlier(path)
    assert main(["trace", "cut", str(other), str(committed), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert snapshot(committed) == before
    for row in out["runs"]:
        level = Path(row["run_dir"]).name
        assert row["status"] == "kept" and row["path"] is None and row["dispatches"] == 0
        assert row["kept_dispatches"] == len(read_trace(TRACED / level / "trace.parquet").dispatches) > 0
        assert row["kept_path"].endswith(f"{level}/trace.parquet") and "--replace" in row["note"]
    assert main(["trace", "cut", str(other), str(committed)]) == 1
    text = capsys.readouterr().out
    assert text.count("kept as it was: the existing trace.parquet holds") == 2
    assert "0 level windows cut" in text and "2 folders kept their cut as it was" in text
    assert not list(committed.rglob("*.tmp")) and snapshot(committed) == before


def test_replace_overwrites_a_committed_cut_when_asked(lifetime, committed, capsys):
    path, _ = lifetime
    other = an_hour_earlier(path)
    assert main(["trace", "cut", str(other), str(committed), "--replace", "--json"]) == 1  # now empty windows
    out = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in out["runs"]] == ["written", "written"]
    for level in LEVELS:
        assert len(read_trace(committed / level / "trace.parquet").dispatches) == 0
        assert json.loads((committed / level / "manifest.json").read_text())["trace_cut"]["from"] == other.name


def test_a_cut_holding_as_many_dispatches_replaces_the_old_one(lifetime, committed, capsys):
    path, _ = lifetime
    assert main(["trace", "cut", str(path), str(committed), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in out["runs"]] == ["written", "written"]
    for level in LEVELS:
        mine = read_trace(committed / level / "trace.parquet").dispatches
        pd.testing.assert_frame_equal(mine, read_trace(TRACED / level / "trace.parquet").dispatches)
        assert json.loads((committed / level / "manifest.json").read_text())["trace_cut"]["from"] == path.name


def test_a_failed_write_leaves_the_old_cut_and_no_temporary_file(lifetime, committed, monkeypatch):
    """The cut is written beside the old one and renamed over it only once complete."""
    from perflib import cut

    path, _ = lifetime
    before = snapshot(committed)

    def half_then_fail(trace, out, start, end, **sides):  # noqa: ANN001, ANN003
        Path(out).write_bytes(b"PAR1 half a file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cut, "write_trace_parquet", half_then_fail)
    with pytest.raises(OSError, match="No space left"):
        cut.cut_into_runs(read_trace(path), committed, replace=True)
    assert snapshot(committed) == before
    assert not [p for p in committed.rglob("*") if p.name.startswith(".")]


def test_repeats_not_kept_leave_an_existing_cut_and_its_manifest_alone(lifetime, committed, capsys):
    path, _ = lifetime
    manifest = committed / LEVELS[1] / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["repeat"] = 2
    manifest.write_text(json.dumps(doc))
    before = snapshot(committed)
    assert main(["trace", "cut", str(path), str(committed), "--repeats", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    second = next(r for r in out["runs"] if r["run_dir"].endswith(LEVELS[1]))
    assert second["status"] == "kept" and "repeat 2 > 1" in second["note"]
    assert snapshot(committed)[f"{LEVELS[1]}/manifest.json"] == before[f"{LEVELS[1]}/manifest.json"]
    assert snapshot(committed)[f"{LEVELS[1]}/trace.parquet"] == before[f"{LEVELS[1]}/trace.parquet"]
