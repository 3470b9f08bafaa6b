"""Profiling a server that perflib starts: the registry of profiler kinds, one `ProfilerKind` entry each,
the only place that knows how a kind runs, where its capture lands, how it is cut and what its loss lines
look like.

| kind | how | the capture | cut |
| --- | --- | --- | --- |
| `rocprofv3` | wrap: `rocprofv3 --kernel-trace --memory-copy-trace --hip-runtime-trace --marker-trace --stats -f csv -d DIR -o trace -- <server>`: the dispatches and copies, the HIP runtime API calls (what fills the host gaps) and the ROCTx ranges (the engine's steps) | DIR, its files found by rocprofv3's own suffixes | lifetime, cut per run |
| `cupti` | inject: `CUDA_INJECTION64_PATH=<library>`. perflib's own library (the default) writes the records to `PERFLIB_CUPTI_OUTPUT` and its counts to `PERFLIB_CUPTI_STATS`; the CUDA sample (`library: sample`) prints them on stdout | `DIR/cupti.txt` (the server's log kept apart) and, from perflib's library, `DIR/cupti-stats.json` | lifetime, cut per run |
| `nsys` | wrap: `nsys profile -o DIR/capture <server>`, then `nsys export --type sqlite` | `DIR/capture.sqlite` | lifetime, cut per run |
| `perf` | wrap: `perf record -e cpu-clock -F 999 -g -k CLOCK_MONOTONIC --no-buildid -o DIR/perf.data -- <server>` (`perflib.server.perf`), at least 30 s to stop, the stop signal to perf alone | `DIR/perf-script.txt`, `perf script` of DIR/perf.data | lifetime, cut per run |
| `torch` | endpoint: the server's own PyTorch profiler, its folder given by the preset's flag (vLLM >= 0.11 `--profiler-config`) and variable (older vLLM `VLLM_TORCH_PROFILER_DIR`, SGLang `SGLANG_TORCH_PROFILER_DIR`); `POST /start_profile` and `/stop_profile` around each run | the worker's Kineto file of each run | per run: moved into the run folder, cut to its window |
| `kineto` | files: Kineto traces made elsewhere, named by `profiler.output` | | |
| `none` | nothing | nothing | |

A wrapping profiler is stopped with the server (the stop signal goes to the whole process group) and
given the grace period to flush its files.

A new kind is one entry in `KINDS`: how it runs (`method`), the function that changes the server's
command and environment (`launch`, a callable or `module:function`, so that a kind's own module, such
as `perflib.server.perf`, may import this one), the function that finds its lifetime capture once the
server has stopped (`capture`), how it is cut (`cut`), its loss lines (`losses`) and the trace sources it
makes (`sources`). `tests/server/test_profiler_kinds.py` runs every entry.

`cupti-stats.json` (`read_cupti_stats`) says what perflib's CUPTI library wrote and lost: `records`,
`dropped_records` (CUPTI's count of records it had no buffer for, plus records without GPU timestamps),
`buffers`, `flushes`, `errors` (every CUPTI error, with how often), and `complete` (true once the final
flush at the server's exit is written). It is rewritten every second while the server runs.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from perflib.errors import InputError, PerflibError
from perflib.server import perf  # the perf kind's least grace period; perf imports nothing of this module

CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
CUPTI_RECORDS, CUPTI_STATS = "cupti.txt", "cupti-stats.json"
"""The CUPTI capture's records and, from perflib's library, its counts, in the capture folder."""
PERFLIB_CUPTI_MARK = b"PERFLIB_CUPTI_OUTPUT"
"""Bytes found in perflib's CUPTI library (the variable it reads), not in the CUDA sample."""
STATS_COUNTS = ("records", "dropped_records", "buffers", "flushes")


def is_perflib_cupti(library: Path) -> bool:
    """Whether an injection library is perflib's own (records to `PERFLIB_CUPTI_OUTPUT`) rather than the
    CUDA sample or another that prints them on stdout: known by the variable's name in its bytes."""
    with open(library, "rb") as handle:
        tail = b""
        while chunk := handle.read(1 << 20):
            if PERFLIB_CUPTI_MARK in tail + chunk:
                return True
            tail = chunk[-len(PERFLIB_CUPTI_MARK):]
    return False


