"""The analysis notebooks as a user runs them."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def test_find_kernel_skips_another_venvs_kernel(tmp_path, monkeypatch):
    """A `perflib` kernel of another checkout's venv runs the same base interpreter through its own
    symlink, but imports that checkout's perflib: it must not be picked (it was, and the notebook tests
    then ran another tree's code)."""
    from perflib.campaign import find_kernel

    other = tmp_path / "other" / ".venv" / "bin"
    other.mkdir(parents=True)
    (other / "python").symlink_to(Path(sys.executable).resolve())
    spec = tmp_path / "jupyter" / "kernels" / "perflib"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(other / "python"), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "another checkout", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    assert find_kernel() != "perflib"
