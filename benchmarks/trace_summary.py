"""Benchmark `perflib trace summary` against the bare read of the same file and against HTA.

What is measured (each as a fresh subprocess, start-up included; wall time with `time.perf_counter`
around the child, peak RSS of the child via `resource.getrusage(RUSAGE_CHILDREN)` in a one-child wrapper):

1. A rocprofv3 `kernel_trace.csv` (header D, 22 columns) of `--rows` dispatches (default 1,000,000),
   written with `perflib.traces.writers` from the dispatch pattern of a real trace (the MI350 rocprofv3
   JSON fixture: its kernel sequence, durations and start-to-start spacing, repeated with time offsets):
   `perflib trace summary FILE --json` versus the bare `pyarrow.csv.read_csv(FILE)`.
   Goal: summary <= 2x the bare read.
2. HTA's temporal breakdown (`TraceAnalysis(...).get_temporal_breakdown()`) of the same dispatches written
   as Kineto JSON. HTA is slow: it runs on the first `--hta-rows` dispatches (default 100,000) and its
   time is scaled linearly to `--rows` (printed as such); perflib is also timed on that same Kineto file.
   Goal: perflib >= 10x faster than HTA.
3. `perflib trace summary` on a Kineto trace versus bare `gzip` + `json.loads` of it: every `--kineto PATH`
   given, else the largest `data/raw/h200-pytorch/*.json.gz`; and always the generated Kineto file from 2.
   Goal: summary <= 1.5x the bare parse.

Usage: python benchmarks/trace_summary.py [--rows N] [--hta-rows N] [--kineto PATH ...] [--repeat K]
       [--out results.json] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(os.environ.get("PERFLIB_FIXTURES", REPO.parent / "shared" / "fixtures"))
PATTERN_TRACE = FIXTURES / "rocprofv3" / "json-mi350" / "908_results.json.gz"

# Runs one command, prints {"wall_s", "max_rss_mib"} of that child only.
_WRAPPER = r"""
import json, resource, subprocess, sys, time
t = time.perf_counter()
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
wall = time.perf_counter() - t
if done.returncode:
    sys.stderr.write(done.stderr.decode()[-2000:])
    sys.exit(done.returncode)