def read_cupti_stats(path: Path) -> dict | None:
    """The counts perflib's CUPTI library wrote beside its capture (a file or the capture folder), or
    None where there are none (the CUDA sample writes none: its losses are "not reported"). A file that
    is not such counts is an error naming the file and the field."""
    path = Path(path)
    if path.is_dir():
        path = path / CUPTI_STATS
    if not path.is_file():
        return None
    try:
        stats = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(path, "byte 0", "the JSON counts of perflib's CUPTI library", str(exc)) from exc
    if not isinstance(stats, dict):
        raise InputError(path, "top level", "a JSON object", type(stats).__name__)
    for name in STATS_COUNTS:
        value = stats.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(path, name, "a count (a whole number, at least 0)", repr(value))
    if not isinstance(stats.get("errors"), list) or not isinstance(stats.get("complete"), bool):
        raise InputError(path, "errors/complete", "a list of error lines and true/false",
                         f"{stats.get('errors')!r}, {stats.get('complete')!r}")
    return stats


Method = Literal["wrap", "inject", "endpoint", "files", "none"]
"""How a kind captures: `wrap` runs the server under the profiler's command; `inject` loads a library into
it through its environment; `endpoint` toggles the server's own profiler over HTTP around each run;
`files` reads traces made elsewhere (`profiler.output`); `none` captures nothing."""
CutKind = Literal["lifetime", "per-run", "none"]
"""How its capture reaches the run folders: `lifetime`, one capture per server start, cut into each run's
window once the server has stopped (`perflib.campaign.captures`); `per-run`, one file per run, moved into
its folder and cut to its window when the run ends (`perflib.campaign.servers`); `none`."""


@dataclass(frozen=True)
class LossPattern:
    """A line that says records were lost: what it means, and a regex (a first group, where present,
    is a count of lost records)."""

    what: str
    regex: str


@dataclass(frozen=True)
class ProfilerKind:
    """One profiler kind: how it runs around a server, where its capture is, how it is cut, what it loses."""

    name: str
    method: Method
    what: str
    """What it is, in words (docs, help, errors)."""
    cut: CutKind = "none"
    launch: Callable[..., Launched] | str | None = None
    """`(capture, argv, env) -> (argv, env, stdout file or None)`, or its `module:function`: the server's
    command and environment under this profiler; None leaves them as they are."""
    capture: Callable[..., Path | None] | str | None = None
    """lifetime kinds: `(capture) -> Path`, or its `module:function`: the capture to cut once the server
    has stopped (a file or folder; an error where it was not written)."""
    losses: tuple[LossPattern, ...] = ()
    """The lines its profiler prints when it loses records (scanned in the server's log and stdout)."""
    sources: tuple[str, ...] = ()
    """Prefixes of the trace `source` its captures read as (`cupti-text`, `kineto`, `rocp`): a trace of a
    run whose campaign named no kind is scanned for this kind's loss lines."""
    endpoints: tuple[str, str] | None = None
    """endpoint kinds: the server's paths that start and stop its profiler."""
    trace_file: str | None = None
    """per-run kinds: a regex for the name of the file that is the run's trace (the worker's), where the
    profiler writes several; else the largest."""
    grace_s: float = 0.0
    """The least grace period the profiler needs at the server's stop to write its capture (perf writes
    perf.data's header once its child has exited); 0 where the campaign's is enough."""
    stop_leader: bool = False
    """The stop signal goes to the profiler alone, which passes it on to the server (perf record does, and
    llama-server aborts at a second SIGTERM: `perflib.server.process.Launch.stop_leader`)."""

    @property
    def live(self) -> bool:
        """Whether perflib runs it around a server it starts (`files` names traces made elsewhere)."""
        return self.method != "files"

    def capture_folder(self, segment: int) -> str:
        """The capture's folder under `<arm_dir>/capture/`: one per server start for a lifetime capture,
        one for the kind where files are moved out per run."""
        return str(segment) if self.cut == "lifetime" else self.name


def _load(ref: Callable[..., Any] | str) -> Callable[..., Any]:
    """A function, or the one a `module:function` reference names (its module imported now)."""
    if callable(ref):
        return ref
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


Launched = tuple[tuple[str, ...], dict[str, str], Path | None]
"""What a kind's `launch` gives: the profiled server's argv, its environment, and the file its stdout goes
to (None: the server's log)."""


