"""Profiling a server that perflib starts: how each profiler wraps or injects it, and where its capture is.

| kind | how the capture is made | the capture, once the server has stopped |
| --- | --- | --- |
| `rocprofv3` | wraps the server: `rocprofv3 --kernel-trace --memory-copy-trace --hip-runtime-trace --marker-trace --stats -f csv -d DIR -o trace -- <server>`: the dispatches and copies, the HIP runtime API calls (what fills the host gaps) and the ROCTx ranges (the engine's steps) | DIR, its files found by rocprofv3's own suffixes |
| `cupti` | injects `CUDA_INJECTION64_PATH=<library>`. perflib's own library (the default) writes the records to `PERFLIB_CUPTI_OUTPUT` and its counts to `PERFLIB_CUPTI_STATS`; the CUDA sample (`library: sample`) prints them on stdout | `DIR/cupti.txt` (the server's log kept apart) and, from perflib's library, `DIR/cupti-stats.json` |
| `nsys` | wraps the server: `nsys profile -o DIR/capture <server>`, then `nsys export --type sqlite` | `DIR/capture.sqlite` |
| `perf` | wraps the server: `perf record -e cpu-clock -F 999 -g -k CLOCK_MONOTONIC --no-buildid -o DIR/perf.data -- <server>` (`perflib.server.perf`), at least 30 s to stop | `DIR/perf-script.txt`, `perf script` of DIR/perf.data |
| `torch` | the server's own PyTorch profiler, its folder in the preset's variable (vLLM `VLLM_TORCH_PROFILER_DIR`, SGLang `SGLANG_TORCH_PROFILER_DIR`); `POST /start_profile` and `/stop_profile` around each level | one Kineto file per level |
| `none` | nothing | nothing |

A wrapping profiler is stopped with the server (the stop signal goes to the whole process group) and
given the grace period to flush its files.

`cupti-stats.json` (`read_cupti_stats`) says what perflib's CUPTI library wrote and lost: `records`,
`dropped_records` (CUPTI's count of records it had no buffer for, plus records without GPU timestamps),
`buffers`, `flushes`, `errors` (every CUPTI error, with how often), and `complete` (true once the final
flush at the server's exit is written). It is rewritten every second while the server runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from perflib.errors import InputError, PerflibError
from perflib.server import perf

LIVE_KINDS = ("none", "rocprofv3", "cupti", "nsys", "torch", perf.KIND)
"""Profilers perflib runs around a server it starts (`kineto` names committed Kineto files instead)."""
LIFETIME_KINDS = ("rocprofv3", "cupti", "nsys", perf.KIND)
"""Profilers whose one capture covers a server start's whole life, cut into its runs (`perflib.cut`)."""

ROCPROFV3_TRACES = ("--kernel-trace", "--memory-copy-trace", "--hip-runtime-trace", "--marker-trace")
"""What rocprofv3 traces around a server (docs/reference/FORMATS.md §1.1): kernel dispatches and copies
(`*_kernel_trace.csv`, `*_memory_copy_trace.csv`: GPU busy, and a device-to-host copy's wait), the HIP
runtime API (`*_hip_api_trace.csv`: launches and synchronisations, what fills the host gaps; the HIP
compiler API that `--hip-trace` adds is registration only) and ROCTx (`*_marker_api_trace.csv`: the
ranges an engine marks its steps with). All of them are read from the output folder into one `Trace`."""
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


