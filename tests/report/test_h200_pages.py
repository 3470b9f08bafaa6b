"""The two H200 results pages rebuild from the committed raw data, and their figures match the raw files.

`perflib campaign report` runs on a copy of the campaigns, the committed raw data and the reports
folder (same relative layout), so the rebuilt pages must equal the committed ones byte for byte
apart from the date line. The facts checked against the pages are computed here from the raw
files themselves (Prometheus counters, request records, Kineto traces), not from perflib's tables.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import statistics
from pathlib import Path

import pytest
from support import REPO, write_page

CAMPAIGNS = ("cuda-h200", "h200-pytorch", "cpu-reference")


def _committed_page(name: str) -> Path:
    pages = sorted((REPO / "reports").glob(f"{name}-[0-9][0-9][0-9][0-9]-*.md"))
    if not pages:
        pytest.fail(f"no committed page reports/{name}-*.md (run `perflib campaign report campaigns/{name}.yaml`)")
    return pages[-1]


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory) -> dict[str, Path]:
    """Copy campaigns, raw data and reports into a tmp tree and rebuild the three pages there."""
    from perflib.campaign import load_campaign

    root = tmp_path_factory.mktemp("h200")
    (root / "campaigns").mkdir()
    for name in CAMPAIGNS:
        shutil.copy(REPO / "campaigns" / f"{name}.yaml", root / "campaigns" / f"{name}.yaml")
        shutil.copytree(REPO / "data" / "raw" / name, root / "data" / "raw" / name)
    shutil.copytree(REPO / "reports", root / "reports", ignore=shutil.ignore_patterns("demo-*"))
    pages = {}
    for name in ("cpu-reference", "h200-pytorch", "cuda-h200"):
        pages[name] = write_page(load_campaign(root / "campaigns" / f"{name}.yaml"))
    return pages


def _without_date(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("Date: ")]


@pytest.mark.parametrize("name", ["cuda-h200", "h200-pytorch"])
def test_page_rebuilds_byte_for_byte(rebuilt, name):
    committed = _committed_page(name)
    page = rebuilt[name]
    assert page.name == committed.name  # the date in the name comes from the raw data
    assert _without_date(page.read_text()) == _without_date(committed.read_text())
    figures = sorted(p.name for p in (page.parent / page.stem).glob("*.png"))
    assert figures == sorted(p.name for p in (committed.parent / committed.stem).glob("*.png"))
    for link in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", committed.read_text()):
        assert (committed.parent / link).is_file(), link


@pytest.mark.parametrize("name", ["cuda-h200", "h200-pytorch"])
def test_page_is_drawn_again_from_data_derived_alone(rebuilt, name):
    """What the rebuild wrote in data/derived/<campaign>/ draws the same page, to the byte (floats read
    back exactly: six significant digits once turned a 168.79 tok/s cell into 168.78)."""
    from perflib import derive, pageinputs, report
    from perflib.campaign import load_campaign
    from perflib.verdicts import Decisions

    page = rebuilt[name]
    root = page.parent.parent
    derived = root / "data" / "derived" / name
    written = page.read_bytes()
    page.unlink()
    campaign, tables = load_campaign(root / "campaigns" / f"{name}.yaml"), derive.read(derived)
    again = report.write_report(campaign, tables, pageinputs.read(derived), Decisions.of(campaign, tables))
    assert again == page and again.read_bytes() == written


# ------------------------------------------------------------------------ facts from the raw files


def _counter(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? ([0-9.eE+-]+)$", text, re.M)
    assert match, name
    return float(match.group(1))


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines() if line.strip()]


def _step_ms(run_dir: Path) -> float:
    """llama.cpp's decode step between the level's two /metrics scrapes (docs/SCHEMA.md §3, SERVERS.md §5):
    1000 · Δtokens_predicted_seconds / (Δtokens_predicted − requests finished), each request's first
    token being a prefill product."""
    before, after = (run_dir / "metrics_before.txt").read_text(), (run_dir / "metrics_after.txt").read_text()
    secs = _counter(after, "llamacpp:tokens_predicted_seconds_total") - _counter(
        before, "llamacpp:tokens_predicted_seconds_total")
    toks = _counter(after, "llamacpp:tokens_predicted_total") - _counter(before, "llamacpp:tokens_predicted_total")
    finished = sum(1 for r in _records(run_dir) if r.get("completion_tokens") is not None)
    return 1e3 * secs / (toks - finished)


def _tok_s(run_dir: Path) -> float:
    """Mean of the ok requests' decode tok/s (SCHEMA §2 request records)."""
    rows = _records(run_dir)
    return statistics.mean(r["decode_tok_s"] for r in rows if r.get("ok") and r.get("decode_tok_s") is not None)


