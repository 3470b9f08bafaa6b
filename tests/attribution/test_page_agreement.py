"""`perflib trace summary --manifest RUN_DIR` and the campaign page (derive.trace_rows) read the same
committed H200 CUPTI level the same way: one window, one step source, the same per-step figures. They
disagreed before (249 steps from the rhythm over the level against 124 from the request records)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support import REPO

from perflib import derive, rundir, safeinput
from perflib.config import loader

LEVELS = [
    ("cuda-h200", "after-cupti", "b1_c1024_r1"),
    ("cuda-h200", "after-cupti", "b4_c1024_r1"),
    ("cuda-h200-batch", "default-cupti", "b8_c1024_r2"),
]


def records_steps(run_dir) -> int:
    """SERVERS.md §5.2 counted here from requests.jsonl alone: the median, over requests, of the token
    chunks that arrive while every request decodes (last first token, first last token]."""
    records = [r for r in safeinput.read_jsonl(run_dir / rundir.REQUESTS) if r.get("ok")]
    lo = max(int(r["first_token_ns"]) for r in records)
    hi = min(int(r["last_token_ns"]) for r in records)
    counts = sorted(sum(1 for t in r["chunk_ns"] if lo < int(t) <= hi) for r in records)
    return counts[len(counts) // 2]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "arm", "level"), LEVELS, ids=lambda x: x)
def test_trace_summary_manifest_agrees_with_the_page(name: str, arm: str, level: str) -> None:
    run_dir = REPO / "data" / "raw" / name / arm / "llamacpp-cuda" / level
    if not (run_dir / "trace.parquet").is_file():
        pytest.skip(f"{run_dir} holds no committed trace")
    done = subprocess.run([sys.executable, "-m", "perflib", "trace", "summary", str(run_dir / "trace.parquet"),
                           "--manifest", str(run_dir), "--json"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    cli = json.loads(done.stdout)

    campaign = loader.read_campaign(REPO / "campaigns" / f"{name}.yaml")
    manifest = rundir.read_manifest(run_dir)
    keys = derive.run_keys(campaign.name, arm, "llamacpp-cuda", manifest, run_dir)
    row = derive.summarize_run_row(run_dir, keys)
    tables, why = derive.trace_rows(campaign, arm, "llamacpp-cuda", run_dir, keys, row.get("decode_steps"))
    assert tables is not None, why
    page = tables["trace_runs"].iloc[0]

    assert cli["steps"] == int(page["steps"]) == records_steps(run_dir)
    assert cli["step_method"] == page["step_method"] == "request records (decode window)"
    assert cli["window"]["label"].startswith(f"decode window of {level}")
    assert cli["dispatches"] == int(page["dispatches"])
    for key in ("window_ms", "busy_ms", "gap_ms", "busy_ms_per_step", "gap_ms_per_step"):
        assert cli[key] == pytest.approx(float(page[key]), rel=1e-12), key
