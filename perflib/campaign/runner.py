"""Running a campaign: every incomplete run measured, one server per (arm, backend), then the page.

`run_campaign` builds what the servers need first (binaries, models, the CUPTI library), then for
each (arm, backend) claims its folder (`perflib.campaign.claims`: one runner per arm and backend,
whichever host), starts its server under its profiler (`perflib.campaign.servers`), measures each run
in this process (`perflib.campaign.notebooks.measure` of the run's `perflib.load.LevelSpec`) and
writes its `collect.ipynb` from the results (`perflib.campaign.records`), restarting a server that
died, and stops it. Then it cuts the server's capture into the runs (`perflib.campaign.captures`) and
attributes each traced run once (`perflib.derive.run_tables`, the per-run tables the page reads),
writing its `profile.ipynb`. With `papermill=True` (`--papermill`) each run is measured and each trace
attributed by executing those notebooks with papermill instead, in one kernel per (arm, backend); the
run folders get the same files. Complete runs are skipped and failed ones carried past. With the GPU
guard it waits for an idle device and redoes runs that saw another GPU process (LOADGEN.md §7).
Ctrl-C stops the server, marks the run in progress incomplete and keeps the rest.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflib import derive, load, rundir
from perflib.campaign import claims, kernels, records
from perflib.campaign.captures import collect_segment, recut_pending
from perflib.campaign.contention import WAIT_BUDGET_S, CpuContention
from perflib.campaign.guard import GpuGuard
from perflib.campaign.interrupts import CtrlC
from perflib.campaign.notebooks import (
    NOTEBOOKS,
    execute_notebook,
    find_kernel,
    import_papermill,
    measure,
    without_iri_grammars,
)
from perflib.campaign.servers import Prepared, ServedArm, prepare, stop_orphans
from perflib.config import ArmSpec, BackendSpec, Campaign, RunSpec
from perflib.errors import PerflibError, interrupt_text
from perflib.load import LevelSpec
from perflib.server import profilers

if TYPE_CHECKING:
    from perflib.publish import Published


@dataclass(frozen=True)
class CampaignResult:
    """What a campaign run did: runs measured, skipped as complete, failed (with why)."""

    done: tuple[str, ...]
    skipped: tuple[str, ...]
    failed: tuple[tuple[str, str], ...]
    contended: tuple[str, ...] = ()
    page: Path | None = None
    claimed: tuple[tuple[str, str], ...] = ()
    """(arm/backend, who holds it) for the groups another runner was measuring."""
    partial: tuple[tuple[str, str], ...] = ()
    """(run, why) for complete runs whose trace was lost, cut short or not attributed: the page's Trace lost
    line, and this invocation's capture, cut and profile failures of runs whose counters stand."""
    on_disk: tuple[int, int] | None = None
    """(complete, all) run folders of the campaign, as the page counts them (None: no page written)."""
    steps_guessed: tuple[str, ...] = ()
    """Traced runs whose step count is the dispatch rhythm's guess (the page marks them)."""
    orphans: tuple[str, ...] = ()
    """Servers an earlier runner left running when it died, stopped before this run started any."""

    kept_contended: tuple[str, ...] = ()
    """Runs kept complete but marked contended (left out of medians and verdicts)."""
    contention_wait_s: float = 0.0
    """Seconds waited in all for quiet CPUs before redoing contended runs."""
    contention_summary: str = ""
    """One line: the wait, the attempts redone, the runs kept contended ('' where none was contended)."""
    published: Published | None = None
    """The page and everything it shows, decided once (`perflib.publish`; None: no page written)."""

    @property
    def nothing_done(self) -> bool:
        """Nothing measured and nothing failed, while runs were left to measure: all held by another runner."""
        return bool(self.claimed) and not self.done and not self.failed


