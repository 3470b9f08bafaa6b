"""A cut keeps the ranges and marks of its window beside its dispatches (`trace.markers.parquet`), so a
campaign's cut trace has the engine's steps and their phases as the capture itself has them: a Kineto
capture of SGLang or vLLM V1 steps (host ranges launching their kernels, `cudaLaunchKernel` joined by
correlation id, written by perflib's Kineto writer and read back by its reader) cut as the campaign cuts it
gives the same step table and phase table as the raw capture over the same window, and a campaign whose
`profiler.step_marker` names the decode steps attributes its cut traces over those steps."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from support import REPO
from synthetic import SGLANG_DECODE, SGLANG_EXTEND, engine_steps

from perflib import attribution, derive, runcache
from perflib.campaign import load_campaign
from perflib.cut import cut_into_runs
from perflib.errors import PerflibError
from perflib.traces import ReadMode, companion_files, markers_path, read_trace, write_trace_parquet
from perflib.traces.writers import write_kineto_json

RUN = REPO / "data/raw/cuda-h200/after-cupti/llamacpp-cuda/b1_c1024_r1"
VLLM_PREFILL = "execute_context_1(888_788544)_generation_0(0)"
VLLM_DECODE = "execute_context_0(0)_generation_4(4)"
"""vLLM V1's step names (`execute_context_<n>(...)_generation_<m>(...)`, issue 27)."""
ENGINES = {"sglang": ([SGLANG_EXTEND, SGLANG_DECODE, SGLANG_DECODE] * 6, "EXTEND"),
           "vllm": ([VLLM_PREFILL, VLLM_DECODE, VLLM_DECODE] * 6, "context_1(")}


def capture(tmp_path: Path, engine: str) -> Path:
    """A Kineto capture of 18 engine steps (a prefill step, then two decode steps, six times), on the
    realtime clock (`baseTimeNanoseconds`)."""
    names, long_phase = ENGINES[engine]
    frame, events, _ = engine_steps(names, seed=5, long_phase=long_phase)
    return write_kineto_json(frame, tmp_path / f"{engine}.json.gz", base_time_ns=10**12 - 10**9, events=events)


