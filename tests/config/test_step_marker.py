"""`profiler.step_marker`: a regex for the ranges that mark one step each, checked when the file is read."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from perflib.campaign import load_campaign
from perflib.errors import InputError

CAMPAIGN = """\
name: t
model: {name: tiny}
backends:
  - name: gpu
    url: http://127.0.0.1:9
    profiler: {kind: nsys, step_marker: 'MARKER'}
batches: [1]
contexts: [64]
decode_tokens: 8
"""


def write(tmp_path: Path, marker: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(CAMPAIGN).replace("MARKER", marker))
    return path


def test_step_marker_is_read_as_given(tmp_path: Path) -> None:
    campaign = load_campaign(write(tmp_path, r"^decode_step\[\d+\]$"))
    assert campaign.backend("gpu").profiler.step_marker == r"^decode_step\[\d+\]$"


def test_step_marker_defaults_to_none(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(CAMPAIGN).replace(", step_marker: 'MARKER'", ""))
    assert load_campaign(path).backend("gpu").profiler.step_marker is None


def test_a_step_marker_that_does_not_compile_names_the_line_and_why(tmp_path: Path) -> None:
    path = write(tmp_path, "step[(")
    with pytest.raises(InputError) as err:
        load_campaign(path)
    msg = str(err.value)
    assert str(path) in msg and "backends[0].profiler.step_marker" in msg and "(line 6)" in msg
    assert "a regular expression" in msg and "does not compile" in msg and "'step[('" in msg