@dataclass
class _Progress:
    """What a campaign run has done so far, and its progress bar."""

    bar: Any
    done: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    contended: list[str] = field(default_factory=list)
    claimed: list[tuple[str, str]] = field(default_factory=list)

    def fail(self, run: RunSpec, data: Path, error: str, mark: bool = True) -> None:
        """Count a run as failed, marking it incomplete with `error` (what it measured stays)."""
        if mark:
            rundir.mark_incomplete(run.run_dir(data), run.manifest_keys(), error)
        self.failed.append((run.label, error.splitlines()[0]))
        self.bar.update(1)


def _check_notebook_extras() -> None:
    """The notebook extras that `--papermill` needs are installed (found, not imported: papermill is
    imported while a server starts)."""
    for name in ("jupyter_client", "nbclient", "papermill"):
        if importlib.util.find_spec(name) is None:
            raise PerflibError(f"`perflib campaign run` needs the notebook extras ({name} is missing): "
                               "pip install 'perflib[notebooks]' (or run without --papermill)")


def run_campaign(campaign: Campaign, data_dir: Path | None = None, reports_dir: Path | None = None,
                 guard: bool = False, only: dict[str, set[str]] | None = None, kernel_name: str | None = None,
                 progress: bool = True, write_page: bool = True, guard_idle_s: float = 90.0,
                 max_attempts: int = 5, notebooks: Path = NOTEBOOKS,
                 contention_threshold: float | None = load.CPU_THRESHOLD,
                 wait_threshold: float | None = load.WAIT_THRESHOLD,
                 psi_threshold: float | None = load.PSI_THRESHOLD,
                 contention_wait_s: float = WAIT_BUDGET_S, papermill: bool = False,
                 cluster: str | None = None) -> CampaignResult:
    """Measure every incomplete run of the campaign, then derive the tables and write the page.

    Each run is measured in this process and its notebooks written from the results; with `papermill`,
    each is measured by executing `<notebooks>/collect.ipynb` with papermill in a Jupyter kernel
    (`kernel_name`, default: one that runs this Python) and its trace attributed by `profile.ipynb`.

    `contention_threshold`: the share of the CPUs that other processes may use during a level, and
    `wait_threshold` the run-queue wait per CPU second of the server's and client's threads, and
    `psi_threshold` the PSI stall share, before
    the run is contended (`perflib.load.contention`); None samples nothing. A contended run is redone
    (`perflib.campaign.contention`: at most `contention_wait_s` of waiting for quiet CPUs over the
    campaign) and at last kept, marked contended.

    `cluster`: a Dask scheduler's address; each (arm, backend) is then measured on a worker that offers
    its backend, with these options, and its run folders gathered into `data` (`perflib.campaign.cluster`)."""
    from tqdm import tqdm  # late: 8 ms (measured) that validate, report and open_campaign skip

    if papermill:
        without_iri_grammars()
        _check_notebook_extras()
    data = Path(data_dir or campaign.data_dir)
    if cluster is not None:  # issue 29: each (arm, backend) on a Dask worker (`perflib.campaign.cluster`)
        return _on_cluster(campaign, data, reports_dir, write_page, cluster, only, progress, dict(
            guard=guard, guard_idle_s=guard_idle_s, contention_threshold=contention_threshold, papermill=papermill,
            wait_threshold=wait_threshold, psi_threshold=psi_threshold, contention_wait_s=contention_wait_s,
            kernel_name=kernel_name))
    orphans = stop_orphans(campaign, data, log=_say)  # servers a runner killed with -9 left behind
    runs = [r for r in campaign.expand(only) if not campaign.backend(r.backend).trace_only]  # nothing to serve
    todo = [r for r in runs if not rundir.is_complete(r.run_dir(data))]
    skipped = [r.label for r in runs if r not in todo]
    kernel = (kernel_name or find_kernel()) if papermill else None
    groups: dict[tuple[str, str], list[RunSpec]] = {}
    for run in todo:
        groups.setdefault((run.arm, run.backend), []).append(run)
    log = _logger(progress)
    prepared = _prepare_all(campaign, groups, progress)  # builds take minutes: before the bar
    state = _Progress(tqdm(total=len(todo), desc=f"campaign {campaign.name}", unit="run", file=sys.stderr,
                           disable=not progress))
    gpu = GpuGuard(idle_s=guard_idle_s, log=log) if guard else None
    ctrl_c = CtrlC()
    cpu = CpuContention(budget_s=contention_wait_s, log=log, bar=state.bar)
    how = _How(kernel, notebooks, gpu, max_attempts, contention_threshold, ctrl_c, wait_threshold, cpu,
               psi_threshold)
    _finish_complete(campaign, data, [r for r in runs if r not in todo], how, state)
    try:
        with ctrl_c:  # a Ctrl-C is acted on between runs even where it was swallowed below (`interrupts`)
            if ctrl_c.ignored:
                print("perflib: SIGINT is ignored in this process (started in the background?): Ctrl-C will not "
                      "stop the campaign; SIGTERM (kill PID) will", file=sys.stderr)
            for (arm_name, backend_name), group in groups.items():
                arm, backend = campaign.arm(arm_name), campaign.backend(backend_name)
                ready = prepared.get((arm_name, backend_name))
                if isinstance(ready, str):  # the build or the model failed: every run of the group says why
                    for run in group:
                        state.fail(run, data, f"server for {arm_name}/{backend_name} could not be prepared: {ready}")
                    continue
                with claims.claim(rundir.backend_dir(data, campaign.name, arm_name, backend_name)) as held:
                    if isinstance(held, str):
                        _say(f"{arm_name}/{backend_name}: skipped, {len(group)} runs: claimed by another runner "
                             f"({held})")
                        state.claimed.append((f"{arm_name}/{backend_name}", held))
                        state.bar.update(len(group))
                        continue
                    fresh = [r for r in group if not rundir.is_complete(r.run_dir(data))]  # another runner's meanwhile
                    skipped += [r.label for r in group if r not in fresh]
                    state.bar.update(len(group) - len(fresh))
                    if fresh:
                        _serve_group(campaign, arm, backend, fresh, data, how, state, ready, held, log)
    finally:
        state.bar.close()
    from perflib.publish import end_run  # late: the verdicts and the page, loaded when a campaign ends
    end = end_run(campaign, data, reports_dir, state.failed, write_page)  # the page; failures split as it splits them
    return CampaignResult(tuple(state.done), tuple(skipped), end.failed, tuple(state.contended), end.page,
                          tuple(state.claimed), end.partial, end.on_disk, end.steps_guessed, tuple(orphans),
                          tuple(cpu.kept), cpu.waited_s, cpu.summary(), end.published)


