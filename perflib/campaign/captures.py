"""A stopped server's lifetime capture, cut into the run folders of the levels it served.

A wrapping or injected profiler (rocprofv3, nsys, CUPTI) records the whole life of one server start.
Once the server has stopped and the profiler has flushed, `collect_segment` reads that capture once
(nsys: exported to SQLite first), cuts each served run's level window into its folder as
`trace.parquet` (`perflib.cut`), and compresses a text capture in place, so that nothing measured is
lost and the committable form is small. A capture that cannot be read leaves each of its runs'
manifests saying why, and the counters of those runs stand. A cut that did not finish (the runner was
stopped while it cut) is done again by the next `campaign run` from the capture still on disk
(`recut_pending`), as `server.json` names each start's capture and runs.
"""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from perflib import cut, rundir, traces
from perflib.campaign.servers import SERVER_RECORD, Segment, earlier_starts
from perflib.config import Campaign, RunSpec
from perflib.errors import PerflibError
from perflib.server import profilers
from perflib.server.profilers import Capture


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
    return collect_capture(segment.capture, segment.runs, segment.record, data, keep_repeats)


def recut_pending(campaign: Campaign, data: Path, log: Callable[[str], None] | None = None) -> list[tuple[str, str]]:
    """Cut again the captures whose cut did not finish: a start recorded in `server.json` with a
    lifetime capture, one of whose complete runs has neither a trace nor a note saying why (the runner
    was stopped while it cut). Returns the failures, as `collect_segment`'s errors."""
    say = log or (lambda message: None)
    by_label = {run.label: run for run in campaign.expand()}
    errors: list[tuple[str, str]] = []
    for arm in campaign.arms:
        for backend in campaign.backends:
            profiler = campaign.profiler(arm.name, backend.name)
            if profilers.profiler_kind(profiler.kind).cut != "lifetime":
                continue
            path = rundir.backend_dir(data, campaign.name, arm.name, backend.name) / SERVER_RECORD
            for start in earlier_starts(path) if path.is_file() else []:
                runs = [by_label[label] for label in start.get("runs") or [] if label in by_label]
                if not start.get("capture") or "ended" not in start or not any(_uncut(r, data) for r in runs):
                    continue
                capture = Capture(profiler.kind, Path(start["capture"]), binary=profiler.binary)
                say(f"{arm.name}/{backend.name}: the cut of capture {capture.directory} did not finish; cutting "
                    f"it again into {len(runs)} run folders")
                errors += collect_capture(capture, runs, start, data, profiler.keep_repeats).errors
    return errors


def _uncut(run: RunSpec, data: Path) -> bool:
    """A complete run with neither a trace nor a note saying why it has none."""
    try:
        manifest = rundir.read_manifest(run.run_dir(data), missing_ok=True)
    except PerflibError:
        return False
    return (manifest is not None and manifest.get("status") == rundir.COMPLETE and not manifest.get("trace_path")
            and not manifest.get("trace_note"))


def collect_capture(capture_of: Capture, served: list[RunSpec], record: dict, data: Path,
                    keep_repeats: int | None = None) -> Collected:
    """Cut one start's lifetime capture into the folders of the runs it served (`record`: its
    `server.json` start, which says how it ended)."""
    runs = [r for r in dict.fromkeys(served) if (r.run_dir(data) / rundir.MANIFEST).is_file()]
    try:
        capture = capture_of.lifetime_capture()
    except PerflibError as exc:
        _note_runs(runs, data, f"profiler {capture_of.kind}: {killed_while_flushing(capture_of.kind, record)}{exc}")
        return Collected(None, errors=tuple((r.label, str(exc)) for r in runs))
    if capture is None:  # a per-run kind (torch): each run's file moved in already
        return Collected(None)
    try:
        if not capture.exists():
            raise PerflibError(f"{capture}: the {capture_of.kind} capture was not written (did the profiler "
                               "run and the server stop within its grace period?)")
        trace = traces.read_trace(capture, traces.ReadMode.LEAN_IDS)  # a lifetime: bounded by its dispatches
    except (PerflibError, OSError, ValueError) as exc:
        why = f"{killed_while_flushing(capture_of.kind, record)}{exc}"
        _note_runs(runs, data, f"capture {capture} could not be read: {why}")
        return Collected(capture, errors=tuple((r.label, f"capture {capture}: {why}") for r in runs))
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


def killed_while_flushing(kind: str, record: dict) -> str:
    """`the nsys profiler was killed while it flushed its capture (...): ` where the server's record says
    its process was SIGKILLed at the stop (the grace period ran out) or died by a signal; else ''."""
    how = record.get("killed") or (record.get("exit") if str(record.get("exit", "")).startswith("killed by")
                                    else None)
    return (f"the {kind} profiler was killed while it flushed its capture ({how}; give it longer with "
            "shutdown.grace_s): " if how else "")


def _compress(capture: Path) -> None:
    """gzip a text capture file (CUPTI's stdout) in place once it is cut: 10-20x smaller, still readable."""
    if capture.is_file() and capture.suffix == ".txt" and capture.stat().st_size > 0:
        with open(capture, "rb") as src, gzip.open(capture.with_name(capture.name + ".gz"), "wb",
                                                    compresslevel=3) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        capture.unlink()
