"""Atomic output: a file is replaced whole or left as it was, with no temp file behind."""

from __future__ import annotations

import json

import pytest

from perflib import atomic


def test_a_write_replaces_the_file_whole(tmp_path):
    path = tmp_path / "sub" / "page.md"
    atomic.write_atomic(path, "old\n")
    atomic.write_json_atomic(path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in path.parent.iterdir()] == ["page.md"]
    assert path.stat().st_mode & 0o777 == 0o644  # readable by the others who share the data folder


def test_a_failure_in_the_block_leaves_the_old_file_and_no_temp_file(tmp_path):
    path = tmp_path / "table.parquet"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic.atomic_target(path) as tmp:
        tmp.write_text("half of the new")
        raise RuntimeError("the writer failed")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["table.parquet"]
