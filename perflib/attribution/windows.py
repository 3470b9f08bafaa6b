"""Windows of a trace: a time range on the trace's clock, from ns, a marker, step markers or a level.

A level's window comes from its run folder: the manifest's clocks (read on every clock a profiler
might use) are aligned to the trace's clock; the decode window of SERVERS.md §5.2 is the span where
every request decodes, from the request records, moved onto the same clock. Where there is none (requests
staggered, a stream coalesced), the decode span's decode-only part (no request in prefill) where it holds
enough steps, else the span, saying how much of it the requests' prefill covers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pandas as pd

from perflib import rundir, safeinput
from perflib.clocks import CLOCK_KEYS
from perflib.errors import PerflibError
from perflib.runs import (
    ALL_DECODING,
    DECODE_SPAN,
    MIN_DECODE_ONLY_STEPS,
    REQUEST_SPAN,
    client_window,
    decode_only,
)

if TYPE_CHECKING:  # only named: attribution reads a trace it is given, it never reads one itself
    from perflib.traces import Trace

DECODE_ONLY = "decode-only part"
"""`DecodeWindow.kind` of a decode span's part with no request in prefill (`perflib.runs.decode_only`)."""
DEFAULT_STEP_MARKER = r"^ProfilerStep\s*#\s*\d+"
"""Markers that delimit a step unless told otherwise (Kineto `ProfilerStep#N`)."""

_NS_PER_MS = 1e6


@dataclass(frozen=True)
class Window:
    """A time range `[start_ns, end_ns)` on the trace's clock, with a label saying where it came from.

    `clock` names the level clock the window was aligned on (`monotonic`, `boottime`, `realtime`)
    where it came from a run folder's clocks; None where it was read off the trace itself (its span,
    a marker, explicit ns), which is then on the trace's own clock by construction.
    """

    start_ns: int
    end_ns: int
    label: str = "range"
    clock: str | None = None

    @property
    def duration_ns(self) -> int:
        return int(self.end_ns) - int(self.start_ns)

    def describe(self) -> str:
        return f"window {self.label!r} [{self.start_ns}, {self.end_ns}) ns ({self.duration_ns / _NS_PER_MS:.3f} ms)"


TraceLike: TypeAlias = "Trace | pd.DataFrame"
"""What attribution reads: a `perflib.traces.Trace`, or its dispatch table alone (a synthetic or hand-made
frame), which has no API calls, markers, clock or meta and reads as having none."""


def dispatches_of(trace: TraceLike) -> pd.DataFrame:
    """The dispatch table of a `Trace`, or the DataFrame itself when given one."""
    return trace if isinstance(trace, pd.DataFrame) else trace.dispatches


def markers_of(trace: TraceLike) -> pd.DataFrame | None:
    """The marker table of a `Trace`; None for a bare dispatch table."""
    return None if isinstance(trace, pd.DataFrame) else getattr(trace, "markers", None)


def trace_span(dispatches: pd.DataFrame) -> Window:
    """Default window: first GPU event's start to the last one's end (kernels, copies and fills)."""
    if len(dispatches) == 0:
        raise PerflibError("the trace holds no GPU dispatches (kernel, memcpy or memset): nothing to attribute")
    start = int(dispatches["start_ns"].min())
    end = int(dispatches["end_ns"].max())
    return Window(start, end, "trace span")


def window_from_range(start_ns: int, end_ns: int, label: str | None = None) -> Window:
    """A window from explicit ns on the trace's clock."""
    return Window(int(start_ns), int(end_ns), label or f"{int(start_ns)}:{int(end_ns)}")


def window_from_marker(markers: pd.DataFrame | None, name: str, index: int | None = None) -> Window:
    """Window of the roctx / NVTX / Kineto annotation range named exactly `name`.

    Several markers may share the name (a Kineto `ProfilerStep#3` appears on the CPU and as
    `gpu_user_annotation`, a roctx range may repeat): with `index=None` the window spans all of them
    (earliest start to latest end); with `index=i` it is the i-th occurrence in start order (0-based,
    negative counts from the end).
    """
    if markers is None or len(markers) == 0:
        raise PerflibError(f"marker {name!r} not found: the trace has no markers (roctx, NVTX, annotations)")
    hits = markers[markers["name"] == name].sort_values("start_ns", kind="stable")
    if len(hits) == 0:
        known = sorted(set(markers["name"].astype(str)))[:10]
        raise PerflibError(f"marker {name!r} not found among {len(markers)} markers; some names: {known}")
    if index is None:
        return Window(int(hits["start_ns"].min()), int(hits["end_ns"].max()), f"marker {name}")
    try:
        row = hits.iloc[index]
    except IndexError:
        raise PerflibError(f"marker {name!r} occurs {len(hits)} times; index {index} is out of range") from None
    return Window(int(row["start_ns"]), int(row["end_ns"]), f"marker {name}[{index}]")


