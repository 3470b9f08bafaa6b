"""Linux `perf` samples: `perf script` text (gzipped or not), or a `perf.data` file read through `perf script`.

A sampling profile holds no dispatches: each row of the dispatch table is one sample (kind `sample`),
standing for the `period` ns of CPU time that ended at the sample's time: `start_ns = time − period`,
`end_ns = time`. `kernel` is the function the sample was taken in; `stream` is the thread (tid) and
`queue` the process (pid) it ran in, `device` is -1. `correlation_id` is the thread too: it is the one
id a lean table keeps (`ReadMode.LEAN`), and a sample's thread is what links it to the others.
Downstream, samples are counted, not unioned (`perflib.attribution.samples`): a share of samples is a
sampled estimate.

Text, as `perf script` prints it with any of these fields (`-F comm,pid,tid,time,period,event,ip,sym,dso`
is what perflib's `perf` profiler asks for; its default fields, `[cpu]` and `+0x..` offsets included,
read too): one header line per sample, `COMM PID/TID [CPU] SECONDS.FRACTION: PERIOD EVENT:`, then either
the frame on the same line (no call chain) or one frame a line, leaf first (`perf record -g`), each
`IP SYMBOL (DSO)`. The time is exact in ns (`--ns` prints 9 decimals, the default 6). Without a period
field the period is the median spacing of a thread's samples (`meta["period_from"]`).

The function of a sample is its leaf frame's symbol (without `+0x..`, and without the suffixes GCC
gives a function's clones: `.isra.0`, `.constprop.0`, `.part.0`, `.cold`); a sample taken in the kernel
(a system call, a page fault, a futex wait) is named by the user-space function that entered the
kernel where the call chain gives it (the first frame outside `[kernel.kallsyms]`: the user IP saved
at entry, exact even where the rest of a frame-pointer chain is not), else by the kernel function.
Frames beyond that are not read: a frame-pointer unwind of code built without frame pointers (ggml,
glibc) gives callers that cannot be trusted. A symbol perf could not resolve is `[unknown] (DSO)`.

Clock: `perf record -k CLOCK_MONOTONIC` (what perflib runs) stamps samples with CLOCK_MONOTONIC; the
header that `perf script --header` prints says so (`clockid = 1`), and `clock` is then `monotonic`
(`realtime` for 0, `boottime` for 7). Without it the clock is `unknown` and perf's own clock (the
kernel's `local_clock`, close to CLOCK_MONOTONIC) is tried against the level's clocks
(`meta["clock_candidates"]`). The header's sample frequency is kept in `meta["sample_hz"]`; without
a header it is 1 s over the median period.

A `perf.data` file (magic `PERFILE2`) is read by running `perf script` on it (`PERF` in the
environment, else `perf` on PATH); where perf is missing the error says so.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from perflib.errors import InputError
from perflib.traces import files
from perflib.traces.codebook import Names
from perflib.traces.trace import ReadMode, Trace

SOURCE = "perf-script"
PERF_DATA_MAGIC = b"PERFILE2"
SCRIPT_FIELDS = "comm,pid,tid,time,period,event,ip,sym,dso"
"""The fields perflib asks `perf script` for (`script_args`)."""
KERNEL_DSO = "[kernel.kallsyms]"
INT64_MAX = 2**63 - 1
CLOCK_IDS = {0: "realtime", 1: "monotonic", 4: "monotonic", 7: "boottime"}
"""`clockid` of a `perf record -k` header: CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_MONOTONIC_RAW, CLOCK_BOOTTIME."""

SAMPLE_LINE = re.compile(
    r"^(?P<comm>.*?)\s+(?:(?P<pid>-?\d+)/)?(?P<tid>-?\d+)\s+(?:\[(?P<cpu>\d+)\]\s+)?"
    r"(?P<sec>\d+)\.(?P<frac>\d{1,9}):\s+(?:(?P<period>\d+)\s+)?(?P<event>\S+?):(?:\s+(?P<rest>.*))?$"
)
"""The line that opens a sample."""
_FRAME = re.compile(r"^\s*(?P<ip>[0-9a-fA-F]+)\s+(?P<rest>.*?)\s*$")
_OFFSET = re.compile(r"\+0x[0-9a-fA-F]+$")
_CLONE = re.compile(r"(?:\.(?:isra|constprop|part|cold|lto_priv|localalias)(?:\.\d+)?)+$")
"""GCC's suffixes on the symbol of a function's clone (`ggml_graph_compute_thread.isra.0`)."""
_HEADER_CLOCK = re.compile(r"\bclockid = (\d+)")
_HEADER_FREQ = re.compile(r"\{\s*sample_period,\s*sample_freq\s*\}\s*=\s*(\d+).*?\bfreq = 1\b")
_HEADER_PERIOD = re.compile(r"\bsample_period\s*=\s*(\d+)")


def perf_binary() -> str | None:
    """The `perf` program: `$PERF`, else `perf` on PATH; None where there is none."""
    named = os.environ.get("PERF") or "perf"
    return shutil.which(named) or (named if os.path.isfile(named) and os.access(named, os.X_OK) else None)


def script_args(data: Path, perf: str) -> list[str]:
    """The `perf script` command perflib runs on a `perf.data` file: the fields the reader reads, times
    in ns, the header (the clock and the sample frequency)."""
    return [perf, "script", "-i", str(data), "-F", SCRIPT_FIELDS, "--ns", "--header"]


def _frame(line: str) -> tuple[str, str] | None:
    """(symbol without its offset, dso) of one frame `IP SYMBOL (DSO)`; None for a line that is not one."""
    found = _FRAME.match(line)
    if found is None:
        return None
    rest = found.group("rest")
    sym, sep, dso = rest.rpartition(" (")
    if not sep or not dso.endswith(")"):
        sym, dso = rest, ""
    else:
        dso = dso[:-1]
    sym = _CLONE.sub("", _OFFSET.sub("", sym.strip())) or "[unknown]"
    return sym, dso


def _name(frames: list[tuple[str, str]]) -> str:
    """The sample's function (module docstring): the leaf, or the user function that entered the kernel."""
    if not frames:
        return "[unknown]"
    pick = frames[0]
    if pick[1] == KERNEL_DSO:
        pick = next((f for f in frames[1:] if f[1] != KERNEL_DSO and f[1]), pick)
    sym, dso = pick
    if sym == "[unknown]" and dso and dso != "[unknown]":
        return f"[unknown] ({os.path.basename(dso)})"
    return sym


