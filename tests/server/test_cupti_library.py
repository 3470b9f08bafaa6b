"""perflib's CUPTI injection library (perflib/server/cupti/perflib_cupti.cpp), on a machine without a GPU:
it builds with nvcc and is cached, exports `InitializeInjection`, prints records in the text that
perflib's CUPTI reader takes (its own formatting code, fed made-up records by a harness), writes its
counts, and ends cleanly at exit and on SIGTERM. The GPU side (buffers filled by CUPTI, dropped records,
CUDA-graph replays) is proven on the H200 (scripts/h200/README.md)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perflib.errors import InputError, PerflibError
from perflib.server import build
from perflib.server.profilers import Capture, is_perflib_cupti, read_cupti_stats
from perflib.traces import read_trace
from perflib.traces.cupti_text import read_cupti_text, read_cupti_text_by_line

HARNESS = Path(__file__).with_name("cupti_format_harness.cpp")
CUDA = Path("/usr/local/cuda")


def _toolkit() -> tuple[str, Path, Path]:
    """nvcc and the CUPTI folders, or a skip that names what is missing."""
    cuda = build._cuda_root(None)
    try:
        return build._nvcc(cuda, "perflib's CUPTI library"), *build.cupti_dirs(cuda)
    except PerflibError as exc:
        pytest.skip(f"no CUDA toolkit to build with here: {exc}")


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    """perflib's library, built once into a cache of this module's own."""
    _toolkit()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFLIB_CACHE", str(tmp_path_factory.mktemp("cache")))
        first = build.ensure_cupti_library()
        built = first.stat().st_mtime_ns
        again = build.ensure_cupti_library()  # cached: the same file, not rebuilt
    assert again == first and first.stat().st_mtime_ns == built
    return first


def test_the_library_builds_with_nvcc_under_the_hash_of_its_source_and_exports_initialize_injection(library):
    assert library.name.startswith("libperflib_cupti-") and library.suffix == ".so"
    assert library.name == build.cupti_library_path().name  # the name the hash of what it is built from gives
    assert is_perflib_cupti(library)
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed: cannot list the exported symbols")
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True,
                             check=True).stdout
    exported = {line.split()[-1] for line in symbols.splitlines() if " T " in line}
    assert {"InitializeInjection", "perflib_cupti_version"} <= exported


def test_a_missing_toolkit_piece_is_an_error_that_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLIB_CACHE", str(tmp_path / "cache"))
    if shutil.which("nvcc"):
        with pytest.raises(PerflibError, match=r"no cupti\.h in .*include"):
            build.ensure_cupti_library(cuda_home=tmp_path)  # a toolkit folder with nothing in it
        (tmp_path / "include").mkdir()
        (tmp_path / "include" / "cupti.h").write_text("")
        with pytest.raises(PerflibError, match=r"no libcupti\.so in .*lib64"):
            build.ensure_cupti_library(cuda_home=tmp_path)
    (tmp_path / "include").mkdir(exist_ok=True)
    (tmp_path / "include" / "cupti.h").write_text("")
    (tmp_path / "lib64").mkdir()
    (tmp_path / "lib64" / "libcupti.so").write_bytes(b"")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(PerflibError, match=r"needs nvcc: not on PATH nor in .*/bin"):
        build.ensure_cupti_library(cuda_home=tmp_path)
    with pytest.raises(PerflibError, match=r"needs nvcc"):
        build.ensure_cupti_library(cuda_home=tmp_path, sample=True)


def test_a_sample_that_is_not_in_the_toolkit_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFLIB_CACHE", str(tmp_path / "cache"))
    (tmp_path / "bin").mkdir()
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\nexit 1\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    with pytest.raises(PerflibError, match=r"cupti_trace_injection\.cpp: the CUPTI sample is not in this CUDA"):
        build.ensure_cupti_library(cuda_home=tmp_path, sample=True)


@pytest.fixture(scope="module")
def made_up_capture(tmp_path_factory) -> tuple[Path, Path]:
    """The harness's records and counts: the library's own `format` and `write_stats` on made-up records."""
    nvcc, include, lib = _toolkit()
    work = tmp_path_factory.mktemp("harness")
    exe = work / "harness"
    subprocess.run([nvcc, "-O0", "-std=c++17", f"-DPERFLIB_CUPTI_SOURCE=\"{build.CUPTI_SOURCE}\"", f"-I{include}",
                    "-o", str(exe), str(HARNESS), f"-L{lib}", "-lcupti", "-lpthread", "-Xlinker", f"-rpath,{lib}"],
                   check=True, capture_output=True, timeout=300)
    records, stats = work / "cupti.txt", work / "cupti-stats.json"
    subprocess.run([str(exe), str(records), str(stats)], check=True, timeout=60)
    return records, stats


def test_its_records_read_into_the_dispatch_and_api_tables(made_up_capture):
    records, _ = made_up_capture
    trace = read_trace(records)  # detected as CUPTI text
    t = 1_800_000_000_000_000_000
    d = trace.dispatches.sort_values("start_ns").reset_index(drop=True)
    assert trace.source == "cupti-text" and trace.clock == "realtime"
    assert list(d["kind"]) == ["kernel", "kernel", "memcpy", "memset"]  # the record without timestamps is not there
    assert list(d["start_ns"] - t) == [3000, 10000, 31000, 33000] and list(d["end_ns"] - t) == [8000, 30000, 32000, 33500]
    assert list(d["stream"]) == [7, 13, 13, 7] and list(d["correlation_id"]) == [11, 12, 12, 13]
    assert d["kernel"][0] in ("scale2(float*, int)", "_Z6scale2Pfi")  # demangled where cxxfilt is installed
    assert d["kernel"][1] == "flash_attn_ext_f16" and d["kernel"][2] == "Memcpy HtoD"
    api = trace.api.sort_values("start_ns").reset_index(drop=True)
    assert list(api["name"]) == ["cudaLaunchKernel_v7000", "cuLaunchKernel"]
    assert list(api["domain"]) == ["cuda_runtime", "cuda_driver"] and list(api["correlation_id"]) == [11, 12]
    assert trace.meta["graph_launched"] == 2  # the graph's kernel and copy
    assert trace.meta["overhead_records"] == 1 and trace.meta["malformed_record_lines"] == 0
    by_line = read_cupti_text_by_line(records)  # the bulk layouts took the lines as the line-by-line path does
    assert by_line.dispatches.sort_values("start_ns")["end_ns"].tolist() == d["end_ns"].tolist()
    assert len(read_cupti_text(records).api) == 2


def test_its_counts_say_what_was_written_and_what_was_lost(made_up_capture):
    _, stats_path = made_up_capture
    stats = read_cupti_stats(stats_path.parent)  # found beside the records
    assert stats["records"] == 7 == sum(stats["records_by_kind"].values())
    assert stats["records_by_kind"]["CONCURRENT_KERNEL"] == 2
    assert stats["dropped_records"] == 1 == stats["timestamps_missing"]
    assert stats["dropped_by_cupti"] == 0 and stats["buffers"] == 1 and stats["complete"] is False


def _run_injected(library: Path, tmp_path: Path, code: str, stop: signal.Signals | None = None):
    """A Python process that calls the library's InitializeInjection itself (no CUDA driver needed)."""
    env = {"PERFLIB_CUPTI_OUTPUT": str(tmp_path / "cupti.txt"), "PERFLIB_CUPTI_FLUSH_MS": "50", "PATH": "/usr/bin:/bin"}
    script = (f"import ctypes, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
              f"ctypes.CDLL({str(library)!r}).InitializeInjection()\nprint('ready', flush=True)\n{code}\n")
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        if stop is not None:
            time.sleep(0.3)  # a few periodic flushes
            proc.send_signal(stop)
        proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    return proc.returncode, read_cupti_stats(tmp_path)