@dataclass(frozen=True)
class Capture:
    """How one server is profiled: the kind, the folder for its output, and the profiler's own options."""

    kind: str
    directory: Path
    binary: str | None = None
    args: tuple[str, ...] = ()
    library: Path | None = None
    torch_env: str | None = None
    """endpoint kinds: the variable that points the server's profiler at `directory` (older servers)."""
    server_args: tuple[str, ...] = ()
    """endpoint kinds: the server's own arguments that point its profiler at `directory` (the preset's,
    rendered: vLLM's `--profiler-config`)."""

    @property
    def spec(self) -> ProfilerKind:
        return profiler_kind(self.kind)

    def wrap(self, argv: tuple[str, ...], env: Mapping[str, str]) -> Launched:
        """(argv, environment, stdout file or None) of the profiled server: the kind's `launch`."""
        env = dict(env)
        if self.spec.launch is None:
            return argv, env, None
        self.directory.mkdir(parents=True, exist_ok=True)
        return _load(self.spec.launch)(self, tuple(argv), env)

    @property
    def grace_s(self) -> float:
        """The kind's least grace period at the server's stop (`ProfilerKind.grace_s`)."""
        return self.spec.grace_s

    @property
    def stop_leader(self) -> bool:
        """Whether the stop signal goes to the profiler alone (`ProfilerKind.stop_leader`)."""
        return self.spec.stop_leader

    def cupti_stats(self) -> dict | None:
        """cupti: the counts perflib's library wrote beside the records (`read_cupti_stats`); None for
        the CUDA sample and the other kinds."""
        return read_cupti_stats(self.directory / CUPTI_STATS) if self.kind == "cupti" else None

    def lifetime_capture(self) -> Path | None:
        """The capture of the server's whole life, for `perflib.cut`: the kind's `capture` (None for a
        kind whose files are per run)."""
        return _load(self.spec.capture)(self) if self.spec.capture is not None else None


ROCPROFV3_TRACES = ("--kernel-trace", "--memory-copy-trace", "--hip-runtime-trace", "--marker-trace")
"""What rocprofv3 traces around a server (docs/reference/FORMATS.md §1.1): kernel dispatches and copies
(`*_kernel_trace.csv`, `*_memory_copy_trace.csv`: GPU busy, and a device-to-host copy's wait), the HIP
runtime API (`*_hip_api_trace.csv`: launches and synchronisations, what fills the host gaps; the HIP
compiler API that `--hip-trace` adds is registration only) and ROCTx (`*_marker_api_trace.csv`: the
ranges an engine marks its steps with). All of them are read from the output folder into one `Trace`."""


def _wrap_rocprofv3(c: Capture, argv: tuple[str, ...], env: dict[str, str]) -> Launched:
    return ((c.binary or "rocprofv3", *ROCPROFV3_TRACES, "--stats", "-f", "csv", "-d", str(c.directory), "-o",
             "trace", *c.args, "--", *argv), env, None)


def _wrap_nsys(c: Capture, argv: tuple[str, ...], env: dict[str, str]) -> Launched:
    return ((c.binary or "nsys", "profile", "--trace=cuda,nvtx", "-o", str(c.directory / "capture"),
             "--force-overwrite=true", *c.args, *argv), env, None)


def _inject_cupti(c: Capture, argv: tuple[str, ...], env: dict[str, str]) -> Launched:
    if c.library is None or not Path(c.library).is_file():
        raise PerflibError(f"profiler cupti: the injection library {c.library} does not exist; build it "
                           "with `perflib server cupti` (needs nvcc and the CUPTI headers and libcupti of "
                           "the CUDA toolkit), or give profiler.library")
    env["CUDA_INJECTION64_PATH"] = str(c.library)
    # libcupti lives in extras/CUPTI/lib64 or, in newer toolkits (the H200's), in lib64
    found = [str(p) for p in (CUDA_HOME / "extras" / "CUPTI" / "lib64", CUDA_HOME / "lib64") if p.is_dir()]
    rest = env.get("LD_LIBRARY_PATH") or os.environ.get("LD_LIBRARY_PATH")
    if found:
        env["LD_LIBRARY_PATH"] = os.pathsep.join([*found, *([rest] if rest else [])])
    if is_perflib_cupti(Path(c.library)):  # records to their own file: stdout stays the server's
        env["PERFLIB_CUPTI_OUTPUT"] = str(c.directory / CUPTI_RECORDS)
        env["PERFLIB_CUPTI_STATS"] = str(c.directory / CUPTI_STATS)
        return argv, env, None
    return argv, env, c.directory / CUPTI_RECORDS


