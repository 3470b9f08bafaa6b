"""A campaign with `profiler: {kind: cupti}` captures the CUDA runtime and driver API records by default, so
that what fills the host gaps (`perflib.attribution.hostgaps`) can be told: perflib's library enables every
record kind unless PERFLIB_CUPTI_KINDS narrows them, and the capture sets no PERFLIB_CUPTI_KINDS of its own
(an arm's env that sets one is the user's choice, kept). The library's `read_settings` is run by a harness
that includes its source (no GPU needed)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from perflib.errors import PerflibError
from perflib.server import build
from perflib.server.profilers import Capture

HARNESS = Path(__file__).with_name("cupti_settings_harness.cpp")


@pytest.fixture(scope="module")
def settings_harness(tmp_path_factory) -> Path:
    cuda = build._cuda_root(None)
    try:
        nvcc, include, lib = build._nvcc(cuda, "perflib's CUPTI library"), *build.cupti_dirs(cuda)
    except PerflibError as exc:
        pytest.skip(f"no CUDA toolkit to build with here: {exc}")
    exe = tmp_path_factory.mktemp("kinds") / "harness"
    subprocess.run([nvcc, "-O0", "-std=c++17", f"-DPERFLIB_CUPTI_SOURCE=\"{build.CUPTI_SOURCE}\"", f"-I{include}",
                    "-o", str(exe), str(HARNESS), f"-L{lib}", "-lcupti", "-lpthread", "-Xlinker", f"-rpath,{lib}"],
                   check=True, capture_output=True, timeout=300)
    return exe


def kinds(exe: Path, env: dict[str, str]) -> dict[str, bool]:
    out = subprocess.run([str(exe)], env={"PATH": "/usr/bin:/bin", **env}, capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return {name: value == "1" for name, value in (line.split() for line in out.splitlines())}


def test_every_kind_is_on_by_default_runtime_and_driver_included(settings_harness: Path) -> None:
    assert kinds(settings_harness, {}) == dict.fromkeys(
        ("kernel", "memcpy", "memset", "runtime", "driver", "overhead"), True)


def test_perflib_cupti_kinds_narrows_them(settings_harness: Path) -> None:
    narrowed = kinds(settings_harness, {"PERFLIB_CUPTI_KINDS": "kernel,memcpy"})
    assert narrowed["kernel"] and narrowed["memcpy"] and not narrowed["runtime"] and not narrowed["driver"]


def test_the_capture_leaves_the_kinds_to_the_library_and_the_users_choice_alone(tmp_path: Path) -> None:
    ours = tmp_path / "libperflib_cupti-0123.so"
    ours.write_bytes(b"\x7fELF...getenv PERFLIB_CUPTI_OUTPUT ...")
    capture = Capture("cupti", tmp_path / "capture", library=ours)
    _, env, _ = capture.wrap(("llama-server",), {})
    assert "PERFLIB_CUPTI_KINDS" not in env
    _, env, _ = capture.wrap(("llama-server",), {"PERFLIB_CUPTI_KINDS": "kernel"})
    assert env["PERFLIB_CUPTI_KINDS"] == "kernel"
