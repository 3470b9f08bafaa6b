"""perflib.metrics: exposition parsing, name tables, deltas, resets and the SERVERS.md §5 figures.

The texts in tests/data/metrics/ are written in each server's real format by generate.py beside them
(scenarios in its README). Expected figures are computed here from those texts with the minimal parser
that SERVERS.md §0 describes (skip `#` lines, split each sample on its last space), independently of
prometheus_client, or taken from the reference tables (§1 example, §5.1 worked examples) and from the
mlxcel harness outputs in the public fixtures.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest
from support import DATA

from perflib import metrics
from perflib.cli import main
from perflib.errors import InputError, PerflibError

METRICS = DATA / "metrics"
REQUIRED_KEYS = {"dialect", "decode_steps", "decode_tokens", "mixed_steps", "prefill_chunks",
                 "tokens_predicted_seconds", "occupancy", "decode_step_ms", "raw_step_ms",
                 "busy_slots_per_decode", "reset", "absent", "deltas", "notes"}


def text(name: str) -> str:
    return (METRICS / name).read_text()


def minimal(body: str) -> dict[str, float]:
    """SERVERS.md §0's minimal parser: `name{labels}` -> value, split on the last space."""
    out: dict[str, float] = {}
    for line in body.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        out[key.strip()] = float(value)
    return out


def total(values: dict[str, float], name: str) -> float:
    """Sum of a sample over all its label sets (0 when missing, as a name missing before counts)."""
    return sum(v for k, v in values.items() if k == name or k.startswith(name + "{"))


def delta(before: str, after: str, name: str) -> float:
    return total(minimal(after), name) - total(minimal(before), name)


# ------------------------------------------------------------------------------------------ parsing


def test_labelled_samples_stay_distinct() -> None:
    samples = {s.key: s.value for s in metrics.parse_exposition(text("mlxcel_before.txt"))}
    assert samples['mlxcel_paged_decode_launches_total{path="gather"}'] == 4064
    assert samples['mlxcel_paged_decode_launches_total{path="fused_v2"}'] == 0
    assert samples['mlxcel_paged_decode_launches_total{path="cascade"}'] == 0


def test_counter_samples_keep_total_and_gauge_typed_counter_is_read() -> None:
    # The older llama-server typed n_busy_slots_per_decode `counter`: prometheus_client renames its sample.
    body = text("llamacpp_old_busy_before.txt")
    assert "# TYPE llamacpp:n_busy_slots_per_decode counter" in body
    names = {s.name for s in metrics.parse_exposition(body)}
    assert "llamacpp:n_busy_slots_per_decode_total" in names
    assert "llamacpp:n_decode_total" in names
    assert metrics.canonical_values(body)["busy_slots_per_decode"] == 1.5


def test_bad_line_names_source_and_line() -> None:
    body = text("llamacpp_before.txt").replace("llamacpp:n_decode_total 8", "llamacpp:n_decode_total eight")
    line = body.splitlines().index("llamacpp:n_decode_total eight") + 1
    with pytest.raises(InputError, match=rf"snap\.txt:line {line}: expected Prometheus exposition"):
        metrics.parse_exposition(body, "snap.txt")


@pytest.mark.parametrize(("name", "dialect"), [
    ("mlxcel_after.txt", "mlxcel"), ("llamacpp_after.txt", "llamacpp"), ("llamacpp_old_busy_after.txt", "llamacpp"),
    ("vllm_after.txt", "vllm"), ("vllm_old_after.txt", "vllm"), ("sglang_after.txt", "sglang"),
])
def test_detect_dialect(name: str, dialect: str) -> None:
    assert metrics.detect_dialect(text(name)) == dialect
    assert metrics.diff(text(name), text(name)).dialect == dialect


def test_unknown_text_is_an_error_naming_the_prefixes() -> None:
    with pytest.raises(PerflibError, match="mlxcel_, llamacpp:, vllm: or sglang:"):
        metrics.diff("# nothing\nprocess_cpu_seconds_total 1\n", "process_cpu_seconds_total 2\n")


