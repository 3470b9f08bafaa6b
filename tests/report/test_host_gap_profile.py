"""The Profile section says what fills the host gaps: per level, each part per step and as a share of the
gap (medians over the repeats whose capture held API calls), or one line saying why it is not measured;
the committed pages show it from their own data: the H200 Kineto traces split, the CUPTI cuts made
before perflib kept the API records say so."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from support import REPO

from perflib.attribution import (
    HOST_GAP_BASIS_TEXT,
    HOST_GAP_LABELS,
    HOST_GAP_PARTS,
    WORK_CPU_OPS,
    WORK_SAMPLES,
)
from perflib.derive import DerivedTables, normalize
from perflib.report import evidence
from perflib.report import tables as tb

KEYS = {"campaign": "t", "arm": "a", "backend": "gpu", "context": 1024}


def host_gaps(rows: list[dict]) -> DerivedTables:
    frame = []
    for r in rows:
        row = {**KEYS, "window_ms": 100.0, "steps": 10, "launch_calls": 400, **r}
        row["gap_ms"] = sum(row.get(f"{p}_ms") or 0 for p in HOST_GAP_PARTS) or 50.0
        for p in HOST_GAP_PARTS:
            ms = row.get(f"{p}_ms")
            row[f"{p}_ms_per_step"] = None if ms is None else ms / row["steps"]
            row[f"{p}_gap_share"] = None if ms is None else ms / row["gap_ms"]
        frame.append(row)
    return DerivedTables(host_gaps=normalize("host_gaps", pd.DataFrame(frame)))


PARTS = {"sync_ms": 20.0, "launch_ms": 10.0, "other_api_ms": 5.0, "host_compute_ms": 15.0}
NOTE = "the capture holds no host API records: a format without API"


def test_a_level_is_the_median_over_the_repeats_that_measured_it() -> None:
    tables = host_gaps([{"batch": 4, "repeat": 1, **PARTS},
                        {"batch": 4, "repeat": 2, **{k: 3 * v for k, v in PARTS.items()}},
                        {"batch": 4, "repeat": 3, "note": NOTE},
                        {"batch": 1, "repeat": 1, "note": NOTE}])
    frame = tb.host_gap_level_table(tables).set_index("batch")
    assert frame.loc[4, "runs"] == 3 and frame.loc[4, "measured"] == 2 and frame.loc[4, "note"] == ""
    assert frame.loc[4, "launch_ms_per_step"] == pytest.approx((1.0 + 3.0) / 2)
    assert frame.loc[4, "sync_gap_share"] == pytest.approx(0.4) and frame.loc[4, "launch_calls_per_step"] == 40
    assert frame.loc[1, "measured"] == 0 and frame.loc[1, "note"] == NOTE and pd.isna(frame.loc[1, "launch_ms_per_step"])
    text = evidence._host_gap_split(tables)
    assert text.startswith("**What fills the host gaps**") and all(HOST_GAP_LABELS[p] in text for p in HOST_GAP_PARTS)
    assert "| 2 of 3 |" in text and "| 4.00 ms (40.0%) |" in text and NOTE in text


def test_no_level_measured_is_one_line_with_why() -> None:
    text = evidence._host_gap_split(host_gaps([{"batch": 1, "repeat": 1, "note": NOTE},
                                               {"batch": 4, "repeat": 1, "note": NOTE}]))
    assert text == f"**What fills the host gaps**: not measured: {NOTE}."
    assert evidence._host_gap_split(DerivedTables()) == ""


def _section(text: str, title: str) -> str:
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _page(campaign: str) -> str:
    return sorted((REPO / "reports").glob(f"{campaign}-[0-9][0-9][0-9][0-9]-*.md"))[-1].read_text()


def test_the_committed_kineto_page_splits_every_traced_level() -> None:
    profile = _section(_page("h200-pytorch"), "Profile")
    table = profile.split("**What fills the host gaps**", 1)[1].split("\n\n", 2)[1]
    rows = [r for r in table.splitlines()[2:] if r.startswith("| eager")]
    assert len(rows) == 4
    for row in rows:
        cells = row.split(" | ")
        gap = float(re.search(r"([\d.]+) ms", cells[5]).group(1))
        parts = [float(re.search(r"([\d.]+) ms", c).group(1)) for c in cells[6:10]]
        assert sum(parts) == pytest.approx(gap, abs=0.03)  # each rounded to 0.01 ms


@pytest.mark.parametrize("campaign", ["cuda-h200-fa", "cuda-h200-batch", "cuda-h200"])
def test_the_committed_cupti_pages_say_their_cuts_kept_no_api_records(campaign: str) -> None:
    text = _page(campaign)
    assert "**What fills the host gaps**: not measured: this trace cut holds GPU dispatches only" in text
    assert "| launch-bound |" not in text.split("## Verdicts", 1)[0]  # not measured: said once, not decided


@pytest.mark.parametrize("basis", [WORK_CPU_OPS, WORK_SAMPLES])
def test_a_cpu_backends_split_says_what_it_was_measured_from(basis: str) -> None:
    zero = {"sync_ms": 0.0 if basis == WORK_CPU_OPS else 12.0, "launch_ms": 0.0, "other_api_ms": 0.0,
            "host_compute_ms": 30.0}
    text = evidence._host_gap_split(host_gaps([{"batch": 4, "repeat": 1, "launch_calls": 0, "basis": basis, **zero}]))
    assert HOST_GAP_BASIS_TEXT[basis] in text and "no kernel launches on a CPU backend" in text
    assert "host API records" not in text and "traces split" in text
    assert "| 0.00 ms (0.0%) |" in text  # launch: 0, measured, never n/a
    api = evidence._host_gap_split(host_gaps([{"batch": 4, "repeat": 1, "basis": "host API records", **PARTS}]))
    assert "traces with API records" in api and HOST_GAP_BASIS_TEXT["host API records"] in api