def _level(campaign: str, arm: str, backend: str, batch: int, context: int, func) -> float:
    runs = sorted((REPO / "data" / "raw" / campaign / arm / backend).glob(f"b{batch}_c{context}_r*"))
    assert runs, (campaign, arm, batch, context)
    return statistics.median(func(r) for r in runs)


def _section(text: str, title: str) -> str:
    return text.split(f"## {title}")[1].split("\n## ")[0]


def _repeats(campaign: str, arm: str, batch: int, context: int, func) -> list[float]:
    runs = sorted((REPO / "data" / "raw" / campaign / arm / "llamacpp-cuda").glob(f"b{batch}_c{context}_r*"))
    assert runs, (campaign, arm, batch, context)
    return [func(r) for r in runs]


def test_before_after_step_change_and_gate_from_raw_counters():
    """Each pair of arms at each level: the means over the repeats and the change of the mean, from the raw
    counters; each gate's state agrees with the interval it prints (pass: the whole interval within 3%)."""
    text = _committed_page("cuda-h200").read_text()
    section = _section(text, "Before / after")
    for context in (1024, 16384):
        before = statistics.mean(_repeats("cuda-h200", "before", 1, context, _step_ms))
        after = statistics.mean(_repeats("cuda-h200", "after", 1, context, _step_ms))
        change = 100 * (after - before) / before
        row = (f"| llamacpp-cuda | 1 | {context} | decode\\_step\\_ms | after vs before | {before:.2f} ms | "
               f"{after:.2f} ms | 3 / 3 | {change:+.1f}% |")
        assert row in section
        for base, arm in (("before", "after"), ("after", "after-kvu")):
            tok_before = statistics.mean(_repeats("cuda-h200", base, 1, context, _tok_s))
            tok_after = statistics.mean(_repeats("cuda-h200", arm, 1, context, _tok_s))
            regression = -100 * (tok_after - tok_before) / tok_before
            gate = [line for line in section.splitlines() if line.startswith("- Gate:")
                    and f"context {context})" in line and f"({base}) to " in line and f"({arm})," in line]
            assert len(gate) == 1
            how = f"({regression:.1f}% worse)" if regression > 0 else f"({-regression:.1f}% better)"
            assert how in gate[0]
            lo, hi = (float(x) for x in re.search(r"95% interval ([-+][\d.]+)% to ([-+][\d.]+)%", gate[0]).groups())
            worst, best = -lo, -hi  # tok/s: a fall is the regression
            state = "pass" if worst <= 3 else "FAIL" if best > 3 else "undecided"
            assert gate[0].endswith(f": {state}"), gate[0]
    # after-kvu names `baseline: after`: compared with the configuration it changed, not with before
    for batch in (1, 4, 8):
        for context in (1024, 16384):
            after = statistics.mean(_repeats("cuda-h200", "after", batch, context, _step_ms))
            kvu = statistics.mean(_repeats("cuda-h200", "after-kvu", batch, context, _step_ms))
            row = (f"| llamacpp-cuda | {batch} | {context} | decode\\_step\\_ms | after-kvu vs after | {after:.2f} ms | "
                   f"{kvu:.2f} ms | 3 / 3 | {100 * (kvu - after) / after:+.1f}% |")
            assert row in section
    assert "after-kvu vs before" not in section
    # the traced arm stays out of the comparison, and is reported against `after` instead
    assert "before → after-cupti" not in section
    assert "after → after-cupti" in section


