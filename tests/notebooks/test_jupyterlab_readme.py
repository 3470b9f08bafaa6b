"""The README's JupyterLab steps as a user follows them: its snippet, pasted into a new notebook in
`notebooks/`, opens a committed campaign by a project-relative path and shows every figure it asks for.

Here in a kernel (nbclient), everywhere; in a real JupyterLab in headless Chromium in test_screenshot.py.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from support import REPO

pytest.importorskip("nbclient")
pytestmark = pytest.mark.slow


def _script():
    spec = importlib.util.spec_from_file_location("jupyterlab_screenshot", REPO / "scripts" / "jupyterlab_screenshot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_snippet_opens_a_committed_campaign_and_asks_for_its_figures():
    lab = _script()
    code = lab.readme_snippet()
    assert "perflib.open_campaign(" in code and lab.expected_figures(code) >= 4
    opened = code.split("open_campaign(", 1)[1].split(")", 1)[0].strip("\"'")
    assert not Path(opened).is_absolute() and (REPO / opened).is_file(), opened
    assert "tests/" not in opened  # real data, not a test sample


def test_the_readme_snippet_shows_every_figure_in_a_kernel_run_from_notebooks(tmp_path):
    """The snippet as one cell, run in `notebooks/` (where JupyterLab starts a new notebook's kernel there):
    one PNG per `plot_*` call, no error."""
    import nbformat
    from nbclient import NotebookClient

    from perflib.campaign import find_kernel

    lab = _script()
    code = lab.readme_snippet()
    nb = nbformat.from_dict(lab.snippet_notebook(code))
    NotebookClient(nb, kernel_name=find_kernel(), timeout=300,
                   resources={"metadata": {"path": str(REPO / "notebooks")}}).execute()
    outputs = nb.cells[0].outputs
    assert not [o for o in outputs if o.output_type == "error" or o.get("name") == "stderr"], outputs
    images = [o for o in outputs if o.output_type == "display_data" and "image/png" in o.data]
    assert len(images) == lab.expected_figures(code)
