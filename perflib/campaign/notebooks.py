"""Running perflib's parameterized notebooks with papermill (`--papermill`, `--notebook-export`).

`collect.ipynb` measures one run (`perflib.campaign.measure.collect_run` of its one parameter, `level`:
a `perflib.load.LevelSpec` as JSON), `profile.ipynb` attributes its trace (`profile_run` of its one
parameter, `run`: a `perflib.campaign.measure.ProfileSpec` as JSON), `report.ipynb` shows the verdicts
(`export_notebook` exports it as Markdown). Each notebook holds a `parameters` cell and calls into
perflib; papermill injects the parameters. The campaign runner measures in its own process by default
(`perflib.campaign.measure`) and writes the notebooks from the results (`perflib.campaign.records`);
with `--papermill` it executes them here (`execute_notebook`, in a kernel `find_kernel` names).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from perflib.campaign import kernels
from perflib.config import Campaign
from perflib.errors import PerflibError


def _notebooks_dir() -> Path:
    """The notebooks the runner executes: `perflib/notebooks/` in an installed wheel (setup.py copies them
    there at build time), else the checkout's `notebooks/` (editable install, or the clone on the path)."""
    here = Path(__file__).resolve()
    packaged = here.parents[1] / "notebooks"
    return packaged if (packaged / "collect.ipynb").is_file() else here.parents[2] / "notebooks"


NOTEBOOKS = _notebooks_dir()


def find_kernel() -> str:
    """Name of a Jupyter kernel that runs this interpreter (`sys.executable`).

    jupyter_client runs a spec whose argv[0] is `python` with the current interpreter, so the
    venv's own `python3` spec qualifies; a `perflib` spec made by
    `python -m ipykernel install --user --name perflib` is preferred when it points here. Another
    venv's python resolves to the same base interpreter but imports that venv's perflib, so a path
    counts only from the same folder.
    """
    from jupyter_client.kernelspec import KernelSpecManager  # the notebooks extra: only with --papermill

    specs = KernelSpecManager().get_all_specs()
    exe = Path(sys.executable)

    def maps_here(name: str) -> bool:
        argv = specs[name]["spec"].get("argv", [])
        if not argv:
            return False
        first = argv[0]
        if first in {"python", f"python{sys.version_info[0]}", f"python{sys.version_info[0]}.{sys.version_info[1]}"}:
            return True
        with contextlib.suppress(OSError):
            return Path(first) == exe or (Path(first).parent.resolve() == exe.parent.resolve()
                                          and Path(first).resolve() == exe.resolve())
        return False

    for name in ("perflib", "python3", *sorted(specs)):
        if name in specs and maps_here(name):
            return name
    raise PerflibError(f"no Jupyter kernel runs {sys.executable}; register one with "
                       f"`{sys.executable} -m ipykernel install --user --name perflib`")


def check_extras() -> None:
    """The notebook extras that `--papermill` needs are installed (found, not imported: papermill is
    imported while a server starts)."""
    for name in ("jupyter_client", "nbclient", "papermill"):
        if importlib.util.find_spec(name) is None:
            raise PerflibError(f"`perflib campaign run` needs the notebook extras ({name} is missing): "
                               "pip install 'perflib[notebooks]' (or run without --papermill)")


KERNEL_LOG_LEVEL = "--IPKernelApp.log_level=ERROR"
"""The kernel logs errors only: no TCP warning per run."""


def without_iri_grammars() -> None:
    """Keep jsonschema from compiling the IRI grammars of `rfc3987_syntax` when papermill imports it.

    jupyterlab's dependencies install `rfc3987_syntax`, and jsonschema, imported by nbformat, builds
    39 lark grammars from it at import: 1.9 s of the 2.1 s that `import nbformat` takes on the 2-core
    machine, once per `perflib campaign run`. The notebook schema has no `format` keyword, so those
    checks never run on a notebook; jsonschema imports the module under `suppress(ImportError)` and
    goes without the two IRI formats. Done in perflib's own processes only, never in a user's kernel.
    """
    if "jsonschema" not in sys.modules:
        sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]


def import_papermill() -> Any:
    """papermill, imported without jsonschema's IRI grammars (`without_iri_grammars`)."""
    without_iri_grammars()
    import papermill  # the notebooks extra, 2 s: only with --papermill

    return papermill


def execute_notebook(notebook: Path, output: Path, parameters: dict, kernel_name: str, cwd: Path) -> str | None:
    """Run a notebook with papermill into `output`; returns None, or the error text if a cell raised.

    Inside `perflib.campaign.kernels.kernel_session` the notebook runs in the session's kernel
    instead of a fresh one; the executed notebook is the same either way."""
    papermill = import_papermill()
    from papermill.exceptions import PapermillExecutionError  # loaded just above, by import_papermill

    output.parent.mkdir(parents=True, exist_ok=True)
    env = _kernel_env()
    session = kernels.current()  # inside `kernels.kernel_session`: this thread's kernel, kept between notebooks
    try:
        with kernels.environment(env):
            papermill.execute_notebook(str(notebook), str(output), parameters=parameters, kernel_name=kernel_name,
                                       progress_bar=False, cwd=str(cwd), extra_arguments=[KERNEL_LOG_LEVEL],
                                       kernel_manager_class=kernels.quiet_kernel_manager(),
                                       engine_name=kernels.ENGINE if session is not None else None)
    except PapermillExecutionError as exc:
        return f"{output}: cell {exc.cell_index} raised {exc.ename}: {exc.evalue}"
    except KeyboardInterrupt:
        # Ctrl-C leaves nbclient's cell task orphaned with the kernel it stopped; asyncio would print its
        # DeadKernelError as a traceback at exit, after perflib's own "interrupted" line.
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        raise
    return None


def _kernel_env() -> dict[str, str]:
    """What the kernel's environment needs added: it runs in another folder, so PYTHONPATH must name this
    perflib, whatever the install looks like."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": root + (os.pathsep + path if path else "")} if root not in path.split(os.pathsep) else {}


def export_notebook(campaign: Campaign, reports_dir: Path | None = None, kernel_name: str | None = None) -> Path:
    """Execute notebooks/report.ipynb for the campaign and export it with
    `jupyter nbconvert --to markdown --no-input` into the reports folder: Markdown tables, the figures
    as PNGs beside it, the verdicts once (cells tagged `export-hide`, nbval's check cell, left out)."""
    reports = Path(reports_dir or campaign.reports_dir)
    reports.mkdir(parents=True, exist_ok=True)
    executed = reports / f"{campaign.name}-report.ipynb"
    error = execute_notebook(NOTEBOOKS / "report.ipynb", executed,
                             {"campaign_file": str(campaign.path), "data_dir": str(campaign.data_dir)},
                             kernel_name or find_kernel(), cwd=reports)
    if error:
        raise PerflibError(error)
    out = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "markdown", "--no-input",
                          "--TagRemovePreprocessor.enabled=True",
                          "--TagRemovePreprocessor.remove_cell_tags=export-hide",
                          str(executed), "--output-dir", str(reports)], capture_output=True, text=True)
    if out.returncode != 0:
        raise PerflibError(f"nbconvert of {executed} failed: {out.stderr.strip()[-500:]}")
    return executed.with_suffix(".md")