def test_step_over_floor_uses_the_8b_q4_0_bytes_and_measured_bandwidth():
    from perflib.campaign import load_campaign

    campaign = load_campaign(REPO / "campaigns" / "cuda-h200.yaml")
    vocab, embd, layers, ffn, kv = 128256, 4096, 32, 14336, 8 * 128
    weights_2d = 2 * vocab * embd + layers * (2 * embd * embd + 2 * embd * kv + 3 * embd * ffn)
    expected = weights_2d // 32 * 18 + (2 * layers + 1) * embd * 4
    assert campaign.model.weight_bytes == expected
    manifest = json.loads((REPO / "data/raw/cuda-h200/after/llamacpp-cuda/b1_c1024_r1/manifest.json").read_text())
    assert manifest["server"]["models"]["data"][0]["meta"]["size"] == expected  # what llama-server loaded
    assert campaign.model.kv_bytes_per_token == 32 * 8 * 128 * 2 * 2
    capture = json.loads((REPO / "data/raw/cuda-h200/capture.json").read_text())
    bandwidth = campaign.backend("llamacpp-cuda").peak_bandwidth_gbs
    assert bandwidth == pytest.approx(capture["bandwidth"]["gb_per_s_median"], abs=0.5)
    step = _level("cuda-h200", "after", "llamacpp-cuda", 8, 16384, _step_ms)
    floor = (expected + 131072 * 16384 * 8) / (bandwidth * 1e9) * 1e3
    row = f"| after | llamacpp-cuda | 8 | 16384 | {step:.2f} ms | {floor:.3f} ms | {step / floor:.1f}x |"
    assert row in _section(_committed_page("cuda-h200").read_text(), "Step over floor")


def test_ratio_table_has_the_cpu_reference_row_and_unmeasured_rocm_metal():
    section = _section(_committed_page("cuda-h200").read_text(), "Cross-backend reference ratio")
    for context in (256, 2048):
        one = _level("cpu-reference", "default", "cpu", 1, context, _step_ms)
        four = _level("cpu-reference", "default", "cpu", 4, context, _step_ms)
        row = (f"| cpu | CPU llama-server demo campaign (cpu-reference) | {context} | 4 | {one:.2f} ms | "
               f"{four:.2f} ms | {four / one:.2f}x |")
        assert row in section
    one = _level("cuda-h200", "after-kvu", "llamacpp-cuda", 1, 1024, _step_ms)  # the last compared arm
    eight = _level("cuda-h200", "after-kvu", "llamacpp-cuda", 8, 1024, _step_ms)
    assert f"| llamacpp-cuda | this campaign | 1024 | 8 | {one:.2f} ms | {eight:.2f} ms | {eight / one:.2f}x |" in section
    for backend in ("rocm", "metal"):
        line = next(x for x in section.splitlines() if x.startswith(f"| {backend} |"))
        assert "not measured: no ROCm or Metal machine was available" in line


def _cupti_level(batch: int, context: int) -> dict:
    """The traced arm's decode window computed from the raw files alone (SERVERS.md §5.2): request times
    (CLOCK_MONOTONIC) moved onto the trace's CLOCK_REALTIME by the level clocks, kernel and copy intervals
    from trace.parquet unioned and clipped to the window, steps = the median request's chunks inside it."""
    import pyarrow.parquet as pq

    run = REPO / "data/raw/cuda-h200/after-cupti/llamacpp-cuda" / f"b{batch}_c{context}_r1"
    manifest = json.loads((run / "manifest.json").read_text())
    offset = manifest["clocks"]["start"]["realtime_ns"] - manifest["clocks"]["start"]["monotonic_ns"]
    records = [r for r in _records(run) if r.get("ok")]
    lo = max(r["first_token_ns"] for r in records)
    hi = min(r["last_token_ns"] for r in records)
    steps = statistics.median_low(sorted(sum(1 for t in r["chunk_ns"] if lo < t <= hi) for r in records))
    lo, hi = lo + offset, hi + offset
    table = pq.read_table(run / "trace.parquet").to_pylist()
    inside = [(max(d["start_ns"], lo), min(d["end_ns"], hi), d["kernel"]) for d in table
              if d["end_ns"] > lo and d["start_ns"] < hi]
    busy, cur_s, cur_e = 0, None, None
    for s, e, _ in sorted(inside):
        if cur_e is None or s > cur_e:
            busy += (cur_e - cur_s) if cur_e is not None else 0
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += (cur_e - cur_s) if cur_e is not None else 0
    gemv = sum(e - s for s, e, k in inside if "mul_mat_vec" in k)
    last = max(d["end_ns"] for d in table)  # the capture's last record in this cut
    # the capture covers the window where its records reach the window's end, give or take two steps
    covered = last >= hi - 2 * (hi - lo) / steps
    return {"steps": steps, "window_ms": (hi - lo) / 1e6, "busy_ms": busy / 1e6, "gemv_ms": gemv / 1e6,
            "names": {k for _, _, k in inside}, "covered": covered, "missing_ms": (hi - last) / 1e6}