def _endpoint_torch(c: Capture, argv: tuple[str, ...], env: dict[str, str]) -> Launched:
    """The server's own PyTorch profiler: its folder through the preset's arguments (vLLM >= 0.11) and
    its variable (older vLLM, SGLang; a newer server ignores it)."""
    if not c.torch_env and not c.server_args:
        raise PerflibError("profiler torch: this server has no PyTorch profiler folder variable; use a "
                           "vllm or sglang preset, or give profiler.env_var")
    if c.torch_env:
        env[c.torch_env] = str(c.directory)
    return (*argv, *c.server_args), env, None


def _capture_folder(c: Capture) -> Path:
    return c.directory


def _capture_cupti(c: Capture) -> Path:
    return c.directory / CUPTI_RECORDS


def _capture_nsys(c: Capture) -> Path:
    return export_nsys(c.directory / "capture.nsys-rep", c.binary or "nsys")


CUPTI_LOSSES = (
    LossPattern("CUPTI error", r"\bCUPTI_ERROR_[A-Z_]+\b"),
    LossPattern("CUPTI dropped records", r"[Dd]ropped (\d+) activity records"),
)
KINDS: dict[str, ProfilerKind] = {k.name: k for k in (
    ProfilerKind("none", "none", "no profiler"),
    ProfilerKind("rocprofv3", "wrap", "ROCm's rocprofv3 kernel, copy, HIP runtime and ROCTx traces (CSV) around the "
                 "server", "lifetime",
                 _wrap_rocprofv3, _capture_folder, (
                     LossPattern("rocprofv3 lost records", r"(?i)\blost (\d+) records?\b"),
                     LossPattern("rocprofv3 lost or dropped records",
                                 r"(?i)\brecords? (?:were |was )?(?:lost|dropped)\b"),
                     LossPattern("rocprofv3 buffer full", r"(?i)\bbuffer (?:is |was )?full\b"),
                     LossPattern("rocprofiler error", r"\bROCPROFILER_STATUS_ERROR[A-Z_]*\b")),
                 sources=("rocp",)),
    ProfilerKind("cupti", "inject", "CUPTI activity records from an injected library (CUDA_INJECTION64_PATH)",
                 "lifetime", _inject_cupti, _capture_cupti, CUPTI_LOSSES, sources=("cupti-text",)),
    ProfilerKind("nsys", "wrap", "Nsight Systems around the server, exported to SQLite", "lifetime", _wrap_nsys,
                 _capture_nsys, (
                     *CUPTI_LOSSES,
                     LossPattern("nsys lost events",
                                 r"(?i)\b(\d+) (?:events|records) (?:were |have been )?(?:lost|dropped)\b"),
                     LossPattern("nsys lost events", r"(?i)\b(?:events|records) (?:were |have been )?(?:lost|dropped)\b")),
                 sources=("nsys",)),
    ProfilerKind("perf", "wrap", "Linux perf's cpu-clock samples of a native CPU server (llama-server on the CPU)",
                 "lifetime", "perflib.server.perf:launch", "perflib.server.perf:capture", (
                     LossPattern("perf lost chunks", r"(?i)\blost (\d+) chunks\b"),
                     LossPattern("perf lost samples", r"(?i)\blost (\d+) (?:samples|events)\b"),
                     LossPattern("perf lost samples", r"(?i)\b(\d+) (?:samples|events) (?:were )?lost\b")),
                 sources=("perf-script",), grace_s=perf.GRACE_S, stop_leader=True),
    ProfilerKind("torch", "endpoint", "the server's own PyTorch profiler (vLLM, SGLang), toggled around each run",
                 "per-run", _endpoint_torch, None, (
                     *CUPTI_LOSSES,
                     LossPattern("PyTorch profiler dropped events", r"(?i)\bdropped (\d+) (?:events|records)\b")),
                 sources=("kineto",), endpoints=("/start_profile", "/stop_profile"),
                 trace_file=r"^rank0\.|TP-?0\b"),
    ProfilerKind("kineto", "files", "Kineto traces made elsewhere, named by profiler.output", sources=()),
)}
"""Every profiler kind a campaign may name (`profiler.kind`)."""

LIVE_KINDS = tuple(name for name, kind in KINDS.items() if kind.live)
"""Profilers perflib runs around a server it starts (`kineto` names committed Kineto files instead)."""


def profiler_kind(name: str) -> ProfilerKind:
    """The registry's entry of a kind; an unknown one is an error listing the kinds."""
    if name not in KINDS:
        raise PerflibError(f"profiler kind {name!r}: expected one of {', '.join(KINDS)}")
    return KINDS[name]


