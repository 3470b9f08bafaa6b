"""The playbook on a traced arm: a trace-based candidate written without `arm:` is decided, for each
compared arm, from the traced arm `of` it, and says so; an arm with no traced arm is "not measured"
with the key to add. Run on the committed H200 batch campaign (arms default, backend-sampling,
kv-unified and default-cupti, `of: default`) with its own candidates taken out, as a new user writes it:
the playbook alone."""

from __future__ import annotations

import pytest
import yaml
from support import REPO

from perflib import derive
from perflib import verdicts as v
from perflib.campaign import load_campaign
from perflib.config import CandidateSpec, read_playbook
from perflib.report import page

TRACE_CANDIDATES = ("gemm-dequant-route", "batched-gemv-per-row", "host-gaps")
"""The playbook's candidates that read kernel traces (class_share, class_scaling, gap_share)."""


@pytest.fixture(scope="module")
def playbook_only(tmp_path_factory):
    """cuda-h200-batch.yaml without its `candidates:` (the playbook's four apply, no `arm:` in them),
    reading the committed raw data; and its derived tables."""
    doc = yaml.safe_load((REPO / "campaigns" / "cuda-h200-batch.yaml").read_text())
    for key in ("candidates", "compare_with", "see_also", "notes"):
        doc.pop(key, None)
    doc.update(data_dir=str(REPO / "data"), reports_dir=str(tmp_path_factory.mktemp("reports")))
    path = tmp_path_factory.mktemp("campaign") / "cuda-h200-batch.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    campaign = load_campaign(path)
    assert {c.id for c in campaign.candidates} == {c.id for c, _ in read_playbook("batched-decode")}
    assert all(c.arm is None for c in campaign.candidates)
    return campaign, derive.build(campaign)


def test_trace_candidates_of_a_compared_arm_are_decided_from_its_traced_arm(playbook_only):
    campaign, tables = playbook_only
    verdicts = v.evaluate(campaign.candidates, tables, v.Context.of(campaign))
    traced_batches = sorted({int(b) for b in tables.trace_runs["batch"]})
    for cid in TRACE_CANDIDATES:
        mine = {x.batch: x for x in verdicts if x.candidate == cid and x.arm == "default"}
        # decided at every traced level, each read from the traced arm
        assert sorted(mine) == [b for b in traced_batches if b > 1 or cid != "batched-gemv-per-row"]
        assert all(x.trace_from == "default-cupti" and "(trace from default-cupti)" in x.scope for x in mine.values())
        # measured from the trace, or not for a reason of the trace itself (at batch 64 no GEMV runs at all)
        for x in mine.values():
            assert "no kernel trace" not in x.why and (x.outcome != v.NOT_MEASURED or cid == "batched-gemv-per-row")
        # the same number and reason, level by level, as the candidate written against the traced arm itself
        spec = next(c for c in campaign.candidates if c.id == cid)
        explicit = v.evaluate([CandidateSpec(**{**spec.__dict__, "arm": "default-cupti"})], tables,
                              v.Context.of(campaign))
        assert [(x.batch, x.value, x.why) for x in explicit] == [(b, x.value, x.why) for b, x in sorted(mine.items())]
        assert all(x.scope.startswith("arm default-cupti,") for x in explicit)
        for arm in ("backend-sampling", "kv-unified"):  # no traced arm of theirs: one verdict says why
            (other,) = [x for x in verdicts if x.candidate == cid and x.arm == arm]
            assert other.outcome == v.NOT_MEASURED and other.batch == max(campaign.batches)
            assert (f"add an arm with role: traced, of: {arm}, profiler: {{kind: cupti}}") in other.why, other.why
    # a candidate that reads no trace stays on the compared arm's own runs, at every batch above 1
    prefill = [x for x in verdicts if x.candidate == "interleaved-prefill"]
    assert {(x.arm, x.batch) for x in prefill} == {(a, b) for a in ("default", "backend-sampling", "kv-unified")
                                                   for b in campaign.batches if b > 1}
    assert all(x.outcome != v.NOT_MEASURED for x in prefill)


def test_the_first_screen_names_the_traced_arm_and_the_key_to_add(playbook_only):
    campaign, tables = playbook_only
    head = page.summary_markdown(campaign, tables, v.Decisions.of(campaign, tables), "")
    gaps = next(line for line in head.splitlines() if line.startswith("| host-side work between kernels"))
    assert "default (trace from default-cupti)" in gaps and "**confirmed**" in gaps
    assert "no kernel trace for backend llamacpp-cuda (profiler: none)" not in gaps
    assert "add an arm with role: traced, of: kv-unified, profiler: {kind: cupti}" in head


def test_an_arm_with_no_traced_arm_names_the_profiler_that_would_trace_it(playbook_only):
    """A CPU llama-server has no kernels, but perf samples it: that is the key suggested for it."""
    from dataclasses import replace

    from perflib.config import BackendSpec, ServerSpec

    cpu = BackendSpec(name="cpu", server=ServerSpec(preset="llama-server", build="cpu"))
    from perflib.verdicts.scopes import profiler_hint

    assert profiler_hint(cpu) == "perf"
    assert profiler_hint(replace(cpu, server=ServerSpec(preset="vllm"))) == "torch"
    assert profiler_hint(replace(cpu, server=ServerSpec(command=("x",), build="rocm"))) == "rocprofv3"