class _Samples:
    """The columns of the samples read so far."""

    def __init__(self) -> None:
        self.names = Names()
        self.name: list[str] = []
        self.time: list[int] = []
        self.period: list[int] = []
        self.pid: list[int] = []
        self.tid: list[int] = []
        self.line: list[int] = []
        self.events: dict[str, int] = {}
        self.threads: dict[int, str] = {}
        self.header: list[str] = []


def _ns(sec: str, frac: str) -> int:
    return int(sec) * 1_000_000_000 + int(frac.ljust(9, "0"))


def parse(lines: Iterable[str], path: Path) -> _Samples:
    """The samples of `perf script` text (module docstring); a sample line whose time is not a time is an
    `InputError` naming its line. Long: one pass over every line, the hot loop of the read, kept whole so
    that a frame line costs a byte test and a frame that names nothing is never parsed."""
    out = _Samples()
    frames: list[tuple[str, str]] = []
    open_sample = decided = False  # decided: the frame that names the open sample is read (`_name`)
    kernel_tail = f"({KERNEL_DSO})"

    def close() -> None:
        out.name.append(_name(frames))

    for number, raw in enumerate(lines, 1):
        if raw[:1] == "\t":  # a frame of the open sample's call chain (perf prints them tab-indented)
            if open_sample and not decided:
                in_kernel = raw.rstrip().endswith(kernel_tail)
                if not frames or not in_kernel:  # the leaf, then the first frame outside the kernel
                    frame = _frame(raw)
                    if frame is not None:
                        frames.append(frame)
                        decided = not in_kernel
            continue
        line = raw.rstrip("\n")
        if not line.strip():
            continue
        if line.startswith("#"):
            if not out.time:
                out.header.append(line)
            continue
        found = SAMPLE_LINE.match(line)
        if found is None:
            if not out.time and out.header:  # the header's command line can run over several lines
                out.header.append(line)
                continue
            if open_sample and _FRAME.match(line):
                frame = _frame(line)
                if frame is not None and not decided and (not frames or frame[1] != KERNEL_DSO):
                    frames.append(frame)
                    decided = frame[1] != KERNEL_DSO
                continue
            raise InputError(path, f"line {number}", "a perf script sample line `COMM PID/TID TIME: PERIOD EVENT:` "
                             "or a frame of its call chain", repr(line[:80]))
        if open_sample:
            close()
        open_sample, decided = True, False
        frames = []
        rest = found.group("rest")
        if rest:
            frame = _frame(rest)
            if frame is not None:
                frames.append(frame)
                decided = frame[1] != KERNEL_DSO
        tid, time = int(found.group("tid")), _ns(found.group("sec"), found.group("frac"))
        period = int(found.group("period")) if found.group("period") else -1
        pid = int(found.group("pid")) if found.group("pid") else -1
        if not (time <= INT64_MAX and period < time and max(abs(tid), abs(pid)) <= INT64_MAX):
            raise InputError(path, f"line {number}", "a sample time, period and ids whose ns fit int64 (a period "
                             "shorter than the time)", repr(line[:80]))
        out.time.append(time)
        out.period.append(period)
        out.pid.append(pid)
        out.tid.append(tid)
        out.line.append(number)
        event = found.group("event")
        out.events[event] = out.events.get(event, 0) + 1
        out.threads.setdefault(tid, found.group("comm").strip())
    if open_sample:
        close()
    return out


