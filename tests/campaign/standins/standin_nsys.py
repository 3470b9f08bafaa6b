#!/usr/bin/env python3
"""STAND-IN for `nsys` (not a profiler; see _standin.py): `nsys profile [--trace=...] -o BASE
[--force-overwrite=true] program args...` runs the program and, once it has exited, writes
`BASE.nsys-rep` (the kernel records on the Unix clock, as JSON: not nsys's format, only this
stand-in's hand-over to its own export); `nsys export --type sqlite --force-overwrite true -o OUT REP`
writes OUT as an Nsight Systems SQLite export with perflib's nsys writer."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from _standin import made_up_dispatches, run_child


def profile(args: list[str]) -> int:
    base = None
    program: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-o":
            base, i = args[i + 1], i + 2
            continue
        if arg.startswith("--"):
            i += 1
            continue
        program = args[i:]
        break
    assert base and program, args
    start, end, code = run_child(program, time.time_ns)
    Path(base + ".nsys-rep").write_text(json.dumps({"standin": True, "start_ns": start, "end_ns": end}))
    return code


def export(args: list[str]) -> int:
    out = Path(args[args.index("-o") + 1])
    report = json.loads(Path(args[-1]).read_text())
    from perflib.traces.writers.nsys import write_nsys_sqlite

    out.unlink(missing_ok=True)
    write_nsys_sqlite(made_up_dispatches(report["start_ns"], report["end_ns"]), out)
    return 0


if __name__ == "__main__":
    verb, rest = sys.argv[1], sys.argv[2:]
    sys.exit(profile(rest) if verb == "profile" else export(rest) if verb == "export" else 2)
