"""Running perflib's parameterized notebooks with papermill, and the functions those notebooks call.

`collect.ipynb` measures one run (`collect_run`), `profile.ipynb` attributes its trace
(`profile_run`), `report.ipynb` shows the verdicts (`export_notebook` exports it as Markdown). Each
notebook holds a `parameters` cell and calls into perflib; papermill injects the parameters.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflib import load
from perflib.campaign import kernels
from perflib.campaign.validate import load_campaign
from perflib.config import Campaign, RunSpec
from perflib.errors import PerflibError

if TYPE_CHECKING:  # the runner's process imports this module but never pandas, sweep or derive (0.9 s)
    import pandas as pd



def _notebooks_dir() -> Path:
    """The notebooks the runner executes: `perflib/notebooks/` in an installed wheel (setup.py copies them
    there at build time), else the checkout's `notebooks/` (editable install, or the clone on the path)."""
    here = Path(__file__).resolve()
    packaged = here.parents[1] / "notebooks"
    return packaged if (packaged / "collect.ipynb").is_file() else here.parents[2] / "notebooks"


NOTEBOOKS = _notebooks_dir()


@dataclass(frozen=True)
class StartedServer:
    """What the runner knows of a server it started, handed to `run_level` inside the notebook
    (the real `ServerHandle` lives in the runner process): flags, log and version."""

    flags: tuple[str, ...]
    log_path: str | None
    version: str | None = None
    started: dict[str, Any] | None = None
    """What `perflib.server.ServerHandle.identity` recorded: binary, its SHA-256, commit, preset, model."""

    def identity(self) -> dict[str, Any]:
        return {**(self.started or {}), "version": self.version, "flags": list(self.flags)}


def collect_run(campaign_file: str | Path, arm: str, backend: str, batch: int, context: int, repeat: int,
                base_url: str, data_dir: str | Path | None = None, server_flags: Sequence[str] | None = None,
                server_log: str | None = None, server_version: str | None = None,
                server_identity: dict[str, Any] | None = None,
                contention_threshold: float | None = load.CPU_THRESHOLD,
                wait_threshold: float | None = load.WAIT_THRESHOLD,
                psi_threshold: float | None = load.PSI_THRESHOLD) -> Path:
    """Measure one run into its folder with `perflib.sweep.run_level`; returns the run folder.

    `contention_threshold` (a share of one core; None: not sampled) is what other processes may use
    during the level before the manifest marks it contended (`perflib.load.contention`);
    `wait_threshold` the run-queue wait per CPU second of the server's and client's threads and
    `psi_threshold` the PSI stall share (`perflib.load.pressure`; None: that signal does not decide).

    A server that does not answer leaves an incomplete manifest naming the URL and raises, so
    the runner records the failure and goes on.
    """
    from perflib import sweep

    campaign = load_campaign(campaign_file)
    data = Path(data_dir) if data_dir else campaign.data_dir
    run = RunSpec(campaign.name, arm, backend, batch, context, repeat, campaign.decode_tokens)
    spec = campaign.backend(backend)
    server = (StartedServer(tuple(server_flags), server_log, server_version, server_identity)
              if server_flags is not None else None)
    result = sweep.run_level(base_url, batch, context, campaign.decode_tokens, repeat, run.run_dir(data).parent,
                             dialect=spec.dialect, server=server, campaign=campaign.name, arm=arm, backend=backend,
                             contention=contention_threshold is not None, workers=campaign.workers,
                             timeout=campaign.request_timeout_s, idle_timeout=campaign.idle_timeout_s,
                             contention_threshold=(load.CPU_THRESHOLD if contention_threshold is None
                                                   else contention_threshold), wait_threshold=wait_threshold,
                             psi_threshold=psi_threshold)
    if result.status != "complete":
        errors = "; ".join(result.errors) or "no error recorded"
        raise PerflibError(f"run {run.label} against {base_url} is incomplete: {errors}")
    return result.run_dir


def find_kernel() -> str:
    """Name of a Jupyter kernel that runs this interpreter (`sys.executable`).

    jupyter_client runs a spec whose argv[0] is `python` with the current interpreter, so the
    venv's own `python3` spec qualifies; a `perflib` spec made by
    `python -m ipykernel install --user --name perflib` is preferred when it points here. Another
    venv's python resolves to the same base interpreter but imports that venv's perflib, so a path
    counts only from the same folder.
    """
    from jupyter_client.kernelspec import KernelSpecManager

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
    import papermill

    return papermill


def execute_notebook(notebook: Path, output: Path, parameters: dict, kernel_name: str, cwd: Path) -> str | None:
    """Run a notebook with papermill into `output`; returns None, or the error text if a cell raised.

    Inside `perflib.campaign.kernels.kernel_session` the notebook runs in the session's kernel
    instead of a fresh one; the executed notebook is the same either way."""
    papermill = import_papermill()
    from papermill.exceptions import PapermillExecutionError

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
        import logging

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
    """Attribute one run's trace, windowed to its level, and write its tables to
    `data/derived/<campaign>/runs/<arm>/<backend>/<run>/` (`perflib.derive.run_tables`)."""
    from perflib import derive

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