# --- cluster (issue 29): the runner's one call into `perflib.campaign.cluster`
def _on_cluster(campaign: Campaign, data: Path, reports_dir: Path | None, write_page: bool, address: str,
                only: dict[str, set[str]] | None, progress: bool, options: dict[str, Any]) -> CampaignResult:
    """The groups measured on the Dask workers at `address`, their run folders gathered into `data`, then
    the page written from them as after a run here."""
    from perflib.campaign import cluster as on_cluster  # late: Dask, the optional perflib[cluster]
    from perflib.publish import end_run  # late: the verdicts and the page, loaded when a campaign ends

    got = on_cluster.measure(campaign, data, address, only, options, progress)
    end = end_run(campaign, data, reports_dir, got.failed, write_page)
    return CampaignResult(tuple(got.done), tuple(got.skipped), end.failed, tuple(got.contended), end.page,
                          tuple(got.claimed), end.partial, end.on_disk, end.steps_guessed, (), tuple(got.kept_contended),
                          published=end.published)
# --- end cluster


def _say(message: str) -> None:
    """A line on stderr whatever the progress setting: what the user must know (a group skipped, an
    orphaned server stopped)."""
    from tqdm import tqdm  # late: see run_campaign

    tqdm.write(f"perflib: {message}", file=sys.stderr)


