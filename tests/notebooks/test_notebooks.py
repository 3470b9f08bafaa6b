"""The analysis notebooks as a user runs them: with their defaults from the repository root (papermill)
and from `notebooks/` (nbval, JupyterLab), each plot cell showing its figure as an `image/png` output,
and a kernel whose own pyplot figures still show after perflib's."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO

import papermill  # noqa: F401 - the notebooks extra runs these: a broken install fails here, never skips
pytestmark = pytest.mark.slow

NOTEBOOKS = ("analyze", "report")


@pytest.fixture(scope="module")
def kernel() -> str:
    from perflib.campaign import find_kernel

    return find_kernel()


def _papermill(notebook: str, out: Path, kernel: str, cwd: Path, *params: str) -> dict:
    """`python -m papermill notebooks/<name>.ipynb OUT` run in `cwd`; the executed notebook."""
    source = os.path.relpath(REPO / "notebooks" / f"{notebook}.ipynb", cwd)
    done = subprocess.run([sys.executable, "-m", "papermill", source, str(out), "-k", kernel, *params],
                          cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def _plot_cells(nb: dict) -> list[tuple[str, list[dict]]]:
    """(method, outputs) of each cell that is one `c.plot_*()` call."""
    cells = []
    for cell in nb["cells"]:
        source = "".join(cell["source"]).strip()
        if cell["cell_type"] == "code" and source.startswith("c.plot_") and source.endswith("()"):
            cells.append((source[2:-2], cell["outputs"]))
    return cells


def _check_figures(nb: dict, view) -> int:
    """Each plot cell holds the page's PNG of that figure as its one output (none where the plot is None);
    returns how many images the notebook holds."""
    images = 0
    for method, outputs in _plot_cells(nb):
        expected = getattr(view, method)()
        shown = [o for o in outputs if o["output_type"] in ("execute_result", "display_data")]
        assert not [o for o in outputs if o["output_type"] == "error"], (method, outputs)
        if expected is None:
            assert shown == [], method
            continue
        assert len(shown) == 1 and "image/png" in shown[0]["data"], (method, outputs)
        png = base64.b64decode(shown[0]["data"]["image/png"])
        assert png == expected._repr_png_(), method
        images += 1
    return images


@pytest.mark.parametrize("notebook", NOTEBOOKS)
@pytest.mark.parametrize("where", ["repo root", "notebooks"])
def test_notebook_defaults_work_from_the_root_and_from_notebooks(notebook, where, kernel, tmp_path):
    """`papermill notebooks/analyze.ipynb out.ipynb` from the repository root, and the same notebook run in
    `notebooks/` as nbval runs it: the defaults open the sample capture and every plot cell shows its figure."""
    from perflib import open_campaign

    cwd = REPO if where == "repo root" else REPO / "notebooks"
    nb = _papermill(notebook, tmp_path / "out.ipynb", kernel, cwd)
    text = json.dumps(nb["cells"])
    assert "CampaignView('sample'" in text or notebook == "report"
    images = _check_figures(nb, open_campaign())
    assert images == {"analyze": 3, "report": 3}[notebook]  # the sample has no bandwidth and no trace


def test_analyze_notebook_shows_every_figure_of_the_h200_campaign(kernel, tmp_path):
    """A campaign path relative to the repository root, given as papermill runs it there: all five figures."""
    from perflib import open_campaign

    nb = _papermill("analyze", tmp_path / "out.ipynb", kernel, REPO, "-p", "campaign_file",
                    "campaigns/cuda-h200.yaml")
    assert _check_figures(nb, open_campaign(REPO / "campaigns" / "cuda-h200.yaml")) == 5


def test_the_kernels_own_pyplot_figures_still_show(kernel, tmp_path):
    """In a kernel on the inline backend, perflib's figure shows, then the user's `plt.plot(); plt.show()`
    shows too (the old `matplotlib.use("Agg")` made it show nothing), and a perflib figure after pyplot
    is one image, not two."""
    import nbformat
    from nbclient import NotebookClient

    cells = ["import perflib\nc = perflib.open_campaign()\nc.plot_batch_scaling()",
             "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()",
             "import matplotlib\nmatplotlib.get_backend()",
             "c.plot_decomposition()"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, kernel_name=kernel, timeout=120, resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [[o for o in cell.outputs if o.output_type in ("execute_result", "display_data")] for cell in nb.cells]
    assert [len(o) for o in outputs] == [1, 1, 1, 1]
    assert "image/png" in outputs[0][0].data and "image/png" in outputs[1][0].data
    assert "inline" in outputs[2][0].data["text/plain"]
    assert "image/png" in outputs[3][0].data


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