# ------------------------------------------------------------------------------------------- mlxcel


def test_mlxcel_formulas() -> None:
    b, a = text("mlxcel_before.txt"), text("mlxcel_after.txt")
    steps = delta(b, a, "mlxcel_batch_decode_steps_total")
    tokens = delta(b, a, "mlxcel_batch_decode_tokens_total")
    seconds = delta(b, a, "llamacpp:tokens_predicted_seconds_total")
    d = metrics.diff(b, a)
    assert d.dialect == "mlxcel" and not d.reset
    assert d.decode_steps == steps == 127
    assert d.decode_tokens == tokens == 508
    assert d.mixed_steps == delta(b, a, "mlxcel_batch_mixed_steps_total")
    assert d.prefill_chunks == delta(b, a, "mlxcel_batch_prefill_chunks_total")
    assert d.tokens_predicted_seconds == pytest.approx(seconds)
    assert d.occupancy == pytest.approx(tokens / steps)
    assert d.decode_step_ms == pytest.approx(1000 * seconds / tokens)
    assert d.raw_step_ms == pytest.approx(1000 * seconds / steps)
    assert d.raw_step_ms == pytest.approx(d.occupancy * d.decode_step_ms)
    # Δdecode_tokens = Δtokens_predicted − requests (508 vs 512 for 4 x 128).
    assert d.deltas["tokens_predicted"] - d.decode_tokens == delta(b, a, "mlxcel_requests_total") == 4
    assert d.deltas['paged_decode_launches{path="fused_v2"}'] == 4064
    assert d.deltas['paged_decode_launches{path="gather"}'] == 0
    assert d.sample_deltas['mlxcel_paged_decode_launches_total{path="fused_v2"}'] == 4064
    assert d.absent == ()
    assert any("mlxcel_batch_decode_tokens_total" in n for n in d.notes)


def test_mlxcel_requests_mismatch_is_noted() -> None:
    d = metrics.diff(text("mlxcel_before.txt"), text("mlxcel_after.txt"), requests=3)
    assert any("Δtokens_predicted − requests" in n for n in d.notes)
    assert not any("Δtokens_predicted − requests" in n
                   for n in metrics.diff(text("mlxcel_before.txt"), text("mlxcel_after.txt"), requests=4).notes)


def test_no_steps_gives_no_figures() -> None:
    body = text("mlxcel_after.txt")
    d = metrics.diff(body, body)
    assert d.decode_steps == 0
    assert d.occupancy is None and d.decode_step_ms is None and d.raw_step_ms is None
    assert d.busy_slots_per_decode is None
    out = d.to_dict()
    assert out["occupancy"] is None and out["decode_step_ms"] is None


def rust_display(value: float) -> str:
    """Rust f64 Display as mlxcel prints `llamacpp:` values (no `.0` on integers)."""
    out = repr(float(value))
    return out[:-2] if out.endswith(".0") else out


def bump(body: str, deltas: dict[str, float]) -> str:
    """The same mlxcel text with `deltas` added to the named samples, formatted as mlxcel does."""
    lines = []
    for line in body.splitlines():
        key, _, value = line.rpartition(" ")
        if not line.startswith("#") and key in deltas:
            new = float(value) + deltas[key]
            if key.startswith("llamacpp:"):
                value = rust_display(round(new, 6))  # µs counters / 1e6
            elif key == "mlxcel_generation_time_seconds_total":
                value = f"{new:.3f}"
            else:
                value = str(int(round(new)))
        lines.append(f"{key} {value}" if key else line)
    return "\n".join(lines) + "\n"


