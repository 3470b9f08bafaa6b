"""The dialect registry (`perflib.metrics.dialects`): every server is one entry, and each entry's own
`/metrics` sample is told as that dialect, read through its name table and derived by its function."""

from __future__ import annotations

import pytest
from support import DATA

from perflib import metrics
from perflib.metrics.dialects import DIALECTS, detect_dialect, occupancy_caption
from perflib.server.presets import PRESETS

SAMPLES = {"mlxcel": ("mlxcel_before.txt", "mlxcel_after.txt", 4),
           "llamacpp": ("llamacpp_before.txt", "llamacpp_after.txt", 4),
           "vllm": ("vllm_before.txt", "vllm_after.txt", 4),
           "sglang": ("sglang_before.txt", "sglang_after.txt", 4)}
"""A before/after pair of each dialect's exposition text (tests/data/metrics) and the requests between
them; a new dialect needs its pair here."""


def _text(name: str) -> str:
    return (DATA / "metrics" / name).read_text()


def test_every_dialect_has_a_sample() -> None:
    assert set(SAMPLES) == set(DIALECTS)


@pytest.mark.parametrize("name", list(DIALECTS))
def test_every_dialect_is_detected_and_derived_from_its_own_names(name: str) -> None:
    dialect = DIALECTS[name]
    before, after, requests = (_text(SAMPLES[name][0]), _text(SAMPLES[name][1]), SAMPLES[name][2])
    assert detect_dialect(after) == name
    delta = metrics.diff(before, after, requests=requests)
    assert delta.dialect == name and not delta.reset
    # the table's names are what the server writes: most of them are present in its own sample
    assert len(delta.absent) < len(dialect.names) / 2, delta.absent
    assert delta.decode_step_ms is not None and delta.decode_step_ms > 0
    # the running gauge is a sampled gauge of the table, present in the sample
    running = next(spec for spec in dialect.names if spec.canonical == dialect.running)
    assert running.kind == "gauge" and running.sampled
    assert dialect.running in metrics.gauge_values(after)
    assert dialect.occupancy in occupancy_caption([name])


@pytest.mark.parametrize("name", list(DIALECTS))
def test_a_dialects_marks_tell_only_its_own_text(name: str) -> None:
    """No other dialect's sample carries this one's marks, except one that it yields to (mlxcel copies
    llama.cpp's families)."""
    for other, (_, after, _) in SAMPLES.items():
        if other == name or other in DIALECTS[name].yields_to:
            continue
        seen = {line.split("{")[0].split(" ")[0] for line in _text(after).splitlines() if not line.startswith("#")}
        assert not any(n.startswith(DIALECTS[name].marks) for n in seen), (name, other)


def test_every_preset_names_a_registered_dialect() -> None:
    assert {p.dialect for p in PRESETS.values()} <= set(DIALECTS)
