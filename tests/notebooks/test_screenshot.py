"""scripts/jupyterlab_screenshot.py, run as the README says: a real JupyterLab in headless Chromium runs
the analysis notebook and the screenshot shows its first figure. Skipped where Debian's Chromium is not
installed (`apt-get install -y chromium`)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.slow


@pytest.mark.skipif(not CHROMIUM.is_file(), reason="Debian's chromium is not installed (apt-get install chromium)")
def test_jupyterlab_runs_the_notebook_and_shows_a_figure(tmp_path):
    notebook = REPO / "notebooks" / "analyze.ipynb"
    before = notebook.read_bytes()
    out = tmp_path / "shot.png"
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "jupyterlab_screenshot.py"), "--out", str(out),
                           "--size", "1200x900", "--timeout", "240"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["figures"] == 3  # batch scaling, decomposition, before/after of the sample
    box = result["figure_box"]
    assert 0 <= box["top"] < box["bottom"] <= 900 and box["right"] <= 1200 and box["bottom"] - box["top"] > 200
    png = out.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (1200, 900)
    assert notebook.read_bytes() == before  # JupyterLab saved nothing into the checkout


def test_the_script_says_what_is_missing(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "jupyterlab_screenshot.py"), "--chromium",
                           str(tmp_path / "none"), "--out", str(tmp_path / "x.png")], capture_output=True, text=True)
    assert done.returncode == 2 and "apt-get install -y chromium" in done.stderr
    assert not (tmp_path / "x.png").exists()
