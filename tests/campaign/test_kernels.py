"""One kernel across a group's notebooks: reused, failures still written, a dead kernel replaced."""

from __future__ import annotations

import json

import nbformat
import pytest
from nbclient.exceptions import DeadKernelError

from perflib.campaign import kernels
from perflib.campaign import notebooks as pc


def _notebook(path, body: str):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("value = 0")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def _outputs(path) -> str:
    nb = json.loads(path.read_text())
    return "".join("".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", []))


def test_a_session_runs_every_notebook_in_one_kernel_and_keeps_failures_executed(tmp_path):
    nb = _notebook(tmp_path / "nb.ipynb", "import os\nif value < 0:\n    raise ValueError('bad value')\n"
                                          "print(os.getpid(), value)")
    kernel = pc.find_kernel()
    with kernels.kernel_session(kernel) as session:
        assert pc.execute_notebook(nb, tmp_path / "a.ipynb", {"value": 1}, kernel, cwd=tmp_path) is None
        error = pc.execute_notebook(nb, tmp_path / "b.ipynb", {"value": -1}, kernel, cwd=tmp_path)
        assert pc.execute_notebook(nb, tmp_path / "c.ipynb", {"value": 3}, kernel, cwd=tmp_path) is None
        assert session.km is not None and session.km.has_kernel
    assert session.km is None  # closed with the session
    pid_a, value_a = _outputs(tmp_path / "a.ipynb").split()
    pid_c, value_c = _outputs(tmp_path / "c.ipynb").split()
    assert pid_a == pid_c and (value_a, value_c) == ("1", "3")  # one kernel, each run its own parameters
    assert error and "ValueError" in error and "bad value" in error
    failed = json.loads((tmp_path / "b.ipynb").read_text())
    assert failed["metadata"]["papermill"]["exception"] is True  # papermill's record of the error
    assert failed["metadata"]["papermill"]["parameters"] == {"value": -1}
    assert any(c["metadata"].get("tags") == ["injected-parameters"] for c in failed["cells"])


def test_a_kernel_that_died_is_replaced_at_the_next_notebook(tmp_path):
    nb = _notebook(tmp_path / "nb.ipynb", "import os\nprint(os.getpid())\nif value:\n    os._exit(1)")
    kernel = pc.find_kernel()
    with kernels.kernel_session(kernel):
        assert pc.execute_notebook(nb, tmp_path / "a.ipynb", {"value": 0}, kernel, cwd=tmp_path) is None
        with pytest.raises(DeadKernelError):  # as with papermill's own fresh kernel
            pc.execute_notebook(nb, tmp_path / "b.ipynb", {"value": 1}, kernel, cwd=tmp_path)
        assert pc.execute_notebook(nb, tmp_path / "c.ipynb", {"value": 0}, kernel, cwd=tmp_path) is None
    assert _outputs(tmp_path / "a.ipynb").split()[0] != _outputs(tmp_path / "c.ipynb").split()[0]
