"""Running perflib's parameterized notebooks with papermill, and the functions those notebooks call.

`collect.ipynb` measures one run (`collect_run` of its one parameter, `level`: a
`perflib.load.LevelSpec` as JSON), `profile.ipynb` attributes its trace (`profile_run`),
`report.ipynb` shows the verdicts (`export_notebook` exports it as Markdown). Each notebook holds a
`parameters` cell and calls into perflib; papermill injects the parameters. The campaign runner
measures in its own process by default (`measure`, the function `collect_run` calls) and writes the
notebooks from the results (`perflib.campaign.records`); with `--papermill` it executes them here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflib import derive, sweep
from perflib.campaign import kernels
from perflib.campaign.validate import load_campaign
from perflib.config import Campaign, RunSpec
from perflib.errors import PerflibError
from perflib.load import LevelSpec
from perflib.sweep import LevelResult

if TYPE_CHECKING:
    import pandas as pd


def _notebooks_dir() -> Path:
    """The notebooks the runner executes: `perflib/notebooks/` in an installed wheel (setup.py copies them
    there at build time), else the checkout's `notebooks/` (editable install, or the clone on the path)."""
    here = Path(__file__).resolve()
    packaged = here.parents[1] / "notebooks"
    return packaged if (packaged / "collect.ipynb").is_file() else here.parents[2] / "notebooks"


NOTEBOOKS = _notebooks_dir()


def measure(level: LevelSpec) -> tuple[LevelResult, str | None]:
    """Measure one run into its folder (`perflib.sweep.run_level`); the result, and the error where the
    run is not complete (a server that does not answer leaves an incomplete manifest naming the URL)."""
    result = sweep.run_level(level)
    if result.status == "complete":
        return result, None
    errors = "; ".join(result.errors) or "no error recorded"
    label = "/".join(x for x in (level.arm, level.backend, level.name) if x)
    return result, f"run {label} against {level.base_url} is incomplete: {errors}"


def collect_run(level: LevelSpec | Mapping[str, Any] | str, base_url: str | None = None,
                out_dir: str | Path | None = None) -> Path:
    """Measure one run into its folder, as `collect.ipynb` does; returns the run folder.

    `level`: a `perflib.load.LevelSpec`, or its JSON (object or text: the notebook's `level` parameter).
    `base_url` measures against another server than the level's (what perflib knew of the level's own
    server, its flags and log, is then left out) and `out_dir` into another folder: a notebook that a
    campaign wrote into a run folder measures the run again with both given, its own server long
    stopped and its own folder complete.

    An incomplete run (a server that does not answer, requests that failed) raises a `PerflibError`, so
    that papermill records the failure and the runner goes on; its manifest says what happened.
    """
    spec = LevelSpec.from_json(level)
    if base_url:
        spec = replace(spec, base_url=str(base_url), server=None)
    if out_dir is not None:
        spec = replace(spec, out_dir=Path(out_dir))
    result, error = measure(spec)
    if error:
        raise PerflibError(error)
    return result.run_dir


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


def profile_run(campaign_file: str | Path, arm: str, backend: str, batch: int, context: int, repeat: int,
                data_dir: str | Path | None = None) -> dict[str, pd.DataFrame]:
    """Attribute one run's trace, windowed to its level (`perflib.derive.run_tables`): its tables are kept
    in `data/derived/<campaign>/runs/<arm>/<backend>/<run>/`, where the page takes them from."""
    campaign = load_campaign(campaign_file)
    if data_dir is not None:
        campaign = replace(campaign, data_dir=Path(data_dir))
    return derive.run_tables(campaign, RunSpec(campaign.name, arm, backend, batch, context, repeat,
                                               campaign.decode_tokens))


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
