"""Cut one long trace, a profiled server's whole lifetime, into the level windows of a sweep's run folders.

A server is profiled once for a whole sweep (rocprofv3, nsys, CUPTI injection or Kineto around the
server process), but a campaign attributes each level on its own. Every run folder below a sweep's
output that has level clocks gets `trace.parquet`: the dispatches overlapping its level window ± a
margin, on the trace's own clock. Its manifest then records `trace_path` and `trace_cut`, so that
`perflib campaign report` finds the cut and windows it to the decode window (SERVERS.md §5.2).
The cut files are also the committable form: compressed and holding only the windows that matter.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perflib import attribution, rundir
from perflib.errors import PerflibError
from perflib.traces.parquet import write_trace_parquet


@dataclass(frozen=True)
class Cut:
    """What one run folder got: the file written (None when skipped), its dispatch counts and window."""

    run_dir: Path
    path: Path | None
    dispatches: int = 0
    kernels: int = 0
    start_ns: int | None = None
    end_ns: int | None = None
    clock: str = ""
    note: str = ""

    @property
    def empty(self) -> bool:
        """True where a window was cut but holds no kernel (a clock or process mismatch, usually)."""
        return self.path is not None and self.kernels == 0


def _run_manifests(runs_dir: Path) -> list[Path]:
    """The manifests of every run folder below `runs_dir` (or of `runs_dir` itself)."""
    if (runs_dir / rundir.MANIFEST).is_file():
        return [runs_dir / rundir.MANIFEST]
    return sorted(p for p in runs_dir.rglob(rundir.MANIFEST) if rundir.parse_run_name(p.parent.name))


def cut_into_runs(trace: Any, runs_dir: str | Path, margin_ns: int = 50_000_000,
                  repeats: int | None = None, name: str = "trace.parquet") -> list[Cut]:
    """Write each run folder's level window of `trace` (± `margin_ns`) as `name`, and point its
    manifest at it. `repeats=N` cuts repeats 1..N only; the others' manifests say why they have no trace.

    Run folders without level clocks (a level that never started) are skipped with a note.
    """
    runs_dir = Path(runs_dir)
    manifests = _run_manifests(runs_dir)
    if not manifests:
        raise PerflibError(f"{runs_dir}: no run folder with a manifest.json below it (expected a `perflib sweep --out` folder)")
    cuts = []
    for manifest_path in manifests:
        run_dir = manifest_path.parent
        manifest = rundir.read_manifest(run_dir)
        clocks = manifest.get("clocks") or {}
        if not clocks.get("start") or not clocks.get("end"):
            cuts.append(Cut(run_dir, None, note="no level clocks in its manifest (the level never ran)"))
            continue
        if repeats is not None and int(manifest.get("repeat", 1)) > repeats:
            manifest["trace_note"] = f"traced, trace not kept (only repeats 1..{repeats} are kept)"
            rundir.write_json_atomic(manifest_path, manifest)
            cuts.append(Cut(run_dir, None, note=f"repeat {manifest.get('repeat')} > {repeats}: not kept"))
            continue
        window = attribution.window_from_manifest(trace, manifest)
        start, end = window.start_ns - margin_ns, window.end_ns + margin_ns
        frame = trace.dispatches
        inside = frame[(frame["end_ns"] > start) & (frame["start_ns"] < end)]
        # the writer applies the same bounds (on the slice: no second pass over the whole trace) and records them
        out = write_trace_parquet(replace(trace, dispatches=inside), run_dir / name, start, end)
        kernels = int((inside["kind"].astype(str) == "kernel").sum())
        clock = window.clock or trace.clock
        manifest["trace_path"] = out.name
        manifest["trace_cut"] = {"from": Path(str(trace.path)).name, "source": trace.source, "clock": clock,
                                 "margin_ms": margin_ns / 1e6, "start_ns": start, "end_ns": end}
        manifest.pop("trace_note", None)
        rundir.write_json_atomic(manifest_path, manifest)
        cuts.append(Cut(run_dir, out, len(inside), kernels, start, end, clock,
                        "" if kernels else "no kernel dispatch inside the level window"))
    return cuts