def _finish_complete(campaign: Campaign, data: Path, complete: list[RunSpec], how: _How, state: _Progress) -> None:
    """What complete runs still lack, with no server: the cut of a capture that a stopped runner left
    half-done (`perflib.campaign.captures.recut_pending`), then the profile of a trace never attributed."""
    if any(profilers.profiler_kind(campaign.profiler(r.arm, r.backend).kind).cut == "lifetime" for r in complete):
        state.failed.extend(recut_pending(campaign, data, log=_say))
    for run in complete:
        if _traced(campaign, run) and _needs_profile(run.run_dir(data)):
            error = _profile(campaign, run, data, how)
            if error:
                state.failed.append((run.label, error))


def _logger(progress: bool) -> Any:
    from tqdm import tqdm  # late: see run_campaign

    def log(message: str) -> None:
        if progress:
            tqdm.write(f"perflib: {message}", file=sys.stderr)

    return log


def _traced(campaign: Campaign, run: RunSpec) -> bool:
    return campaign.profiler(run.arm, run.backend).kind != "none"


def _prepare_all(campaign: Campaign, groups: dict[tuple[str, str], list[RunSpec]],
                 progress: bool) -> dict[tuple[str, str], Prepared | str | None]:
    """Each group's binary, model and profiler library, built or found before any server starts;
    a failure is kept as the text that its runs' manifests will carry."""
    out: dict[tuple[str, str], Prepared | str | None] = {}
    for arm_name, backend_name in groups:
        arm, backend = campaign.arm(arm_name), campaign.backend(backend_name)
        if arm.url or backend.url or backend.server_spec is None:
            out[(arm_name, backend_name)] = None
            continue
        try:
            out[(arm_name, backend_name)] = prepare(campaign, arm, backend, progress=progress)
        except PerflibError as exc:
            out[(arm_name, backend_name)] = str(exc)
    return out


@dataclass(frozen=True)
class _How:
    """How each run is measured: in this process, or through the notebooks in a kernel (`kernel`, None:
    in this process); the GPU guard, attempts, the CPU thresholds."""

    kernel: str | None
    notebooks: Path
    gpu: GpuGuard | None
    max_attempts: int
    contention_threshold: float | None
    ctrl_c: CtrlC
    wait_threshold: float | None = load.WAIT_THRESHOLD
    cpu: CpuContention = field(default_factory=CpuContention)
    psi_threshold: float | None = load.PSI_THRESHOLD

    @property
    def papermill(self) -> bool:
        return self.kernel is not None


def _serve_group(campaign: Campaign, arm: ArmSpec, backend: BackendSpec, group: list[RunSpec], data: Path,
                 how: _How, state: _Progress, prepared: Prepared | None, held: claims.Claim, log: Any) -> None:
    """Long: start the (arm, backend) server, measure its runs (starting it again where it died),
    stop it (also on Ctrl-C), then cut its capture into the runs and profile them."""
    served = ServedArm(campaign, arm, backend, data, prepared, log=log)
    measured: list[RunSpec] = []
    started = False
    try:
        # --papermill: one kernel for the group's collect notebooks
        with kernels.kernel_session(how.kernel) if how.kernel else contextlib.nullcontext():
            if how.papermill:
                import_papermill()  # half a second, before the server is started
            try:
                served.start()
            except PerflibError as exc:
                for run in group:
                    state.fail(run, data, f"server for {arm.name}/{backend.name} did not start: {exc}")
                return
            started = True
            _measure_group(campaign, arm, backend, group, data, how, state, served, held, measured)
    finally:  # the kernel is gone by now; the server stops, then its capture is cut and profiled
        if started:
            served.__exit__(*sys.exc_info())
            _collect(campaign, served, measured, data, how, state, log)


