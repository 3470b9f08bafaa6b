"""Running a campaign: every incomplete run measured, one server per (arm, backend), then the page.

`run_campaign` executes `notebooks/collect.ipynb` (and `profile.ipynb` where the backend has a
profiler) once per run with papermill, starting each (arm, backend) server once, skipping complete
runs and carrying on past failed ones. With the GPU guard it waits for an idle device and reruns
runs that saw another GPU process (LOADGEN.md §7).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflib import report, rundir, server
from perflib.campaign.guard import GpuGuard
from perflib.campaign.notebooks import NOTEBOOKS, execute_notebook, find_kernel
from perflib.config import ArmSpec, BackendSpec, Campaign, RunSpec
from perflib.errors import PerflibError


@dataclass(frozen=True)
class CampaignResult:
    """What a campaign run did: runs measured, skipped as complete, failed (with why)."""

    done: tuple[str, ...]
    skipped: tuple[str, ...]
    failed: tuple[tuple[str, str], ...]
    contended: tuple[str, ...] = ()
    page: Path | None = None


@contextlib.contextmanager
def serve(campaign: Campaign, arm: ArmSpec, backend: BackendSpec, log_path: Path) -> Iterator[tuple[str, Any]]:
    """The (arm, backend) server: (base_url, handle or None). Starts a local llama-server once."""
    if arm.url or backend.url:
        yield (arm.url or backend.url).rstrip("/"), None
        return
    model = None
    if campaign.model.path:
        model = Path(campaign.model.path)
        model = model if model.is_absolute() else campaign.path.parent / model
    handle = server.start_local_llama(parallel=max(campaign.batches), context=max(campaign.contexts),
                                      decode_tokens=campaign.decode_tokens, log_path=log_path, model=model,
                                      random_shape=campaign.model.random,
                                      binary=Path(arm.binary) if arm.binary else None, threads=backend.threads,
                                      extra_args=[*backend.extra_args, *arm.extra_args], env={**backend.env, **arm.env})
    try:
        yield handle.base_url, handle
    finally:
        handle.stop()


@dataclass
class _Progress:
    """What a campaign run has done so far, and its progress bar."""

    bar: Any
    done: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    contended: list[str] = field(default_factory=list)


def _check_notebook_extras() -> None:
    try:
        import jupyter_client  # noqa: F401
        import papermill  # noqa: F401
    except ImportError as exc:
        raise PerflibError(f"`perflib campaign run` needs the notebook extras ({exc.name} is missing): "
                           "pip install 'perflib[notebooks]'") from None


def run_campaign(campaign: Campaign, data_dir: Path | None = None, reports_dir: Path | None = None,
                 guard: bool = False, only: dict[str, set[str]] | None = None, kernel_name: str | None = None,
                 progress: bool = True, write_page: bool = True, guard_idle_s: float = 90.0,
                 max_attempts: int = 5, notebooks: Path = NOTEBOOKS) -> CampaignResult:
    """Measure every incomplete run of the campaign, then derive the tables and write the page."""
    from tqdm import tqdm

    _check_notebook_extras()
    data = Path(data_dir or campaign.data_dir)
    runs = [r for r in campaign.expand(only) if not campaign.backend(r.backend).trace_only]  # nothing to serve
    todo = [r for r in runs if not rundir.is_complete(r.run_dir(data))]
    skipped = [r.label for r in runs if r not in todo]
    kernel = kernel_name or find_kernel()
    state = _Progress(tqdm(total=len(todo), desc=f"campaign {campaign.name}", unit="run", file=sys.stderr,
                           disable=not progress))
    for run in runs:  # complete runs whose trace was never attributed: profile them (no server needed)
        if run not in todo and campaign.backend(run.backend).profiler.kind != "none" and _needs_profile(run.run_dir(data)):
            error = _profile(campaign, run, data, kernel, notebooks)
            if error:
                state.failed.append((run.label, error))
    gpu = GpuGuard(idle_s=guard_idle_s, log=lambda m: print(m, file=sys.stderr)) if guard else None
    groups: dict[tuple[str, str], list[RunSpec]] = {}
    for run in todo:
        groups.setdefault((run.arm, run.backend), []).append(run)
    for (arm_name, backend_name), group in groups.items():
        _serve_group(campaign, campaign.arm(arm_name), campaign.backend(backend_name), group, data, kernel,
                     notebooks, gpu, max_attempts, state)
    state.bar.close()
    page = report.write_report(campaign, data_dir=data, reports_dir=reports_dir) if write_page else None
    return CampaignResult(tuple(state.done), tuple(skipped), tuple(state.failed), tuple(state.contended), page)


def _serve_group(campaign: Campaign, arm: ArmSpec, backend: BackendSpec, group: list[RunSpec], data: Path,
                 kernel: str, notebooks: Path, gpu: GpuGuard | None, max_attempts: int, state: _Progress) -> None:
    """Start the (arm, backend) server once and measure its runs; a server that does not start
    marks each of them incomplete."""
    log_path = rundir.backend_dir(data, campaign.name, arm.name, backend.name) / rundir.SERVER_LOG
    try:
        server_cm = serve(campaign, arm, backend, log_path)
        base_url, handle = server_cm.__enter__()
    except PerflibError as exc:
        for run in group:
            rundir.mark_incomplete(run.run_dir(data), run.manifest_keys(),
                                   f"server for {arm.name}/{backend.name} did not start: {exc}")
            state.failed.append((run.label, str(exc).splitlines()[0]))
            state.bar.update(1)
        return
    server_params: dict[str, Any] = {}
    if handle is not None:
        server_params = {"server_flags": list(handle.flags), "server_log": str(handle.log_path),
                         "server_version": handle.identity().get("version")}
        if gpu is not None:
            gpu.own_roots.add(handle.process.pid)
    try:
        for run in group:
            state.bar.set_postfix_str(run.label)
            error = _one_run(campaign, run, data, {"base_url": base_url, **server_params}, kernel, notebooks,
                             gpu, max_attempts, state.contended)
            if error:
                state.failed.append((run.label, error))
            else:
                state.done.append(run.label)
            state.bar.update(1)
    finally:
        server_cm.__exit__(None, None, None)


def _one_run(campaign: Campaign, run: RunSpec, data: Path, server_params: dict[str, Any], kernel: str,
             notebooks: Path, gpu: GpuGuard | None, max_attempts: int, contended: list[str]) -> str | None:
    """Measure one run (redoing contended attempts under the guard); returns the error or None.

    The executed notebook is written beside the run folder while it runs (run_level moves an
    incomplete folder aside and starts it afresh) and then moved into it as `collect.ipynb`.
    """
    run_dir = run.run_dir(data)
    params = {"campaign_file": str(campaign.path), "arm": run.arm, "backend": run.backend, "batch": run.batch,
              "context": run.context, "repeat": run.repeat, "data_dir": str(data), **server_params}
    scratch = run_dir.parent / f".{run_dir.name}.collect.ipynb"
    for attempt in range(1, max_attempts + 1):
        if gpu is not None:
            gpu.wait_idle()
        guard_cm = gpu.watching() if gpu is not None else contextlib.nullcontext(set())
        with guard_cm as seen:
            error = execute_notebook(notebooks / "collect.ipynb", scratch, params, kernel, cwd=run_dir.parent)
        run_dir.mkdir(parents=True, exist_ok=True)
        if scratch.exists():
            scratch.replace(run_dir / "collect.ipynb")
        if seen:
            contended.append(f"{run.label} attempt {attempt}: GPU pids {sorted(seen)}")
            if attempt < max_attempts:
                rundir.move_aside(run_dir, "contended")
                continue
            rundir.mark_incomplete(run_dir, run.manifest_keys(),
                                   f"GPU guard: all {max_attempts} attempts saw other GPU processes")
            return f"contended on all {max_attempts} attempts"
        if error:
            rundir.mark_incomplete(run_dir, run.manifest_keys(), error)
            return error
        break
    if campaign.backend(run.backend).profiler.kind != "none":
        return _profile(campaign, run, data, kernel, notebooks)
    return None


def _needs_profile(run_dir: Path) -> bool:
    """True where `profile.ipynb` is missing from the run folder or recorded an exception."""
    path = run_dir / "profile.ipynb"
    if not path.is_file():
        return True
    try:
        meta = json.loads(path.read_text()).get("metadata", {}).get("papermill", {})
    except (OSError, ValueError):
        return True
    return bool(meta.get("exception"))


def _profile(campaign: Campaign, run: RunSpec, data: Path, kernel: str, notebooks: Path = NOTEBOOKS) -> str | None:
    """Execute profile.ipynb for one run into its folder; returns the error or None."""
    run_dir = run.run_dir(data)
    return execute_notebook(notebooks / "profile.ipynb", run_dir / "profile.ipynb", {
        "campaign_file": str(campaign.path), "arm": run.arm, "backend": run.backend, "batch": run.batch,
        "context": run.context, "repeat": run.repeat, "data_dir": str(data)}, kernel, cwd=run_dir)
