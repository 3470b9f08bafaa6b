"""`perflib trace summary`: GPU busy versus host gaps, gap sizes, steps, kernels and classes of a trace.
`perflib trace cut`: one server-lifetime trace cut into the level windows of a sweep's run folders."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from perflib.cli import float_arg, int_arg
from perflib.errors import PerflibError

if TYPE_CHECKING:  # named only: pandas and the readers load when a command runs, not at `perflib --help`
    from perflib.attribution import HostGaps, StepCount, TraceSummary, Window
    from perflib.cut import Cut
    from perflib.traces import Prefetched, Trace

SUMMARY_FIGURES = """\
what it prints (--json: the same figures under keys named with their unit, e.g. busy_ms,
busy_share as a fraction; the window's bounds in ns on the trace's clock):
  dispatches       kernels, copies and fills that overlap the window (count)
  window           end - start of the window (ms)
  GPU busy         union of the dispatch intervals clipped to the window: overlapping
                   streams count once (ms)
  host gap         window - GPU busy: time no GPU work ran (ms)
  busy share       GPU busy / window (%)
  steps            how many steps the window holds, and where that count came from
                   (step annotations, request records, server counters, dispatch rhythm)
  per step         GPU busy / steps, host gap / steps (ms) and dispatches / steps (count);
                   with --steps REGEX, inside the matched steps' spans only (steps of
                   other names may lie between them)
  steps by phase   where the engine names its steps' phase (SGLang step[EXTEND ...] /
                   step[DECODE ...], vLLM execute_context_<n>(...)_generation_<m>(...)):
                   per phase (prefill, mixed, decode, empty) its steps (count) and per
                   step: step = the period from the previous step's end to its own end,
                   span = its own start to end, GPU busy and host gap (= step - busy)
                   in the period (ms), dispatches; a capture with no decode step says so
  host gaps by size  gaps between consecutive busy intervals, bucketed by length:
                   count, summed length (ms) and share of all host gap (%)
  largest gaps     the longest gaps: where they start from the window start (ms), their
                   length (ms) and the dispatch that ends each (the one the host waited for)
  what fills the host gaps  (JSON host_gaps) the host gap split by the host API calls in flight
                   on the threads that launched the window's kernels: sync and copy wait (a
                   synchronising call or a device-to-host copy), else launch (a kernel or graph
                   launch call), else other API (any other call), else host compute (no call):
                   ms, ms per step and share of the host gap (%); the four add up to the gap.
                   Where the trace holds no API calls (CUPTI runtime/driver off, a format
                   without them) it says so instead
  kernel classes   kernel time summed per class of the class table: time (ms), count,
                   ms per step, share of all kernel time (%); kernel time counts each
                   dispatch's own duration, so it can exceed GPU busy on several streams
  top kernels      the same per kernel name
  straddling       (JSON straddling_start) dispatches that began before the window: only
                   their part inside it counts
