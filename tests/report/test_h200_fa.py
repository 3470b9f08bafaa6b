"""The H200 flash-attention campaign (issue 20), checked from its committed raw files: the traced arm ran
its `of` arm's command line, perflib's CUPTI library lost nothing, every trace covers its run's window,
and the page's first screen answers the host-gap and GEMV candidates from the traced arm."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from support import REPO

RAW = REPO / "data" / "raw" / "cuda-h200-fa"


def _start(arm: str) -> dict:
    starts = json.loads((RAW / arm / "llamacpp-cuda" / "server.json").read_text())["starts"]
    assert len(starts) == 1, f"{arm}: one server start expected"
    return starts[0]


def _without_port(argv: list[str]) -> list[str]:
    i = argv.index("--port")
    return argv[:i] + argv[i + 2:]


def test_the_traced_arm_ran_its_of_arms_command_line_under_the_profiler():
    plain, traced = _start("fa-on"), _start("fa-on-cupti")
    assert _without_port(traced["argv"]) == _without_port(plain["argv"])
    assert traced["argv"][-2:] == ["--flash-attn", "on"]
    added = set(traced["env_added"]) - set(plain["env_added"])
    assert {"CUDA_INJECTION64_PATH", "PERFLIB_CUPTI_OUTPUT", "PERFLIB_CUPTI_STATS"} <= added


def test_perflibs_cupti_library_lost_no_record():
    stats = json.loads((RAW / "fa-on-cupti" / "llamacpp-cuda" / "capture" / "1" / "cupti-stats.json").read_text())
    assert stats["library"] == "perflib-cupti" and stats["complete"] is True and stats["ended_by"] == "exit"
    assert stats["dropped_records"] == 0 and stats["errors"] == []
    assert stats["records"] == sum(stats["records_by_kind"].values())
    assert stats["records_by_kind"]["CONCURRENT_KERNEL"] > 1_000_000
    start = _start("fa-on-cupti")
    assert start["exit_code"] == 0 and start["losses"] == [] and start["losses_text"] == ""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[str, pd.DataFrame]:
    """The page's first screen and runs.csv, rebuilt from a copy of the committed raw data."""
    import shutil

    from perflib.campaign import load_campaign
    from perflib.publish import publish

    root = tmp_path_factory.mktemp("fa")
    shutil.copytree(RAW, root / "raw" / "cuda-h200-fa")
    campaign = load_campaign(REPO / "campaigns" / "cuda-h200-fa.yaml")
    published = publish(campaign, root, root / "reports")
    return published.page.read_text().split("\n## ")[0], published.tables.runs


def test_every_traced_run_covers_its_window(built):
    """No run lost trace coverage (`trace_loss`, the coverage rule of `perflib.derive`), and each cut
    recorded how far its capture reached."""
    _, runs = built
    traced = runs[runs["arm"] == "fa-on-cupti"]
    assert len(traced) == 12 and (traced["status"] == "complete").all()
    assert (runs["trace_loss"].fillna("") == "").all() and (runs["profiler_loss"].fillna("") == "").all()
    for run in sorted((RAW / "fa-on-cupti" / "llamacpp-cuda").glob("b*_c*_r*")):
        cut = json.loads((run / "manifest.json").read_text())["trace_cut"]
        assert cut["capture_start_ns"] < cut["start_ns"] < cut["capture_end_ns"], run.name


@pytest.mark.parametrize("cause", ["host-side work between kernels", "per-row weight streaming of batched GEMV"])
def test_the_first_screen_decides_from_the_traced_arm(built, cause):
    first_screen, _ = built
    (row,) = [ln for ln in first_screen.splitlines() if ln.startswith(f"| {cause} |")]
    # decided for fa-on from its traced arm at every traced batch; only fa-off, which has no trace, is not
    parts = re.split(r"; (?=\*\*)", row.split("|")[2].strip())  # one part per outcome, each opening in bold
    assert all("for fa-on (trace from fa-on-cupti) at batch" in p for p in parts[:-1])
    assert parts[-1] == "**not measured** for fa-off"
    assert "- **Traces.** All 12 traced runs' traces cover their windows" in first_screen