def kind_of_source(source: str | None) -> str:
    """The kind whose captures read as trace `source` ('' where none): whose loss lines to look for in a
    run whose campaign named no live kind (a server injected by hand)."""
    text = str(source or "")
    return next((k.name for k in KINDS.values() if text and text.startswith(k.sources)), "") if text else ""


def export_nsys(report: Path, nsys: str = "nsys") -> Path:
    """`nsys export --type sqlite` of a report, beside it; an error names what is missing."""
    if not report.is_file():
        raise PerflibError(f"{report}: nsys wrote no report (did the server run and stop with a grace period?)")
    out = report.with_suffix(".sqlite")
    if shutil.which(nsys) is None:
        raise PerflibError(f"cannot export {report}: {nsys} is not on PATH")
    done = subprocess.run([nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(out),
                           str(report)], capture_output=True, text=True, check=False)
    if done.returncode != 0 or not out.is_file():
        raise PerflibError(f"nsys export of {report} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return out


def toggle_profile(base_url: str, kind: str, which: Literal["start", "stop"], timeout: float = 600.0) -> None:
    """`POST` an endpoint kind's start or stop path (vLLM, SGLang: `/start_profile`, `/stop_profile`); a
    failure names the URL and the answer.

    Stopping flushes the trace files, which takes long on a large model: hence the long timeout.
    """
    # late: httpx and perflib.load, 84 ms (measured); perflib.config imports this module for LIVE_KINDS
    import httpx

    from perflib.load import tls

    paths = profiler_kind(kind).endpoints
    if paths is None:
        raise PerflibError(f"profiler {kind}: not toggled over HTTP (method {profiler_kind(kind).method})")
    url = base_url.rstrip("/") + paths[0 if which == "start" else 1]
    try:
        resp = httpx.post(url, timeout=timeout, trust_env=False, verify=tls.context())
    except httpx.HTTPError as exc:
        raise PerflibError(f"{url}: {type(exc).__name__}: {exc}") from exc
    if resp.status_code != 200:
        raise PerflibError(f"{url} answered HTTP {resp.status_code}: {resp.text[:200]!r} (was the server "
                           "started with its profiler folder set?)")


def new_files(directory: Path, before: set[Path]) -> list[Path]:
    """Files under `directory` that were not in `before` (what one `stop_profile` wrote), oldest first."""
    now = {p for p in directory.rglob("*") if p.is_file()}
    return sorted(now - before, key=lambda p: p.stat().st_mtime)


def files_under(directory: Path) -> set[Path]:
    return {p for p in directory.rglob("*") if p.is_file()} if directory.is_dir() else set()


TRACE_NAME = re.compile(r"\.json(\.gz)?$")
"""A Kineto trace file's name (the profilers' tables, `*.txt`, are not traces)."""


def pick_trace(kind: str, files: list[Path]) -> Path | None:
    """The run's trace among the files one stop wrote: the one the kind's `trace_file` names (vLLM's
    worker, `rank0.*.pt.trace.json.gz`; SGLang's `TP-0`), else the largest trace file; None where no
    file is a trace."""
    traces = [p for p in files if TRACE_NAME.search(p.name)]
    pattern = profiler_kind(kind).trace_file
    named = [p for p in traces if pattern and re.search(pattern, p.name)]
    pool = named or traces
    return max(pool, key=lambda p: p.stat().st_size) if pool else None


def await_files(kind: str, directory: Path, before: set[Path], timeout_s: float, settle_s: float = 2.0,
                poll_s: float = 0.5) -> tuple[list[Path], float]:
    """The files one stop wrote under `directory`, once the run's trace is there (`pick_trace`) and no
    file has changed size for `settle_s` (a profiler writes a gzip in place, seconds after the stop); what
    is there at `timeout_s` otherwise. Returns them (oldest first) and the seconds waited."""
    started = time.monotonic()
    sizes: dict[Path, int] = {}
    stable_since = started
    while True:
        found = new_files(directory, before)
        now = {p: p.stat().st_size for p in found if p.exists()}
        if now != sizes:
            sizes, stable_since = now, time.monotonic()
        elif found and pick_trace(kind, found) is not None and time.monotonic() - stable_since >= settle_s:
            return found, time.monotonic() - started
        if time.monotonic() - started >= timeout_s:
            return found, time.monotonic() - started
        time.sleep(poll_s)