def _measure_group(campaign: Campaign, arm: ArmSpec, backend: BackendSpec, group: list[RunSpec], data: Path,
                   how: _How, state: _Progress, served: ServedArm, held: claims.Claim,
                   measured: list[RunSpec]) -> None:
    """Measure the started server's runs one after the other (starting it again where it died); a
    Ctrl-C marks the run in progress incomplete. `measured` gets each run that was tried."""
    current: RunSpec | None = None
    try:
        for i, run in enumerate(group):
            current = run
            try:
                served.ensure_running()
            except PerflibError as exc:
                for rest in group[i:]:
                    state.fail(rest, data, f"server for {arm.name}/{backend.name} could not be started again: {exc}")
                return
            if how.gpu is not None and served.current and served.current.handle:
                how.gpu.own_roots.add(served.current.handle.process.pid)
            how.cpu.show(run.label)
            how.ctrl_c.check()
            error = _measure(campaign, run, data, served, how, state.contended)
            how.ctrl_c.check()  # a Ctrl-C during the run that was swallowed below: the run is kept incomplete
            died = served.died()
            if died and (error or not rundir.is_complete(run.run_dir(data))):
                rundir.mark_incomplete(run.run_dir(data), run.manifest_keys(), f"during this run the {died}")
                error = f"{error + '; ' if error else ''}{died}"
            if error:
                state.fail(run, data, error, mark=False)  # _one_run marked it
            else:
                state.done.append(run.label)
                state.bar.update(1)
            measured.append(run)
            held.refresh()
            current = None
    except KeyboardInterrupt as exc:
        if current is not None:
            rundir.mark_incomplete(current.run_dir(data), current.manifest_keys(),
                                   f"{interrupt_text(type(exc))} during this run; measure it again with the same command")
        raise


def _measure(campaign: Campaign, run: RunSpec, data: Path, served: ServedArm, how: _How,
             contended: list[str]) -> str | None:
    """One run measured, a PyTorch profiler toggled around it; the error or None."""
    try:
        before = served.begin_run(run)
    except PerflibError as exc:
        return f"profiler start failed: {exc}"
    error = _one_run(run, level_spec(campaign, run, data, served, how), how, contended)
    try:
        trace_error = served.end_run(run, before) if served.alive() else None
    except PerflibError as exc:
        trace_error = f"profiler stop failed: {exc}"
    if trace_error and not error:
        _note_trace(run, data, trace_error)
    return error


def _note_trace(run: RunSpec, data: Path, note: str) -> None:
    """A run whose trace was to be made and was not: `trace_note` and `trace_lost` in its manifest."""
    manifest = rundir.read_manifest(run.run_dir(data), missing_ok=True)
    if manifest is not None:
        manifest["trace_note"] = note
        manifest["trace_lost"] = note
        rundir.write_manifest(run.run_dir(data), manifest)


def _collect(campaign: Campaign, served: ServedArm, measured: list[RunSpec], data: Path, how: _How,
             state: _Progress, log: Any) -> None:
    """After the server stopped: cut each start's capture into its runs, then attribute each traced run
    once, into the per-run tables the page reads."""
    if served.profiler.kind == "none" or not measured:
        return
    keep = served.profiler.keep_repeats
    for segment in served.segments:
        if segment.capture is not None and segment.runs and segment.capture.spec.cut == "lifetime":
            log(f"{served.arm.name}/{served.backend.name}: cutting the {segment.capture.kind} capture into "
                f"{len(set(segment.runs))} run folders")
        collected = collect_segment(segment, data, keep_repeats=keep)
        state.failed.extend(collected.errors)
    for run in measured:
        if rundir.is_complete(run.run_dir(data)) and rundir.find_trace(run.run_dir(data)) is not None:
            error = _profile(campaign, run, data, how)
            if error:
                state.failed.append((run.label, error))


def level_spec(campaign: Campaign, run: RunSpec, data: Path, served: ServedArm, how: _How) -> LevelSpec:
    """Everything one run's level needs: the campaign's settings, the server, the CPU thresholds."""
    return LevelSpec(served.base_url, run.batch, run.context, campaign.decode_tokens, run.repeat,
                     out_dir=run.run_dir(data).parent, dialect=campaign.backend(run.backend).dialect,
                     timeout=campaign.request_timeout_s, idle_timeout=campaign.idle_timeout_s,
                     workers=campaign.workers, contention_threshold=how.contention_threshold,
                     wait_threshold=how.wait_threshold, psi_threshold=how.psi_threshold, campaign=campaign.name,
                     arm=run.arm, backend=run.backend, server=served.server_info())


