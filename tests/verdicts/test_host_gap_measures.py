"""What fills the host gaps as measurements (`launch_share`, `sync_share`, `other_api_share`,
`host_compute_share`): each part as a share of the step, median over the repeats whose capture held
host API calls, decided by the playbook's three candidates; "not measured" with the capture's reason
where none did; and the host-gap candidate's evidence carries the split where there is one."""

from __future__ import annotations

import pandas as pd
import pytest

from perflib import verdicts as v
from perflib.attribution import HOST_GAP_PARTS
from perflib.config import read_playbook
from perflib.derive import DerivedTables, normalize

KEYS = {"campaign": "t", "arm": "a", "backend": "gpu", "batch": 4, "context": 1024}
NO_API = "the capture holds no host API records: CUPTI runtime and driver records off"


def tables(parts: list[dict[str, float]] | None, window_ms: float = 100.0, steps: int = 10) -> DerivedTables:
    """Three traced repeats; `parts`: each repeat's ms of each part (None: no API records in any)."""
    trace, split = [], []
    for repeat in (1, 2, 3):
        gap = sum(parts[repeat - 1].values()) if parts else 60.0
        trace.append({**KEYS, "repeat": repeat, "window_ms": window_ms, "busy_ms": window_ms - gap, "gap_ms": gap,
                      "steps": steps, "busy_ms_per_step": (window_ms - gap) / steps, "gap_ms_per_step": gap / steps})
        row = {**KEYS, "repeat": repeat, "window_ms": window_ms, "gap_ms": gap, "steps": steps,
               "note": "" if parts else NO_API}
        for p in HOST_GAP_PARTS:
            ms = parts[repeat - 1][p] if parts else None
            row.update({f"{p}_ms": ms, f"{p}_gap_share": None if ms is None else ms / gap,
                        f"{p}_ms_per_step": None if ms is None else ms / steps})
        split.append(row)
    return DerivedTables(trace_runs=normalize("trace_runs", pd.DataFrame(trace)),
                         host_gaps=normalize("host_gaps", pd.DataFrame(split)))


SCOPE = v.Scope(arm="a", backend="gpu", batch=4, context=1024, profiler="cupti")
SPLITS = [{"sync": 30.0, "launch": 10.0, "other_api": 5.0, "host_compute": 15.0},
          {"sync": 20.0, "launch": 2.0, "other_api": 8.0, "host_compute": 30.0},
          {"sync": 25.0, "launch": 4.0, "other_api": 1.0, "host_compute": 20.0}]


@pytest.mark.parametrize("part", HOST_GAP_PARTS)
def test_each_part_is_its_median_share_of_the_step(part: str) -> None:
    measured = v.MEASUREMENTS[f"{part}_share"].func(tables(SPLITS), SCOPE)
    assert measured.value == pytest.approx(sorted(s[part] / 100.0 for s in SPLITS)[1])
    assert " ms per step (" in measured.text and "% of the step" in measured.text and "host gap" in measured.text
    assert measured.text.endswith("median of 3")


@pytest.mark.parametrize("part", HOST_GAP_PARTS)
def test_without_api_records_a_part_is_not_measured_with_the_captures_reason(part: str) -> None:
    measured = v.MEASUREMENTS[f"{part}_share"].func(tables(None), SCOPE)
    assert measured.value is None and measured.why == NO_API
    untraced = v.MEASUREMENTS[f"{part}_share"].func(DerivedTables(), SCOPE)
    assert untraced.value is None and "trace" in untraced.why


def test_the_host_gap_evidence_carries_the_split_only_where_measured() -> None:
    with_split = v.MEASUREMENTS["gap_share"].func(tables(SPLITS), SCOPE)
    without = v.MEASUREMENTS["gap_share"].func(tables(None), SCOPE)
    assert with_split.value == without.value == pytest.approx(0.6)
    assert " = sync and copy wait 2.5 + launch 0.4 + other API 0.5 + host compute 2.0 ms" in with_split.text
    assert with_split.text.startswith(without.text.split(" ms per step")[0]) and " = " not in without.text


@pytest.mark.parametrize(("cid", "part", "ms", "outcome"), [
    ("launch-bound", "launch", 25.0, v.CONFIRMED), ("launch-bound", "launch", 3.0, v.RULED_OUT),
    ("sync-bound", "sync", 20.0, v.CONFIRMED), ("sync-bound", "sync", 4.9, v.RULED_OUT),
    ("host-compute", "host_compute", 12.0, v.INCONCLUSIVE), ("host-compute", "host_compute", 45.0, v.CONFIRMED),
])
def test_the_playbooks_three_candidates_decide_on_the_share_of_the_step(cid, part, ms, outcome) -> None:
    (cand,) = [c for c, _ in read_playbook("batched-decode") if c.id == cid]
    assert v.MEASUREMENTS[cand.measure].unit == "fraction" and v.MEASUREMENTS[cand.measure].trace
    split = {p: 5.0 for p in HOST_GAP_PARTS} | {part: ms}
    verdicts = v.evaluate_candidate(cand, tables([split] * 3), v.Context(
        arms=("a",), backends=("gpu",), batches=(4,), contexts=(1024,), profilers={"gpu": "cupti"}))
    assert [x.outcome for x in verdicts] == [outcome]
    (none,) = v.evaluate_candidate(cand, tables(None), v.Context(
        arms=("a",), backends=("gpu",), batches=(4,), contexts=(1024,), profilers={"gpu": "cupti"}))
    assert none.outcome == v.NOT_MEASURED and none.why == NO_API
