"""Cut one long trace, a profiled server's whole lifetime, into the level windows of a sweep's run folders.

A server is profiled once for a whole sweep (rocprofv3, nsys, CUPTI injection or Kineto around the
server process), but a campaign attributes each level on its own. Every run folder below a sweep's
output that has level clocks gets `trace.parquet`: the dispatches overlapping its level window ± a
margin, on the trace's own clock, and beside it the host API calls of the same window
(`trace.api.parquet`, what fills the host gaps) and its ranges and marks (`trace.markers.parquet`: the
engine's step ranges, from which the steps and their phases are counted). Its manifest then records
`trace_path` and `trace_cut` (the cut's bounds and how far the whole capture reaches), so that `perflib
campaign report` finds the cut, windows it to the decode window (SERVERS.md §5.2) and sees where the capture did not cover that window.
The cut files are also the committable form: compressed and holding only the windows that matter.

A cut never destroys a committed one: where a run folder already holds a cut, the new window
replaces it only if it holds at least as many dispatches (`replace=True` overrides). A trace of
another time, whose windows hold nothing, once turned a committed H200 window of 118,396
dispatches into an empty one, with only a warning afterwards.
Each cut is written to a temporary file in the run folder and renamed over the old one once
complete, and only the manifests of folders whose cut was written are changed.
"""

from __future__ import annotations

import contextlib
import gzip
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from perflib import atomic, attribution, rundir
from perflib.clocks import CLOCK_KEYS
from perflib.errors import PerflibError
from perflib.traces import (
    Trace,
    api_path,
    file_meta,
    host_start,
    markers_path,
    write_side_parquet,
    write_trace_parquet,
)


@dataclass(frozen=True)
class Cut:
    """What one run folder got: the file written (None when not), its dispatch counts and window, and
    where an existing cut was kept as it was, that file and its dispatch count."""

    run_dir: Path
    path: Path | None
    dispatches: int = 0
    kernels: int = 0
    start_ns: int | None = None
    end_ns: int | None = None
    clock: str = ""
    note: str = ""
    kept: Path | None = None
    kept_dispatches: int | None = None

    @property
    def status(self) -> str:
        """`written`, `kept` (an existing cut left as it was) or `skipped` (nothing to cut)."""
        return "written" if self.path is not None else "kept" if self.kept is not None else "skipped"

    @property
    def empty(self) -> bool:
        """True where a window was cut but holds no kernel (a clock or process mismatch, usually)."""
        return self.path is not None and self.kernels == 0

    @property
    def refused(self) -> bool:
        """True where an existing cut was kept because the new window held fewer dispatches."""
        return self.kept is not None and self.start_ns is not None


def _run_manifests(runs_dir: Path) -> list[Path]:
    """The manifests of every run folder below `runs_dir` (or of `runs_dir` itself)."""
    if (runs_dir / rundir.MANIFEST).is_file():
        return [runs_dir / rundir.MANIFEST]
    return sorted(p for p in runs_dir.rglob(rundir.MANIFEST) if rundir.parse_run_name(p.parent.name))


def existing_dispatches(path: Path) -> int | None:
    """How many dispatches the cut at `path` holds (its Parquet row count); None where it cannot be read."""
    import pyarrow.parquet as pq  # late: 18 ms (measured) that `import perflib.campaign` skips

    try:
        return int(pq.ParquetFile(path).metadata.num_rows)
    except Exception:  # noqa: BLE001 - pyarrow raises several types for a file it cannot read
        return None


SIDES = {"api": api_path, "markers": markers_path}
"""The tables a cut keeps beside its dispatches, each in its own file: the host API calls (what fills the
host gaps) and the ranges and marks (the engine's steps and their phases)."""


def _in_bounds(frame: pd.DataFrame, start: int, end: int, marks: bool) -> bool:
    """Whether any row overlaps [start, end) (`marks`: or a row of no length lies inside it), as
    `traces.write_side_parquet` keeps them."""
    if not len(frame):
        return False
    s, e = frame["start_ns"], frame["end_ns"]
    after = (e > start) | ((e == s) & (s >= start)) if marks else e > start
    return bool((after & (s < end)).any())