@dataclass(frozen=True)
class Capture:
    """How one server is profiled: the kind, the folder for its output, and the profiler's own options."""

    kind: str
    directory: Path
    binary: str | None = None
    args: tuple[str, ...] = ()
    library: Path | None = None
    torch_env: str | None = None

    def wrap(self, argv: tuple[str, ...], env: Mapping[str, str]) -> tuple[tuple[str, ...], dict[str, str], Path | None]:
        """(argv, environment, stdout file or None) of the profiled server."""
        env = dict(env)
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.kind == "rocprofv3":
            prof = self.binary or "rocprofv3"
            return ((prof, *ROCPROFV3_TRACES, "--stats", "-f", "csv", "-d", str(self.directory), "-o", "trace",
                     *self.args, "--", *argv), env, None)
        if self.kind == "nsys":
            prof = self.binary or "nsys"
            return ((prof, "profile", "--trace=cuda,nvtx", "-o", str(self.directory / "capture"),
                     "--force-overwrite=true", *self.args, *argv), env, None)
        if self.kind == perf.KIND:
            return perf.wrap(self.directory, argv, self.binary, self.args), env, None
        if self.kind == "cupti":
            if self.library is None or not Path(self.library).is_file():
                raise PerflibError(f"profiler cupti: the injection library {self.library} does not exist; build it "
                                   "with `perflib server cupti` (needs nvcc and the CUPTI headers and libcupti of "
                                   "the CUDA toolkit), or give profiler.library")
            env["CUDA_INJECTION64_PATH"] = str(self.library)
            # libcupti lives in extras/CUPTI/lib64 or, in newer toolkits (the H200's), in lib64
            found = [str(p) for p in (CUDA_HOME / "extras" / "CUPTI" / "lib64", CUDA_HOME / "lib64") if p.is_dir()]
            rest = env.get("LD_LIBRARY_PATH") or os.environ.get("LD_LIBRARY_PATH")
            if found:
                env["LD_LIBRARY_PATH"] = os.pathsep.join([*found, *([rest] if rest else [])])
            if is_perflib_cupti(Path(self.library)):  # records to their own file: stdout stays the server's
                env["PERFLIB_CUPTI_OUTPUT"] = str(self.directory / CUPTI_RECORDS)
                env["PERFLIB_CUPTI_STATS"] = str(self.directory / CUPTI_STATS)
                return argv, env, None
            return argv, env, self.directory / CUPTI_RECORDS
        if self.kind == "torch":
            if not self.torch_env:
                raise PerflibError("profiler torch: this server has no PyTorch profiler folder variable; use a "
                                   "vllm or sglang preset, or give profiler.env_var")
            env[self.torch_env] = str(self.directory)
            return argv, env, None
        return argv, env, None

    @property
    def grace_s(self) -> float:
        """The least grace period the profiler needs at the server's stop to write its capture (perf:
        `perf.GRACE_S`); 0 where the campaign's is enough."""
        return perf.GRACE_S if self.kind == perf.KIND else 0.0

    @property
    def stop_leader(self) -> bool:
        """Whether the stop signal goes to the profiler alone, which passes it on to the server: perf
        record does, and llama-server aborts at a second SIGTERM (`Launch.stop_leader`)."""
        return self.kind == perf.KIND

    def cupti_stats(self) -> dict | None:
        """cupti: the counts perflib's library wrote beside the records (`read_cupti_stats`); None for
        the CUDA sample and the other kinds."""
        return read_cupti_stats(self.directory / CUPTI_STATS) if self.kind == "cupti" else None

    def lifetime_capture(self) -> Path | None:
        """The capture of the server's whole life, for `perflib.cut` (None for `torch`: one file per level)."""
        if self.kind == "rocprofv3":
            return self.directory
        if self.kind == "cupti":
            return self.directory / CUPTI_RECORDS
        if self.kind == "nsys":
            return export_nsys(self.directory / "capture.nsys-rep", self.binary or "nsys")
        if self.kind == perf.KIND:
            return perf.script_of(self.directory, self.binary)
        return None


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


def toggle_torch_profile(base_url: str, which: str, timeout: float = 600.0) -> None:
    """`POST /start_profile` or `/stop_profile` (vLLM, SGLang); a failure names the URL and the answer.

    Stopping flushes the trace files, which takes long on a large model: hence the long timeout.
    """
    # late: httpx and perflib.load, 84 ms (measured); perflib.config imports this module for LIVE_KINDS
    import httpx

    from perflib.load import tls

    url = base_url.rstrip("/") + f"/{which}_profile"
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