def _one_run(run: RunSpec, level: LevelSpec, how: _How, contended: list[str]) -> str | None:
    """Measure one run (redoing contended attempts under the guard); returns the error or None."""
    run_dir = level.run_dir
    gpu, max_attempts = how.gpu, how.max_attempts
    for attempt in range(1, max_attempts + 1):
        if gpu is not None:
            gpu.wait_idle()
        guard_cm = gpu.watching() if gpu is not None else contextlib.nullcontext(set())
        with guard_cm as seen:
            error = _attempt(level, how)
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
        why = how.cpu.observe(run_dir)
        if why and how.cpu.should_redo(run.label, run_dir, attempt) and attempt < max_attempts:
            contended.append(f"{run.label} attempt {attempt}: {why}")
            rundir.move_aside(run_dir, "contended")
            how.cpu.wait(run.label)
            continue
        if why:  # kept: complete, and marked contended in its manifest; the page leaves it out of medians
            contended.append(f"{run.label} attempt {attempt} (kept, marked contended): {why}")
            how.cpu.keep(run.label)
        break
    return None


def _attempt(level: LevelSpec, how: _How) -> str | None:
    """One attempt at a run, its `collect.ipynb` left in its folder; the error or None.

    In this process: the level measured (`measure`), then the notebook written from its results. With
    papermill: the notebook executed beside the run folder while it runs (run_level moves an incomplete
    folder aside and starts it afresh), then moved into it."""
    run_dir = level.run_dir
    if how.kernel is not None:
        scratch = run_dir.parent / f".{run_dir.name}.collect.ipynb"
        error = execute_notebook(how.notebooks / "collect.ipynb", scratch, {"level": level.to_dict()}, how.kernel,
                                 cwd=run_dir.parent)
        run_dir.mkdir(parents=True, exist_ok=True)
        if scratch.exists():
            scratch.replace(run_dir / "collect.ipynb")
        return error
    summary: dict[str, Any] | None = None
    try:
        result, error = measure(level)
        summary = result.summary
    except Exception as exc:  # noqa: BLE001 - a run that crashed is that run's failure, as a cell that raised under
        error = f"{type(exc).__name__}: {exc}"  # papermill: the campaign goes on (Ctrl-C is no Exception)
    run_dir.mkdir(parents=True, exist_ok=True)
    records.write_collect(run_dir / "collect.ipynb", level, run_dir, summary, error)
    return error


def _needs_profile(run_dir: Path) -> bool:
    """True where `profile.ipynb` is missing from the run folder or records a failure."""
    return records.failed(run_dir / "profile.ipynb") is not False


def _profile(campaign: Campaign, run: RunSpec, data: Path, how: _How) -> str | None:
    """Attribute one run's trace into its per-run derived tables (`perflib.derive.run_tables`) and leave
    its `profile.ipynb` in its folder (with papermill: executed); returns the error or None."""
    run_dir = run.run_dir(data)
    if how.kernel is not None:
        return execute_notebook(how.notebooks / "profile.ipynb", run_dir / "profile.ipynb", {
            "campaign_file": str(campaign.path), "arm": run.arm, "backend": run.backend, "batch": run.batch,
            "context": run.context, "repeat": run.repeat, "data_dir": str(data)}, how.kernel, cwd=run_dir)
    tables = None
    try:
        tables = derive.run_tables(replace(campaign, data_dir=data), run)
        error = None
    except Exception as exc:  # noqa: BLE001 - a trace that cannot be attributed is that run's loss, as under papermill
        error = str(exc) if isinstance(exc, PerflibError) else f"{type(exc).__name__}: {exc}"
    records.write_profile(run_dir / "profile.ipynb", run, campaign.path, data, tables, error)
    return error