def _write_atomic(trace: Trace, inside: pd.DataFrame, target: Path, start: int, end: int) -> Path:
    """Write the cut through `atomic.atomic_target`: a failure at any point leaves `target` as it
    was and no temporary file behind. Names read as a categorical (the lean read) are written as text,
    as the full read's are, and the meta is the file's (`traces.file_meta`), so that a cut from the lean
    read is the cut from the full read. The host API calls and the markers of the same window (reaching
    back to the launch calls of its dispatches, `traces.host_start`) go beside it (`traces.api_path`,
    `traces.markers_path`), through temporary files too, renamed right after the
    cut that names them: a failure before leaves every file as it was. Where the window holds none of
    them, an older such file is removed once the cut that no longer names it is in place."""
    meta = file_meta(trace)
    if isinstance(inside["kernel"].dtype, pd.CategoricalDtype):
        inside = inside.assign(kernel=inside["kernel"].astype("str"))
    cut = replace(trace, dispatches=inside, meta=meta)
    tables = {"api": trace.api, "markers": trace.markers}
    reach = host_start(trace, inside, start)  # back to the launch calls of its dispatches
    described: dict[str, Any] = {}
    stale = []
    with contextlib.ExitStack() as stack:
        for key, near in SIDES.items():
            side = near(target)
            if _in_bounds(tables[key], reach, end, marks=key == "markers"):
                side_tmp = stack.enter_context(atomic.atomic_target(side))
                described[key] = write_side_parquet(trace, key, side_tmp, reach, end, name=side.name)
            else:  # writes nothing: says why there is none
                described[key] = write_side_parquet(trace, key, side, reach, end)
                stale.append(side)
        with atomic.atomic_target(target) as tmp:
            write_trace_parquet(cut, tmp, start, end, api=described["api"], markers=described["markers"])
    for side in stale:
        side.unlink(missing_ok=True)
    return target


def _keep_existing(run_dir: Path, target: Path, n_new: int, replace_cuts: bool) -> tuple[int | None, str] | None:
    """(its dispatch count, why) where the cut already at `target` is to be kept; None to write over it."""
    if replace_cuts or not target.exists():
        return None
    old = existing_dispatches(target)
    if old is None:
        return None, f"kept as it was: the existing {target.name} cannot be read as Parquet (--replace to overwrite it)"
    if n_new < old:
        return old, (f"kept as it was: the existing {target.name} holds {old} dispatches, the new window {n_new} "
                     "(a trace of another time or process?); --replace to overwrite it")
    return None


def capture_span(trace: Trace) -> tuple[int, int] | None:
    """(first start, last end) of all the dispatches of a lifetime trace, in ns on its clock: how far
    the capture reaches, which a cut keeps (`trace_cut.capture_start_ns` / `capture_end_ns`) so that a
    run whose window the capture did not cover is never attributed as if it did (`perflib.derive`)."""
    frame = trace.dispatches
    if not len(frame):
        return None
    return int(frame["start_ns"].min()), int(frame["end_ns"].max())


def _cut_one(trace: Trace, manifest_path: Path, margin_ns: int, repeats: int | None, name: str,
             replace_cuts: bool, span: tuple[int, int] | None = None) -> Cut:
    """One run folder's cut: skipped, kept as it was, or written (and its manifest updated)."""
    run_dir = manifest_path.parent
    target = run_dir / name
    manifest = rundir.read_manifest(run_dir)
    clocks = manifest.get("clocks") or {}
    if not clocks.get("start") or not clocks.get("end"):
        return Cut(run_dir, None, note="no level clocks in its manifest (the level never ran)")
    if repeats is not None and int(manifest.get("repeat", 1)) > repeats:
        if target.exists():
            return Cut(run_dir, None, note=f"repeat {manifest.get('repeat')} > {repeats}: not cut; its existing "
                       f"{name} kept as it was", kept=target, kept_dispatches=existing_dispatches(target))
        manifest["trace_note"] = f"traced, trace not kept (only repeats 1..{repeats} are kept)"
        atomic.write_json_atomic(manifest_path, manifest)
        return Cut(run_dir, None, note=f"repeat {manifest.get('repeat')} > {repeats}: not kept")
    window = attribution.window_from_manifest(trace, manifest)
    start, end = window.start_ns - margin_ns, window.end_ns + margin_ns
    frame = trace.dispatches
    inside = frame[(frame["end_ns"] > start) & (frame["start_ns"] < end)]
    kernels = int((inside["kind"].astype(str) == "kernel").sum())
    clock = window.clock or trace.clock
    keep = _keep_existing(run_dir, target, len(inside), replace_cuts)
    if keep is not None:
        return Cut(run_dir, None, len(inside), kernels, start, end, clock, keep[1], kept=target,
                   kept_dispatches=keep[0])
    # the writer applies the same bounds (on the slice: no second pass over the whole trace) and records them
    out = _write_atomic(trace, inside, target, start, end)
    manifest["trace_path"] = out.name
    manifest["trace_cut"] = {"from": Path(str(trace.path)).name, "source": trace.source, "clock": clock,
                             "margin_ms": margin_ns / 1e6, "start_ns": start, "end_ns": end,
                             "capture_start_ns": span[0] if span else None, "capture_end_ns": span[1] if span else None}
    manifest.pop("trace_note", None)
    atomic.write_json_atomic(manifest_path, manifest)
    return Cut(run_dir, out, len(inside), kernels, start, end, clock,
               "" if kernels else "no kernel dispatch inside the level window")