@pytest.mark.parametrize("context", [1024, 16384])
def test_cupti_busy_gap_split_from_the_raw_trace(context):
    """GPU busy and host gap per step of the traced arm, recomputed from trace.parquet and requests.jsonl."""
    text = _committed_page("cuda-h200").read_text()
    profile = _section(text, "Profile")
    for batch in (1, 4, 8):
        level = _cupti_level(batch, context)
        step, busy = level["window_ms"] / level["steps"], level["busy_ms"] / level["steps"]
        row = (f"| after-cupti | llamacpp-cuda | {batch} | {context} | 1 | {level['steps']} | {step:.2f} ms | "
               f"{busy:.2f} ms | {step - busy:.2f} ms | {100 * busy / step:.1f}% |")
        assert (row in profile) is level["covered"]  # a capture that ended inside its window is not attributed
        if not level["covered"]:
            head = text.split("\n## ")[0]
            assert (f"**Trace lost.** after-cupti/llamacpp-cuda/b{batch}\\_c{context}\\_r1: capture ended" in head
                    and f"(its last {level['missing_ms'] / 1e3:.2f} s has no record)" in head)
    verdicts = _section(text, "Verdicts")
    eight = _cupti_level(8, context)
    gap, step = (eight["window_ms"] - eight["busy_ms"]) / eight["steps"], eight["window_ms"] / eight["steps"]
    line = next(x for x in verdicts.splitlines() if x.startswith("| host-side work")
                and f"batch 8, context {context} |" in x)
    if not eight["covered"]:  # the committed ~16K batch-8 capture ran out of CUPTI buffer memory
        assert "| not measured |" in line and "no whole trace" in line
        return
    expected = "confirmed" if gap / step >= 0.30 else "ruled out" if gap / step < 0.15 else "inconclusive"
    assert f"host gaps {gap:.1f} of {step:.1f} ms per step" in line and f"| {expected} |" in line


@pytest.mark.parametrize("context", [1024, 16384])
def test_cupti_gemv_scaling_and_absent_gemm_from_the_raw_trace(context):
    """llama.cpp's batch-8 projections stay on mul_mat_vec_q: no GEMM or dequantize kernel in the window,
    and the GEMV time per step grows far slower than the batch (the weights are not streamed per row)."""
    verdicts = _section(_committed_page("cuda-h200").read_text(), "Verdicts")
    one, eight = _cupti_level(1, context), _cupti_level(8, context)
    assert not [n for n in eight["names"] if re.search(r"(?i)gemm|cublas|nvjet|dequantize|convert", n)]
    line = next(x for x in verdicts.splitlines() if x.startswith("| GEMM/dequant route")
                and f"batch 8, context {context} |" in x)
    gemv = next(x for x in verdicts.splitlines()
                if x.startswith("| per-row weight streaming") and f"batch 8, context {context} |" in x)
    if eight["covered"]:
        assert "| ruled out |" in line and "(0.0%, 0 dispatches" in line
        per_step_1, per_step_8 = one["gemv_ms"] / one["steps"], eight["gemv_ms"] / eight["steps"]
        ratio = per_step_8 / per_step_1
        assert f"{per_step_8:.1f} ms per step at batch 8 over {per_step_1:.1f} at batch 1: {ratio:.2f}x" in gemv
        expected = "confirmed" if ratio / 8 >= 0.75 else "ruled out" if ratio / 8 <= 0.5 else "inconclusive"
        assert f"| {expected} |" in gemv
    else:  # a trace cut short by its capture decides nothing
        assert "| not measured |" in line and "| not measured |" in gemv and "no whole trace" in gemv
    # interleaved prefill: decided from the own-step share, which the request records give
    line = next(x for x in verdicts.splitlines()
                if x.startswith("| interleaved prefill | arm after,") and f"batch 8, context {context} |" in x)
    assert "| confirmed |" in line or "| ruled out |" in line or "| inconclusive |" in line


# -------------------------------------------------------------------------- the Kineto traces


def _gemm_ms_per_step(batch: int, context: int) -> float:
    """gemm-class kernel ms per step inside the ProfilerStep span, from the Kineto JSON itself."""
    from perflib import classes

    table = classes.load_builtin("pytorch-cuda")
    path = REPO / "data/raw/h200-pytorch" / f"llama1b_decode_b{batch}_c{context}.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"]
    start = min(float(e["ts"]) for e in steps)
    end = max(float(e["ts"]) + float(e["dur"]) for e in steps)
    n_steps = len({e["name"] for e in steps})
    total_us = 0.0
    for e in events:
        if e.get("cat") != "kernel" or e.get("ph") != "X":
            continue
        s, t = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        if t <= start or s >= end:
            continue
        if table.classify(e["name"]) == "gemm":
            total_us += min(t, end) - max(s, start)
    return total_us / 1e3 / n_steps


