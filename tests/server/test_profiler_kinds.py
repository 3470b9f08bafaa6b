"""The profiler-kind registry (`perflib.server.profilers.KINDS`): every kind is one entry, and each entry
runs as its method says (a wrapper before the server, an injection in its environment, an endpoint the
server serves), names where its capture lands and how it is cut, and its loss lines are regexes that the
loss scanner reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perflib.config import PROFILER_KINDS
from perflib.errors import PerflibError
from perflib.server import losses, profilers
from perflib.server.presets import PRESETS
from perflib.server.profilers import KINDS, LIVE_KINDS, Capture, ProfilerKind, profiler_kind

SERVER = ("/opt/llama/bin/llama-server", "-m", "model.gguf", "--port", "4321")

EXAMPLES = {"rocprofv3": "rocprofv3: lost 12 records", "cupti": "Dropped 7 activity records",
            "nsys": "Dropped 7 activity records", "torch": "profiler dropped 3 events",
            "perf": "Warning: Processed 52113 events and lost 3 chunks!"}
"""A loss line of each kind that counts what it lost; a new kind with loss lines needs one here."""


def capture_of(kind: str, tmp_path: Path) -> Capture:
    library = tmp_path / "libinject.so"
    library.write_bytes(b"no perflib variable in here")
    return Capture(kind, tmp_path / "capture" / profiler_kind(kind).capture_folder(1), library=library,
                   torch_env="SERVER_PROFILER_DIR", server_args=("--profiler-dir", str(tmp_path)))


def test_the_campaign_may_name_every_kind_and_only_those() -> None:
    assert set(PROFILER_KINDS) == set(KINDS)
    assert set(LIVE_KINDS) == {name for name, kind in KINDS.items() if kind.method != "files"}


@pytest.mark.parametrize("name", list(KINDS))
def test_every_kind_runs_as_its_method_says(tmp_path: Path, name: str) -> None:
    kind = KINDS[name]
    capture = capture_of(name, tmp_path)
    if kind.method in ("none", "files"):
        assert kind.launch is None and kind.capture is None and kind.cut == "none"
        assert capture.wrap(SERVER, {"A": "1"}) == (SERVER, {"A": "1"}, None)
        return
    argv, env, stdout = capture.wrap(SERVER, {"A": "1"})
    assert env["A"] == "1" and capture.directory.is_dir()
    if kind.method == "wrap":  # the profiler's program first, the server's whole command after it
        assert argv[0] != SERVER[0] and tuple(argv[-len(SERVER):]) == SERVER
    elif kind.method == "inject":  # the server's command as it was, the profiler in its environment
        assert tuple(argv) == SERVER and set(env) > {"A"}
    else:  # endpoint: the server's own profiler, pointed at the capture folder, toggled over HTTP
        assert tuple(argv[:len(SERVER)]) == SERVER and kind.endpoints is not None
        assert env["SERVER_PROFILER_DIR"] == str(capture.directory) and "--profiler-dir" in argv
    assert stdout is None or stdout.parent == capture.directory


@pytest.mark.parametrize("name", list(KINDS))
def test_every_kind_says_where_its_capture_is_and_how_it_is_cut(tmp_path: Path, name: str) -> None:
    kind = KINDS[name]
    if kind.cut == "lifetime":  # one capture per server start, found once it has stopped
        assert kind.capture is not None and kind.capture_folder(3) == "3"
        capture = capture_of(name, tmp_path)
        if name == "perf":  # a capture whose `perf script` text was made already is found as it is
            capture.directory.mkdir(parents=True)
            (capture.directory / "perf-script.txt").write_text("# header\n")
        if name != "nsys":  # nsys exports its report first (needs the nsys program)
            assert capture.lifetime_capture() is not None
    elif kind.cut == "per-run":  # files per run moved out of one folder: no lifetime capture
        assert kind.capture is None and kind.capture_folder(3) == name and kind.endpoints is not None
        assert capture_of(name, tmp_path).lifetime_capture() is None


@pytest.mark.parametrize("name", [n for n, k in KINDS.items() if k.losses])
def test_every_kinds_loss_lines_are_scanned(tmp_path: Path, name: str) -> None:
    for pattern in KINDS[name].losses:
        assert re.compile(pattern.regex).groups <= 1, pattern  # a first group is a count of lost records
    log = tmp_path / "server.log"
    log.write_text(f"serving\n{EXAMPLES[name]}\nstopped\n")
    found = losses.scan(log, name)
    assert found and found[0]["line"] == EXAMPLES[name] and isinstance(found[0]["records"], int)
    assert losses.scan(log, "none") == []


@pytest.mark.parametrize("name", [n for n, k in KINDS.items() if k.sources])
def test_a_traces_source_names_its_kind(name: str) -> None:
    for source in KINDS[name].sources:
        assert profilers.kind_of_source(source + "-x") == name
    assert profilers.kind_of_source(None) == "" and profilers.kind_of_source("unknown-format") == ""


def test_a_kind_of_another_module_is_one_entry_by_reference(tmp_path: Path, monkeypatch) -> None:
    """A kind whose functions live in its own module (as `perf` does) is named `module:function`, loaded
    when a server starts: the registry imports nothing of it."""
    kind = ProfilerKind("wrapper", "wrap", "a wrapper of another module", "lifetime",
                        "perflib.server.profilers:_wrap_nsys", "perflib.server.profilers:_capture_folder")
    monkeypatch.setitem(KINDS, "wrapper", kind)
    capture = Capture("wrapper", tmp_path / "c")
    argv, _, _ = capture.wrap(SERVER, {})
    assert argv[:2] == ("nsys", "profile") and capture.lifetime_capture() == tmp_path / "c"


def test_every_presets_kernel_profiler_is_a_kind() -> None:
    named = {p.kernel_profiler for p in PRESETS.values() if p.kernel_profiler}
    assert named and named <= set(KINDS)
    assert all(KINDS[k].endpoints is not None for k in named)  # PyTorch engines: their own profiler's endpoints


def test_an_unknown_kind_is_an_error_listing_the_kinds() -> None:
    with pytest.raises(PerflibError, match="expected one of none, rocprofv3"):
        profiler_kind("rocprof")
