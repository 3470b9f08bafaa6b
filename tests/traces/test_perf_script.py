"""Linux perf samples (`perflib.traces.perf_script`): a real `perf script` capture of llama-server on the
CPU (tests/data/traces/README.md), perf.data read through `perf script`, and what a sample row holds."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from support import DATA

from perflib.errors import InputError
from perflib.traces import FORMATS, ReadMode, detect_format, read_trace

SAMPLE = DATA / "traces" / "perf_llama_server_b4.perf-script.txt.gz"
HEAD = re.compile(r"^(?P<comm>\S.*?)\s+(?P<pid>\d+)/(?P<tid>\d+)\s+(?P<sec>\d+)\.(?P<ns>\d{9}):\s+(?P<period>\d+)\s+cpu-clock:")


def samples_of(text: str) -> list[dict]:
    """Each sample of perflib's `perf script` fields, read plainly: its header fields and its frames."""
    out: list[dict] = []
    for line in text.splitlines():
        found = HEAD.match(line)
        if found:
            out.append({**found.groupdict(), "frames": []})
        elif line.startswith("\t") and out:
            ip, _, rest = line.strip().partition(" ")
            sym, _, dso = rest.rpartition(" (")
            out[-1]["frames"].append((sym, dso.rstrip(")")))
    return out


@pytest.fixture(scope="module")
def plain() -> list[dict]:
    return samples_of(gzip.decompress(SAMPLE.read_bytes()).decode())


def test_the_real_capture_is_told_and_read_sample_for_sample(plain):
    assert detect_format(SAMPLE) == "perf-script"
    trace = read_trace(SAMPLE)
    frame = trace.dispatches
    assert len(frame) == len(plain) == trace.meta["samples"]
    assert trace.clock == "monotonic" and trace.meta["clockid"] == 1  # perf record -k CLOCK_MONOTONIC
    assert trace.meta["sample_hz"] == 999.0 and trace.meta["events"] == {"cpu-clock": len(plain)}
    ends = sorted(int(s["sec"]) * 10**9 + int(s["ns"]) for s in plain)
    assert frame["end_ns"].tolist() == ends  # exact ns, sorted
    periods = {int(s["period"]) for s in plain}
    assert set((frame["end_ns"] - frame["start_ns"]).unique()) == periods  # each sample stands for its period
    by_time = {int(s["sec"]) * 10**9 + int(s["ns"]): int(s["tid"]) for s in plain}
    assert frame["stream"].tolist() == [by_time[t] for t in frame["end_ns"]]
    assert (frame["correlation_id"] == frame["stream"]).all() and (frame["device"] == -1).all()
    assert set(frame["kind"].astype(str)) == {"sample"} and set(frame["source"].astype(str)) == {"perf-script"}


def test_a_sample_is_named_by_its_leaf_or_the_user_function_that_entered_the_kernel(plain):
    trace = read_trace(SAMPLE)
    names = trace.dispatches.sort_values("end_ns", kind="stable")["kernel"].tolist()
    in_kernel = 0
    for sample, name in zip(sorted(plain, key=lambda s: (int(s["sec"]), int(s["ns"]))), names, strict=True):
        frames = sample["frames"]
        user = [f for f in frames if f[1] != "[kernel.kallsyms]"]
        leaf = frames[0] if frames[0][1] != "[kernel.kallsyms]" or not user else user[0]
        in_kernel += frames[0][1] == "[kernel.kallsyms]"
        expected = re.sub(r"(\.(isra|constprop|part|cold)(\.\d+)?)+$", "", leaf[0])
        if expected == "[unknown]":
            expected = f"[unknown] ({os.path.basename(leaf[1])})"
        assert name == expected
    assert in_kernel > 0  # the capture has samples taken in the kernel, named by their user function


def test_every_mode_reads_the_same_samples():
    full = read_trace(SAMPLE, ReadMode.FULL).dispatches
    for mode, columns in ((ReadMode.LEAN, ["kernel", "start_ns", "end_ns", "correlation_id"]),
                          (ReadMode.LEAN_IDS, ["kernel", "start_ns", "end_ns", "stream", "queue", "correlation_id"])):
        got = read_trace(SAMPLE, mode).dispatches
        assert isinstance(got["kernel"].dtype, pd.CategoricalDtype)
        pd.testing.assert_frame_equal(got[columns].assign(kernel=got["kernel"].astype(str)), full[columns])


def test_default_perf_script_output_reads_too(tmp_path):
    """`perf script` without -F: right-aligned comm, tid only, µs times, symbol offsets, frame on the line."""
    text = ("            bash 11139   513.198245:    1001001 cpu-clock:      7f45f3d6262a handle_amd+0xa "
            "(/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2)\n"
            "         python3 11140   513.199249:    1001001 cpu-clock:  ffffffff82236f77 clear_page_erms+0x7 "
            "([kernel.kallsyms])\n")
    path = tmp_path / "default.txt"
    path.write_text(text)
    trace = read_trace(path)
    assert trace.dispatches["kernel"].tolist() == ["handle_amd", "clear_page_erms"]
    assert trace.dispatches["end_ns"].tolist() == [513_198_245_000, 513_199_249_000]
    assert trace.dispatches["stream"].tolist() == [11139, 11140] and trace.clock == "unknown"
    assert trace.meta["clock_candidates"] == ["monotonic", "boottime"]


def test_a_line_that_is_no_sample_is_named(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("bash 1/1 10.000000001: 1000 cpu-clock:\n\t 1 f (/x)\nnot a sample at all\n")
    with pytest.raises(InputError, match=r"line 3.*perf script sample line"):
        read_trace(path)
    path.write_text("bash 1/1 99999999999999999999.000000001: 1000 cpu-clock:\n\t 1 f (/x)\n")
    with pytest.raises(InputError, match=r"line 1.*whose ns fit int64"):  # never a wrapped time
        read_trace(path)


@pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed")
def test_perf_data_is_read_through_perf_script(tmp_path):
    data = tmp_path / "perf.data"
    busy = "import time\nend = time.monotonic() + 0.3\nwhile time.monotonic() < end: pass\n"
    done = subprocess.run(["perf", "record", "-e", "cpu-clock", "-F", "999", "-k", "CLOCK_MONOTONIC", "-o", str(data),
                           "--", sys.executable, "-c", busy], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"perf record cannot sample here: {done.stderr.strip()[-200:]}")
    assert detect_format(data) == "perf-script"
    trace = read_trace(data, ReadMode.LEAN)
    assert len(trace.dispatches) > 100 and trace.clock == "monotonic"  # 0.3 s at 999 Hz, the header read
    assert trace.meta["sample_hz"] == 999.0
    assert trace.meta["cmdline"].startswith("/usr/bin/perf record") or "perf record" in trace.meta["cmdline"]


def test_perf_data_without_perf_says_so(tmp_path, monkeypatch):
    data = tmp_path / "perf.data"
    data.write_bytes(b"PERFILE2" + bytes(200))
    monkeypatch.setenv("PERF", str(tmp_path / "no-such-perf"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(InputError, match="no perf program"):
        read_trace(data)


def test_the_writer_gives_what_perf_script_prints():
    """The round trip of every format is tests/traces/test_registry.py's; here the writer's text is the
    text the real capture has, field for field."""
    real = read_trace(SAMPLE, ReadMode.LEAN_IDS)
    assert FORMATS["perf-script"].kind == "sample"
    head = np.array([bool(HEAD.match(line)) for line in
                     gzip.decompress(SAMPLE.read_bytes()).decode().splitlines() if "cpu-clock:" in line])
    assert head.all() and head.size == len(real.dispatches)
