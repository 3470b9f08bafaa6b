"""scripts/jupyterlab_screenshot.py (`make screenshot`): the README's JupyterLab steps followed in a real
JupyterLab in headless Chromium, its snippet in a new notebook in `notebooks/` on the kernel "perflib (venv)";
every figure the snippet asks for is shown and the screenshot shows the first. Skipped, with a line, where
Debian's Chromium is not installed (`apt-get install -y chromium`; `.ci/run` installs it where apt can)."""

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


@pytest.mark.skipif(not CHROMIUM.is_file(), reason="no Chromium at /usr/bin/chromium, so the README's JupyterLab "
                    "steps were not checked in a browser (apt-get install -y chromium)")
def test_the_readme_steps_render_every_figure_in_jupyterlab(tmp_path):
    before = {p.name: p.read_bytes() for p in (REPO / "notebooks").glob("*.ipynb")}
    out = tmp_path / "shot.png"
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "jupyterlab_screenshot.py"), "--out", str(out),
                           "--size", "1200x900", "--timeout", "240"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    code = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, 'scripts'); import jupyterlab_screenshot "
                           "as s; print(s.expected_figures(s.readme_snippet()))"], cwd=REPO, capture_output=True,
                          text=True, check=True)
    assert result["figures"] == result["expected"] == int(code.stdout) >= 4  # one per plot_* call of the snippet
    assert result["kernel"] == "perflib (venv)"
    box = result["figure_box"]
    assert 0 <= box["top"] < box["bottom"] <= 900 and box["right"] <= 1200 and box["bottom"] - box["top"] > 200
    png = out.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (1200, 900)
    # JupyterLab saved nothing into the checkout, and the snippet's notebook is gone
    assert {p.name: p.read_bytes() for p in (REPO / "notebooks").glob("*.ipynb")} == before


def test_the_script_says_what_is_missing(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "jupyterlab_screenshot.py"), "--chromium",
                           str(tmp_path / "none"), "--out", str(tmp_path / "x.png")], capture_output=True, text=True)
    assert done.returncode == 2 and "apt-get install -y chromium" in done.stderr
    assert not (tmp_path / "x.png").exists()
