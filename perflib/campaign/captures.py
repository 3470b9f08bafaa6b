"""A stopped server's lifetime capture, cut into the run folders of the levels it served.

A wrapping or injected profiler (rocprofv3, nsys, CUPTI) records the whole life of one server start.
Once the server has stopped and the profiler has flushed, `collect_segment` reads that capture once
(nsys: exported to SQLite first), cuts each served run's level window into its folder as
`trace.parquet` (`perflib.cut`), and compresses a text capture in place, so that nothing measured is
lost and the committable form is small. A capture that cannot be read leaves each of its runs'
manifests saying why, and the counters of those runs stand.
"""

from __future__ import annotations

import gzip
import shutil
from dataclasses import dataclass
from pathlib import Path

from perflib import cut, rundir, traces
from perflib.campaign.servers import Segment
from perflib.config import RunSpec
from perflib.errors import PerflibError


@dataclass(frozen=True)
class Collected:
    """What one segment's capture gave: the runs cut (with their kernel counts) and the failures."""

    capture: Path | None
    cuts: tuple[cut.Cut, ...] = ()
    errors: tuple[tuple[str, str], ...] = ()


def _note_runs(runs: list[RunSpec], data: Path, note: str) -> None:
    """Write why a run has no trace into the manifests of runs that were measured: `trace_note`, and
    `trace_lost` (a trace that was to be made and was not; the page names it on its first screen)."""
    for run in runs:
        manifest = rundir.read_manifest(run.run_dir(data), missing_ok=True)
        if manifest is not None:
            manifest["trace_note"] = note
            manifest["trace_lost"] = note
            rundir.write_manifest(run.run_dir(data), manifest)


def collect_segment(segment: Segment, data: Path, keep_repeats: int | None = None) -> Collected:
    """Cut a stopped segment's lifetime capture into the folders of the runs it served."""
    if segment.capture is None or not segment.runs:
        return Collected(None)
    runs = [r for r in dict.fromkeys(segment.runs) if (r.run_dir(data) / rundir.MANIFEST).is_file()]
    try:
        capture = segment.capture.lifetime_capture()
    except PerflibError as exc:
        _note_runs(runs, data, f"profiler {segment.capture.kind}: {exc}")
        return Collected(None, errors=tuple((r.label, str(exc)) for r in runs))
    if capture is None:  # torch: one file per run, moved in already
        return Collected(None)
    try:
        if not capture.exists():
            raise PerflibError(f"{capture}: the {segment.capture.kind} capture was not written (did the profiler "
                               "run and the server stop within its grace period?)")
        trace = traces.read_trace(capture, traces.ReadMode.LEAN_IDS)  # a lifetime: bounded by its dispatches
    except (PerflibError, OSError, ValueError) as exc:
        _note_runs(runs, data, f"capture {capture} could not be read: {exc}")
        return Collected(capture, errors=tuple((r.label, f"capture {capture}: {exc}") for r in runs))
    cuts: list[cut.Cut] = []
    errors: list[tuple[str, str]] = []
    for run in runs:
        try:
            cuts += cut.cut_into_runs(trace, run.run_dir(data), repeats=keep_repeats)
        except (PerflibError, OSError, ValueError) as exc:
            errors.append((run.label, f"cut of {capture}: {exc}"))
            _note_runs([run], data, f"cut of {capture}: {exc}")
    _compress(capture)
    return Collected(capture, tuple(cuts), tuple(errors))


def _compress(capture: Path) -> None:
    """gzip a text capture file (CUPTI's stdout) in place once it is cut: 10-20x smaller, still readable."""
    if capture.is_file() and capture.suffix == ".txt" and capture.stat().st_size > 0:
        with open(capture, "rb") as src, gzip.open(capture.with_name(capture.name + ".gz"), "wb",
                                                    compresslevel=3) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        capture.unlink()