def window_from_step_markers(markers: pd.DataFrame | None, pattern: str = DEFAULT_STEP_MARKER) -> Window:
    """The decode window of a trace-only capture: first start to last end of the step markers
    (`ProfilerStep#N` on the host and the GPU stream), so set-up and export fall outside it."""
    if markers is None or len(markers) == 0:
        raise PerflibError(f"no step markers /{pattern}/: the trace has no markers (annotations, NVTX, roctx)")
    hits = markers[markers["name"].astype(str).str.contains(pattern, regex=True)]
    if not len(hits):
        known = sorted(set(markers["name"].astype(str)))[:10]
        raise PerflibError(f"no step marker matches /{pattern}/ among {len(markers)} markers; some names: {known}")
    return Window(int(hits["start_ns"].min()), int(hits["end_ns"].max()), f"step markers /{pattern}/")


def window_from_clocks(trace: TraceLike, clocks: Mapping[str, Mapping[str, int]], label: str = "level") -> Window:
    """Window of a sweep level from its manifest `clocks` (`{"start": now_clocks(), "end": now_clocks()}`).

    The trace's `clock` picks the reading: `realtime` (Kineto with `baseTimeNanoseconds`) uses only the
    realtime reading. rocprofv3 stamps with CLOCK_MONOTONIC or CLOCK_BOOTTIME and does not say which, so
    for `monotonic`/`boottime` both are tried, and for `unknown` the reader's `meta["clock_candidates"]`
    (else all three); the clock whose window holds the most dispatch starts wins (docs/reference/FORMATS.md
    §0; ties keep the first candidate, the trace's own clock). The label records the clock chosen.
    """
    dispatches = dispatches_of(trace)
    clock = "unknown" if isinstance(trace, pd.DataFrame) else str(getattr(trace, "clock", "unknown"))
    hinted = [] if isinstance(trace, pd.DataFrame) else list((getattr(trace, "meta", None) or {}).get("clock_candidates") or [])
    if clock == "realtime":
        candidates = ["realtime"]
    elif clock in ("monotonic", "boottime"):
        candidates = [clock, "boottime" if clock == "monotonic" else "monotonic"]
    else:
        candidates = hinted or ["monotonic", "boottime", "realtime"]
    starts = np.sort(dispatches["start_ns"].to_numpy(dtype=np.int64))
    best: tuple[int, Window] | None = None
    for name in candidates:
        key = CLOCK_KEYS[name]
        try:
            lo, hi = int(clocks["start"][key]), int(clocks["end"][key])
        except (KeyError, TypeError):
            continue
        held = int(np.searchsorted(starts, hi, "left") - np.searchsorted(starts, lo, "left"))
        if best is None or held > best[0]:
            best = (held, Window(lo, hi, f"{label} ({name} clock)", name))
    if best is None:
        raise PerflibError(
            f"level clocks hold none of {candidates}: expected clocks.start/end with monotonic_ns, "
            "boottime_ns, realtime_ns (docs/SCHEMA.md §2)"
        )
    return best[1]


def window_from_manifest(trace: TraceLike, manifest: Mapping[str, Any] | str | Path) -> Window:
    """Window of a run folder's level: the manifest's `clocks` (a parsed manifest, or a run folder or
    manifest file to read), aligned to the trace."""
    if not isinstance(manifest, Mapping):
        manifest = rundir.read_manifest(manifest)
    if not isinstance(manifest.get("clocks"), Mapping):
        raise PerflibError("manifest has no `clocks` (expected {start: {...}, end: {...}}, docs/SCHEMA.md §2)")
    label = "level " + rundir.run_name(manifest.get("batch", "?"), manifest.get("context", "?"),
                                      manifest.get("repeat", "?"))
    return window_from_clocks(trace, manifest["clocks"], label)


