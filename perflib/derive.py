"""Derived tables (docs/SCHEMA.md §4) of a campaign, built from `data/raw` alone.

`build(campaign)` reads every run folder (`perflib.runs.summarize_run`) and every trace the
runs point to (`perflib.traces.read_trace`, windowed to the level by the manifest clocks and
attributed by `perflib.attribution.summarize`), each trace once: a run's attributed tables are kept
in `data/derived/<campaign>/runs/` (`perflib.runcache`, keyed by the raw trace's hash and what else
they depend on; the runner stores them at the end of each arm, `run_tables`) and taken from there
while they stand. `write(tables, out_dir)` writes the CSV files with sorted rows and floats that read
back exactly (`read`), so that a rebuild gives the same bytes and a page drawn from them is the page
drawn from `data/raw`.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from perflib import atomic, attribution, checks, classes, runcache, rundir, runs, traces
from perflib.config import BackendSpec, Campaign, RunSpec
from perflib.errors import InputError, PerflibError
from perflib.server import losses, profilers

KEYS = ["campaign", "arm", "backend", "batch", "context", "repeat"]
COLUMNS: dict[str, list[str]] = {
    "runs": KEYS + ["status", "ok", "failed", "ttft_ms", "ttft_p95_ms", "decode_tok_s", "aggregate_tok_s",
                    "decode_step_ms", "raw_step_ms", "steady_step_ms", "occupancy", "prefill_chunks", "mixed_steps",
                    "decode_steps", "decode_tokens", "own_step_share", "prefill_share", "other_share", "window_ms",
                    "trace_loss", "profiler_loss"],
    "trace_runs": KEYS + ["dispatches", "window_ms", "busy_ms", "gap_ms", "busy_share", "steps", "busy_ms_per_step",
                          "gap_ms_per_step", "step_method", "steps_guessed", "window", "window_why",
                          "window_prefill_share", *attribution.DECODE_COLUMNS],
    "classes": KEYS + ["kernel_class", "time_ms", "count", "ms_per_step", "share", *attribution.DECODE_KERNEL_COLUMNS],
    "kernels": KEYS + ["kernel", "kernel_class", "time_ms", "count", "ms_per_step", "share",
                       *attribution.DECODE_KERNEL_COLUMNS],
    "gaps": KEYS + ["bucket", "gap_ms", "count"],
    "steps": KEYS + ["step", "start_ns", "end_ns", "busy_ms", "gap_ms", "dispatches", "phase"],
    "phases": KEYS + attribution.PHASE_COLUMNS,
}
COLUMNS["host_gaps"] = KEYS + list(attribution.HOST_GAP_COLUMNS)  # what fills the host gaps, one row per run
COLUMNS["steps"] = COLUMNS["steps"] + [f"{part}_ms" for part in attribution.HOST_GAP_PARTS]  # and each step's
SORT: dict[str, list[str]] = {
    "runs": KEYS, "trace_runs": KEYS, "classes": KEYS + ["kernel_class"], "kernels": KEYS + ["kernel"],
    "gaps": KEYS, "steps": KEYS + ["step"], "phases": KEYS, "host_gaps": KEYS,
}
GAP_ORDER = ["<10us", "10-50us", "50-200us", "0.2-1ms", "1-5ms", ">=5ms"]
PHASE_ORDER = [*attribution.PHASES, "unknown"]
ORDERED = {"gaps": ("bucket", GAP_ORDER), "phases": ("phase", PHASE_ORDER)}
"""Tables whose rows within a run follow a fixed order of one column, not its alphabet."""
FLOAT_FORMAT = None
"""Floats as Python's shortest repr that reads back as the same number (with `ROUND_TRIP`): a page drawn
from `data/derived` alone is then the page drawn from `data/raw`, to the last digit it shows (six
significant digits turned 168.785 into 168.79 on one and 168.78 on the other)."""
ROUND_TRIP = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}
"""How `read` (and `perflib.pageinputs.read`) parse the floats back: exactly. pandas 3's default parser
is exact (and it deprecates `float_precision`); pandas 2's fast default is not, so there it is asked for."""


def empty(name: str) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in COLUMNS[name]})


