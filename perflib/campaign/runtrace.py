"""A per-run profiler's files (the `torch` kind: vLLM's and SGLang's own PyTorch profiler) kept with the
run that made them.

After `/stop_profile` the server writes its Kineto files seconds later (`perflib.server.profilers.
await_files` waits until their sizes settle). `keep_run_trace` moves them out of the capture folder into
the run folder: the run's trace (the worker's, `rank0.*.pt.trace.json.gz`, `profilers.pick_trace`) as
`trace.json.gz`, cut to the level window ± 50 ms (`perflib.cut.cut_kineto`), so that the folder holds its
level and not the idle seconds around the toggles; the other traces (vLLM's API process,
`*.async_llm.*.pt.trace.json.gz`) cut the same way and the profiler's tables under `trace-extra/`. What
went wrong is returned as one line, which the runner records as the run's `trace_lost` like any other
kind's loss: no file within the wait, no trace among the files, a file still growing when the wait ran
out, a file that cannot be read.
"""

from __future__ import annotations

import gzip
import shutil
import zlib
from pathlib import Path

from perflib import rundir
from perflib.cut import cut_kineto
from perflib.errors import PerflibError
from perflib.server import profilers

TRACE = "trace.json.gz"
EXTRA = "trace-extra"
MARGIN_NS = 50_000_000


def keep_run_trace(kind: str, run_dir: Path, written: list[Path], waited_s: float, flush_s: float,
                   capture_dir: Path) -> str | None:
    """Move what one stop wrote into `run_dir` (its trace cut to the level window); returns what was lost,
    or None."""
    if not written:
        return (f"{run_dir.name}: the {kind} profiler's stop answered but no trace file appeared in {capture_dir} "
                f"within {flush_s:.0f} s")
    main = profilers.pick_trace(kind, written)
    extra = run_dir / EXTRA
    run_dir.mkdir(parents=True, exist_ok=True)
    losses: list[str] = []
    if waited_s >= flush_s:
        losses.append(f"a file was still being written when the {flush_s:.0f} s wait ran out: kept as found")
    manifest = rundir.read_manifest(run_dir, missing_ok=True)
    clocks = (manifest or {}).get("clocks")
    cut_of = None
    for path in written:
        if path == main:
            target = run_dir / TRACE
        else:
            extra.mkdir(exist_ok=True)
            gz = profilers.TRACE_NAME.search(path.name) and not path.name.endswith(".gz")  # cut_kineto gzips
            target = extra / (path.name + ".gz" if gz else path.name)
        if profilers.TRACE_NAME.search(path.name):
            try:
                cut = cut_kineto(path, target, clocks, MARGIN_NS)
            except (PerflibError, OSError, ValueError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
                losses.append(f"{path.name} could not be read ({type(exc).__name__}: {str(exc)[:200]}): kept as "
                              "written")
                target = extra / path.name if path != main else run_dir / path.name
                target.parent.mkdir(exist_ok=True)
                shutil.move(str(path), target)
                continue
            if path == main:
                cut_of = cut
            path.unlink()
        else:
            shutil.move(str(path), target)
    if main is None:
        names = ", ".join(p.name for p in written)
        losses.insert(0, f"no trace file among what the {kind} profiler wrote ({names}); kept in {EXTRA}/")
    if manifest is not None and main is not None and (run_dir / TRACE).is_file():
        manifest["trace_path"] = TRACE
        manifest["trace_made_by"] = {"profiler": kind, "from": main.name, "waited_s": round(waited_s, 1),
                                     "files": sorted(p.name for p in written)}
        if cut_of is not None:
            manifest["trace_cut"] = {"from": main.name, "source": "kineto", "clock": "realtime",
                                     "margin_ms": MARGIN_NS / 1e6, "start_ns": cut_of.start_ns,
                                     "end_ns": cut_of.end_ns, "capture_start_ns": cut_of.capture_start_ns,
                                     "capture_end_ns": cut_of.capture_end_ns, "events": cut_of.events,
                                     "events_kept": cut_of.kept, **({"note": cut_of.note} if cut_of.note else {})}
        for key in ("trace_note", "trace_lost"):
            manifest.pop(key, None)
        rundir.write_manifest(run_dir, manifest)
    return f"{run_dir.name}: " + "; ".join(losses) if losses else None