print(json.dumps({"wall_s": wall, "max_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""

BARE_CSV = "import sys, pyarrow.csv as c; c.read_csv(sys.argv[1])"
BARE_KINETO = "import gzip, json, sys; p = sys.argv[1]; f = gzip.open(p) if p.endswith('.gz') else open(p, 'rb'); json.loads(f.read())"
HTA = (
    "import logging, sys; logging.disable(logging.WARNING); from hta.trace_analysis import TraceAnalysis; "
    "TraceAnalysis(trace_dir=sys.argv[1]).get_temporal_breakdown(visualize=False)"
)


def measure(argv: list[str], repeat: int) -> dict:
    """Best-of-`repeat` wall time (least disturbed by other load on a shared box) and its peak RSS."""
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", _WRAPPER, *argv], capture_output=True, text=True, cwd=REPO)
        if out.returncode:
            raise SystemExit(f"benchmark command failed: {' '.join(argv)}\n{out.stderr}")
        runs.append(json.loads(out.stdout))
    best = min(runs, key=lambda r: r["wall_s"])
    return {"wall_s": best["wall_s"], "max_rss_mib": max(r["max_rss_mib"] for r in runs),
            "runs_wall_s": [r["wall_s"] for r in runs]}


def pattern_dispatches(rows: int):
    """`rows` dispatches repeating a real trace's kernel sequence, durations and start-to-start spacing."""
    import numpy as np
    import pandas as pd

    from perflib.traces import read_trace

    if not PATTERN_TRACE.is_file():
        raise SystemExit(f"pattern trace {PATTERN_TRACE} not found (../shared/fixtures beside the clone)")
    real = read_trace(PATTERN_TRACE).dispatches
    real = real[real["kind"] == "kernel"].reset_index(drop=True)
    starts = real["start_ns"].to_numpy(np.int64)
    dur = (real["end_ns"] - real["start_ns"]).to_numpy(np.int64)
    step = np.diff(starts)
    period = int(starts[-1] - starts[0] + (np.median(step) if step.size else 1))
    reps = -(-rows // len(real))
    idx = np.tile(np.arange(len(real)), reps)[:rows]
    offset = np.repeat(np.arange(reps, dtype=np.int64) * period, len(real))[:rows]
    new_starts = starts[idx] + offset
    frame = pd.DataFrame(
        {
            "kernel": real["kernel"].to_numpy(dtype=object)[idx],
            "start_ns": new_starts,
            "end_ns": new_starts + dur[idx],
            "device": np.int64(0),
            "queue": np.int64(1),
            "stream": np.int64(0),
            "correlation_id": np.arange(1, rows + 1, dtype=np.int64),
            "kind": pd.Categorical(["kernel"] * rows, categories=["kernel", "memcpy", "memset"]),
            "source": "rocprofv3-csv",
        }
    )
    return frame, {"pattern": str(PATTERN_TRACE), "pattern_dispatches": len(real), "repeats": reps,
                   "period_ms": period / 1e6}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="dispatches in the CSV (default 1,000,000)")
    p.add_argument("--hta-rows", type=int, default=100_000, help="dispatches HTA runs on (scaled to --rows)")
    p.add_argument("--kineto", action="append", default=[], metavar="PATH", help="Kineto trace(s) to parse (repeatable)")
    p.add_argument("--repeat", type=int, default=3, help="runs per measurement; the fastest is reported (default 3)")
    p.add_argument("--out", metavar="FILE", help="write the results as JSON here")
    p.add_argument("--workdir", metavar="DIR", help="where to write the generated traces (default: a temp dir, removed)")
    args = p.parse_args(argv)

    from perflib.traces import writers

    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="perflib-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    perflib = [sys.executable, "-m", "perflib", "trace", "summary"]
    results: dict = {
        "host": {"python": platform.python_version(), "cpus": os.cpu_count(), "load_avg": os.getloadavg(),
                 "machine": platform.machine()},
        "rows": args.rows, "hta_rows": args.hta_rows, "repeat": args.repeat, "measurements": [],
    }
    table: list[tuple[str, str, dict]] = []
    try:
        t = time.perf_counter()
        frame, info = pattern_dispatches(args.rows)
        csv = writers.write_kernel_trace_csv(frame, work / "bench_kernel_trace.csv", version="D")
        results["generated"] = {**info, "csv": str(csv), "csv_mib": csv.stat().st_size / 2**20,
                                "write_s": time.perf_counter() - t}
        print(f"wrote {args.rows:,} dispatches ({csv.stat().st_size / 2**20:.0f} MiB) to {csv}", file=sys.stderr)

        summary = measure([*perflib, str(csv), "--json"], args.repeat)
        bare = measure([sys.executable, "-c", BARE_CSV, str(csv)], args.repeat)
        table += [("perflib trace summary --json", f"CSV D, {args.rows:,} rows", summary),
                  ("pyarrow.csv.read_csv (bare)", f"CSV D, {args.rows:,} rows", bare)]
        results["csv"] = {"summary": summary, "bare_read": bare, "ratio_summary_over_bare": summary["wall_s"] / bare["wall_s"],
                          "goal": "<= 2.0"}

        hta_rows = min(args.hta_rows, args.rows)
        hta_dir = work / "hta"
        hta_dir.mkdir(exist_ok=True)
        kineto = writers.write_kineto_json(frame.iloc[:hta_rows], hta_dir / "rank0.trace.json.gz")
        doc = json.loads(__import__("gzip").decompress(kineto.read_bytes()))
        doc["distributedInfo"] = {"rank": 0}  # HTA wants a rank
        kineto.write_bytes(__import__("gzip").compress(json.dumps(doc).encode(), compresslevel=3))
        del doc
        hta = measure([sys.executable, "-c", HTA, str(hta_dir)], 1)
        ours_small = measure([*perflib, str(kineto), "--json"], args.repeat)
        scale = args.rows / hta_rows
        table += [("HTA temporal breakdown", f"Kineto JSON, {hta_rows:,} rows", hta),
                  ("perflib trace summary --json", f"Kineto JSON, {hta_rows:,} rows", ours_small)]
        results["hta"] = {
            "hta": hta, "perflib_same_file": ours_small, "rows": hta_rows, "scale_to_rows": scale,
            "hta_scaled_wall_s": hta["wall_s"] * scale,
            "speedup_same_file": hta["wall_s"] / ours_small["wall_s"],
            "speedup_vs_scaled_hta_on_csv": hta["wall_s"] * scale / summary["wall_s"],
            "goal": ">= 10x",
            "note": (f"HTA ran on all {hta_rows:,} dispatches, no scaling" if hta_rows == args.rows else
                     f"HTA ran on {hta_rows:,} dispatches; scaled linearly x{scale:g} to {args.rows:,}"),
        }

        paths = [Path(k) for k in args.kineto]
        if not paths:
            h200 = sorted((REPO / "data" / "raw" / "h200-pytorch").glob("*.json.gz"), key=lambda q: q.stat().st_size)
            paths = h200[-1:]
        paths.append(kineto)  # and the generated one: a larger file, so start-up weighs less
        results["kineto"] = []
        for path in paths:
            ours = measure([*perflib, str(path), "--json"], args.repeat)
            parse = measure([sys.executable, "-c", BARE_KINETO, str(path)], args.repeat)
            label = f"{path.name} ({path.stat().st_size / 2**20:.1f} MiB)"
            table += [("perflib trace summary --json", label, ours), ("gzip + json.loads (bare)", label, parse)]
            results["kineto"].append({"path": str(path), "mib": path.stat().st_size / 2**20, "summary": ours,
                                      "bare_parse": parse, "ratio_summary_over_bare": ours["wall_s"] / parse["wall_s"],
                                      "goal": "<= 1.5"})
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)

    results["measurements"] = [{"what": w, "input": i, **m} for w, i, m in table]
    print(f"\nbest of {args.repeat} runs (HTA: 1), each a fresh subprocess incl. start-up; "
          f"peak RSS of the child; load average at start {results['host']['load_avg'][0]:.2f} on {os.cpu_count()} CPUs\n")
    width = max(len(w) for w, _, _ in table)
    iwidth = max(len(i) for _, i, _ in table)
    print(f"{'what':<{width}}  {'input':<{iwidth}}  {'wall s':>8}  {'peak RSS MiB':>12}")
    for w, i, m in table:
        print(f"{w:<{width}}  {i:<{iwidth}}  {m['wall_s']:>8.2f}  {m['max_rss_mib']:>12.0f}")
    c, h = results["csv"], results["hta"]
    print(f"\nsummary / bare CSV read          {c['ratio_summary_over_bare']:.2f}x   (goal <= 2x)")
    print(f"HTA / perflib, same Kineto file  {h['speedup_same_file']:.1f}x   (goal >= 10x)")
    print(f"HTA ({args.rows:,} rows) / perflib on the CSV  {h['speedup_vs_scaled_hta_on_csv']:.1f}x   (goal >= 10x; {h['note']})")
    for k in results["kineto"]:
        print(f"Kineto {Path(k['path']).name}: summary / bare parse  {k['ratio_summary_over_bare']:.2f}x   (goal <= 1.5x)")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
        print(f"\nresults written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
