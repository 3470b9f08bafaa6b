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

REPO = Path(__file__).resolve().parents[1]
CAMPAIGNS = ("cuda-h200", "h200-pytorch", "cpu-reference")


def _committed_page(name: str) -> Path:
    pages = sorted((REPO / "reports").glob(f"{name}-*.md"))
    if not pages:
        pytest.fail(f"no committed page reports/{name}-*.md (run `perflib campaign report campaigns/{name}.yaml`)")
    return pages[-1]


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory) -> dict[str, Path]:
    """Copy campaigns, raw data and reports into a tmp tree and rebuild the three pages there."""
    from perflib import report
    from perflib.campaign import load_campaign

    root = tmp_path_factory.mktemp("h200")
    (root / "campaigns").mkdir()
    for name in CAMPAIGNS:
        shutil.copy(REPO / "campaigns" / f"{name}.yaml", root / "campaigns" / f"{name}.yaml")
        shutil.copytree(REPO / "data" / "raw" / name, root / "data" / "raw" / name)
    shutil.copytree(REPO / "reports", root / "reports", ignore=shutil.ignore_patterns("demo-*"))
    pages = {}
    for name in ("cpu-reference", "h200-pytorch", "cuda-h200"):
        pages[name] = report.write_report(load_campaign(root / "campaigns" / f"{name}.yaml"))
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


def test_before_after_step_change_and_gate_from_raw_counters():
    text = _committed_page("cuda-h200").read_text()
    section = _section(text, "Before / after")
    for context in (1024, 16384):
        before = _level("cuda-h200", "before", "llamacpp-cuda", 1, context, _step_ms)
        after = _level("cuda-h200", "after", "llamacpp-cuda", 1, context, _step_ms)
        change = 100 * (after - before) / before
        row = (f"| llamacpp-cuda | 1 | {context} | decode\\_step\\_ms | before → after | {before:.2f} ms | "
               f"{after:.2f} ms | 3 / 3 | {change:+.1f}% |")
        assert row in section
        tok_before = _level("cuda-h200", "before", "llamacpp-cuda", 1, context, _tok_s)
        tok_after = _level("cuda-h200", "after", "llamacpp-cuda", 1, context, _tok_s)
        regression = -100 * (tok_after - tok_before) / tok_before
        gate = [line for line in section.splitlines() if line.startswith("- Gate:") and f"context {context})" in line]
        assert len(gate) == 1
        assert f"regression {regression:.1f}%" in gate[0]
        assert gate[0].endswith(": pass" if regression <= 3 else ": FAIL")
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
    one = _level("cuda-h200", "after", "llamacpp-cuda", 1, 1024, _step_ms)
    eight = _level("cuda-h200", "after", "llamacpp-cuda", 8, 1024, _step_ms)
    assert f"| llamacpp-cuda | this campaign | 1024 | 8 | {one:.2f} ms | {eight:.2f} ms | {eight / one:.2f}x |" in section
    for backend in ("rocm", "metal"):
        line = next(x for x in section.splitlines() if x.startswith(f"| {backend} |"))
        assert "not measured: no ROCm or Metal machine was available" in line


def test_cuda_verdicts_say_why_trace_candidates_are_not_measured():
    section = _section(_committed_page("cuda-h200").read_text(), "Verdicts")
    for label in ("GEMM/dequant route", "per-row weight streaming", "host-side work"):
        lines = [x for x in section.splitlines() if x.startswith(f"| {label}")]
        assert len(lines) == 2 and all("| not measured |" in x and "CUPTI kernel trace" in x for x in lines)
    # interleaved prefill: decided from the own-step share, which the request records give
    for context in (1024, 16384):
        line = next(x for x in section.splitlines()
                    if x.startswith("| interleaved prefill | arm after,") and f"context {context} |" in x)
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
    section = _section(_committed_page("h200-pytorch").read_text(), "Profile: GPU busy versus host gaps per step")
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
    profile = _section(text, "Profile: GPU busy versus host gaps per step")
    for entry in manifest["traces"]:
        row = f"| eager | pytorch-cuda | {entry['batch']} | {entry['context']} | 1 | {entry['steps']} |"
        assert row in profile  # one step per ProfilerStep annotation, as the capture recorded
    verdicts = _section(text, "Verdicts")
    for label in ("interleaved prefill", "batched step far above single-stream"):
        lines = [x for x in verdicts.splitlines() if x.startswith(f"| {label} |")]
        assert lines and all("| not measured |" in x and "trace-only backend" in x for x in lines)
    assert "Trace-only runs: 4 traces found of 4." in text
    assert "[cuda-h200-" in _section(text, "See also")
    assert "[h200-pytorch-" in _section(_committed_page("cuda-h200").read_text(), "See also")


# ------------------------------------------------------------------------ the campaign keys


def test_campaign_keys_for_traced_arms_and_trace_only_backends(tmp_path):
    from perflib.campaign import load_campaign
    from perflib.errors import InputError

    h200 = load_campaign(REPO / "campaigns" / "cuda-h200.yaml")
    assert [a.name for a in h200.compared_arms] == ["before", "after"]
    assert h200.arm("after-cupti").role == "traced" and h200.arm("after-cupti").of == "after"
    assert h200.compare_with[0].campaign == (REPO / "campaigns" / "cpu-reference.yaml").resolve()
    pytorch = load_campaign(REPO / "campaigns" / "h200-pytorch.yaml")
    assert pytorch.backends[0].trace_only and pytorch.backends[0].profiler.window == "steps"
    bad = (REPO / "campaigns" / "cuda-h200.yaml").read_text().replace("of: after", "of: aftr")
    (tmp_path / "bad.yaml").write_text(bad)
    line = bad.splitlines().index(next(x for x in bad.splitlines() if "of: aftr" in x)) + 1
    with pytest.raises(InputError, match=rf"arms\[2\]\.of \(line {line}\).*'aftr'"):
        load_campaign(tmp_path / "bad.yaml")


# ------------------------------------------------------------------------------- the notebook


def test_analyze_notebook_runs_on_the_h200_campaign(tmp_path):
    """nbval's target runs the sample data; this executes the same notebook on campaigns/cuda-h200.yaml."""
    pytest.importorskip("papermill")
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
    assert "decode_tok_s at batch 1, regression at most 3%" in text