@pytest.mark.parametrize("context", [1024, 16384])
def test_b4_over_b1_gemm_per_step_from_the_traces(context):
    one, four = _gemm_ms_per_step(1, context), _gemm_ms_per_step(4, context)
    ratio = four / one
    section = _section(_committed_page("h200-pytorch").read_text(), "Profile")
    row = (f"| eager | pytorch-cuda | {context} | 4 | gemm | {one:.3f} ms | {four:.3f} ms | {ratio:.2f}x | "
           f"{ratio / 4:.2f} |")
    assert row in section
    verdicts = _section(_committed_page("h200-pytorch").read_text(), "Verdicts")
    line = next(x for x in verdicts.splitlines()
                if x.startswith("| per-row weight streaming") and f"context {context} |" in x)
    assert f"{ratio:.2f}x for a 4x batch" in line
    expected = "confirmed" if ratio / 4 >= 0.75 else "ruled out" if ratio / 4 <= 0.5 else "inconclusive"
    assert f"| {expected} |" in line


def test_trace_only_page_steps_and_not_measured_counters():
    text = _committed_page("h200-pytorch").read_text()
    manifest = json.loads((REPO / "data/raw/h200-pytorch/manifest.json").read_text())
    profile = _section(text, "Profile")
    for entry in manifest["traces"]:
        row = f"| eager | pytorch-cuda | {entry['batch']} | {entry['context']} | 1 | {entry['steps']} |"
        assert row in profile  # one step per ProfilerStep annotation, as the capture recorded
    verdicts = _section(text, "Verdicts")
    for label in ("interleaved prefill", "batched step far above single-stream"):
        lines = [x for x in verdicts.splitlines() if x.startswith(f"| {label} | arm ")]  # the detail, not the grid
        assert lines and all("| not measured |" in x and "trace-only backend" in x for x in lines)
    assert "Trace-only runs: 4 traces found of 4." in text
    assert "[cuda-h200-" in _section(text, "See also")
    assert "[h200-pytorch-" in _section(_committed_page("cuda-h200").read_text(), "See also")


# ------------------------------------------------------------------------ the campaign keys


def test_campaign_keys_for_traced_arms_and_trace_only_backends(tmp_path):
    from perflib.campaign import load_campaign
    from perflib.errors import InputError

    h200 = load_campaign(REPO / "campaigns" / "cuda-h200.yaml")
    assert [a.name for a in h200.compared_arms] == ["before", "after", "after-kvu"]
    assert h200.arm("after-cupti").role == "traced" and h200.arm("after-cupti").of == "after"
    assert h200.compare_with[0].campaign == (REPO / "campaigns" / "cpu-reference.yaml").resolve()
    pytorch = load_campaign(REPO / "campaigns" / "h200-pytorch.yaml")
    assert pytorch.backends[0].trace_only and pytorch.backends[0].profiler.window == "steps"
    bad = (REPO / "campaigns" / "cuda-h200.yaml").read_text().replace("of: after", "of: aftr")
    (tmp_path / "bad.yaml").write_text(bad)
    line = bad.splitlines().index(next(x for x in bad.splitlines() if "of: aftr" in x)) + 1
    with pytest.raises(InputError, match=rf"arms\[3\]\.of \(line {line}\).*'aftr'"):
        load_campaign(tmp_path / "bad.yaml")


# ------------------------------------------------------------------------------- the notebook


def test_analyze_notebook_runs_on_the_h200_campaign(tmp_path):
    """nbval's target runs the sample data; this executes the same notebook on campaigns/cuda-h200.yaml."""
    from perflib.campaign import execute_notebook, find_kernel

    out = tmp_path / "analyze-cuda-h200.ipynb"
    error = execute_notebook(REPO / "notebooks" / "analyze.ipynb", out,
                             {"campaign_file": str(REPO / "campaigns" / "cuda-h200.yaml")}, find_kernel(),
                             cwd=REPO / "notebooks")
    assert error is None, error
    cells = json.loads(out.read_text())["cells"]
    text = "".join("".join(o.get("text", "")) + json.dumps(o.get("data", {}))
                   for c in cells if c["cell_type"] == "code" for o in c.get("outputs", []))
    assert "after-cupti" in text and "llamacpp-cuda" in text
    assert "decode_tok_s at batch 1, at most 3% worse" in text


# ------------------------------------------------------------------- the graph-reuse probe