def level_texts(steps: int, tokens: int, chunks: int, seconds: float, mixed: int = 0,
                paths: dict[str, int] | None = None) -> tuple[str, str]:
    """mlxcel before/after texts whose counter deltas are the given ones."""
    before = text("mlxcel_before.txt")
    requests = 4 if tokens > 127 else 1
    changes = {
        "mlxcel_batch_decode_steps_total": steps, "mlxcel_batch_decode_tokens_total": tokens,
        "mlxcel_batch_prefill_chunks_total": chunks, "mlxcel_batch_mixed_steps_total": mixed,
        "llamacpp:tokens_predicted_seconds_total": seconds, "llamacpp:tokens_predicted_total": tokens + requests,
        "mlxcel_requests_total": requests,
    }
    for path, n in (paths or {}).items():
        changes[f'mlxcel_paged_decode_launches_total{{path="{path}"}}'] = n
    return before, bump(before, changes)


# SERVERS.md §5.1: Δsteps, Δtokens, Δchunks, Δpred. s -> occupancy, step ms, raw ms as the table prints them.
WORKED = [
    ("s3 before r1 4/1K", 127, 508, 0, 83.979, "4.00", "165.31", "661.25"),
    ("s3 before r2 4/1K", 127, 508, 0, 84.687, "4.00", "166.71", "666.83"),
    ("s3 before r3 4/1K", 127, 508, 0, 84.668, "4.00", "166.67", "666.68"),
    ("s3 fold r1 4/1K", 127, 508, 0, 32.773, "4.00", "64.51", "258.06"),
    ("s5 final r1 4/1K", 127, 508, 0, 33.465, "4.00", "65.88", "263.50"),
    ("s5 final r2 4/1K", 127, 508, 0, 33.506, "4.00", "65.96", "263.83"),
    ("s5 final r3 4/1K", 127, 508, 0, 32.794, "4.00", "64.56", "258.22"),
    ("s5 final r1 1/1K", 127, 127, 0, 3.944, "1.00", "31.06", "31.06"),
    ("s5 final r2 1/1K", 127, 127, 0, 3.966, "1.00", "31.23", "31.23"),
    ("s5 final r3 1/1K", 127, 127, 0, 4.006, "1.00", "31.54", "31.54"),
    ("s3 fold r1 4/16K", 415, 508, 28, 186.009, "1.22", "366.16", "448.21"),
    ("s3 fold r2 4/16K", 415, 508, 28, 184.908, "1.22", "363.99", "445.56"),
    ("s3 fold r3 4/16K", 415, 508, 28, 181.064, "1.22", "356.43", "436.30"),
    ("s1 before 1/1K", 127, 127, 0, 3.967, "1.00", "31.24", "31.24"),
    ("s1 before 4/1K", 127, 508, 0, 80.257, "4.00", "157.99", "631.94"),
    ("s1 before 1/16K", 127, 127, 7, 5.183, "1.00", "40.81", "40.81"),
    ("s1 before 4/16K", 415, 508, 28, 194.587, "1.22", "383.05", "468.88"),
]


@pytest.mark.parametrize(("run", "steps", "tokens", "chunks", "seconds", "occ", "step", "raw"), WORKED,
                         ids=[w[0] for w in WORKED])
def test_servers_md_worked_examples(run, steps, tokens, chunks, seconds, occ, step, raw) -> None:
    d = metrics.diff(*level_texts(steps, tokens, chunks, seconds))
    assert (d.decode_steps, d.decode_tokens, d.prefill_chunks, d.mixed_steps) == (steps, tokens, chunks, 0)
    assert d.tokens_predicted_seconds == pytest.approx(seconds, abs=1e-9)
    assert (f"{d.occupancy:.2f}", f"{d.decode_step_ms:.2f}", f"{d.raw_step_ms:.2f}") == (occ, step, raw)


COUNTERS_RE = re.compile(r"batch counters: decode_steps=\+(\d+)\s+decode_tokens=\+(\d+)\s+mixed_steps=\+(\d+)\s+"
                         r"prefill_chunks=\+(\d+)\s+tokens_predicted_seconds=\+([\d.]+)")
