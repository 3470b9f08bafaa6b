"""Steps by phase through a campaign: an SGLang-like trace-only campaign (Kineto captures written by
`perflib.traces.writers`), its derived tables, the page's Profile section and the host-gap verdict,
which reads the decode steps only. Expected figures come from how the captures were built."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd
import pytest
from synthetic import SGLANG_DECODE, SGLANG_EXTEND, engine_steps, union_ns

from perflib import derive
from perflib.attribution import HOST_GAP_LABELS
from perflib.campaign import load_campaign
from perflib.cli import main
from perflib.report import tables as tb
from perflib.traces.writers import write_kineto_json

CAMPAIGN = """\
name: sg
model: {name: synthetic engine}
backends:
  - name: sglang
    start: none
    profiler:
      kind: kineto
      output: "{data_dir}/raw/sg/engine_b{batch}_c{context}.json.gz"
      window: steps
batches: [16]
contexts: [1024, 4096]
decode_tokens: 8
repeats: 1
arms:
  - name: engine
playbook: batched-decode
"""
MIXED = [SGLANG_EXTEND, SGLANG_DECODE] * 8
"""Context 1024: 8 extend steps interleaved with 8 decode steps. Context 4096: 8 extend steps only (issue
27: the bs32/bs64 SGLang captures held no decode step)."""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("phases")
    raw = root / "data" / "raw" / "sg"
    raw.mkdir(parents=True)
    (root / "reports").mkdir()
    frame, events, truth = engine_steps(MIXED, seed=2)
    write_kineto_json(frame, raw / "engine_b16_c1024.json.gz", events=events)
    extend, extend_events, _ = engine_steps([SGLANG_EXTEND] * 8, seed=3)
    write_kineto_json(extend, raw / "engine_b16_c4096.json.gz", events=extend_events)
    yaml = root / "sg.yaml"
    yaml.write_text(textwrap.dedent(CAMPAIGN))
    assert main(["campaign", "report", str(yaml), "--data", str(root / "data"), "--reports", str(root / "reports")]) == 0
    page = next((root / "reports").glob("sg-*.md")).read_text()
    tables = derive.read(load_campaign(yaml).derived_dir(root / "data"))
    return {"frame": frame, "truth": truth, "page": page, "tables": tables}


def decode_figures(frame: pd.DataFrame, truth: list[dict]) -> tuple[float, float]:
    """(decode steps' summed period, their busy) in ns: each step from the previous step's end."""
    every = list(zip(frame["start_ns"].tolist(), frame["end_ns"].tolist(), strict=True))
    spans = [(min(s for s, _ in t["kernels"]), max(e for _, e in t["kernels"])) for t in truth]
    lo = [spans[0][0]] + [end for _, end in spans[:-1]]
    mine = [k for k, t in enumerate(truth) if t["name"] == SGLANG_DECODE]
    return (sum(spans[k][1] - lo[k] for k in mine), sum(union_ns(every, lo[k], spans[k][1]) for k in mine))


def test_trace_runs_carry_the_decode_phase_and_the_phases_table(built: dict) -> None:
    tr = built["tables"].trace_runs.set_index("context")
    period, busy = decode_figures(built["frame"], built["truth"])
    mixed, extend = tr.loc[1024], tr.loc[4096]
    assert (mixed["steps"], mixed["decode_steps"], mixed["prefill_steps"]) == (16, 8, 8)
    assert mixed["decode_window_ms"] == pytest.approx(period / 1e6, abs=1e-9)
    assert mixed["decode_gap_ms_per_step"] == pytest.approx((period - busy) / 8 / 1e6, abs=1e-9)
    assert (extend["decode_steps"], extend["prefill_steps"]) == (0, 8)
    assert extend["phase_note"] == "no decode step in this capture: 8 prefill steps"
    assert pd.isna(extend["decode_window_ms"])
    phases = built["tables"].phases
    assert phases[["context", "phase", "steps"]].values.tolist() == [[1024, "prefill", 8], [1024, "decode", 8],
                                                                     [4096, "prefill", 8]]
    steps = built["tables"].steps
    assert steps[steps["context"] == 1024]["phase"].tolist() == ["prefill", "decode"] * 8


def test_host_gap_verdict_reads_the_decode_steps_and_says_when_there_are_none(built: dict) -> None:
    period, busy = decode_figures(built["frame"], built["truth"])
    share = (period - busy) / period
    lines = [x for x in built["page"].splitlines() if x.startswith("| host-side work between kernels | arm engine")]
    mixed = next(x for x in lines if "context 1024 |" in x)
    assert f"({100 * share:.1f}%) (decode steps only: 8 of 16 steps)" in mixed
    window = built["tables"].trace_runs.set_index("context").loc[1024]
    assert f"{100 * window['gap_ms'] / window['window_ms']:.1f}%" not in mixed  # not the whole window's share
    extend = next(x for x in lines if "context 4096 |" in x)
    assert "| not measured |" in extend and "no decode step in this capture: 8 prefill steps" in extend


def test_profile_section_shows_steps_by_phase(built: dict) -> None:
    page = built["page"]
    profile = page[page.index("## Profile"):]
    profile = profile[:profile.index("\n## ", 1)]
    assert "- engine sglang b16 c4096: no decode step in this capture: 8 prefill steps" in profile
    period, busy = decode_figures(built["frame"], built["truth"])
    row = next(x for x in profile.splitlines() if x.startswith("| engine | sglang | 16 | 1024 | decode | 8 |"))
    assert f"| {period / 8 / 1e6:.2f} ms |" in row and f"| {busy / 8 / 1e6:.2f} ms |" in row
    assert "**Steps by phase**" in profile and "**Each step** of the traces by the phase" in profile
    share = round(100 * (period - busy) / period)  # the figure: per decode step, not the window's average
    assert f"host gaps are {share}% (b16 c1024) to {share}% (b16 c1024) of the step" in profile


@pytest.mark.parametrize(("mixed", "chunks", "said"), [
    (12.0, 3.0, "the server counted 12 mixed prefill/decode steps and 3 prefill chunks in the level"),
    (None, None, None),  # llama.cpp and vLLM count neither: nothing is said, no phase is invented
])
def test_counters_give_the_composition_where_the_trace_names_no_phase(mixed, chunks, said) -> None:
    keys = {"campaign": "c", "arm": "a", "backend": "b", "batch": 4, "context": 1024, "repeat": 1}
    runs = derive.normalize("runs", pd.DataFrame([{**keys, "status": "complete", "ok": 4, "failed": 0,
                                                   "mixed_steps": mixed, "prefill_chunks": chunks}]))
    trace_runs = derive.normalize("trace_runs", pd.DataFrame([{**keys, "window_ms": 100.0, "steps": 10,
                                                               "busy_ms_per_step": 8.0, "gap_ms_per_step": 2.0,
                                                               "step_method": "dispatch rhythm, a guess"}]))
    lines = tb.counted_composition(derive.DerivedTables(runs=runs, trace_runs=trace_runs))
    assert lines == ([f"a b b4 c1024: the trace names no step phase; {said} (median over repeats)"] if said else [])


def test_a_step_marker_that_matches_nothing_leaves_the_trace_unattributed_and_says_why(tmp_path: Path) -> None:
    """`profiler.step_marker` follows `--steps`: no fall back to the engine's ranges or the rhythm."""
    raw = tmp_path / "data" / "raw" / "sg"
    raw.mkdir(parents=True)
    frame, events, _ = engine_steps(MIXED, seed=2)
    for context in (1024, 4096):
        write_kineto_json(frame, raw / f"engine_b16_c{context}.json.gz", events=events)
    yaml = tmp_path / "sg.yaml"
    yaml.write_text(textwrap.dedent(CAMPAIGN).replace("      window: steps\n",
                                                      "      window: steps\n      step_marker: 'decode_step'\n"))
    tables = derive.build(load_campaign(yaml), tmp_path / "data")
    assert len(tables.trace_runs) == 0
    why = [n for n in tables.notes if "step_marker /decode_step/: no step" in n]
    assert len(why) == 2 and all(f"{SGLANG_DECODE!r} (8)" in n for n in why)


# ------------------------------------------------- decode-only figures wherever a decode step is shown


def decode_class_ms(built: dict) -> dict[str, float]:
    """Per kernel class, its kernel time inside the decode steps' periods (ns), by a plain sweep over the
    capture's kernels; classes from the derived kernels table (what the class table called each kernel)."""
    frame, truth = built["frame"], built["truth"]
    spans = [(min(s for s, _ in t["kernels"]), max(e for _, e in t["kernels"])) for t in truth]
    lo = [spans[0][0]] + [end for _, end in spans[:-1]]
    periods = [(lo[k], spans[k][1]) for k, t in enumerate(truth) if t["name"] == SGLANG_DECODE]
    kernels = built["tables"].kernels
    of = dict(zip(kernels[kernels["context"] == 1024]["kernel"], kernels[kernels["context"] == 1024]["kernel_class"],
                  strict=True))
    out: dict[str, float] = {}
    for name, s, e in zip(frame["kernel"].astype(str), frame["start_ns"], frame["end_ns"], strict=True):
        out[of[name]] = out.get(of[name], 0) + sum(max(0, min(e, b) - max(s, a)) for a, b in periods)
    return out


def test_class_measurements_are_over_the_decode_steps(built: dict) -> None:
    from perflib.verdicts.measures import MEASUREMENTS, Scope

    tables, want = built["tables"], decode_class_ms(built)
    period, _ = decode_figures(built["frame"], built["truth"])
    scope = Scope(arm="engine", backend="sglang", batch=16, context=1024, classes=("gemm",))
    per_step = MEASUREMENTS["class_ms_per_step"].func(tables, scope)
    assert per_step.value == pytest.approx(want["gemm"] / 8 / 1e6, abs=1e-9)
    assert "(decode steps only: 8 of 16 steps)" in per_step.text
    share = MEASUREMENTS["class_share"].func(tables, scope)
    assert share.value == pytest.approx(want["gemm"] / period, abs=1e-12) and "in the decode steps" in share.text
    count = MEASUREMENTS["class_dispatches"].func(tables, scope)
    assert count.value == int(tables.classes.query("context == 1024 and kernel_class == 'gemm'")["decode_count"].iloc[0])
    whole = tables.classes.query("context == 1024 and kernel_class == 'gemm'")["ms_per_step"].iloc[0]
    assert per_step.value < whole / 2  # the window's figure averages the ~28 ms prefill steps in
    none = MEASUREMENTS["class_ms_per_step"].func(tables, Scope(arm="engine", backend="sglang", batch=16,
                                                                context=4096, classes=("gemm",)))
    assert none.value is None and "no decode step in this capture: 8 prefill steps" in none.why


def test_the_host_gap_split_is_over_the_decode_steps_and_matches_the_gap_share(built: dict) -> None:
    from perflib.attribution import HOST_GAP_PARTS
    from perflib.verdicts.measures import MEASUREMENTS, Scope

    tables = built["tables"]
    hg = tables.host_gaps.set_index("context").loc[1024]
    tr = tables.trace_runs.set_index("context").loc[1024]
    period, busy = decode_figures(built["frame"], built["truth"])
    assert hg["decode_steps"] == 8 and hg["decode_gap_ms"] == pytest.approx((period - busy) / 1e6, abs=1e-9)
    assert sum(hg[f"decode_{p}_ms"] for p in HOST_GAP_PARTS) == pytest.approx(tr["decode_gap_ms"], abs=1e-9)
    assert hg["decode_window_ms"] == pytest.approx(tr["decode_window_ms"], abs=1e-9)
    scope = Scope(arm="engine", backend="sglang", batch=16, context=1024)
    for part in HOST_GAP_PARTS:
        got = MEASUREMENTS[f"{part}_share" if part != "host_compute" else "host_compute_share"].func(tables, scope)
        assert got.value == pytest.approx(hg[f"decode_{part}_ms"] / hg["decode_window_ms"], abs=1e-12)
        assert " per decode step " in got.text
    page = built["page"]
    line = next(x for x in page.splitlines() if x.startswith("| host-side work between kernels | arm engine")
                and "context 1024 |" in x)
    filled = " + ".join(f"{HOST_GAP_LABELS[p]} {hg[f'decode_{p}_ms'] / 8:.1f}" for p in HOST_GAP_PARTS)
    assert f"(decode steps only: 8 of 16 steps) = {filled} ms" in line
    extend = tables.host_gaps.set_index("context").loc[4096]
    assert extend["decode_steps"] == 0 and pd.isna(extend["decode_gap_ms"])


def test_the_pages_per_step_figures_are_the_decode_steps(built: dict) -> None:
    page = built["page"]
    period, busy = decode_figures(built["frame"], built["truth"])
    level = page[page.index("## Per level"):page.index("## Profile")]
    row = next(x for x in level.splitlines() if x.startswith("| engine | sglang | 16 | 1024 |"))
    assert f"| {busy / 8 / 1e6:.2f} ms | {(period - busy) / 8 / 1e6:.2f} ms | {100 * busy / period:.1f}% |" in row
    assert "GPU busy, host gap and busy share are those of its decode steps alone" in level
    want = decode_class_ms(built)
    profile = page[page.index("**Kernel classes**"):]
    for name in ("gemm", "attention"):
        cls = next(x for x in profile.splitlines() if x.startswith(f"| engine | sglang | 16 | 1024 | {name} |"))
        assert f"| {want[name] / 8 / 1e6:.3f} ms |" in cls, cls
    assert "of its decode steps alone" in profile.splitlines()[0]
    split = page[page.index("**What fills the host gaps**"):page.index("**Kernel classes**")]
    hg = built["tables"].host_gaps.set_index("context").loc[1024]
    row = next(x for x in split.splitlines() if x.startswith("| engine | sglang | 16 | 1024 |"))
    assert f"| {hg['decode_gap_ms'] / 8:.2f} ms |" in row and "over its decode steps alone" in split
    assert "no decode step in this capture" in next(x for x in split.splitlines()
                                                    if x.startswith("| engine | sglang | 16 | 4096 |"))
