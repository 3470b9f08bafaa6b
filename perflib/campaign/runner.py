"""Running a campaign: every incomplete run measured, one server per (arm, backend), then the page.

A `CampaignRun` is one `perflib campaign run`: it holds the campaign, its data folders, its options
(`perflib.campaign.options.RunOptions`), its state (what was done and failed, the progress bar, the CPU
contention and GPU guards, the Ctrl-C handler) and its log, and its steps are its methods:

- `run`: stop the servers an earlier runner left (`servers.stop_orphans`), prepare each (arm, backend)
  group's binary and model before the progress bar (`prepare`), finish the complete runs that lack a cut
  or a profile (`finish_complete`), `serve` each group, then `publish` the page.
- `serve`: claim the group's folder (`perflib.campaign.claims`: one runner per arm and backend, whichever
  host), start its server under its profiler (`perflib.campaign.servers`), measure its runs level by
  level, stop it, then `collect`: cut the server's capture into the runs (`perflib.campaign.captures`) and
  `profile` each traced run once (`perflib.campaign.measure.attribute`, the per-run tables the page reads).
- `measure_run`: one run in this process (`perflib.campaign.measure.measure_level` of its `perflib.load.LevelSpec`),
  the repeats of a level sharing its prompts, warm-up and scrapes (`perflib.load.Repeats`), each run's
  `collect.ipynb` written from its results after the level's last request (`perflib.campaign.records`);
  redone where the GPU guard or the CPU contention says so; a server that died started again.

With `papermill` each run is measured, and each trace attributed, by executing those notebooks in one
kernel per (arm, backend) instead; the run folders get the same files. Complete runs are skipped and
failed ones carried past. Ctrl-C (and SIGTERM) stops the server, marks the run in progress incomplete and
keeps the rest. With `cluster`, each group runs on a Dask worker instead (`perflib.campaign.cluster`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflib import load, rundir
from perflib.campaign import claims, kernels, notebooks, records
from perflib.campaign.captures import collect_segment, recut_pending
from perflib.campaign.contention import CpuContention
from perflib.campaign.guard import GpuGuard
from perflib.campaign.interrupts import CtrlC
from perflib.campaign.measure import ProfileSpec, attribute, measure_level
from perflib.campaign.options import RunOptions
from perflib.campaign.servers import Prepared, ServedArm, prepare, stop_orphans
from perflib.config import ArmSpec, BackendSpec, Campaign, RunSpec
from perflib.errors import PerflibError, interrupt_text
from perflib.load import LevelSpec
from perflib.server import profilers

if TYPE_CHECKING:
    from tqdm import tqdm

    from perflib.publish import Published, RunEnd


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
class Progress:
    """What a campaign run has done so far, and its progress bar."""

    bar: tqdm
    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    contended: list[str] = field(default_factory=list)
    claimed: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Group:
    """One (arm, backend): its runs left to measure, and what its server needs (None: a server perflib does
    not start; a text: why it could not be prepared)."""

    arm: ArmSpec
    backend: BackendSpec
    runs: list[RunSpec]
    prepared: Prepared | str | None = None

    @property
    def name(self) -> str:
        return f"{self.arm.name}/{self.backend.name}"


@dataclass(frozen=True)
class Written:
    """A run's `collect.ipynb` to write from its results, once its level's last request has finished."""

    level: LevelSpec
    summary: Mapping[str, Any] | None
    error: str | None


def run_campaign(campaign: Campaign, data_dir: Path | None = None, reports_dir: Path | None = None,
                 **options: object) -> CampaignResult:
    """`CampaignRun(campaign, RunOptions(**options), data_dir, reports_dir).run()`: every incomplete run
    measured, then the tables derived and the page written (the keywords are `RunOptions`' fields)."""
    return CampaignRun(campaign, RunOptions(**options), data_dir, reports_dir).run()  # type: ignore[arg-type]


class CampaignRun:
    """One run of a campaign: its campaign, data folders, options, state and log (see the module's docstring)."""

    def __init__(self, campaign: Campaign, options: RunOptions | None = None, data_dir: Path | None = None,
                 reports_dir: Path | None = None):
        self.campaign = campaign
        self.options = options or RunOptions()
        self.data = Path(data_dir or campaign.data_dir)
        self.reports = Path(reports_dir) if reports_dir else None
        self.kernel: str | None = None
        """The Jupyter kernel the notebooks run in (`papermill`); None: measured in this process."""
        self.state: Progress  # made by `run`, with its progress bar
        self.ctrl_c = CtrlC()
        self.gpu: GpuGuard | None = None
        """The GPU guard (`guard`), made by `run` once the servers' builds are done."""
        self.cpu = CpuContention(budget_s=self.options.contention_wait_s, log=self.note)
        self.pending: list[Written] = []
        """Runs measured whose `collect.ipynb` is not written yet (`write_records`)."""
        self.measured: list[RunSpec] = []
        """The runs of the group being served that were measured (or tried)."""
        self.current: RunSpec | None = None
        """The run being measured: a Ctrl-C leaves it incomplete."""

    # ------------------------------------------------------------------------------------------ the log

    def say(self, message: str) -> None:
        """A line on stderr whatever the progress setting: what the user must know (a group skipped, an
        orphaned server stopped)."""
        from tqdm import tqdm  # late: 8 ms (measured) that validate, report and open_campaign skip

        tqdm.write(f"perflib: {message}", file=sys.stderr)

    def note(self, message: str) -> None:
        """A line on stderr with the progress bar (a server started, a run redone)."""
        if self.options.progress:
            self.say(message)

    # ------------------------------------------------------------------------------------------ the campaign

    def run(self) -> CampaignResult:
        """Measure every incomplete run of the campaign, then derive the tables and write the page."""
        if self.options.papermill:
            notebooks.without_iri_grammars()
            notebooks.check_extras()
        if self.options.cluster is not None:  # issue 29: each (arm, backend) on a Dask worker
            return self.on_cluster()
        from tqdm import tqdm  # late: see `say`

        orphans = stop_orphans(self.campaign, self.data, log=self.say)  # servers a runner killed with -9 left
        runs = [r for r in self.campaign.expand(self.options.only)
                if not self.campaign.backend(r.backend).trace_only]  # nothing to serve
        todo = [r for r in runs if not rundir.is_complete(r.run_dir(self.data))]
        self.kernel = (self.options.kernel_name or notebooks.find_kernel()) if self.options.papermill else None
        groups = self.prepare(todo)  # builds take minutes: before the bar
        self.state = Progress(tqdm(total=len(todo), desc=f"campaign {self.campaign.name}", unit="run",
                                   file=sys.stderr, disable=not self.options.progress),
                              skipped=[r.label for r in runs if r not in todo])
        self.cpu.bar = self.state.bar
        self.gpu = GpuGuard(idle_s=self.options.guard_idle_s, log=self.note) if self.options.guard else None
        self.finish_complete([r for r in runs if r not in todo])
        try:
            with self.ctrl_c:  # a Ctrl-C is acted on between runs even where it was swallowed below (`interrupts`)
                if self.ctrl_c.ignored:
                    print("perflib: SIGINT is ignored in this process (started in the background?): Ctrl-C will "
                          "not stop the campaign; SIGTERM (kill PID) will", file=sys.stderr)
                for group in groups:
                    self.serve(group)
        finally:
            self.state.bar.close()
        return self.result(self.publish(self.state.failed), orphans)

    def prepare(self, todo: list[RunSpec]) -> list[Group]:
        """The runs left, by (arm, backend), each group's binary, model and profiler library built or found
        before any server starts; a failure is kept as the text that its runs' manifests will carry."""
        by_key: dict[tuple[str, str], list[RunSpec]] = {}
        for run in todo:
            by_key.setdefault((run.arm, run.backend), []).append(run)
        groups = []
        for (arm_name, backend_name), runs in by_key.items():
            group = Group(self.campaign.arm(arm_name), self.campaign.backend(backend_name), runs)
            if not (group.arm.url or group.backend.url or group.backend.server_spec is None):
                try:
                    group.prepared = prepare(self.campaign, group.arm, group.backend, progress=self.options.progress)
                except PerflibError as exc:
                    group.prepared = str(exc)
            groups.append(group)
        return groups

    def finish_complete(self, complete: list[RunSpec]) -> None:
        """What complete runs still lack, with no server: the cut of a capture that a stopped runner left
        half-done (`perflib.campaign.captures.recut_pending`), then the profile of a trace never attributed."""
        if any(profilers.profiler_kind(self.campaign.profiler(r.arm, r.backend).kind).cut == "lifetime"
               for r in complete):
            self.state.failed.extend(recut_pending(self.campaign, self.data, log=self.say))
        for run in complete:
            if self.campaign.profiler(run.arm, run.backend).kind != "none" and needs_profile(run.run_dir(self.data)):
                self.profile(run)

    def publish(self, failures: list[tuple[str, str]]) -> RunEnd:
        """The one publish step (`perflib.publish.end_run`): the derived tables, page inputs, verdicts and
        page, decided once from the run folders (nothing with `--no-report`), and `failures` split as the
        page splits them."""
        from perflib.publish import end_run  # late: the verdicts and the page, loaded when a campaign ends

        return end_run(self.campaign, self.data, self.reports, failures, self.options.write_page)

    def result(self, end: RunEnd, orphans: list[str]) -> CampaignResult:
        """What this run did, its failures split as the page splits them."""
        state, cpu = self.state, self.cpu
        return CampaignResult(tuple(state.done), tuple(state.skipped), end.failed, tuple(state.contended), end.page,
                              tuple(state.claimed), end.partial, end.on_disk, end.steps_guessed, tuple(orphans),
                              tuple(cpu.kept), cpu.waited_s, cpu.summary(), end.published)

    def on_cluster(self) -> CampaignResult:
        """The groups measured on the Dask workers at `options.cluster`, their run folders gathered into the
        data folder, then the page written from them as after a run here."""
        from perflib.campaign import cluster  # late: Dask, the optional perflib[cluster]

        got = cluster.run_on_cluster(self.campaign, self.data, self.options)
        end = self.publish(list(got.failed))
        return CampaignResult(tuple(got.done), tuple(got.skipped), end.failed, tuple(got.contended), end.page,
                              tuple(got.claimed), end.partial, end.on_disk, end.steps_guessed, (),
                              tuple(got.kept_contended), published=end.published)

    def fail(self, run: RunSpec, error: str, mark: bool = True) -> None:
        """Count a run as failed, marking it incomplete with `error` (what it measured stays)."""
        if mark:
            rundir.mark_incomplete(run.run_dir(self.data), run.manifest_keys(), error)
        self.state.failed.append((run.label, error.splitlines()[0]))
        self.state.bar.update(1)

    # ------------------------------------------------------------------------------------------ a group

    def serve(self, group: Group) -> None:
        """Long: claim the group, start its server, measure its runs (starting it again where it died), stop
        it (also on Ctrl-C), then cut its capture into the runs and profile them."""
        if isinstance(group.prepared, str):  # the build or the model failed: every run of the group says why
            for run in group.runs:
                self.fail(run, f"server for {group.name} could not be prepared: {group.prepared}")
            return
        with claims.claim(rundir.backend_dir(self.data, self.campaign.name, group.arm.name,
                                             group.backend.name)) as held:
            if isinstance(held, str):
                self.say(f"{group.name}: skipped, {len(group.runs)} runs: claimed by another runner ({held})")
                self.state.claimed.append((group.name, held))
                self.state.bar.update(len(group.runs))
                return
            fresh = [r for r in group.runs if not rundir.is_complete(r.run_dir(self.data))]  # another runner's
            self.state.skipped += [r.label for r in group.runs if r not in fresh]
            self.state.bar.update(len(group.runs) - len(fresh))
            if fresh:
                self.serve_group(group, fresh, held)

    def serve_group(self, group: Group, runs: list[RunSpec], held: claims.Claim) -> None:
        """Long: start the group's server, measure its runs, stop it, cut its capture and profile its runs."""
        served = ServedArm(self.campaign, group.arm, group.backend, self.data,
                           group.prepared if isinstance(group.prepared, Prepared) else None, log=self.note)
        self.measured = []
        started = False
        try:
            # --papermill: one kernel for the group's collect notebooks
            with kernels.kernel_session(self.kernel) if self.kernel else contextlib.nullcontext():
                if self.kernel:
                    notebooks.import_papermill()  # half a second, before the server is started
                try:
                    served.start()
                except PerflibError as exc:
                    for run in runs:
                        self.fail(run, f"server for {group.name} did not start: {exc}")
                    return
                started = True
                self.measure_group(served, runs, held)
        finally:  # the kernel is gone by now; the server stops, then its capture is cut and profiled
            if started:
                served.__exit__(*sys.exc_info())
                self.collect(served)

    def measure_group(self, served: ServedArm, runs: list[RunSpec], held: claims.Claim) -> None:
        """Measure the started server's runs one after the other, level by level: the repeats of a level
        share what is per level (`perflib.load.Repeats`), each run's notebook is written after the level's
        last request. A Ctrl-C marks the run in progress incomplete."""
        repeats: load.Repeats | None = None
        try:
            for i, run in enumerate(runs):
                starts = len(served.segments)
                if not self.server_up(served, runs[i:]):
                    return
                if repeats is not None and len(served.segments) != starts:  # started again: warm up, scrape afresh
                    repeats.interrupted()
                if i == 0 or (run.batch, run.context) != (runs[i - 1].batch, runs[i - 1].context):
                    self.write_records()  # the level before's notebooks, after its last request
                    repeats = self.repeats(served, runs[i:])
                self.current = run
                self.measure_run(served, run, repeats)
                self.current = None
                self.measured.append(run)
                held.refresh()
        except KeyboardInterrupt as exc:
            if self.current is not None:
                rundir.mark_incomplete(self.current.run_dir(self.data), self.current.manifest_keys(),
                                       f"{interrupt_text(type(exc))} during this run; measure it again with the "
                                       "same command")
            raise
        finally:
            self.write_records()

    def repeats(self, served: ServedArm, rest: list[RunSpec]) -> load.Repeats | None:
        """What the repeats of the level that starts `rest` share; None (each run on its own) where the runs go
        through a notebook or a profiler is toggled over HTTP around each run (the toggles reach the server).
        The server's record lists the level's runs before the first is measured (`ServedArm.begin_level`)."""
        first = rest[0]
        level = [r for r in rest if (r.batch, r.context) == (first.batch, first.context)]
        served.begin_level(level)
        if self.kernel is not None or served.toggles_profiler:
            return None
        return load.Repeats(tuple(r.repeat for r in level))

    def server_up(self, served: ServedArm, rest: list[RunSpec]) -> bool:
        """The server running for the next run (started again where it died); False, each run left failed,
        where it could not be."""
        try:
            served.ensure_running()
        except PerflibError as exc:
            for run in rest:
                self.fail(run, f"server for {served.arm.name}/{served.backend.name} could not be started again: {exc}")
            return False
        if self.gpu is not None and served.current and served.current.handle:
            self.gpu.own_roots.add(served.current.handle.process.pid)
        return True

    def collect(self, served: ServedArm) -> None:
        """After the server stopped: cut each start's capture into its runs, then attribute each traced run
        once, into the per-run tables the page reads."""
        if served.profiler.kind == "none" or not self.measured:
            return
        for segment in served.segments:
            if segment.capture is not None and segment.runs and segment.capture.spec.cut == "lifetime":
                self.note(f"{served.arm.name}/{served.backend.name}: cutting the {segment.capture.kind} capture "
                          f"into {len(set(segment.runs))} run folders")
            self.state.failed.extend(collect_segment(segment, self.data, keep_repeats=served.profiler.keep_repeats)
                                     .errors)
        for run in self.measured:
            if rundir.is_complete(run.run_dir(self.data)) and rundir.find_trace(run.run_dir(self.data)) is not None:
                self.profile(run)

    # ------------------------------------------------------------------------------------------ a run

    def measure_run(self, served: ServedArm, run: RunSpec, repeats: load.Repeats | None) -> None:
        """One run measured on the started server, a profiler toggled around it; counted done or failed."""
        self.cpu.show(run.label)
        self.ctrl_c.check()
        try:
            before = served.begin_run(run)
        except PerflibError as exc:
            error: str | None = f"profiler start failed: {exc}"
        else:
            error = self.attempts(run, self.level(served, run), repeats)
            try:
                trace_error = served.end_run(run, before) if served.alive() else None
            except PerflibError as exc:
                trace_error = f"profiler stop failed: {exc}"
            if trace_error and not error:
                _note_trace(run.run_dir(self.data), trace_error)
        self.ctrl_c.check()  # a Ctrl-C during the run that was swallowed below: the run is kept incomplete
        died = served.died()
        if died and (error or not rundir.is_complete(run.run_dir(self.data))):
            rundir.mark_incomplete(run.run_dir(self.data), run.manifest_keys(), f"during this run the {died}")
            error = f"{error + '; ' if error else ''}{died}"
        if error:
            self.fail(run, error, mark=False)  # `attempts` marked it
        else:
            self.state.done.append(run.label)
            self.state.bar.update(1)

    def level(self, served: ServedArm, run: RunSpec) -> LevelSpec:
        """Everything one run's level needs: the campaign's settings, the server, the CPU thresholds."""
        campaign, options = self.campaign, self.options
        return LevelSpec(served.base_url, run.batch, run.context, campaign.decode_tokens, run.repeat,
                         out_dir=run.run_dir(self.data).parent, dialect=campaign.backend(run.backend).dialect,
                         timeout=campaign.request_timeout_s, idle_timeout=campaign.idle_timeout_s,
                         workers=campaign.workers, contention_threshold=options.contention_threshold,
                         wait_threshold=options.wait_threshold, psi_threshold=options.psi_threshold,
                         campaign=campaign.name, arm=run.arm, backend=run.backend, server=served.server_info())

    def attempts(self, run: RunSpec, level: LevelSpec, repeats: load.Repeats | None) -> str | None:
        """Measure one run, redoing attempts the GPU guard or the CPU contention found contended; the error
        or None."""
        run_dir, gpu, most = level.run_dir, self.gpu, self.options.max_attempts
        for attempt in range(1, most + 1):
            if gpu is not None:
                gpu.wait_idle()
            with gpu.watching() if gpu is not None else contextlib.nullcontext(set()) as seen:
                error = self.attempt(level, repeats)
            if seen:
                self.state.contended.append(f"{run.label} attempt {attempt}: GPU pids {sorted(seen)}")
                if attempt < most:
                    self.write_records()  # the attempt's notebook goes aside with it
                    rundir.move_aside(run_dir, "contended")
                    continue
                rundir.mark_incomplete(run_dir, run.manifest_keys(),
                                       f"GPU guard: all {most} attempts saw other GPU processes")
                return f"contended on all {most} attempts"
            if error:
                rundir.mark_incomplete(run_dir, run.manifest_keys(), error)
                return error
            why = self.cpu.observe(run_dir)
            if why and self.cpu.should_redo(run.label, run_dir, attempt) and attempt < most:
                self.state.contended.append(f"{run.label} attempt {attempt}: {why}")
                self.write_records()
                rundir.move_aside(run_dir, "contended")
                self.cpu.wait(run.label)
                continue
            if why:  # kept: complete, and marked contended in its manifest; the page leaves it out of medians
                self.state.contended.append(f"{run.label} attempt {attempt} (kept, marked contended): {why}")
                self.cpu.keep(run.label)
            break
        return None

    def attempt(self, level: LevelSpec, repeats: load.Repeats | None) -> str | None:
        """One attempt at a run, its `collect.ipynb` to be left in its folder; the error or None.

        In this process: the level measured (`perflib.campaign.measure.measure_level`), its notebook written from
        the results once the level's last request has finished (`write_records`). With papermill: the
        notebook executed beside the run folder while it runs (run_level moves an incomplete folder aside
        and starts it afresh), then moved into it."""
        run_dir = level.run_dir
        if self.kernel is not None:
            scratch = run_dir.parent / f".{run_dir.name}.collect.ipynb"
            error = notebooks.execute_notebook(self.options.notebooks / "collect.ipynb", scratch,
                                               {"level": level.to_dict()}, self.kernel, cwd=run_dir.parent)
            run_dir.mkdir(parents=True, exist_ok=True)
            if scratch.exists():
                scratch.replace(run_dir / "collect.ipynb")
            return error
        summary = None
        try:
            result, error = measure_level(level, repeats)
            summary = result.summary
        except Exception as exc:  # noqa: BLE001 - a run that crashed is that run's failure, as a cell that raised
            error = f"{type(exc).__name__}: {exc}"  # under papermill: the campaign goes on (Ctrl-C is no Exception)
            if repeats is not None:
                repeats.interrupted()
        self.pending.append(Written(level, summary, error))
        return error

    def write_records(self) -> None:
        """The `collect.ipynb` of each run measured since the last call, written from its results."""
        pending, self.pending = self.pending, []
        for written in pending:
            run_dir = written.level.run_dir
            run_dir.mkdir(parents=True, exist_ok=True)
            records.write_collect(run_dir / "collect.ipynb", written.level, run_dir, written.summary, written.error)

    def profile(self, run: RunSpec) -> None:
        """Attribute one run's trace into its per-run derived tables and leave its `profile.ipynb` in its
        folder (with papermill: executed); a failure is counted against the run (its counters stand)."""
        run_dir = run.run_dir(self.data)
        spec = ProfileSpec.of(self.campaign, run, self.data)
        if self.kernel is not None:
            error = notebooks.execute_notebook(self.options.notebooks / "profile.ipynb", run_dir / "profile.ipynb",
                                               {"run": spec.to_dict()}, self.kernel, cwd=run_dir)
        else:
            tables, error = attribute(self.campaign, run, self.data)
            records.write_profile(run_dir / "profile.ipynb", spec, tables, error)
        if error:
            self.state.failed.append((run.label, error))


def needs_profile(run_dir: Path) -> bool:
    """True where `profile.ipynb` is missing from the run folder or records a failure."""
    return records.failed(run_dir / "profile.ipynb") is not False


def _note_trace(run_dir: Path, note: str) -> None:
    """A run whose trace was to be made and was not: `trace_note` and `trace_lost` in its manifest."""
    manifest = rundir.read_manifest(run_dir, missing_ok=True)
    if manifest is not None:
        manifest["trace_note"] = note
        manifest["trace_lost"] = note
        rundir.write_manifest(run_dir, manifest)
