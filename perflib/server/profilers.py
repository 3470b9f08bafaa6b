"""Profiling a server that perflib starts: how each profiler wraps or injects it, and where its capture is.

| kind | how the capture is made | the capture, once the server has stopped |
| --- | --- | --- |
| `rocprofv3` | wraps the server: `rocprofv3 --kernel-trace --stats -f csv -d DIR -o trace -- <server>` | DIR, its files found by rocprofv3's own suffixes |
| `cupti` | injects `CUDA_INJECTION64_PATH=<the CUDA sample's library>`; the records go to stdout | `DIR/cupti.txt`, the server's log kept apart |
| `nsys` | wraps the server: `nsys profile -o DIR/capture <server>`, then `nsys export --type sqlite` | `DIR/capture.sqlite` |
| `torch` | the server's own PyTorch profiler, its folder in the preset's variable (vLLM `VLLM_TORCH_PROFILER_DIR`, SGLang `SGLANG_TORCH_PROFILER_DIR`); `POST /start_profile` and `/stop_profile` around each level | one Kineto file per level |
| `none` | nothing | nothing |

A wrapping profiler is stopped with the server (the stop signal goes to the whole process group) and
given the grace period to flush its files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from perflib.errors import PerflibError

LIVE_KINDS = ("none", "rocprofv3", "cupti", "nsys", "torch")
"""Profilers perflib runs around a server it starts (`kineto` names committed Kineto files instead)."""

CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))


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
            return ((prof, "--kernel-trace", "--stats", "-f", "csv", "-d", str(self.directory), "-o", "trace",
                     *self.args, "--", *argv), env, None)
        if self.kind == "nsys":
            prof = self.binary or "nsys"
            return ((prof, "profile", "--trace=cuda,nvtx", "-o", str(self.directory / "capture"),
                     "--force-overwrite=true", *self.args, *argv), env, None)
        if self.kind == "cupti":
            if self.library is None or not Path(self.library).is_file():
                raise PerflibError(f"profiler cupti: the injection library {self.library} does not exist; build it "
                                   "with `perflib server cupti` (needs nvcc and the CUPTI samples of the CUDA "
                                   "toolkit), or give profiler.library")
            env["CUDA_INJECTION64_PATH"] = str(self.library)
            # libcupti lives in extras/CUPTI/lib64 or, in newer toolkits (the H200's), in lib64
            found = [str(p) for p in (CUDA_HOME / "extras" / "CUPTI" / "lib64", CUDA_HOME / "lib64") if p.is_dir()]
            rest = env.get("LD_LIBRARY_PATH") or os.environ.get("LD_LIBRARY_PATH")
            if found:
                env["LD_LIBRARY_PATH"] = os.pathsep.join([*found, *([rest] if rest else [])])
            return argv, env, self.directory / "cupti.txt"
        if self.kind == "torch":
            if not self.torch_env:
                raise PerflibError("profiler torch: this server has no PyTorch profiler folder variable; use a "
                                   "vllm or sglang preset, or give profiler.env_var")
            env[self.torch_env] = str(self.directory)
            return argv, env, None
        return argv, env, None

    def lifetime_capture(self) -> Path | None:
        """The capture of the server's whole life, for `perflib.cut` (None for `torch`: one file per level)."""
        if self.kind == "rocprofv3":
            return self.directory
        if self.kind == "cupti":
            return self.directory / "cupti.txt"
        if self.kind == "nsys":
            return export_nsys(self.directory / "capture.nsys-rep", self.binary or "nsys")
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
