"""A run folder's window and step count, read the way the campaign page reads them.

`profiler.window` of a campaign: `decode` (the default) is the SERVERS.md §5.2 window where every
request decodes, with its steps counted from the request records (where the requests were staggered:
the decode span's decode-only part, no request in prefill, where it holds enough steps, else the run's
decode span, its steps the trace's own; where the stream was coalesced, the requests' span, which holds
every step of the level: its steps the trace's own, else the server's counters); `level` is the level's clocks, with
the server's counters' step count where given; `steps` is the span of the trace's step ranges (a
trace-only capture). `trace summary --manifest` reads a run folder as a `decode` campaign does, so its
steps and per-step figures are the page's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from perflib import rundir
from perflib.attribution.markers import window_from_step_annotations
from perflib.attribution.steps import StepCount
from perflib.attribution.windows import (
    DECODE_ONLY,
    TraceLike,
    Window,
    decode_window_from_run,
    window_from_manifest,
)
from perflib.errors import PerflibError
from perflib.runs import ALL_DECODING, REQUEST_SPAN, summarize_run

RECORDS = "request records (decode window)"
COUNTERS = "server counters (level window)"
SPAN_COUNTERS = "server counters (request span: every step of the level, prompt batches included)"


@dataclass(frozen=True)
class LevelWindow:
    """The window to attribute and the steps counted for it outside the trace (None: none counted); `kind`
    names the window (`decode window`, `decode span`, `request span`, `level`, `steps`) and `why` says why a
    decode window is not the all-decoding one ('' where it is)."""

    window: Window
    count: StepCount | None
    kind: str = "decode window"
    why: str = ""
    prefill_share: float = 0.0
    """The share of the window the level's requests' prefill covers (`DecodeWindow.prefill_share`): a trace
    verdict over such a window is not decided (`perflib.verdicts`)."""


def _count(value: object, source: str) -> StepCount | None:
    try:
        count = int(value)
    except (TypeError, ValueError):
        return None
    return StepCount(count, source) if count > 0 else None


def run_window(trace: TraceLike, run_dir: str | Path | None, mode: str = "decode", counters: float | None = None,
               step_marker: str | None = None) -> LevelWindow:
    """The window of a run folder for `profiler.window` = `mode` (see the module); a missing run folder
    or manifest reads as `steps`. `counters`: the level's Δdecode_steps, used by `level`."""
    if mode == "steps" or run_dir is None or not (Path(run_dir) / rundir.MANIFEST).is_file():
        return LevelWindow(window_from_step_annotations(trace, step_marker), None, "steps")
    if mode == "level":
        return LevelWindow(window_from_manifest(trace, run_dir), _count(counters, COUNTERS), "level")
    decode = decode_window_from_run(trace, run_dir)
    kind = "decode window" if decode.kind == ALL_DECODING else decode.kind
    source = RECORDS if decode.kind != DECODE_ONLY else f"request records ({DECODE_ONLY})"
    count = _count(decode.steps, source)
    if count is None and decode.kind == REQUEST_SPAN:  # every step of the level lies in it: the server's count
        count = _count(counters, SPAN_COUNTERS)
    return LevelWindow(decode.window, count, kind, decode.why, decode.prefill_share)


def manifest_window(trace: TraceLike, path: str | Path) -> LevelWindow:
    """`trace summary --manifest PATH` (a run folder or its manifest.json): the decode window and its
    request-record steps where the folder has request records that give one (a request span: the
    counters' steps, from its two scrapes), as a campaign's page reads it; else the level window from
    the manifest's clocks, with no count."""
    path = Path(path)
    run_dir = path if path.is_dir() else path.parent
    if (run_dir / rundir.REQUESTS).is_file():
        try:
            return run_window(trace, run_dir, "decode", counters=_counter_steps(run_dir))
        except PerflibError:  # no successful request: the level is all there is
            pass
    return LevelWindow(window_from_manifest(trace, path), None, "level")


def _counter_steps(run_dir: Path) -> float | None:
    """The run's Δdecode_steps from its two scrapes (`perflib.runs.summarize_run`), None where they give none."""
    try:
        return summarize_run(run_dir).get("decode_steps")
    except PerflibError:  # unreadable counters: the window still stands, without their count
        return None