def cut_into_runs(trace: Trace, runs_dir: str | Path, margin_ns: int = 50_000_000,
                  repeats: int | None = None, name: str = "trace.parquet", replace: bool = False) -> list[Cut]:
    """Write each run folder's level window of `trace` (± `margin_ns`) as `name`, and point its
    manifest at it. `repeats=N` cuts repeats 1..N only; the others' manifests say why they have no trace.

    Run folders without level clocks (a level that never started) are skipped with a note. A folder
    that already holds a cut keeps it where the new window holds fewer dispatches, unless `replace`.
    """
    runs_dir = Path(runs_dir)
    manifests = _run_manifests(runs_dir)
    if not manifests:
        raise PerflibError(f"{runs_dir}: no run folder with a manifest.json below it (expected a `perflib sweep --out` folder)")
    span = capture_span(trace)
    return [_cut_one(trace, m, margin_ns, repeats, name, replace, span) for m in manifests]


@dataclass(frozen=True)
class KinetoCut:
    """What `cut_kineto` kept of one Kineto file: events before and after, the window (Unix ns) and how far
    the file reached; `note` says why it was copied whole (no `baseTimeNanoseconds`, no level clocks)."""

    events: int
    kept: int
    start_ns: int | None = None
    end_ns: int | None = None
    capture_start_ns: int | None = None
    capture_end_ns: int | None = None
    note: str = ""


def _timed(event: Any) -> bool:
    """An event placed in time: not metadata (`ph` M: process and thread names, kept whatever its `ts`)."""
    return isinstance(event, dict) and event.get("ph") != "M" and isinstance(event.get("ts"), int | float)


def cut_kineto(source: Path, target: Path, clocks: Any, margin_ns: int = 50_000_000) -> KinetoCut:
    """A Kineto trace file (`.json` or `.json.gz`) written to `target` (gzip) with only the events that
    overlap the level window ± `margin_ns`, and every metadata event (`ph` M): the form a per-run PyTorch trace is
    kept in, so that its run folder holds its level and not the idle seconds around the profiler's toggles.

    The window is the manifest's realtime readings (`clocks`), the file's clock is Unix ns through its
    `baseTimeNanoseconds` (docs/reference/FORMATS.md: `ts` µs + base); a file without that base, or a run
    without level clocks, is copied whole, and the note says so. The file is written whole or not at all."""
    opener = gzip.open if source.name.endswith(".gz") else open
    with opener(source, "rt", encoding="utf-8") as handle:
        doc = json.load(handle)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise PerflibError(f"{source}: expected a Kineto trace (a JSON object with a traceEvents list)")
    events = doc["traceEvents"]
    base = doc.get("baseTimeNanoseconds")
    timed = [e for e in events if _timed(e)]

    def to_ns(us: float) -> int:
        return int(round(us * 1000)) + int(base)

    based = isinstance(base, int) and not isinstance(base, bool)
    span = (min(to_ns(e["ts"]) for e in timed), max(to_ns(e["ts"] + float(e.get("dur") or 0)) for e in timed)) \
        if based and timed else (None, None)
    start = end = None
    note = ""
    try:
        start = int(clocks["start"][CLOCK_KEYS["realtime"]]) - margin_ns
        end = int(clocks["end"][CLOCK_KEYS["realtime"]]) + margin_ns
    except (KeyError, TypeError, ValueError):
        note = "copied whole: the run has no level clocks"
    if not based:
        note = "copied whole: the trace has no baseTimeNanoseconds to put it on the level's clock"
    kept = events
    if not note and start is not None and end is not None:
        kept = [e for e in events if not _timed(e)
                or (to_ns(e["ts"] + float(e.get("dur") or 0)) > start and to_ns(e["ts"]) < end)]
    doc["traceEvents"] = kept
    partial = target.with_name(target.name + ".partial")
    with gzip.open(partial, "wt", encoding="utf-8", compresslevel=6) as out:
        json.dump(doc, out, separators=(",", ":"))
    partial.replace(target)
    return KinetoCut(len(events), len(kept), start if not note else None, end if not note else None,
                     span[0], span[1], note)