def test_at_exit_it_flushes_and_marks_its_counts_complete(library, tmp_path):
    code, stats = _run_injected(library, tmp_path, "time.sleep(0.2)")
    assert code == 0
    assert stats["complete"] is True and stats["ended_by"] == "exit" and stats["flushes"] >= 1
    assert stats["records"] == sum(stats["records_by_kind"].values())
    assert (tmp_path / "cupti.txt").read_text().startswith("perflib-cupti 1: pid ")  # never on stdout


def test_on_sigterm_it_flushes_then_dies_of_the_signal_as_the_program_would(library, tmp_path):
    code, stats = _run_injected(library, tmp_path, "time.sleep(30)", stop=signal.SIGTERM)
    assert code == -signal.SIGTERM
    assert stats["complete"] is True and stats["ended_by"] == "SIGTERM" and stats["flushes"] >= 2


def test_counts_that_are_not_counts_are_an_error_naming_the_field(tmp_path):
    assert read_cupti_stats(tmp_path) is None  # the CUDA sample writes none: "not reported"
    path = tmp_path / "cupti-stats.json"
    path.write_text("{not json")
    with pytest.raises(InputError, match="cupti-stats.json"):
        read_cupti_stats(path)
    good = {"records": 3, "dropped_records": 0, "buffers": 1, "flushes": 2, "errors": [], "complete": True}
    path.write_text(json.dumps({**good, "dropped_records": -1}))
    with pytest.raises(InputError, match="dropped_records"):
        read_cupti_stats(path)
    path.write_text(json.dumps({**good, "complete": "yes"}))
    with pytest.raises(InputError, match="errors/complete"):
        read_cupti_stats(path)
    path.write_text(json.dumps(good))
    assert read_cupti_stats(path)["records"] == 3


def test_the_capture_sends_perflibs_library_to_its_own_files_and_the_sample_to_stdout(tmp_path):
    ours = tmp_path / "libperflib_cupti-0123.so"
    ours.write_bytes(b"\x7fELF...getenv PERFLIB_CUPTI_OUTPUT ...")
    sample = tmp_path / "libcupti_trace_injection.so"
    sample.write_bytes(b"\x7fELF... printf CONCURRENT_KERNEL ...")
    capture = Capture("cupti", tmp_path / "capture" / "1", library=ours)
    argv, env, stdout = capture.wrap(("llama-server", "-m", "x.gguf"), {"KEEP": "1"})
    assert argv == ("llama-server", "-m", "x.gguf") and stdout is None  # stdout stays the server's log
    assert env["CUDA_INJECTION64_PATH"] == str(ours) and env["KEEP"] == "1"
    assert env["PERFLIB_CUPTI_OUTPUT"] == str(capture.directory / "cupti.txt") == str(capture.lifetime_capture())
    assert env["PERFLIB_CUPTI_STATS"] == str(capture.directory / "cupti-stats.json")
    assert capture.cupti_stats() is None  # nothing written yet
    (capture.directory / "cupti-stats.json").write_text(json.dumps(
        {"records": 5, "dropped_records": 2, "buffers": 1, "flushes": 3, "errors": ["x"], "complete": True}))
    assert capture.cupti_stats()["dropped_records"] == 2
    _, env, stdout = Capture("cupti", tmp_path / "capture" / "2", library=sample).wrap(("llama-server",), {})
    assert stdout == tmp_path / "capture" / "2" / "cupti.txt" and "PERFLIB_CUPTI_OUTPUT" not in env
    assert Capture("nsys", tmp_path / "n").cupti_stats() is None