def _reuse_runs(log: Path) -> list[tuple[list[int], int]]:
    """(slots, graphs reused during it) per repeat, from a llama-server log (whole or filtered): each
    repeat is a warm-up request (a few tokens) followed by its decode requests (128 tokens each)."""
    rows = re.findall(r"id +(\d+) \| task +\d+ \| +eval time = +[0-9.]+ ms / +(\d+) tokens.*\n(?:.*total time.*\n)?"
                      r".*graphs reused = +(\d+)", log.read_text())
    runs: list[tuple[list[int], int]] = []
    base, current = 0, []
    for slot, tokens, reused in ((int(a), int(b), int(c)) for a, b, c in rows):
        if tokens < 128:  # a warm-up request opens the next repeat
            if current:
                runs.append((sorted(s for s, _ in current), max(r for _, r in current) - base))
            base, current = reused, []
        else:
            current.append((slot, reused))
    if current:
        runs.append((sorted(s for s, _ in current), max(r for _, r in current) - base))
    return runs


def _reuse_groups(log: Path) -> list[tuple[int, int]]:
    return [(len(slots), reused) for slots, reused in _reuse_runs(log)]


def test_batch4_graph_reuse_follows_slot_adjacency_with_per_slot_kv():
    """The cause named on the page: with per-slot KV caches a batch-4 repeat reuses its graph through its
    decode exactly when its four slots are adjacent; with --kv-unified it always does."""
    raw = REPO / "data/raw/cuda-h200"
    per_slot = [raw / "after/llamacpp-cuda/server.log", raw / "before/llamacpp-cuda/server.log",
                raw / "experiments/graph-reuse/fa-on/server.log", raw / "experiments/graph-reuse/fa-off/server.log"]
    unified = [raw / "after-kvu/llamacpp-cuda/server.log", raw / "experiments/graph-reuse/fa-on-kvu/server.log"]

    def adjacent(slots: list[int]) -> bool:
        return slots == list(range(slots[0], slots[0] + len(slots)))

    seen = {True: 0, False: 0}
    for log in per_slot:
        for slots, reused in _reuse_runs(log):
            if len(slots) == 4:
                assert (reused >= 100) == adjacent(slots), (log.parent.name, slots, reused)
                seen[adjacent(slots)] += 1
    assert seen[True] >= 3 and seen[False] >= 3
    batch4 = [(s, r) for log in unified for s, r in _reuse_runs(log) if len(s) == 4]
    assert len(batch4) >= 12 and all(r >= 100 for _, r in batch4)
    assert any(not adjacent(s) for s, _ in batch4)


def test_graph_reuse_probe_figures_from_the_raw_files():
    """The probe's note: per-repeat batch-4 steps from the raw counters, and reuse read from the server log.
    Every batch-4 repeat that reused its graph is faster than every one that did not; --kv-unified reused
    it in all six."""
    base = REPO / "data/raw/cuda-h200/experiments/graph-reuse"
    notes = _section(_committed_page("cuda-h200").read_text(), "Notes")
    fast, slow = [], []
    for cfg in ("fa-on", "fa-on-kvu", "fa-off"):
        groups = _reuse_groups(base / cfg / "server.log")
        phases = sorted(p for p in (base / cfg).iterdir() if p.is_dir())
        assert [p.name for p in phases] == ["1-b4-c1024", "2-b1-c16384", "3-b4-c1024"]
        steps = [[_step_ms(r) for r in sorted(p.glob("b*_r*"))] for p in phases]
        assert [len(s) for s in steps] == [3, 3, 3] and len(groups) == 9
        b4 = steps[0] + steps[2]
        reuse = groups[:3] + groups[6:]
        assert all(n == 4 for n, _ in reuse)
        for step, (_, reused) in zip(b4, reuse, strict=True):
            (fast if reused >= 100 else slow).append(step)
        if cfg == "fa-on-kvu":
            assert all(reused >= 100 for _, reused in reuse)
        figures = ", ".join(f"{x:.2f}" for x in steps[0]) + " ms, then " + ", ".join(f"{x:.2f}" for x in steps[2])
        assert figures in notes.replace("\n", " "), (cfg, figures)
    assert fast and slow and max(fast) < min(slow)
    r1, r2, r3 = (_step_ms(r) for r in sorted((REPO / "data/raw/cuda-h200/after/llamacpp-cuda").glob("b4_c1024_r*")))
    assert f"r1 stepped {r1:.2f} ms, r2 and r3 {r2:.2f} and {r3:.2f} ms" in notes.replace("\n", " ")