on a CPU backend (JSON work): a PyTorch trace without GPU work counts the model's CPU
operators as the busy work (CPU busy, host time); a perf profile (perf script text or
perf.data) counts samples: compute, sync + host, each a sampled estimate, with the
samples' split on the decode threads and a 95% interval per share
"""

WINDOW_HELP = (
    "START:END in integer ns on the trace's own clock, or with a unit suffix (ns, us, ms, s) relative "
    "to the first GPU event, e.g. 100ms:250ms; either side may be empty"
)

CUT_DESCRIPTION = (
    "Profile the server once for a whole sweep, then cut: every run folder below RUNS_DIR whose "
    "manifest has level clocks gets trace.parquet, the dispatches overlapping its level window "
    "+- the margin, on the trace's own clock (aligned as `trace summary --manifest` does), with the "
    "host API calls of the same window beside it as trace.api.parquet and its ranges and marks (the "
    "engine's step ranges) as trace.markers.parquet where the trace has any, and its manifest gets trace_path and trace_cut. `perflib campaign report` then attributes each level "
    "over its decode window. A run folder that already holds a cut keeps it, as it was, where the new "
    "window holds fewer dispatches (a trace of another time would otherwise wipe a committed cut); "
    "--replace overrides that. Each cut is written to a temporary file in its folder and renamed over "
    "the old one once complete; only the manifests of folders whose cut was written change. Prints one "
    "line per run folder: dispatches and kernels kept, window, file size, or why it was kept as it was. "
    "Exit status 1 when a cut window holds no kernel, or an existing cut was kept because the new "
    "window held fewer dispatches (a clock or process mismatch, usually)."
)
"""What `trace cut --help` says."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `trace` with its sub-commands `summary` and `cut`."""
    trace = subparsers.add_parser("trace", help="attribute profiler traces to GPU kernels and host gaps")
    sub = trace.add_subparsers(dest="trace_command", required=True, metavar="SUBCOMMAND")
    p = sub.add_parser(
        "summary",
        help="window, GPU busy, host gaps by size, steps, top kernels and kernel classes",
        description=(
            "Summarise one window of a profiler trace (rocprofv3 CSV/JSON/rocpd or output directory, "
            "Kineto JSON, Nsight Systems SQLite, perf script, ...): GPU busy = union of kernel, copy and fill "
            "intervals clipped to the window; host gap = window - busy; gaps by size; per-step figures; "
            "time by kernel and by kernel class. Without a window option the window is the trace span."
        ),
        epilog=SUMMARY_FIGURES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("path", metavar="PATH", help="trace file or rocprofv3 output directory")
    win = p.add_mutually_exclusive_group()
    win.add_argument("--window", metavar="START:END", help=WINDOW_HELP)
    win.add_argument("--marker", metavar="NAME", help="window = the roctx/NVTX/annotation range with this exact name "
                     "(several with that name: from the first start to the last end; NAME@I picks the I-th, 0-based)")
    win.add_argument("--manifest", metavar="FILE", help="window = what the campaign page reads for this run folder "
                     "(or its manifest.json): the decode window, steps from its request records, where the "
                     "records give one (a coalesced stream: the requests' span, steps from its counters); else "
                     "the level (its recorded clocks, aligned to the trace clock)")
    p.add_argument("--classes", metavar="FILE", help="YAML class table whose rules go in front of the built-in one")
    p.add_argument("--backend", metavar="NAME", default="auto",
                   help="built-in class table (mlx-rocm, pytorch-cuda, pytorch-rocm, llamacpp-cuda, llamacpp-rocm) "
                   "or auto: the one that leaves the least kernel time unclassified (default)")
    p.add_argument("--steps", metavar="N|REGEX",
                   help="a step count used outright, or a regex for the step ranges (figures then inside those steps; "
                   "no match is an error); default: engine step ranges (SGLang step[...], vLLM execute_..., its Python "
                   "frames), ProfilerStep#N, the request records or counters (--manifest), else the dispatch rhythm")
    p.add_argument("--top", metavar="N", type=int_arg(0), default=10, help="kernels and largest gaps to list (default 10)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.set_defaults(func=run_summary, exit_at_once=True)  # it writes no file; its prefetch child is reaped

    c = sub.add_parser(
        "cut",
        help="cut one server-lifetime trace into the level windows of a sweep's run folders",
        description=CUT_DESCRIPTION,
    )
    c.add_argument("path", metavar="TRACE", help="the trace of the server's lifetime (any format `trace summary` reads)")
    c.add_argument("runs_dir", metavar="RUNS_DIR", help="a `perflib sweep --out` folder (or one run folder)")
    c.add_argument("--margin-ms", type=float_arg(0), default=50.0, help="kept on each side of the level window (default 50 ms)")
    c.add_argument("--repeats", type=int_arg(1), metavar="N", help="keep the cuts of repeats 1..N only (to commit less)")
    c.add_argument("--replace", action="store_true",
                   help="replace existing cuts even where the new window holds fewer dispatches (by default such a "
                   "folder keeps its cut as it was)")
    c.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    c.set_defaults(func=run_cut)


def _read(path: str, pre: Prefetched | None) -> Trace:
    """The trace, from the prefetch (`pre`: what `traces.start_prefetch` gave) where it delivered (Kineto columns from the child, CSV columns from
    the thread), else the lean read (`ReadMode.LEAN`: the dispatch columns a summary uses, memory bounded
    by the dispatches, not the file; the same figures to the ns), which also gives the precise error for
    a bad file. Both give the same lean Trace."""
    from perflib.traces import ReadMode, read_trace  # late: 26 ms (measured) that `perflib --help` skips

    trace = pre.trace() if pre is not None else None
    return trace if trace is not None else read_trace(path, ReadMode.LEAN)


def _window(args: argparse.Namespace, trace: Trace) -> tuple[Window | None, StepCount | None]:
    """The window asked for, and the steps counted for it outside the trace (`--manifest` only)."""
    from perflib import attribution  # loaded by now (run_summary): here it keeps pandas out of `--help`

    if args.manifest:
        level = attribution.manifest_window(trace, args.manifest)
        return level.window, level.count
    if args.window:
        return attribution.parse_window(args.window, trace.dispatches), None
    if args.marker:
        name, index = args.marker, None
        if "@" in name and name.rsplit("@", 1)[1].lstrip("-").isdigit():
            name, raw = name.rsplit("@", 1)
            index = int(raw)
        return attribution.window_from_marker(trace.markers, name, index), None
    return None, None


def _warm(args: argparse.Namespace) -> None:
    """Load now what the summary loads later anyway (the built-in class tables it will read, their
    regexes compiled; the lean Kineto reader), while the prefetch child may still be parsing: the same
    work, done where this process would otherwise wait. A fault here is left to the call that meets it
    later, in its place among the summary's errors."""
    from perflib import classes  # loaded by now (run_summary): here it keeps numpy out of `--help`

    try:
        for backend in classes.builtin_backends() if args.backend == "auto" else [args.backend]:
            classes.load_builtin(backend)
    except PerflibError:
        pass


def run_summary(args: argparse.Namespace) -> int:
    """Read the trace, summarise the window, print a table or one JSON object."""
    from perflib.traces import start_prefetch  # late: see _read

    # a large Kineto file is parsed in a child, a large kernel_trace.csv in a thread, while pandas imports here
    pre = start_prefetch(args.path)
    from perflib import attribution, classes  # pandas: only once the prefetch has forked

    if pre is not None and pre.forked:
        pre.warm()
        _warm(args)
    trace = _read(args.path, pre)
    window, counted = _window(args, trace)
    if args.classes:
        table = classes.load_class_file(args.classes, None if args.backend == "auto" else args.backend)
    else:
        table = args.backend
    steps = counted  # the page's order: the trace's step ranges, then this count, then the rhythm
    if args.steps is not None:
        steps = int(args.steps) if args.steps.isdigit() else args.steps
    summary = attribution.summarize(trace, window=window, classes=table, steps=steps, top=args.top)
    split = attribution.host_gaps(trace, summary.window, summary.step_table, summary.decode_periods(),
                                  sampling=summary.sampling)
    if args.json:
        out = summary.to_dict()
        row = split.row(steps=summary.steps)
        out["host_gaps"] = {**split.to_dict(), **{f"{p}_ms_per_step": row[f"{p}_ms_per_step"]
                                                   for p in attribution.HOST_GAP_PARTS},
                            "decode": {k: None if v != v else v for k, v in row.items() if k.startswith("decode_")}}
        out["path"] = str(args.path)
        out["source"] = trace.source
        out["clock"] = trace.clock
        print(json.dumps(out, allow_nan=False))
    else:
        print(format_summary(summary, trace, split))
    return 0


def run_cut(args: argparse.Namespace) -> int:
    """Read the trace once (lean, with its ids: every dispatch column, memory bounded by the dispatches,
    not by the file), cut every run folder's level window, print what each got."""
    # late: the cut and the readers (pandas, 0.33 s) load when the command runs, not at `perflib --help`
    from perflib.cut import cut_into_runs
    from perflib.traces import ReadMode, read_trace

    trace = read_trace(args.path, ReadMode.LEAN_IDS)
    cuts = cut_into_runs(trace, args.runs_dir, margin_ns=int(args.margin_ms * 1e6), repeats=args.repeats,
                         replace=args.replace)
    if args.json:
        print(json.dumps({"path": str(args.path), "source": trace.source, "clock": trace.clock,
                          "dispatches": len(trace.dispatches), "runs": [
                              {"run_dir": str(c.run_dir), "status": c.status, "path": str(c.path) if c.path else None,
                               "dispatches": c.dispatches, "kernels": c.kernels, "start_ns": c.start_ns,
                               "end_ns": c.end_ns, "clock": c.clock or None, "note": c.note or None,
                               "kept_path": str(c.kept) if c.kept else None, "kept_dispatches": c.kept_dispatches}
                              for c in cuts]}))
    else:
        print("\n".join(_cut_line(c) for c in cuts))
        written = sum(1 for c in cuts if c.path is not None)
        kept = sum(1 for c in cuts if c.kept is not None)
        print(f"{written} level windows cut from {args.path} ({len(trace.dispatches)} dispatches, "
              f"{trace.source}, clock {trace.clock})" + (f"; {kept} folders kept their cut as it was" if kept else ""))
    return 1 if any(c.empty or c.refused for c in cuts) else 0


def _cut_line(c: Cut) -> str:
    """One run folder's line of `trace cut`: what was written, or why the folder was kept or skipped."""
    if c.status == "kept":
        return f"{c.run_dir}: {c.note}"
    if c.path is None:
        return f"{c.run_dir}: skipped, {c.note}"
    window_ms = (c.end_ns - c.start_ns) / 1e6
    warn = f"  WARNING: {c.note}" if c.note else ""
    return (f"{c.run_dir}: {c.dispatches} dispatches ({c.kernels} kernels) in {window_ms:.1f} ms "
            f"({c.clock} clock), {c.path.stat().st_size / 1e3:.0f} kB{warn}")


def _f(x: float | None, fmt: str = "{:.3f}", unit: str = "") -> str:
    return "n/a" if x is None else fmt.format(x) + unit


def _split_lines(split: HostGaps, steps: int | None) -> list[str]:
    """What fills the host gaps: a table of the four parts, or the line saying why it is not measured."""
    from tabulate import tabulate  # late: as format_summary's

    from perflib.attribution import (  # loaded by now (run_summary)
        HOST_GAP_API_RECORDS,
        HOST_GAP_BASIS_TEXT,
        HOST_GAP_LABELS,
        HOST_GAP_PARTS,
    )

    if not split.measured:
        return ["", f"what fills the host gaps: not measured: {split.note}"]
    calls = ", ".join(f"{n} {c}" for c, n in split.calls.items())
    lines = ["", f"what fills the host gaps (API calls of {split.threads} launching thread"
             f"{'s' if split.threads != 1 else ''}, found by {split.threads_by}; calls in the window: {calls})"
             if split.basis == HOST_GAP_API_RECORDS else
             f"what fills the host time ({split.basis}): {HOST_GAP_BASIS_TEXT[split.basis]}"]
    gap, over = split.gap_ns, split.periods  # over: the decode steps' periods, where the steps have phases
    decode = over is not None and bool(over["steps"])

    def of_decode(p: str) -> list[str]:
        if not decode:
            return []
        share = f"{100 * over[f'{p}_ns'] / over['gap_ns']:.1f}" if over["gap_ns"] > 0 else "n/a"
        return [_f(over[f"{p}_ns"] / 1e6 / over["steps"]), share]

    per_step = ("ms/step (all steps)" if over is not None else "ms/step") if steps else "ms/step (n/a)"
    lines.append(tabulate(
        [[HOST_GAP_LABELS[p], f"{split.part_ns(p) / 1e6:.3f}", _f(split.part_ns(p) / 1e6 / steps if steps else None),
          f"{100 * split.part_ns(p) / gap:.1f}" if gap > 0 else "n/a", *of_decode(p)] for p in HOST_GAP_PARTS],
        headers=["part", "ms", per_step, "% of gap", *(["decode ms/step", "% of decode gap"] if decode else [])],
        tablefmt="simple", disable_numparse=True,
    ))
    if over is not None and not decode:
        lines.append("no decode step in this capture: the split is over every step")
    return lines


def _phase_lines(s: TraceSummary, tabulate: Callable[..., str]) -> list[str]:
    """The 'steps by phase' table and its note, or nothing where no step has a phase."""
    if not len(s.phases):
        return []
    period = "each step its own span" if s.steps_named else "each step from the previous step's end to its own end"
    lines = ["", f"steps by phase ({period}; ms per step)"]
    lines.append(tabulate(
        [[r.phase, r.steps, f"{r.step_ms:.3f}", f"{r.span_ms_per_step:.3f}", f"{r.busy_ms_per_step:.3f}",
          f"{r.gap_ms_per_step:.3f}", f"{r.dispatches_per_step:.1f}"] for r in s.phases.itertuples()],
        headers=["phase", "steps", "step ms", "span ms", "GPU busy ms", "host gap ms", "dispatches"],
        tablefmt="simple", disable_numparse=True,
    ))
    if s.phase_note:
        lines.append(s.phase_note)
    return lines


def format_summary(summary: TraceSummary, trace: Trace, split: HostGaps | None = None) -> str:
    """The readable report: headline figures, gap buckets, largest gaps, what fills the gaps (`split`,
    `perflib.attribution.host_gaps`), steps, kernels (or CPU operators, or sampled functions), classes."""
    # late: tabulate (21 ms) only for the printed table, not --json; classes is loaded by now (run_summary)
    from tabulate import tabulate

    from perflib.attribution.summary import WORK_WORDS  # loaded by now (run_summary)
    from perflib.classes import base_name

    s = summary
    words = WORK_WORDS[s.work]
    estimate = f" ({s.sampling.label()})" if s.sampling is not None else ""
    lines = [
        f"trace    {trace.path}  ({trace.source}, clock {trace.clock})",
        f"window   {s.window.label}: [{s.window.start_ns}, {s.window.end_ns}) ns",
        f"{words['units']} {s.dispatches}   window {s.window_ms:.3f} ms   {words['busy']} {s.busy_ms:.3f} ms   "
        f"{words['gap']} {s.gap_ms:.3f} ms   busy share {_f(None if s.busy_share is None else 100 * s.busy_share, '{:.1f}', ' %')}"
        + estimate,
    ]
    if s.sampling is not None:
        lines.append(f"samples  {s.sampling.describe()}")
    if s.steps:
        inside = f" (inside the {s.steps} matched steps' spans, {s.steps_ms:.3f} ms)" if s.steps_named else ""
        lines.append(
            f"steps    {s.steps}, steps from {s.step_method}   per step{inside}: busy "
            f"{_f(s.busy_ms_per_step, unit=' ms')}   gap {_f(s.gap_ms_per_step, unit=' ms')}   "
            f"{words['units']} {_f(s.dispatches_per_step, '{:.1f}')}"
        )
    else:
        lines.append("steps    n/a (no step ranges, no request records and no step rhythm found; pass --steps N)")
    lines += _phase_lines(s, tabulate)
    if len(s.gap_buckets):
        lines += ["", "host gaps by size"]
        lines.append(tabulate(
            [[r.bucket, r.count, f"{r.gap_ms:.3f}", f"{100 * r.gap_ms / s.gap_ms:.1f}" if s.gap_ms > 0 else "n/a"]
             for r in s.gap_buckets.itertuples()],
            headers=["bucket", "gaps", "gap ms", "% of gap"], tablefmt="simple", disable_numparse=True,
        ))
    if len(s.largest_gaps):
        lines += ["", f"largest gaps (top {len(s.largest_gaps)}), charged to the dispatch that ends each"]
        lines.append(tabulate(
            [[f"{r.offset_ms:.3f}", f"{r.gap_ms:.3f}", base_name(r.kernel)[:60]] for r in s.largest_gaps.itertuples()],
            headers=["at ms", "gap ms", "ended by"], tablefmt="simple", disable_numparse=True,
        ))
    if split is not None:
        lines += _split_lines(split, s.steps)
    return "\n".join(lines + _class_lines(s, words, tabulate, base_name))


def _class_lines(s: TraceSummary, words: dict[str, str], tabulate: Callable[..., str],
                 base_name: Callable[[str], str]) -> list[str]:
    """The class table and the top kernels (operators, sampled functions), with the decode steps' own ms per
    step beside where the engine names its steps' phases."""
    phased = bool(len(s.phases))
    per_step = ("ms/step (all steps)" if phased else "ms/step") if s.steps else "ms/step (n/a)"
    decode = ["decode ms/step"] if phased else []
    share = f"% {words['unit']} {'samples' if s.sampling else 'time'}"

    def figures(r: Any) -> list[str]:  # Any: a row of the class or kernel table (`itertuples`' namedtuple)
        cells = [f"{r.time_ms:.3f}", r.count, _f(None if r.ms_per_step != r.ms_per_step else r.ms_per_step)]
        return cells + ([_f(None if r.decode_ms_per_step != r.decode_ms_per_step else r.decode_ms_per_step)]
                        if phased else []) + [f"{100 * r.share:.1f}"]

    lines = ["", f"{words['unit']} classes (table {s.class_table})"]
    lines.append(tabulate(
        [[r.kernel_class, *figures(r)] for r in s.classes.itertuples()],
        headers=["class", "time ms", "count", per_step, *decode, share], tablefmt="simple", disable_numparse=True,
    ))
    lines += ["", f"top {words['unit']}s ({min(s.top, len(s.kernels))} of {len(s.kernels)})"]
    lines.append(tabulate(
        [[base_name(r.kernel)[:60], r.kernel_class, *figures(r)] for r in s.kernels.head(s.top).itertuples()],
        headers=[words["unit"], "class", "time ms", "count", per_step, *decode, share], tablefmt="simple",
        disable_numparse=True,
    ))
    return lines