def _lines(path: Path) -> Iterator[str]:
    """The text of a `perf script` file (gunzipped where gzip), line by line."""
    with files.read_ahead(path, 8 << 20) as blocks:
        tail = b""
        while True:
            try:
                piece = blocks.read()
            except Exception as exc:  # noqa: BLE001 - what the read-ahead raised, as the error read_bytes gives
                raise files.stream_error(path, exc) from exc
            if not piece:
                break
            data = tail + piece
            cut = data.rfind(b"\n") + 1
            tail = data[cut:]
            yield from data[:cut].decode("utf-8", "replace").splitlines()
        if tail:
            yield tail.decode("utf-8", "replace")


def _script_lines(data: Path) -> Iterator[str]:
    """`perf script` run on a perf.data file, its output line by line; a missing perf or a failed run is
    an `InputError` naming the file."""
    perf = perf_binary()
    if perf is None:
        raise InputError(data, None, "perf on PATH (or $PERF) to read a perf.data file with `perf script`",
                         "no perf program (Debian: apt-get install linux-perf)")
    with subprocess.Popen(script_args(data, perf), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          errors="replace") as proc:
        assert proc.stdout is not None and proc.stderr is not None
        yield from proc.stdout
        err = proc.stderr.read()
        code = proc.wait()
    if code != 0:
        raise InputError(data, None, f"a perf.data file `{' '.join(script_args(data, 'perf'))}` reads",
                         f"exit {code}: {' '.join(err.split())[-300:]}")