STEPS_RE = re.compile(r"batch steps: occupancy=([\d.]+)\s+decode_step_ms=([\d.]+)\s+"
                      r"\(predicted_seconds/steps=([\d.]+) ms\)")
PATH_RE = re.compile(r'paged_decode_launches_total\{path="(\w+)"\}=\+(\d+)')


def test_fixture_harness_outputs_agree(fixtures: Path) -> None:
    """Every `batch counters:`/`batch steps:` pair the mlxcel harness printed is what `diff` computes."""
    folder = fixtures / "mlxcel-gfx1151"
    if not folder.is_dir():
        pytest.skip(f"{folder} not found")
    checked = 0
    for path in sorted(folder.glob("s*/*.txt")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            m = COUNTERS_RE.search(line)
            if not m:
                continue
            s = STEPS_RE.search(lines[i + 1])
            assert s, f"{path}:{i + 2}: expected the `batch steps:` line after `batch counters:`"
            paths = {p: int(n) for p, n in PATH_RE.findall(lines[i - 2] if i >= 2 else "")}
            steps, tokens, mixed, chunks = (int(g) for g in m.groups()[:4])
            d = metrics.diff(*level_texts(steps, tokens, chunks, float(m.group(5)), mixed=mixed, paths=paths))
            assert (d.decode_steps, d.decode_tokens, d.mixed_steps, d.prefill_chunks) == (steps, tokens, mixed,
                                                                                         chunks), path
            printed = (f"{d.occupancy:.2f}", f"{d.decode_step_ms:.2f}", f"{d.raw_step_ms:.2f}")
            assert printed == s.groups(), f"{path}:{i + 2}"
            for p, n in paths.items():
                assert d.deltas[f'paged_decode_launches{{path="{p}"}}'] == n, path
            checked += 1
        if any("/metrics unavailable" in x for x in lines):
            assert not any(COUNTERS_RE.search(x) for x in lines)
    assert checked >= 14, f"only {checked} harness levels found under {folder}"


# ----------------------------------------------------------------------------------------- llama.cpp


def test_llamacpp_formulas_with_requests() -> None:
    b, a = text("llamacpp_before.txt"), text("llamacpp_after.txt")
    mb, ma = minimal(b), minimal(a)
    n1, n2 = mb["llamacpp:n_decode_total"], ma["llamacpp:n_decode_total"]
    g1, g2 = mb["llamacpp:n_busy_slots_per_decode"], ma["llamacpp:n_busy_slots_per_decode"]
    seconds = delta(b, a, "llamacpp:tokens_predicted_seconds_total")
    predicted = delta(b, a, "llamacpp:tokens_predicted_total")
    d = metrics.diff(b, a, requests=4)
    assert d.dialect == "llamacpp" and not d.reset
    assert d.decode_steps == n2 - n1 == 131
    assert d.decode_tokens == predicted - 4 == 508
    assert d.decode_step_ms == pytest.approx(1000 * seconds / (predicted - 4))
    assert d.decode_step_ms == pytest.approx(30.0)  # the scenario's 30 ms per token
    assert d.raw_step_ms == pytest.approx(1000 * seconds / (n2 - n1))
    busy = (g2 * n2 - g1 * n1) / (n2 - n1)
    assert d.busy_slots_per_decode == pytest.approx(busy)
    assert d.busy_slots_per_decode == pytest.approx(518 / 131, rel=1e-5)  # 6 printed digits
    assert d.occupancy == d.busy_slots_per_decode
    assert d.per_stream_tok_s == pytest.approx(predicted / seconds)
    assert d.mixed_steps is None and d.prefill_chunks is None
    assert any("n_decode_total" in n and "prompt batches" in n for n in d.notes)


def test_llamacpp_without_requests_has_no_step_ms() -> None:
    d = metrics.diff(text("llamacpp_before.txt"), text("llamacpp_after.txt"))
    assert d.decode_step_ms is None and d.decode_tokens is None
    assert d.raw_step_ms is not None and d.busy_slots_per_decode is not None
    assert any("requests" in n and "no completed-requests counter" in n for n in d.notes)
    out = json.loads(json.dumps(d.to_dict()))
    assert out["decode_step_ms"] is None


def test_llamacpp_busy_slots_window_example() -> None:
    """SERVERS.md §1: 1.5 at 10 decodes, 2.5 at 30 -> (75 - 15) / 20 = 3.0."""
    d = metrics.diff(text("llamacpp_old_busy_before.txt"), text("llamacpp_old_busy_after.txt"))
    assert d.busy_slots_per_decode == 3.0
    assert d.occupancy == 3.0
    assert d.decode_steps == 20


def test_busy_slots_average_falling_is_not_a_reset() -> None:
    # Typed `counter` in the older layout, but a lifetime average: it may fall. 2.5 at 10, 1.5 at 30 -> 1.0.
    before = text("llamacpp_old_busy_before.txt").replace("per_decode 1.5", "per_decode 2.5")
    after = text("llamacpp_old_busy_after.txt").replace("per_decode 2.5", "per_decode 1.5")
    d = metrics.diff(before, after)
    assert not d.reset
    assert d.busy_slots_per_decode == pytest.approx((1.5 * 30 - 2.5 * 10) / 20)


def test_llamacpp_kv_usage_is_absent() -> None:
    d = metrics.diff(text("llamacpp_before.txt"), text("llamacpp_after.txt"), requests=4)
    assert "kv_cache_usage" in d.absent and "kv_cache_tokens" in d.absent
    assert "kv_cache_usage" not in d.gauges_after
    old = metrics.diff(text("llamacpp_old_busy_before.txt"), text("llamacpp_old_busy_after.txt"))
    assert "prompt_tokens_cached" in old.absent and old.deltas["prompt_tokens_cached"] is None


def test_gauge_values_skip_scrape_reset_gauges() -> None:
    gauges = metrics.gauge_values(text("llamacpp_after.txt"))
    assert set(gauges) == {"requests_processing", "requests_deferred"}
    mlx = metrics.gauge_values(text("mlxcel_after.txt"))
    assert {"requests_processing", "batch_current_size", "slots_total"} <= set(mlx)
    assert "predicted_tokens_seconds" not in mlx and "busy_slots_per_decode" not in mlx
    assert mlx["slots_total"] == minimal(text("mlxcel_after.txt"))["mlxcel_slots_total"]


# --------------------------------------------------------------------------------------------- vLLM


def test_vllm_formulas() -> None:
    b, a = text("vllm_before.txt"), text("vllm_after.txt")
    steps = delta(b, a, "vllm:iteration_tokens_total_count")
    gen = delta(b, a, "vllm:generation_tokens_total")
    itl_sum = delta(b, a, "vllm:inter_token_latency_seconds_sum")
    itl_count = delta(b, a, "vllm:inter_token_latency_seconds_count")
    d = metrics.diff(b, a)
    assert d.dialect == "vllm" and not d.reset and d.absent == ()
    assert d.decode_steps == steps == 128  # 1 prefill step + 127 decode steps
    finished = delta(b, a, "vllm:request_success_total")
    assert d.decode_tokens == gen - finished == 512 - 4  # each request's first token comes from its prefill
    assert d.occupancy == pytest.approx(gen / steps) == 4.0
    prompt = delta(b, a, "vllm:iteration_tokens_total_sum") - gen
    assert d.extras["prefill_tokens_per_step"] == pytest.approx(prompt / steps)
    assert d.extras["prompt_tokens"] == delta(b, a, "vllm:prompt_tokens_total")
    assert d.decode_step_ms == pytest.approx(1000 * itl_sum / itl_count) == pytest.approx(25.0)
    assert d.raw_step_ms == pytest.approx(1000 * itl_sum / steps)
    assert d.tokens_predicted_seconds == pytest.approx(delta(b, a, "vllm:request_decode_time_seconds_sum"))
    assert d.extras["iteration_tokens_per_step"] == pytest.approx(
        delta(b, a, "vllm:iteration_tokens_total_sum") / steps)
    assert d.extras["decode_time_step_ms"] == pytest.approx(1000 * d.tokens_predicted_seconds / (gen - finished))
    assert d.extras["request_tpot_mean_ms"] == pytest.approx(25.0)
    assert d.per_stream_tok_s == pytest.approx(1000 / d.decode_step_ms)
    assert d.mixed_steps is None and d.prefill_chunks is None and d.busy_slots_per_decode is None


def test_vllm_label_missing_before_counts_from_zero() -> None:
    b, a = text("vllm_before.txt"), text("vllm_after.txt")
    assert 'finished_reason="length"' not in b and 'finished_reason="length"' in a
    d = metrics.diff(b, a)
    assert d.deltas["request_success"] == 4
    assert d.sample_deltas[next(k for k in d.sample_deltas if 'finished_reason="length"' in k)] == 4


def test_vllm_old_names_through_aliases() -> None:
    d = metrics.diff(text("vllm_old_before.txt"), text("vllm_old_after.txt"))
    assert "vllm:time_per_output_token_seconds" in text("vllm_old_after.txt")
    assert d.decode_step_ms == pytest.approx(25.0)
    assert "inter_token_latency" not in d.absent and "kv_cache_usage" not in d.absent
    assert d.gauges_after["kv_cache_usage"] == 0.0
    assert d.deltas["prefix_cache_queries"] == delta(text("vllm_old_before.txt"), text("vllm_old_after.txt"),
                                                     "vllm:gpu_prefix_cache_queries_total")
    assert "request_time_per_output_token" in d.absent
    assert any("older name vllm:time_per_output_token_seconds" in n for n in d.notes)


def test_vllm_without_iteration_tokens() -> None:
    d = metrics.diff(text("vllm_before.txt"), text("vllm_after_no_iteration.txt"))
    assert d.absent == ("iteration_tokens",)
    assert d.deltas["iteration_tokens_count"] is None and d.deltas["iteration_tokens_sum"] is None
    assert d.decode_steps is None and d.occupancy is None and d.raw_step_ms is None
    assert d.decode_step_ms == pytest.approx(25.0)  # the ITL histogram is still there


# ------------------------------------------------------------------------------------------- SGLang


def test_sglang_formulas_and_sampled_occupancy() -> None:
    b, a = text("sglang_before.txt"), text("sglang_after.txt")
    itl_sum = delta(b, a, "sglang:inter_token_latency_seconds_sum")
    itl_count = delta(b, a, "sglang:inter_token_latency_seconds_count")
    d = metrics.diff(b, a)
    assert d.dialect == "sglang"
    assert d.decode_step_ms == pytest.approx(1000 * itl_sum / itl_count) == pytest.approx(20.0)
    assert d.decode_tokens == delta(b, a, "sglang:generation_tokens_total") == 512
    assert d.occupancy is None and d.raw_step_ms is None and d.decode_steps is None
    assert "num_aborted_requests" in d.absent
    during = metrics.gauge_values(text("sglang_during.txt"))
    assert during["num_running_reqs"] == 4 and during["kv_cache_usage"] == 0.05
    idle = metrics.gauge_values(b)
    d2 = metrics.diff(b, a, gauge_samples=[during, during, idle])
    assert d2.occupancy == pytest.approx((4 + 4 + 0) / 3)
    assert d2.raw_step_ms == pytest.approx(d2.occupancy * d2.decode_step_ms)
    assert d2.per_stream_tok_s == pytest.approx((199.5 * 2 / 3) / d2.occupancy)


# -------------------------------------------------------------------------------------------- resets


def test_counter_going_backwards_is_a_reset() -> None:
    d = metrics.diff(text("mlxcel_after.txt"), text("mlxcel_before.txt"))
    assert d.reset
    for name in metrics.FIGURES:
        assert getattr(d, name) is None, name
    assert all(v is None for v in d.deltas.values())
    assert any("went backwards" in n for n in d.notes)
    assert d.to_dict()["occupancy"] is None


def test_changed_process_start_is_a_reset() -> None:
    b, a = text("mlxcel_before.txt"), text("mlxcel_after.txt")
    same = metrics.diff(b, a, process_start_before=1764385200, process_start_after=1764385200)
    assert not same.reset and same.occupancy == 4.0
    d = metrics.diff(b, a, process_start_before=1764385200, process_start_after=1764389999)
    assert d.reset and d.occupancy is None and d.decode_step_ms is None
    assert any("Process-Start-Time-Unix" in n for n in d.notes)
    snap_b = metrics.Snapshot(b, 1764385200.0, {}, "http://x/metrics")
    snap_a = metrics.Snapshot(a, 1764389999.0, {}, "http://x/metrics")
    assert metrics.diff(snap_b, snap_a).reset


def test_recreated_counter_is_a_reset() -> None:
    after = text("vllm_after.txt").replace(
        'vllm:generation_tokens_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7643852e+09',
        'vllm:generation_tokens_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7643999e+09')
    assert after != text("vllm_after.txt")
    assert metrics.diff(text("vllm_before.txt"), after).reset


# ------------------------------------------------------------------------------------------ scraping


def test_llamacpp_501_is_metrics_unavailable() -> None:
    body = text("llamacpp_501.json")
    url = "http://127.0.0.1:8080/metrics"
    err = metrics.classify_metrics_response(501, body, url)
    assert isinstance(err, metrics.MetricsUnavailable)
    assert url in str(err) and "--metrics" in str(err) and "501" in str(err)
    old = metrics.classify_metrics_response(404, "Not Found", url)
    assert isinstance(old, metrics.MetricsUnavailable) and "--metrics" in str(old)
    assert metrics.classify_metrics_response(200, text("llamacpp_after.txt"), url) is None
    other = metrics.classify_metrics_response(500, "oops", url)
    assert isinstance(other, PerflibError) and not isinstance(other, metrics.MetricsUnavailable)
    router = metrics.classify_metrics_response(400, "model name is missing from the request", url)
    assert "model=" in str(router)


@pytest.mark.server
def test_real_llama_server(tmp_path: Path, llama_server_binary: Path, tiny_model: Path) -> None:
    """A real llama-server: 501 without --metrics; with it, a 2-request level differenced end to end."""
    import httpx

    from perflib import server

    with server.start_llama_server(tiny_model, parallel=2, ctx_size=2 * 256, log_path=tmp_path / "off.log",
                                   metrics=False, binary=llama_server_binary, threads=1) as off:
        with pytest.raises(metrics.MetricsUnavailable, match=r"/metrics.*--metrics"):
            metrics.scrape(off.base_url)
        try:
            metrics.scrape(off.base_url)
        except metrics.MetricsUnavailable as exc:
            assert off.base_url in str(exc)

    n_predict = 12
    with server.start_llama_server(tiny_model, parallel=2, ctx_size=2 * 256, log_path=tmp_path / "on.log",
                                   metrics=True, binary=llama_server_binary, threads=1) as on:
        before = metrics.scrape(on.base_url)
        assert before.process_start is not None and before.taken["monotonic_ns"] > 0
        results: list[dict] = []

        def complete(i: int) -> None:
            resp = httpx.post(f"{on.base_url}/completion", timeout=120.0, json={
                "prompt": f"Request {i}: tell me about counters.", "n_predict": n_predict,
                "ignore_eos": True, "cache_prompt": False})
            resp.raise_for_status()
            results.append(resp.json())

        threads = [threading.Thread(target=complete, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        after = metrics.scrape(on.base_url)
    assert len(results) == 2
    predicted = sum(r["timings"]["predicted_n"] for r in results)
    d = metrics.diff(before, after, requests=2)
    assert d.dialect == "llamacpp" and not d.reset
    assert d.deltas["tokens_predicted"] == predicted == 2 * n_predict
    assert d.decode_tokens == predicted - 2
    assert d.decode_steps is not None and d.decode_steps >= n_predict - 1
    assert d.decode_step_ms is not None and d.decode_step_ms > 0
    assert d.busy_slots_per_decode is not None and 1.0 <= d.busy_slots_per_decode <= 2.0
    assert "kv_cache_usage" in d.absent
    assert metrics.gauge_values(after.text)["requests_processing"] == 0


# ----------------------------------------------------------------------------------------------- CLI


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["metrics", "diff", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_json_has_every_key_and_null_not_zero(capsys) -> None:
    code, out, _ = run_cli(capsys, str(METRICS / "sglang_before.txt"), str(METRICS / "sglang_after.txt"), "--json")
    assert code == 0
    obj = json.loads(out)
    assert REQUIRED_KEYS <= set(obj)
    assert obj["dialect"] == "sglang"
    assert obj["occupancy"] is None and obj["raw_step_ms"] is None and obj["decode_steps"] is None
    assert obj["decode_step_ms"] == pytest.approx(20.0)
    assert '"occupancy": null' in out

    code, out, _ = run_cli(capsys, str(METRICS / "llamacpp_before.txt"), str(METRICS / "llamacpp_after.txt"), "--json")
    obj = json.loads(out)
    assert obj["decode_step_ms"] is None and obj["busy_slots_per_decode"] == pytest.approx(518 / 131, rel=1e-5)
    code, out, _ = run_cli(capsys, str(METRICS / "llamacpp_before.txt"), str(METRICS / "llamacpp_after.txt"), "--json",
                           "--requests", "4")
    assert json.loads(out)["decode_step_ms"] == pytest.approx(30.0)


def test_cli_table_prints_units_absent_and_reset(capsys) -> None:
    code, out, _ = run_cli(capsys, str(METRICS / "mlxcel_before.txt"), str(METRICS / "mlxcel_after.txt"))
    assert code == 0
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line and not line.startswith(" ")}
    assert rows["decode_step_ms"] == ["65.88", "ms"]
    assert rows["raw_step_ms"] == ["263.50", "ms"]
    assert rows["decode_steps"] == ["+127", "steps"]
    assert rows["decode_tokens"] == ["+508", "tokens"]
    assert rows["tokens_predicted_seconds"] == ["+33.465", "s"]
    assert "absent: none" in out and "RESET" not in out

    code, out, _ = run_cli(capsys, str(METRICS / "vllm_before.txt"), str(METRICS / "vllm_after_no_iteration.txt"))
    assert "absent: iteration_tokens" in out
    assert re.search(r"^occupancy\s+n/a\s", out, re.M)

    code, out, _ = run_cli(capsys, str(METRICS / "mlxcel_after.txt"), str(METRICS / "mlxcel_before.txt"))
    assert code == 0
    assert re.search(r"^RESET:", out, re.M)
    assert re.search(r"^decode_step_ms\s+n/a\s+ms", out, re.M)


def test_cli_process_start_options(capsys) -> None:
    code, out, _ = run_cli(capsys, str(METRICS / "mlxcel_before.txt"), str(METRICS / "mlxcel_after.txt"), "--json",
                           "--process-start-before", "1764385200", "--process-start-after", "1764389999")
    assert json.loads(out)["reset"] is True


def test_cli_missing_file_names_it(capsys, tmp_path: Path) -> None:
    missing = tmp_path / "metrics_before.txt"
    code, out, err = run_cli(capsys, str(missing), str(METRICS / "mlxcel_after.txt"))
    assert code == 2 and out == ""
    assert str(missing) in err and "no such file" in err


def test_cli_help_explains_each_figure(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["metrics", "diff", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in metrics.FIGURES:
        assert re.search(rf"^\s+{name}\s+\S+\s+\w", out, re.M), name
    assert "RESET" in out and "--requests" in out
