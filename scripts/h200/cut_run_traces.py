"""Cut one server-lifetime trace into the level windows of a sweep's run folders.

Usage: python3 scripts/h200/cut_run_traces.py TRACE RUNS_DIR [--margin-ms 50] [--repeats 1]

TRACE is anything `perflib.traces.read_trace` reads (here: the CUPTI activity text that the
injected llama-server printed on stdout). Every run folder below RUNS_DIR whose manifest has
level clocks gets `trace.parquet`: the dispatches that overlap [start − margin, end + margin] on
the trace's clock, and its manifest gets `trace_path` and how the cut was made. `--repeats N`
keeps traces only for repeats 1..N (the rest were traced but are not kept, to stay small).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from perflib.traces import read_trace
from perflib.traces.cupti_text import read_cupti_text
from perflib.traces.parquet import write_trace_parquet

CLOCK_KEYS = {"realtime": "realtime_ns", "monotonic": "monotonic_ns", "boottime": "boottime_ns"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("runs_dir")
    parser.add_argument("--margin-ms", type=float, default=50.0)
    parser.add_argument("--repeats", type=int, default=None, help="keep traces of repeats 1..N only")
    parser.add_argument("--cupti", action="store_true",
                        help="read TRACE as CUPTI text (a server log whose first records come late)")
    args = parser.parse_args(argv)
    trace = read_cupti_text(Path(args.trace)) if args.cupti else read_trace(args.trace)
    key = CLOCK_KEYS.get(trace.clock)
    if key is None:
        print(f"{args.trace}: clock {trace.clock!r} cannot be aligned to the level clocks", file=sys.stderr)
        return 2
    margin = int(args.margin_ms * 1e6)
    kept = empty = 0
    for manifest_path in sorted(Path(args.runs_dir).rglob("manifest.json")):
        manifest = json.loads(manifest_path.read_text())
        clocks = manifest.get("clocks") or {}
        if not clocks.get("start") or not clocks.get("end"):
            continue
        if args.repeats is not None and int(manifest.get("repeat", 1)) > args.repeats:
            manifest["trace_note"] = f"traced, trace not kept (only repeats 1..{args.repeats} are kept)"
        else:
            start, end = clocks["start"][key] - margin, clocks["end"][key] + margin
            out = write_trace_parquet(trace, manifest_path.parent / "trace.parquet", start, end)
            inside = trace.dispatches[(trace.dispatches.end_ns > start) & (trace.dispatches.start_ns < end)]
            if not (inside["kind"].astype(str) == "kernel").any():
                print(f"{manifest_path.parent}: no kernel dispatch inside the level window", file=sys.stderr)
                empty += 1
            manifest["trace_path"] = out.name
            manifest["trace_cut"] = {"from": Path(args.trace).name, "source": trace.source, "clock": trace.clock,
                                     "margin_ms": args.margin_ms, "start_ns": start, "end_ns": end}
            kept += 1
            print(f"{manifest_path.parent}: {out.stat().st_size / 1e3:.0f} kB")
        manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    print(f"{kept} run windows cut from {args.trace} ({len(trace.dispatches)} dispatches, clock {trace.clock})")
    return 3 if empty or not kept else 0


if __name__ == "__main__":
    sys.exit(main())