def _header_facts(header: list[str]) -> dict[str, Any]:
    """The clock and the sampling of a `perf script --header` header (empty where there is none)."""
    text = "\n".join(header)
    facts: dict[str, Any] = {}
    clock = _HEADER_CLOCK.search(text)
    if clock and "use_clockid = 1" in text:
        facts["clockid"] = int(clock.group(1))
    freq = _HEADER_FREQ.search(text)
    if freq:
        facts["sample_hz"] = float(freq.group(1))
    else:
        period = _HEADER_PERIOD.search(text)
        if period:
            facts["sample_period_ns"] = int(period.group(1))
    for line in header:
        key, sep, value = line.lstrip("# ").partition(" : ")
        if sep and key.strip() in ("cmdline", "perf version", "hostname", "nrcpus online"):
            facts[key.strip().replace(" ", "_")] = value.strip()[:500]
    return facts


def _periods(s: _Samples) -> tuple[np.ndarray, str]:
    """Each sample's period in ns: the field where printed, else the median spacing of its thread's samples."""
    period = np.asarray(s.period, dtype=np.int64)
    if not period.size or (period >= 0).all():
        return period, "the period field"
    time, tid = np.asarray(s.time, dtype=np.int64), np.asarray(s.tid, dtype=np.int64)
    order = np.lexsort((time, tid))
    step = np.diff(time[order])
    same = np.diff(tid[order]) == 0
    spacing = step[same & (step > 0)]
    guess = int(np.median(spacing)) if spacing.size else 1_000_000
    return np.where(period >= 0, period, guess), f"the median spacing of a thread's samples ({guess} ns)"


def build(s: _Samples, path: Path, mode: ReadMode) -> Trace:
    """The samples as a Trace (module docstring)."""
    from perflib.traces import schema  # pandas: loaded where a table is made, not at import

    time = np.asarray(s.time, dtype=np.int64)
    period, period_from = _periods(s)
    start = time - period
    codes = s.names.encode(s.name)
    lines = s.line

    def label(k: int) -> str:
        return f"line {lines[k]}"

    thread = np.asarray(s.tid, dtype=np.int64)
    ids = {"device": -1, "queue": np.asarray(s.pid, dtype=np.int64), "stream": thread}
    dispatches = schema.lean_dispatch_frame(codes, s.names.names, start, time, thread, "sample", SOURCE, path, label,
                                            ids=ids if mode is not ReadMode.LEAN else None)
    if mode is ReadMode.FULL:
        dispatches = dispatches.assign(kernel=dispatches["kernel"].astype("str"))
    facts = _header_facts(s.header)
    clock = CLOCK_IDS.get(facts.get("clockid", -1), "unknown")
    positive = period[period > 0]
    sample_hz = facts.get("sample_hz") or (1e9 / float(np.median(positive)) if positive.size else None)
    meta: dict[str, Any] = {
        "events": dict(s.events), "samples": int(time.size), "sample_hz": sample_hz,
        "period_from": period_from, "threads": {str(k): v for k, v in s.threads.items()},
        **{k: v for k, v in facts.items() if k != "sample_hz"},
    }
    if clock == "unknown":
        meta["clock_candidates"] = ["monotonic", "boottime"]
        meta["clock_note"] = "no clockid in a perf script header: perf's own clock, tried as CLOCK_MONOTONIC"
    if mode.lean:
        meta["lean"] = True
    return Trace(dispatches, schema.empty_api(SOURCE), schema.empty_markers(SOURCE), clock, SOURCE, str(path), meta)


def read(path: Path, mode: ReadMode = ReadMode.FULL) -> Trace:
    """`perf script` text or a `perf.data` file -> Trace of samples (module docstring)."""
    path = Path(path)
    with open(path, "rb") as handle:
        magic = handle.read(len(PERF_DATA_MAGIC))
    lines = _script_lines(path) if magic == PERF_DATA_MAGIC else _lines(path)
    with files.gc_paused():
        samples = parse(lines, path)
    if not samples.time:
        raise InputError(path, None, "perf samples (`perf record` of a running program)", "no sample")
    return build(samples, path, mode)
