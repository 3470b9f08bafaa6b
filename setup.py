"""perflib's one build step beyond pyproject.toml: the notebooks go into the wheel.

`notebooks/*.ipynb` at the top of the clone are the one copy of the notebooks (what a user opens,
what nbval and the tests run). `perflib campaign run` executes them with papermill, so an installed
wheel needs them too: `build_py` copies them into the built package as `perflib/notebooks/`, where
`perflib.campaign.notebooks.NOTEBOOKS` looks first. A checkout (editable or not installed) has no
`perflib/notebooks/` and uses `notebooks/` itself. The sdist carries them through MANIFEST.in.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


def _notebooks() -> list[Path]:
    """notebooks/*.ipynb beside this file; the build stops if the runner's collect notebook is not there."""
    source = Path(__file__).resolve().parent / "notebooks"
    found = sorted(source.glob("*.ipynb"))
    if not (source / "collect.ipynb").is_file():
        raise SystemExit(f"perflib build: no collect.ipynb in {source} (an sdist without MANIFEST.in?)")
    return found


class BuildPyWithNotebooks(build_py):
    """`build_py`, then the notebooks copied into the built `perflib/notebooks/`."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install reads notebooks/ in place
            return
        notebooks = _notebooks()
        target = Path(self.build_lib) / "perflib" / "notebooks"
        target.mkdir(parents=True, exist_ok=True)
        for notebook in notebooks:
            self.copy_file(str(notebook), str(target / notebook.name))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        if getattr(self, "editable_mode", False):
            return outputs
        target = Path(self.build_lib) / "perflib" / "notebooks"
        return [*outputs, *(str(target / n.name) for n in _notebooks())]


setup(cmdclass={"build_py": BuildPyWithNotebooks})