@dataclass(frozen=True)
class DerivedTables:
    """The derived tables of one campaign, plus notes on what could not be derived and why."""

    runs: pd.DataFrame = field(default_factory=lambda: empty("runs"))
    trace_runs: pd.DataFrame = field(default_factory=lambda: empty("trace_runs"))
    classes: pd.DataFrame = field(default_factory=lambda: empty("classes"))
    kernels: pd.DataFrame = field(default_factory=lambda: empty("kernels"))
    gaps: pd.DataFrame = field(default_factory=lambda: empty("gaps"))
    steps: pd.DataFrame = field(default_factory=lambda: empty("steps"))
    host_gaps: pd.DataFrame = field(default_factory=lambda: empty("host_gaps"))
    notes: tuple[str, ...] = ()
    phases: pd.DataFrame = field(default_factory=lambda: empty("phases"))

    def table(self, name: str) -> pd.DataFrame:
        return getattr(self, name)


def normalize(name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """Schema column order (extra columns kept after), rows sorted by the keys, a fresh index."""
    frame = frame.copy()
    for col in COLUMNS[name]:
        if col not in frame.columns:
            frame[col] = None
    extra = sorted(c for c in frame.columns if c not in COLUMNS[name])
    frame = frame[COLUMNS[name] + extra]
    if len(frame):
        by = [c for c in SORT[name] if c in frame.columns]
        if name in ORDERED:
            column, order = ORDERED[name]
            frame = frame.assign(_o=frame[column].map({b: i for i, b in enumerate(order)}))
            by = by + ["_o"]
        frame = frame.sort_values(by, kind="stable").drop(columns=[c for c in ["_o"] if c in frame.columns])
    return frame.reset_index(drop=True)


def run_keys(campaign: str, arm: str, backend: str, manifest: dict, run_dir: Path) -> dict[str, Any]:
    """The key columns of a run's rows: the manifest's batch, context and repeat, else the folder name's."""
    batch, context, repeat = rundir.parse_run_name(run_dir.name) or (None, None, None)
    return {"campaign": campaign, "arm": arm, "backend": backend,
            "batch": int(manifest.get("batch", batch)), "context": int(manifest.get("context", context)),
            "repeat": int(manifest.get("repeat", repeat))}


def summarize_run_row(run_dir: Path, keys: dict[str, Any]) -> dict[str, Any]:
    """One runs.csv row: `perflib.runs.summarize_run`, with the campaign keys set from the folder."""
    row = dict(runs.summarize_run(run_dir))
    row.update(keys)
    return row


def _read_trace_cached(path: Path) -> traces.Trace:
    """`read_trace`, keeping the last trace read: a server profiled once for a whole sweep has one
    trace (`profiler.output` without per-run fields) that every run of the sweep windows, and reading
    it once per run would repeat the slowest step of the report. Keyed on path, size and mtime. Read
    lean (`ReadMode.LEAN`): a minutes-long trace costs memory by its dispatches, not by its file,
    and every figure attributed from it is the full read's (tests/traces/test_lean.py)."""
    stat = path.stat()
    return _read_trace_keyed(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=1)
def _read_trace_keyed(path: str, size: int, mtime_ns: int) -> traces.Trace:
    return traces.read_trace(path, mode=traces.ReadMode.LEAN)


@dataclass(frozen=True)
class RunTrace:
    """One run's trace tables as the page reads them (its key columns added), or why it has none; `loss`: why its trace is not whole ('' where it is,
    or where none was made); `profiler_loss`: what the server start that served it reported lost."""

    tables: dict[str, pd.DataFrame] | None
    why: str | None = None
    loss: str = ""
    profiler_loss: str = ""


def _loss_kind(kind: str, source: str | None) -> str:
    """The profiler whose loss lines to look for: the campaign's live kind, else the one whose captures
    read as the trace's source (a server injected by hand: `CUDA_INJECTION64_PATH` in an arm's env)."""
    if profilers.profiler_kind(kind).method not in ("none", "files"):
        return kind
    return profilers.kind_of_source(source)


@functools.lru_cache(maxsize=16)
def _scanned_log(path: str, size: int, mtime_ns: int, kind: str) -> tuple[dict[str, Any], ...]:
    return tuple(losses.scan(Path(path), kind))


def _start_losses(run_dir: Path, kind: str) -> tuple[str, int | None]:
    """(what the start that served this run reported lost, the records it says it dropped). Its
    `server.json` entry where it was scanned when the server stopped; else (data from before that, or a
    server started by hand) the loss lines of the whole `server.log` beside the run folders."""
    start = rundir.server_start_of(run_dir) or {}
    if "losses" not in start:
        log = run_dir.parent / rundir.SERVER_LOG
        found: tuple[dict[str, Any], ...] = ()
        if kind and log.is_file():
            stat = log.stat()
            found = _scanned_log(str(log.resolve()), stat.st_size, stat.st_mtime_ns, kind)
        start = {**start, "losses": list(found)}
    return losses.describe(start), losses.dropped(start)


def _tolerance_ns(window: attribution.Window, count: attribution.StepCount | None) -> int:
    """How far a window may reach past a capture's first or last record and still be covered: two steps
    (the last step's kernels end a host turn before the window does), else 5% of it; at least 1 ms."""
    length = int(window.end_ns) - int(window.start_ns)
    steps = getattr(count, "count", None)
    return max(2 * length // steps if steps else length // 20, 1_000_000)


def _capture_span(trace: traces.Trace, manifest: dict[str, Any]) -> tuple[int, int] | None:
    """How far the capture reaches: the `capture_start_ns`/`capture_end_ns` a cut recorded, else (a cut
    made before they were recorded, or a file per run) the trace's own first start and last end."""
    cut = manifest.get("trace_cut") if isinstance(manifest.get("trace_cut"), dict) else {}
    start, end = cut.get("capture_start_ns"), cut.get("capture_end_ns")
    if isinstance(start, int) and isinstance(end, int):
        return start, end
    frame = trace.dispatches
    return (int(frame["start_ns"].min()), int(frame["end_ns"].max())) if len(frame) else None


def attribute_run(campaign: Campaign, arm: str, backend: str, run_dir: Path, keys: dict[str, Any],
                  decode_steps: float | None) -> RunTrace:
    """The trace tables of one run, windowed as the page reads it, or why not. A trace that does not
    cover its window (the capture began late or ended early) is not attributed: its uncovered part would
    read as host gaps. A trace that was to be made and was not says why (`trace_lost`)."""
    spec = campaign.backend(backend) if backend in {b.name for b in campaign.backends} else None
    run = RunSpec(campaign.name, arm, backend, keys["batch"], keys["context"], keys["repeat"], campaign.decode_tokens)
    kind = campaign.profiler(arm, backend).kind if spec else "none"
    manifest = rundir.read_manifest(run_dir, missing_ok=True) or {}
    lost = str(manifest.get("trace_lost") or "")
    path = campaign.trace_path(run)
    if path is None:
        shown = spec.profiler.kind if spec else "unknown"
        why = lost or f"arm {arm}: no kernel trace for backend {backend} (profiler: {shown})"
        if not lost and profilers.profiler_kind(kind).method not in ("none", "files") \
                and not manifest.get("trace_note"):
            lost = f"{run.label}: the {kind} profiler ran but no trace reached this run folder"  # and nothing said why
            why = lost
        return RunTrace(None, why, lost, _start_losses(run_dir, _loss_kind(kind, None))[0] if lost else "")
    if not path.exists():
        why = f"{run.label}: trace path {path} does not exist"
        return RunTrace(None, why, lost or why)
    done = _attributed_trace(campaign, spec, run, run_dir, path, manifest, decode_steps)
    if done.error:
        why = f"{run.label}: trace {path} could not be attributed: {done.error}"
        return RunTrace(None, why, why)
    reported, dropped = _start_losses(run_dir, _loss_kind(kind, done.source))
    if done.uncovered or done.tables is None:
        loss = done.uncovered + (f": {reported}" if reported else "")
        return RunTrace(None, f"{run.label}: trace not attributed: {loss}", loss, reported)
    out = {name: frame.assign(**keys) for name, frame in done.tables.items()}
    loss = (f"its server start's capture lost {dropped:,} records, where is not known (see Profiler losses)"
            if dropped else "")
    return RunTrace(out, None, loss, reported)


def _attributed_trace(campaign: Campaign, spec: BackendSpec | None, run: RunSpec, run_dir: Path, path: Path,
                      manifest: dict[str, Any], decode_steps: float | None) -> runcache.Attributed:
    """The run's trace attributed, windowed as the page reads it (`run_window`: decode, SERVERS.md §5.2,
    steps from the request records; level, the counters; steps), or what stopped it: taken from
    `data/derived/<campaign>/runs/...` where that was stored for the same trace, run folder and settings
    (`perflib.runcache`), else read from raw, attributed and stored there."""
    marker = spec.profiler.step_marker if spec else None
    mode = spec.profiler.window if spec else "decode"
    try:
        table: Any = None
        if spec and spec.kernel_classes:
            file = campaign.class_file(spec)
            table = classes.load_class_file(file) if file else spec.kernel_classes
        key = runcache.key(path, run_dir, decode_steps, table, mode, marker)
    except Exception as exc:  # noqa: BLE001 - a bad class table is a result for the page, not a crash
        return runcache.Attributed(None, error=str(exc))
    folder = campaign.derived_dir() / "runs" / run.arm / run.backend / run.folder
    stored = runcache.load(folder, key)
    if stored is not None:
        return stored
    source = None
    try:
        trace = _read_trace_cached(path)
        source = trace.source
        level = attribution.run_window(trace, run_dir, mode, counters=decode_steps, step_marker=marker)
        span = _capture_span(trace, manifest)
        if span is not None:
            covered = attribution.coverage(level.window, span, _tolerance_ns(level.window, level.count))
            if not covered.covered:
                done = runcache.Attributed(source, uncovered=covered.describe(f"{mode} window"))
                runcache.save(folder, key, done)
                return done
        summary = attribution.summarize(trace, window=level.window, classes=table, steps=level.count,
                                        step_marker=marker)
        split = attribution.host_gaps(trace, summary.window, summary.step_table, summary.decode_periods(),
                                      sampling=summary.sampling)
    except Exception as exc:  # noqa: BLE001 - a bad trace is a result for the page, not a crash
        return runcache.Attributed(source, error=str(exc))  # not stored: what broke may be passing (memory)
    done = runcache.Attributed(source, {
        "trace_runs": pd.DataFrame([{"dispatches": summary.dispatches, "window_ms": summary.window_ms,
                                     "busy_ms": summary.busy_ms, "gap_ms": summary.gap_ms,
                                     "busy_share": summary.busy_share, "steps": summary.steps,
                                     "busy_ms_per_step": summary.busy_ms_per_step,
                                     "gap_ms_per_step": summary.gap_ms_per_step, "step_method": summary.step_method,
                                     "steps_guessed": summary.steps_guessed, "window": level.kind, "window_why": level.why,
                                     "window_prefill_share": level.prefill_share,
                                     **summary.decode_columns(), **summary.extras}]),
        "classes": summary.classes, "kernels": summary.kernels, "gaps": summary.gap_buckets,
        "steps": split.with_steps(summary.step_table), "phases": summary.phases,
        "host_gaps": pd.DataFrame([split.row(summary.window_ms, summary.steps)])})
    runcache.save(folder, key, done)
    return done


def trace_rows(campaign: Campaign, arm: str, backend: str, run_dir: Path, keys: dict[str, Any],
               decode_steps: float | None) -> tuple[dict[str, pd.DataFrame] | None, str | None]:
    """Trace tables of one run, or (None, why not) where it has no trace, the trace is unreadable or does
    not cover the run's window (`attribute_run`)."""
    done = attribute_run(campaign, arm, backend, run_dir, keys, decode_steps)
    return done.tables, done.why


def _add(parts: dict[str, list[pd.DataFrame]], tables: dict[str, pd.DataFrame]) -> None:
    for name, frame in tables.items():
        parts[name].append(frame)


def _run_folder_rows(campaign: Campaign, parts: dict[str, list[pd.DataFrame]], notes: list[str]) -> list[dict]:
    """runs.csv rows of every run folder (with `left_out`, `perflib.checks`), and the trace tables of
    the runs that enter the medians."""
    rows, where = [], []
    for found in campaign.run_folders():
        arm, backend, run_dir = found.arm, found.backend, found.path
        try:
            manifest = rundir.read_manifest(run_dir, missing_ok=True) or {}
        except InputError as exc:
            notes.append(f"{arm}/{backend}/{run_dir.name}: not summarised: {exc}")
            continue
        keys = run_keys(campaign.name, arm, backend, manifest, run_dir)
        try:
            row = summarize_run_row(run_dir, keys)
        except Exception as exc:  # noqa: BLE001 - one broken run folder must not hide the others
            notes.append(f"{arm}/{backend}/{run_dir.name}: not summarised: {exc}")
            row = {**keys, "status": manifest.get("status", "incomplete")}
        rows.append(row)
        where.append((arm, backend, run_dir, keys))
    frame = pd.DataFrame(rows)
    out_why = checks.left_out(frame) if len(frame) else pd.Series(dtype=object)
    for i, (row, (arm, backend, run_dir, keys)) in enumerate(zip(rows, where, strict=True)):
        row["left_out"] = out_why.iloc[i] if len(out_why) else ""
        row["trace_loss"], row["profiler_loss"] = "", ""
        if str(row.get("status", "incomplete")) != "complete" or row["left_out"]:
            # a crashed or contended level's trace must not enter the medians and verdicts
            why = "incomplete" if not row["left_out"] else row["left_out"].split(";")[0]
            notes.append(f"{arm}/{backend}/{run_dir.name}: run {why}, its trace is not attributed")
            continue
        done = attribute_run(campaign, arm, backend, run_dir, keys, row.get("decode_steps"))
        row["trace_loss"], row["profiler_loss"] = done.loss, done.profiler_loss
        if done.tables is None:
            if done.why and done.why not in notes:
                notes.append(done.why)
            continue
        _add(parts, done.tables)
    return rows


def _trace_only_tables(campaign: Campaign, parts: dict[str, list[pd.DataFrame]], notes: list[str]) -> None:
    """Trace tables of the trace-only backends' runs (committed profiler captures, no run folder)."""
    for run, path in campaign.trace_only_runs():
        if path is None:
            notes.append(f"{run.label}: no trace file for this trace-only run")
            continue
        keys = {"campaign": campaign.name, "arm": run.arm, "backend": run.backend, "batch": run.batch,
                "context": run.context, "repeat": run.repeat}
        tables, why = trace_rows(campaign, run.arm, run.backend, run.run_dir(campaign.data_dir), keys, None)
        if tables is None:
            notes.append(why or f"{run.label}: no trace")
            continue
        _add(parts, tables)


def build(campaign: Campaign, data_dir: Path | None = None) -> DerivedTables:
    """All derived tables of the campaign from its run folders under `<data>/raw/<campaign>/`."""
    if data_dir is not None:
        campaign = replace(campaign, data_dir=Path(data_dir))
    parts: dict[str, list[pd.DataFrame]] = {name: [] for name in COLUMNS}
    notes: list[str] = []
    rows = _run_folder_rows(campaign, parts, notes)
    _trace_only_tables(campaign, parts, notes)
    out = {"runs": pd.DataFrame(rows) if rows else empty("runs")}
    for name in ("trace_runs", "classes", "kernels", "gaps", "steps", "phases", "host_gaps"):
        frames = [f for f in parts[name] if len(f)]
        out[name] = pd.concat(frames, ignore_index=True) if frames else empty(name)
    return DerivedTables(**{k: normalize(k, v) for k, v in out.items()}, notes=tuple(notes))


def write(tables: DerivedTables, out_dir: Path) -> list[Path]:
    """Write the CSV files (and `notes.json`) into `out_dir`; returns the paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in COLUMNS:
        path = out_dir / f"{name}.csv"
        atomic.write_atomic(path, _csv(normalize(name, tables.table(name))))  # two hosts may report at once
        written.append(path)
    notes = out_dir / "notes.json"
    atomic.write_atomic(notes, json.dumps(list(tables.notes), indent=2) + "\n")
    written.append(notes)
    return written


def _csv(frame: pd.DataFrame) -> str:
    return frame.to_csv(index=False, float_format=FLOAT_FORMAT, lineterminator="\n")


def read(out_dir: Path) -> DerivedTables:
    """The tables back from a `data/derived/<campaign>/` folder."""
    out_dir = Path(out_dir)
    frames = {}
    for name in COLUMNS:
        path = out_dir / f"{name}.csv"
        frames[name] = pd.read_csv(path, **ROUND_TRIP) if path.is_file() and path.stat().st_size else empty(name)
    notes_path = out_dir / "notes.json"
    notes = tuple(json.loads(notes_path.read_text())) if notes_path.is_file() else ()
    return DerivedTables(**frames, notes=notes)


def rebuild(campaign: Campaign, data_dir: Path | None = None) -> DerivedTables:
    """Rebuild `data/derived/<campaign>/` from `data/raw` and return the tables."""
    tables = build(campaign, data_dir)
    write(tables, campaign.derived_dir(data_dir))
    return tables


def run_tables(campaign: Campaign, run: RunSpec) -> dict[str, pd.DataFrame]:
    """The trace tables of one run, windowed to its level, as the page reads them: attributed once and
    kept in `data/derived/<campaign>/runs/<arm>/<backend>/<run>/` (`perflib.runcache`), where `build`
    takes them from while the trace and the run folder are the same; a missing trace is a clear error."""
    run_dir = run.run_dir(campaign.data_dir)
    manifest = rundir.read_manifest(run_dir, missing_ok=True)
    if manifest is None:
        raise PerflibError(f"{run_dir}: expected a run folder with manifest.json (run collect.ipynb first)")
    keys = run_keys(campaign.name, run.arm, run.backend, manifest, run_dir)
    row = summarize_run_row(run_dir, keys)
    tables, why = trace_rows(campaign, run.arm, run.backend, run_dir, keys, row.get("decode_steps"))
    if tables is None:
        raise PerflibError(why or f"{run.label}: no trace")
    return {name: normalize(name, frame) for name, frame in tables.items()}