def inner_window(trace) -> attribution.Window:  # noqa: ANN001 - a Trace
    """The middle of the capture: a few steps in from either end, as a level inside a lifetime is."""
    d = trace.dispatches
    first, last = int(d["start_ns"].min()), int(d["end_ns"].max())
    return attribution.window_from_range(first + (last - first) // 5, last - (last - first) // 5, "level")


@pytest.mark.parametrize("engine", list(ENGINES))
def test_a_cut_gives_the_steps_and_phases_of_the_capture(tmp_path: Path, engine: str) -> None:
    raw = read_trace(capture(tmp_path, engine))
    lean = read_trace(capture(tmp_path, engine), ReadMode.LEAN_IDS)  # what the campaign's cut reads
    window = inner_window(raw)
    margin = 2_000_000
    cut = write_trace_parquet(lean, tmp_path / "trace.parquet", window.start_ns - margin, window.end_ns + margin)
    assert markers_path(cut).is_file() and markers_path(cut) in companion_files(cut)
    for mode in ReadMode:
        back = read_trace(cut, mode)
        assert "markers_note" not in back.meta and 0 < len(back.markers) < len(raw.markers)
        want, got = attribution.summarize(raw, window), attribution.summarize(back, window)
        assert got.step_method == want.step_method and ("SGLang" in want.step_method or "vLLM" in want.step_method)
        pd.testing.assert_frame_equal(got.step_table, want.step_table)
        pd.testing.assert_frame_equal(got.phases, want.phases)
        assert set(got.step_table["phase"]) == {"prefill", "decode"}
        split_got = attribution.host_gaps(back, window, got.step_table)
        assert split_got.to_dict() == attribution.host_gaps(raw, window, want.step_table).to_dict()


def test_a_cut_made_before_markers_were_kept_says_why_its_named_steps_are_missing(tmp_path: Path) -> None:
    """The committed H200 cuts hold no markers: a step_marker over them names that, not a silent guess."""
    old = read_trace(RUN / "trace.parquet")
    assert not len(old.markers) and "before perflib kept them" in old.meta["markers_note"]
    with pytest.raises(PerflibError, match=r"step_marker /DECODE/: no step.*no named ranges \(this trace cut holds no"):
        attribution.summarize(old, step_marker="DECODE")
    raw = read_trace(capture(tmp_path, "sglang"))
    first = int(raw.markers["start_ns"].min())
    none = read_trace(write_trace_parquet(raw, tmp_path / "early.parquet", first - 10**9, first - 1))
    assert not len(none.markers) and "no range or mark of the capture overlaps" in none.meta["markers_note"]
    assert not markers_path(tmp_path / "early.parquet").exists()


CAMPAIGN = """\
name: steps
model: {name: synthetic engine}
backends:
  - name: engine
    url: http://127.0.0.1:9
    profiler: {kind: cupti, window: level, step_marker: 'DECODE'}
batches: [1]
contexts: [1024]
decode_tokens: 8
repeats: 1
arms:
  - name: traced
"""


def campaign_with_a_cut(tmp_path: Path, engine: str) -> tuple[Path, attribution.Window, object]:
    """A campaign's run folder (the committed H200 run's, its level clocks moved inside the capture) cut
    from the lifetime capture as the campaign cuts it (`cut_into_runs` of the lean read with ids)."""
    raw = read_trace(capture(tmp_path, engine))
    window = inner_window(raw)
    folder = tmp_path / "data" / "raw" / "steps" / "traced" / "engine" / RUN.name
    shutil.copytree(RUN, folder, ignore=shutil.ignore_patterns("trace.parquet"))
    manifest = json.loads((folder / "manifest.json").read_text())
    for key in ("trace_path", "trace_cut"):
        manifest.pop(key, None)
    clocks, length = manifest["clocks"], window.end_ns - window.start_ns
    clocks["start"]["realtime_ns"], clocks["end"]["realtime_ns"] = window.start_ns, window.end_ns
    for other in ("monotonic_ns", "boottime_ns"):
        clocks["end"][other] = clocks["start"][other] + length
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (done,) = cut_into_runs(read_trace(capture(tmp_path, engine), ReadMode.LEAN_IDS), folder.parent)
    assert done.status == "written" and markers_path(done.path).is_file()
    yaml = tmp_path / "steps.yaml"
    yaml.write_text(textwrap.dedent(CAMPAIGN))
    return yaml, window, raw


def test_a_campaigns_step_marker_counts_the_decode_steps_of_its_cut_traces(tmp_path: Path) -> None:
    yaml, window, raw = campaign_with_a_cut(tmp_path, "sglang")
    tables = derive.build(load_campaign(yaml), tmp_path / "data")
    assert len(tables.trace_runs) == 1, tables.notes
    row = tables.trace_runs.iloc[0]
    want = attribution.summarize(raw, window, step_marker="DECODE")
    assert want.steps_named and set(want.step_table["phase"]) == {"decode"}
    assert row["step_method"] == want.step_method and "step_marker /DECODE/" in row["step_method"]
    assert int(row["steps"]) == want.steps == int(row["decode_steps"]) > 0
    assert row["busy_ms_per_step"] == pytest.approx(want.busy_ms_per_step, abs=1e-9)
    assert list(tables.steps["phase"]) == ["decode"] * want.steps
    run = tmp_path / "data" / "raw" / "steps" / "traced" / "engine" / RUN.name
    key = runcache.key(run / "trace.parquet", run, None, None, "level", "DECODE")
    assert "trace.markers.parquet" in key["companions"]
    near = markers_path(run / "trace.parquet")
    near.write_bytes(near.read_bytes() + b"\0")  # another markers file beside the same cut: another key
    assert runcache.key(run / "trace.parquet", run, None, None, "level", "DECODE") != key


def test_a_campaign_over_cut_traces_without_a_step_marker_has_the_engines_steps(tmp_path: Path) -> None:
    yaml, window, raw = campaign_with_a_cut(tmp_path, "vllm")
    yaml.write_text(yaml.read_text().replace(", step_marker: 'DECODE'", ""))
    tables = derive.build(load_campaign(yaml), tmp_path / "data")
    row = tables.trace_runs.iloc[0]
    want = attribution.summarize(raw, window)
    assert "vLLM execute_" in row["step_method"] and not bool(row["steps_guessed"])
    assert (int(row["decode_steps"]), int(row["prefill_steps"])) == (
        int((want.step_table["phase"] == "decode").sum()), int((want.step_table["phase"] == "prefill").sum()))
    assert list(tables.phases["phase"]) == ["prefill", "decode"]