@dataclass(frozen=True)
class DecodeWindow:
    """A level's decode window on the trace's clock and the decode steps the client counted inside it
    (None where its chunks do not time the steps: the trace's own steps then count them); `kind` is
    `perflib.runs.client_window`'s, `why` says why it is not the all-decoding window ('' where it is)."""

    window: Window
    steps: int | None
    kind: str = ALL_DECODING
    why: str = ""
    prefill_share: float = 0.0
    """The share of the window that the level's requests' prefill covers ([start, first token]): 0 for an
    all-decoding window or a decode-only part; a decode span with too short a decode-only part keeps it."""


def decode_window_from_run(trace: TraceLike, run_dir: str | Path) -> DecodeWindow:
    """SERVERS.md §5.2: last request's first token → first request's last token, on the trace's clock.

    Request times are CLOCK_MONOTONIC; the level clocks in the manifest give the offset to whichever
    clock the trace uses (chosen as in `window_from_clocks`). Steps inside the window are counted from
    the client: the median, over requests, of token chunks that arrive inside it (one per decode step
    while every request decodes). Where there is no such window (requests staggered: the first finished
    before the last produced its first token), the window is the run's decode span, and where the stream
    was coalesced the requests' span (`perflib.runs.client_window`). A span holds other requests'
    prefill, whose kernels would count as the decode's: the window is then the span's decode-only part
    (`perflib.runs.decode_only`: no request between its start and its first token), its steps the client's
    chunks there, where it holds at least `MIN_DECODE_ONLY_STEPS` steps; else the span, with no client step
    count (the trace's own steps, the counters over a requests' span, or the rhythm count them:
    `perflib.attribution.level.run_window`) and `prefill_share` saying how much of it the
    prefill covers. `why` says which window and why. A run with no successful request is a `PerflibError`.
    """
    run_dir = Path(run_dir)
    manifest = rundir.read_manifest(run_dir)
    level = window_from_manifest(trace, manifest)
    clocks = manifest["clocks"]
    offset = int(clocks["start"][CLOCK_KEYS[level.clock]]) - int(clocks["start"]["monotonic_ns"])
    path = run_dir / rundir.REQUESTS
    every = safeinput.read_jsonl(path)
    records = [r for r in every if r.get("ok")]
    seen = client_window(records)
    if seen is None:
        raise PerflibError(f"{path}: no successful request with first and last token times")
    lo, hi = seen.start_ns, seen.end_ns
    steps = None
    if seen.client_steps:
        counts = sorted(sum(1 for t in (r.get("chunk_ns") or []) if lo < int(t) <= hi) for r in records
                        if r.get("first_token_ns") is not None and r.get("last_token_ns") is not None)
        steps = counts[len(counts) // 2] if counts and counts[len(counts) // 2] > 0 else None
    what = {ALL_DECODING: "decode window", DECODE_SPAN: "decode span", REQUEST_SPAN: "request span"}[seen.kind]
    ends = {ALL_DECODING: "last first token → first last token", DECODE_SPAN: "first first token → last last token",
            REQUEST_SPAN: "first request sent → last token"}[seen.kind]
    kind, why, prefill = seen.kind, seen.why, 0.0
    if seen.kind != ALL_DECODING:
        part = decode_only(every, lo, hi, bool(seen.coalesced))
        if part is not None and part.usable:
            lo, hi, steps, kind = part.start_ns, part.end_ns, part.steps, DECODE_ONLY
            what, ends = DECODE_ONLY, "the decode span's part with no request in prefill"
            why = f"{why}; read over {part.describe()}"
        elif part is not None and part.prefill_share > 0:
            prefill = part.prefill_share
            held = (f"its decode-only part holds {part.steps} step{'s' if part.steps != 1 else ''}, fewer than "
                    f"{MIN_DECODE_ONLY_STEPS}"
                    if part.end_ns > part.start_ns else "it has no decode-only part")
            why = f"{why}; the window holds requests' prefill ({100 * prefill:.1f}% of it): {held}"
    label = f"{what} of {run_dir.name}: {ends} ({level.clock} clock)" + (f"; {why}" if why else "")
    window = Window(lo + offset, hi + offset, label, level.clock)
    return DecodeWindow(window, steps, kind, why.removeprefix("; "), prefill)


@dataclass(frozen=True)
class Coverage:
    """How much of a window lies outside what a capture recorded: ns before its first record and after
    its last, beyond the tolerance; `covered` where neither is."""

    window: Window
    span: tuple[int, int]
    tolerance_ns: int
    head_ns: int
    tail_ns: int

    @property
    def covered(self) -> bool:
        return self.head_ns <= self.tolerance_ns and self.tail_ns <= self.tolerance_ns

    def describe(self, what: str = "window") -> str:
        """'capture ended 412 ms into the 1.91 s decode window (its last 1.50 s has no record)', or ''."""
        if self.covered:
            return ""
        w0, w1 = int(self.window.start_ns), int(self.window.end_ns)
        length = f"{(w1 - w0) / 1e9:.2f} s {what}"
        parts = []
        if self.head_ns > self.tolerance_ns:
            parts.append(f"capture began {(self.span[0] - w0) / _NS_PER_MS:.0f} ms into the {length}" if self.span[0] < w1
                         else f"capture began {(self.span[0] - w1) / _NS_PER_MS:.0f} ms after the {length} ended")
        if self.tail_ns > self.tolerance_ns:
            parts.append(f"capture ended {(self.span[1] - w0) / _NS_PER_MS:.0f} ms into the {length} (its last "
                         f"{self.tail_ns / 1e9:.2f} s has no record)" if self.span[1] > w0
                         else f"capture ended {(w0 - self.span[1]) / _NS_PER_MS:.0f} ms before the {length} began")
        return "; ".join(parts)


def coverage(window: Window, span: tuple[int, int], tolerance_ns: int) -> Coverage:
    """Whether a capture that recorded from `span[0]` to `span[1]` (its first dispatch's start and last
    one's end, on the window's clock) covers the window, give or take `tolerance_ns` at each end (the last
    step of a window ends a host turn before its end; nothing is recorded while the host works)."""
    head = max(0, int(span[0]) - int(window.start_ns))
    tail = max(0, int(window.end_ns) - int(span[1]))
    return Coverage(window, (int(span[0]), int(span[1])), int(tolerance_ns), head, tail)


def empty_window_error(window: Window, dispatches: pd.DataFrame, why: str) -> PerflibError:
    """The error for a window that holds nothing: the window, why, and where the dispatches are."""
    if len(dispatches):
        span = trace_span(dispatches)
        where = f"the trace's dispatches span [{span.start_ns}, {span.end_ns}) ns ({span.duration_ns / _NS_PER_MS:.3f} ms)"
    else:
        where = "the trace has no dispatches"
    return PerflibError(f"empty {window.describe()}: {why}; {where}")


INT64 = 2**63
"""Nanosecond bounds live in int64: a bound beyond is an error, never an overflow."""


def parse_window(text: str, dispatches: pd.DataFrame) -> Window:
    """`START:END` in ns on the trace's clock, or with a unit suffix (`ns`/`us`/`ms`/`s`) relative to the
    first dispatch's start (`100ms:250ms`); either side may be empty (trace start / end)."""
    m = re.fullmatch(r"\s*([^:]*)\s*:\s*([^:]*)\s*", text)
    if not m:
        raise PerflibError(f"--window {text!r}: expected START:END (ns on the trace clock, or e.g. 100ms:250ms)")
    span = trace_span(dispatches)
    units = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}

    def one(part: str, default: int) -> int:
        part = part.strip()
        if not part:
            return default
        u = re.fullmatch(r"([-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)\s*(ns|us|ms|s)", part)
        if u:
            offset = float(u.group(1)) * units[u.group(2)]
            value = span.start_ns + round(offset) if math.isfinite(offset) and abs(offset) < INT64 else None
        elif re.fullmatch(r"[-+]?\d{1,30}", part):
            value = int(part)
        else:
            raise PerflibError(f"--window {text!r}: {part!r} is neither integer ns nor a number with ns/us/ms/s")
        if value is None or not -INT64 <= value < INT64:
            raise PerflibError(f"--window {text!r}: {part!r} is out of range: a bound is ns on the trace's clock, "
                               f"within ±{INT64 / 1e9 / 86400 / 365.25:.0f} years (int64 ns)")
        return value

    return Window(one(m.group(1), span.start_ns), one(m.group(2), span.end_ns), text)
