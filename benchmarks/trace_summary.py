"""Benchmark `perflib trace summary` against the bare read of the same file and against HTA.

What is measured (each as a fresh subprocess, start-up included; wall time with `time.perf_counter`
around the child, peak RSS of the child via `resource.getrusage(RUSAGE_CHILDREN)` in a one-child wrapper):

1. rocprofv3 `kernel_trace.csv` (header D, 22 columns) at each of `--sizes` dispatches (default 1M, 3M,
   10M), written with `perflib.traces.writers` from the dispatch pattern of a real trace (the MI350
   rocprofv3 JSON fixture: its kernel sequence, names, durations and start-to-start spacing, repeated
   with time offsets; names of 8 to 1,800 characters, ~420 bytes a row): `perflib trace summary FILE
   --json` (the lean read) versus the bare `pyarrow.csv.read_csv(FILE)`, and versus the in-memory path
   (`read_trace(FILE)` + `summarize`, what `trace summary` ran before the lean read).
   Goals: peak RSS <= 2 GiB at 10M; time ~linear in the dispatches; summary <= 1.5x the bare read.
2. HTA's temporal breakdown (`TraceAnalysis(...).get_temporal_breakdown()`) of the same dispatches written
   as Kineto JSON. HTA is slow: it runs on the first `--hta-rows` dispatches (default 100,000) and its
   time is scaled linearly to each CSV size (stated as such); perflib is also timed on that same file.
   Goal: perflib >= 30x faster than HTA.
3. Kineto JSON: `perflib trace summary` versus bare `gzip` + `json.loads`, on every `--kineto PATH` (else
   the largest `data/raw/h200-pytorch/*.json.gz`) and on generated files of `--kineto-sizes` events
   (default 1M, 10M). The bare parse is skipped above `--bare-kineto-max` events (default 1M: at 10M it
   needs ~14 GiB). On each real trace HTA is measured too, its load plus temporal breakdown as in 2 (a
   copy of the file with `distributedInfo.rank` added, best of `--hta-repeat`); where HTA's breakdown
   fails on the trace (HTA 0.5.0 asserts `non_compute_time >= 0` on float-µs traces), its time up to
   the failure is reported with the failure. The three run interleaved, round by round, so that a change
   of load on a shared box hits them alike. Goals: summary no slower than the bare parse; >= 10x faster
   than HTA on the real traces; within 2 GiB at 10M.
4. rocpd SQLite of `--rocpd-size` dispatches (default 10M), written by `writers.write_rocpd`: perflib's
   summary. Goal: within 2 GiB.
5. CUPTI activity text (`cupti_trace_injection` stdout, gzipped as a cut capture is kept) of
   `--cupti-size` kernels (default 1M), each with its `cudaLaunchKernel` RUNTIME record, written by
   `writers.write_cupti_text` from the same dispatch pattern: `perflib trace summary --json` (the
   chunked lean read) versus the in-memory path it replaced (`read_cupti_text_by_line` + `summarize`,
   one run: it is slow) and versus a bare gunzip of the file.
6. rocprofv3 JSON (`<prefix>_results.json`, compact as rocprofv3 writes it) of `--rocjson-size`
   dispatches (default 1M), written by `writers.write_rocprof_json` from the same dispatch pattern:
   `perflib trace summary --json` (the streamed lean read) versus the in-memory path (`read_trace` +
   `summarize`: one orjson parse of the whole file, one run) and versus a bare `orjson.loads` of it.
   Goal: peak RSS that grows with the dispatches, not the file (well under the bare parse's).
7. `perflib trace cut`: the rocprofv3 CSV of case 1 and the gzipped Kineto JSON of case 3 (`--cut-formats`)
   at each of `--cut-sizes` dispatches (default 1M, 10M) cut into six run folders whose manifests put a level window at every sixth of the trace (each 2% of
   its dispatches): `perflib trace cut FILE RUNS --json` (the lean read with ids) versus the in-memory path it
   replaced (`read_trace(FILE)` + `cut_into_runs`, one run, up to `--cut-in-memory-max` dispatches,
   default 3M). Both cuts are read back and compared row for row, so the figure is of the same result.
   Goal: within 2 GiB at 10M, as the summary.

perflib's bytecode is compiled before anything is measured (`compileall`), as an installed package has
it: this editable checkout has none where `PYTHONDONTWRITEBYTECODE` is set, as it is on the development
machine, and every run would then compile perflib's modules from source (~0.08 s of a trace summary);
the standard library, pandas and HTA have theirs.

`--quick` runs small sizes (100k, 300k; Kineto and rocpd 300k; HTA 20k; CUPTI 50k; rocprofv3 JSON 100k;
cut 100k; one run each) for development. `--only` runs some of the cases (csv, hta, kineto, rocpd, cupti,
rocjson, cut). A size of 0 skips its
part: `--only kineto --kineto-sizes 0 --kineto PATH` measures only the real trace (perflib, the bare
parse and HTA), without generating anything.

Usage: python benchmarks/trace_summary.py [--quick] [--only CASE,...] [--sizes N,N,...] [--hta-rows N]
       [--kineto PATH ...] [--kineto-sizes N,...] [--rocpd-size N] [--cupti-size N] [--rocjson-size N]
       [--cut-sizes N,...] [--cut-in-memory-max N] [--repeat K]
       [--repeat-large K] [--hta-repeat K] [--out results.json] [--workdir DIR]
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

# Runs one command, prints {"wall_s", "max_rss_mib"} of that child only, and its `NOTE: ` lines on stderr.
_WRAPPER = r"""
import json, resource, subprocess, sys, time
t = time.perf_counter()
done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
wall = time.perf_counter() - t
if done.returncode:
    sys.stderr.write(done.stderr.decode()[-2000:])
    sys.exit(done.returncode)
notes = [x[6:] for x in done.stderr.decode(errors="replace").splitlines() if x.startswith("NOTE: ")]
print(json.dumps({"wall_s": wall, "max_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "notes": notes}))
"""

BARE_CSV = "import sys, pyarrow.csv as c; c.read_csv(sys.argv[1])"
IN_MEMORY = ("import sys; from perflib.traces import read_trace; from perflib.attribution import summarize; "
             "summarize(read_trace(sys.argv[1])).to_dict()")
IN_MEMORY_CUT = ("import sys; from perflib.traces import read_trace; from perflib.cut import cut_into_runs; "
                 "cut_into_runs(read_trace(sys.argv[1]), sys.argv[2], replace=True)")
IN_MEMORY_CUPTI = ("import sys; from perflib.traces.cupti_text import read_cupti_text_by_line; "
                   "from perflib.attribution import summarize; summarize(read_cupti_text_by_line(sys.argv[1])).to_dict()")
BARE_GUNZIP = ("import sys, zlib; d = zlib.decompressobj(wbits=47); f = open(sys.argv[1], 'rb')\n"
               "while b := f.read(1 << 22): d.decompress(b)")
BARE_ORJSON = "import orjson, sys; orjson.loads(open(sys.argv[1], 'rb').read())"
BARE_KINETO = "import gzip, json, sys; p = sys.argv[1]; f = gzip.open(p) if p.endswith('.gz') else open(p, 'rb'); json.loads(f.read())"
HTA = (
    "import logging, sys, traceback; logging.disable(logging.WARNING)\n"
    "from hta.trace_analysis import TraceAnalysis\n"
    "try:\n"
    "    TraceAnalysis(trace_dir=sys.argv[1]).get_temporal_breakdown(visualize=False)\n"
    "except AssertionError as exc:\n"  # its own consistency check, after the breakdown's work is done
    "    f = traceback.extract_tb(exc.__traceback__)[-1]\n"
    "    print(f'NOTE: HTA failed: AssertionError in {f.name}, line {f.lineno}: {f.line}', file=sys.stderr)\n"
)


CASES = ("csv", "hta", "kineto", "rocpd", "cupti", "rocjson", "cut")
GIB = 1024.0
LARGE = 5_000_000
"""From this many dispatches on, a measurement runs `--repeat-large` times (the box is shared)."""


def _run_once(argv: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", _WRAPPER, *argv], capture_output=True, text=True, cwd=REPO)
    if out.returncode:
        raise SystemExit(f"benchmark command failed: {' '.join(argv)}\n{out.stderr}")
    return json.loads(out.stdout)


def _best(runs: list[dict]) -> dict:
    best = min(runs, key=lambda r: r["wall_s"])
    out = {"wall_s": best["wall_s"], "max_rss_mib": max(r["max_rss_mib"] for r in runs),
           "runs_wall_s": [r["wall_s"] for r in runs]}
    notes = sorted({n for r in runs for n in r.get("notes", [])})
    if notes:
        out["notes"] = notes
    return out


def measure(argv: list[str], repeat: int) -> dict:
    """Best-of-`repeat` wall time (least disturbed by other load on a shared box) and its peak RSS."""
    return _best([_run_once(argv) for _ in range(repeat)])


def measure_interleaved(commands: dict[str, tuple[list[str], int]]) -> dict[str, dict]:
    """`measure` of several commands, `{key: (argv, repeat)}`, run round by round (one run of each per
    round) so that a change of load on a shared box hits them alike."""
    runs: dict[str, list[dict]] = {k: [] for k in commands}
    for round_ in range(max(r for _, r in commands.values())):
        for key, (argv, repeat) in commands.items():
            if round_ < repeat:
                runs[key].append(_run_once(argv))
    return {k: _best(v) for k, v in runs.items()}


def hta_copy(src: Path, dest_dir: Path) -> Path:
    """`src` as HTA wants it: alone in `dest_dir` as rank0.trace.json.gz, with `distributedInfo.rank`. The
    key is put in front of the top-level object's text; every other byte of the JSON stays as it was."""
    import gzip

    text = src.read_bytes()
    if text[:2] == b"\x1f\x8b":
        text = gzip.decompress(text)
    if b'"distributedInfo"' not in text[:1 << 16]:
        at = text.index(b"{") + 1
        text = text[:at] + b'"distributedInfo": {"rank": 0}, ' + text[at:]
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = dest_dir / "rank0.trace.json.gz"
    out.write_bytes(gzip.compress(text, compresslevel=3))
    return out


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


def _sizes(text: str) -> list[int]:
    """Sizes from `1e6,3e6`; a 0 is left out (`--kineto-sizes 0`: no generated file)."""
    return [n for n in (int(float(x)) for x in text.split(",") if x.strip()) if n > 0]


SLICE = 1_000_000
"""Dispatches written at a time: a 10M file is written slice by slice, never as one table."""


def write_csv(frame, path: Path) -> Path:
    """The dispatches as one kernel_trace.csv (header D), written slice by slice (Dispatch_Id and
    Kernel_Id restart per slice; the summary reads neither)."""
    from perflib.traces import writers

    part = path.with_suffix(".part.csv")
    with open(path, "wb") as out:
        for i, at in enumerate(range(0, len(frame), SLICE)):
            writers.write_kernel_trace_csv(frame.iloc[at:at + SLICE], part, version="D")
            with open(part, "rb") as f:
                if i:
                    f.readline()
                shutil.copyfileobj(f, out, 1 << 24)
    part.unlink()
    return path


def write_kineto(frame, path: Path, level: int = 1) -> Path:
    """The dispatches as one gzipped Kineto JSON, written slice by slice (the writer's own events)."""
    import gzip

    from perflib.traces import writers

    part = path.with_name(path.name + ".part.json")
    with gzip.open(path, "wb", compresslevel=level) as out:
        for i, at in enumerate(range(0, len(frame), SLICE)):
            writers.write_kineto_json(frame.iloc[at:at + SLICE], part)
            text = part.read_bytes()
            open_at = text.index(b'"traceEvents": [\n') + len(b'"traceEvents": [\n')
            if i == 0:
                out.write(text[:open_at])
            else:
                out.write(b",\n")
            out.write(text[open_at:text.rindex(b"\n]}")])
        out.write(b"\n]}")
    part.unlink()
    return path


def write_cupti(frame, path: Path) -> Path:
    """The dispatches as one gzipped CUPTI text capture, a kernel and its launch record each, written
    slice by slice (the writer's header once; correlation ids run on across slices)."""
    import gzip

    from perflib.traces import writers

    part = path.with_name(path.name + ".part.txt")
    with gzip.open(path, "wb", compresslevel=1) as out:
        for i, at in enumerate(range(0, len(frame), SLICE)):
            writers.write_cupti_text(frame.iloc[at:at + SLICE], part, header=i == 0)
            with open(part, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 24)
    part.unlink()
    return path


def _rocjson(frame, work: Path, perflib: list[str], repeat: int, in_memory: bool,
             table: list[tuple[str, str, dict]]) -> dict:
    """Case 6: the dispatches as one rocprofv3 JSON file, its summary (the streamed read), the bare parse
    and the in-memory path; the file is removed after."""
    from perflib.traces import writers

    n = len(frame)
    t = time.perf_counter()
    path = writers.write_rocprof_json(frame, work / f"bench{n}_results.json")
    mib = path.stat().st_size / 2**20
    print(f"wrote {n:,} rocprofv3 JSON dispatches ({mib:.0f} MiB) in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    label = f"rocprofv3 JSON, {n:,} rows, {mib:,.0f} MiB"
    entry: dict = {"rows": n, "mib": mib,
                   "summary": measure([*perflib, str(path), "--json"], repeat),
                   "bare_parse": measure([sys.executable, "-c", BARE_ORJSON, str(path)], repeat)}
    table += [("perflib trace summary --json", label, entry["summary"]),
              ("orjson.loads (bare)", label, entry["bare_parse"])]
    if in_memory:
        entry["in_memory"] = measure([sys.executable, "-c", IN_MEMORY, str(path)], 1)
        entry["speedup_over_in_memory"] = entry["in_memory"]["wall_s"] / entry["summary"]["wall_s"]
        table.append(("in-memory path (read_trace + summarize)", label, entry["in_memory"]))
    path.unlink()
    return entry


CUT_LEVELS = 6
"""Run folders the cut case makes: one level window at every sixth of the trace."""


def _cut_runs(root: Path, starts) -> Path:
    """`CUT_LEVELS` run folders whose manifests hold level clocks (on the trace's monotonic and boottime
    clocks): each from the dispatch at 1/36 past every sixth of the trace, for 2% of its dispatches."""
    n = len(starts)
    for i in range(CUT_LEVELS):
        first = n * (6 * i + 1) // 36
        start, end = int(starts[first]), int(starts[min(first + n // 50, n - 1)])
        d = root / f"b{i + 1}_c128_r1"
        d.mkdir(parents=True, exist_ok=True)
        clocks = {k: {"monotonic_ns": t, "boottime_ns": t, "realtime_ns": 1_700_000_000_000_000_000 + t}
                  for k, t in (("start", start), ("end", end))}
        (d / "manifest.json").write_text(json.dumps({"batch": i + 1, "context": 128, "repeat": 1, "clocks": clocks}))
    return root


def _cut(frame, n: int, work: Path, repeat: int, in_memory: bool, table: list[tuple[str, str, dict]],
         fmt: str = "csv") -> dict:
    """Case 7: `perflib trace cut` of an n-dispatch trace (`fmt`: rocprofv3 CSV or gzipped Kineto JSON)
    into `CUT_LEVELS` run folders, against the in-memory path; both cuts read back and compared. The
    files are removed after."""
    import numpy as np
    import pandas as pd

    from perflib.traces import read_trace

    t = time.perf_counter()
    if fmt == "kineto":
        csv = write_kineto(frame.iloc[:n], work / f"cut{n}.json.gz")
        label = f"Kineto JSON, {n:,} events, {csv.stat().st_size / 2**20:,.0f} MiB gz, {CUT_LEVELS} windows"
    else:
        csv = write_csv(frame.iloc[:n], work / f"cut{n}_kernel_trace.csv")
        label = f"CSV D, {n:,} rows, {csv.stat().st_size / 2**20:,.0f} MiB, {CUT_LEVELS} windows"
    print(f"wrote {label} in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    mib = csv.stat().st_size / 2**20
    starts = np.sort(frame["start_ns"].to_numpy()[:n])
    lean_runs, full_runs = _cut_runs(work / f"cut{n}-lean", starts), _cut_runs(work / f"cut{n}-full", starts)
    entry: dict = {"format": fmt, "rows": n, "mib": mib, "levels": CUT_LEVELS,
                   "cut": measure([sys.executable, "-m", "perflib", "trace", "cut", str(csv), str(lean_runs),
                                   "--json", "--replace"], repeat)}
    table.append(("perflib trace cut --json", label, entry["cut"]))
    cuts = sorted(lean_runs.glob("*/trace.parquet"))
    entry["dispatches_cut"] = [len(read_trace(c).dispatches) for c in cuts]
    if in_memory:
        entry["in_memory"] = measure([sys.executable, "-c", IN_MEMORY_CUT, str(csv), str(full_runs)], 1)
        table.append(("in-memory path (read_trace + cut_into_runs)", label, entry["in_memory"]))
        for c in cuts:
            theirs = read_trace(full_runs / c.parent.name / "trace.parquet").dispatches
            pd.testing.assert_frame_equal(read_trace(c).dispatches, theirs)
        entry["same_cuts_as_in_memory"] = True
    csv.unlink()
    shutil.rmtree(lean_runs)
    shutil.rmtree(full_runs)
    return entry


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes, one run each (development)")
    p.add_argument("--sizes", help="CSV dispatch counts, comma-separated (default 1e6,3e6,1e7)")
    p.add_argument("--hta-rows", type=int, help="dispatches HTA runs on, scaled to each size (default 100,000; "
                   "0 skips)")
    p.add_argument("--kineto", action="append", default=[], metavar="PATH", help="Kineto trace(s) to parse (repeatable)")
    p.add_argument("--kineto-sizes", help="generated Kineto event counts (default 1e6,1e7)")
    p.add_argument("--bare-kineto-max", type=int, default=1_000_000, help="largest Kineto file the bare parse runs on")
    p.add_argument("--rocpd-size", type=int, help="rocpd dispatches (default 1e7; 0 skips)")
    p.add_argument("--cupti-size", type=float, help="CUPTI text kernels, each with its launch (default 1e6; 0 skips)")
    p.add_argument("--rocjson-size", type=float, help="rocprofv3 JSON dispatches (default 1e6; 0 skips)")
    p.add_argument("--cut-sizes", help="CSV dispatch counts that `trace cut` is measured on (default 1e6,1e7)")
    p.add_argument("--cut-formats", default="csv,kineto",
                   help="the formats `trace cut` is measured on: csv (rocprofv3 kernel_trace.csv), kineto (gzipped "
                        "Kineto JSON); default both")
    p.add_argument("--cut-in-memory-max", type=float, default=3e6,
                   help="largest cut case that the in-memory path also runs on (default 3e6: it is slow and large)")
    p.add_argument("--only", help=f"the cases to run, comma-separated, of {', '.join(CASES)} (default all)")
    p.add_argument("--no-in-memory", action="store_true",
                   help="skip the in-memory paths (read_trace + summarize; CUPTI: read_cupti_text_by_line + summarize)")
    p.add_argument("--repeat", type=int, help="runs per measurement; the fastest is reported (default 3)")
    p.add_argument("--repeat-large", type=int, help=f"runs per measurement from {LARGE:,} dispatches (default 1)")
    p.add_argument("--hta-repeat", type=int, default=1, help="runs of HTA on each real Kineto trace (default 1)")
    p.add_argument("--out", metavar="FILE", help="write the results as JSON here")
    p.add_argument("--workdir", metavar="DIR", help="where to write the generated traces (default: a temp dir, removed)")
    args = p.parse_args(argv)
    q = args.quick
    sizes = _sizes(args.sizes) if args.sizes else ([100_000, 300_000] if q else [1_000_000, 3_000_000, 10_000_000])
    kineto_sizes = _sizes(args.kineto_sizes) if args.kineto_sizes else ([300_000] if q else [1_000_000, 10_000_000])
    rocpd_size = args.rocpd_size if args.rocpd_size is not None else (300_000 if q else 10_000_000)
    cupti_size = int(args.cupti_size) if args.cupti_size is not None else (50_000 if q else 1_000_000)
    rocjson_size = int(args.rocjson_size) if args.rocjson_size is not None else (100_000 if q else 1_000_000)
    cut_sizes = _sizes(args.cut_sizes) if args.cut_sizes else ([100_000] if q else [1_000_000, 10_000_000])
    only = set(_names(args.only)) if args.only else set(CASES)
    if not only <= set(CASES):
        p.error(f"--only: unknown case(s) {', '.join(sorted(only - set(CASES)))}; cases are {', '.join(CASES)}")
    sizes = sizes if "csv" in only else []
    kineto_sizes = kineto_sizes if "kineto" in only else []
    rocpd_size = rocpd_size if "rocpd" in only else 0
    cupti_size = cupti_size if "cupti" in only else 0
    rocjson_size = rocjson_size if "rocjson" in only else 0
    cut_sizes = cut_sizes if "cut" in only else []
    hta_rows = args.hta_rows if args.hta_rows is not None else (20_000 if q else 100_000)
    hta_rows = hta_rows if "hta" in only else 0
    repeat = args.repeat or (1 if q else 3)
    repeat_large = args.repeat_large or 1

    def runs(n: int) -> int:
        return repeat_large if n >= LARGE else repeat

    import compileall

    from perflib.traces import writers

    compileall.compile_dir(str(REPO / "perflib"), quiet=1)  # see the module docstring
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="perflib-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    perflib = [sys.executable, "-m", "perflib", "trace", "summary"]
    results: dict = {
        "host": {"python": platform.python_version(), "cpus": os.cpu_count(), "load_avg": os.getloadavg(),
                 "machine": platform.machine(), "date": time.strftime("%Y-%m-%d"),
                 "perflib_bytecode": "compiled before measuring",
                 "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE")},
        "sizes": sizes, "hta_rows": hta_rows, "repeat": repeat, "repeat_large": repeat_large, "quick": q,
        "csv": [], "kineto": [], "measurements": [],
    }
    table: list[tuple[str, str, dict]] = []
    frame = None
    try:
        biggest = max([*sizes, *kineto_sizes, rocpd_size, cupti_size, rocjson_size, *cut_sizes, hta_rows])
        if biggest:
            frame, info = pattern_dispatches(biggest)
            results["generated"] = info
        for n in sizes:
            t = time.perf_counter()
            csv = write_csv(frame.iloc[:n], work / f"bench{n}_kernel_trace.csv")
            mib = csv.stat().st_size / 2**20
            print(f"wrote {n:,} dispatches ({mib:.0f} MiB) in {time.perf_counter() - t:.0f} s", file=sys.stderr)
            label = f"CSV D, {n:,} rows, {mib:,.0f} MiB"
            row: dict = {"rows": n, "mib": mib}
            # side by side: one run of each per round, so a drift of the shared box's load weighs on both alike
            row.update(measure_interleaved({"summary": ([*perflib, str(csv), "--json"], runs(n)),
                                            "bare_read": ([sys.executable, "-c", BARE_CSV, str(csv)], runs(n))}))
            table += [("perflib trace summary --json", label, row["summary"]),
                      ("pyarrow.csv.read_csv (bare)", label, row["bare_read"])]
            if not args.no_in_memory:
                row["in_memory"] = measure([sys.executable, "-c", IN_MEMORY, str(csv)], 1)
                table.append(("in-memory path (read_trace + summarize)", label, row["in_memory"]))
            row["ratio_summary_over_bare"] = row["summary"]["wall_s"] / row["bare_read"]["wall_s"]
            results["csv"].append(row)
            csv.unlink()
        if results["csv"]:
            first, last = results["csv"][0], results["csv"][-1]
            results["csv_scaling"] = {
                "time_per_million_s": {str(r["rows"]): r["summary"]["wall_s"] / r["rows"] * 1e6
                                       for r in results["csv"]},
                "time_ratio_last_over_first": last["summary"]["wall_s"] / first["summary"]["wall_s"],
                "rows_ratio_last_over_first": last["rows"] / first["rows"],
            }

        if hta_rows:
            hta_rows = min(hta_rows, len(frame))
            generated = writers.write_kineto_json(frame.iloc[:hta_rows], work / "hta-generated.json.gz")
            hta_dir = work / "hta"
            kineto = hta_copy(generated, hta_dir)
            generated.unlink()
            hta = measure([sys.executable, "-c", HTA, str(hta_dir)], 1)
            ours_small = measure([*perflib, str(kineto), "--json"], repeat)
            table += [("HTA temporal breakdown", f"Kineto JSON, {hta_rows:,} rows", hta),
                      ("perflib trace summary --json", f"Kineto JSON, {hta_rows:,} rows", ours_small)]
            results["hta"] = {
                "hta": hta, "perflib_same_file": ours_small, "rows": hta_rows,
                "speedup_same_file": hta["wall_s"] / ours_small["wall_s"],
                "speedup_vs_scaled_hta_on_csv": {
                    str(r["rows"]): hta["wall_s"] * r["rows"] / hta_rows / r["summary"]["wall_s"]
                    for r in results["csv"]},
                "goal": ">= 30x",
                "note": f"HTA ran once on {hta_rows:,} dispatches; its time is scaled linearly to each CSV size",
            }
            shutil.rmtree(hta_dir, ignore_errors=True)

        paths: list[tuple[Path, int | None]] = [(Path(k), None) for k in args.kineto] if "kineto" in only else []
        if not paths and "kineto" in only:
            h200 = sorted((REPO / "data" / "raw" / "h200-pytorch").glob("*.json.gz"), key=lambda x: x.stat().st_size)
            paths = [(x, None) for x in h200[-1:]]
        for n in kineto_sizes:
            t = time.perf_counter()
            path = write_kineto(frame.iloc[:n], work / f"kineto{n}.json.gz")
            print(f"wrote {n:,} Kineto events ({path.stat().st_size / 2**20:.0f} MiB gz) in "
                  f"{time.perf_counter() - t:.0f} s", file=sys.stderr)
            paths.append((path, n))
        for path, n in paths:
            label = f"{path.name} ({path.stat().st_size / 2**20:.1f} MiB gz)"
            entry: dict = {"path": str(path), "events": n, "mib": path.stat().st_size / 2**20}
            commands = {"summary": ([*perflib, str(path), "--json"], runs(n or 0))}
            bare = n is None or n <= args.bare_kineto_max
            if bare:
                commands["bare_parse"] = ([sys.executable, "-c", BARE_KINETO, str(path)], runs(n or 0))
            hta_dir = work / f"hta-{path.name}"
            if n is None and args.hta_repeat > 0:  # a real trace: HTA beside it
                hta_copy(path, hta_dir)
                commands["hta"] = ([sys.executable, "-c", HTA, str(hta_dir)], args.hta_repeat)
            entry.update(measure_interleaved(commands))
            shutil.rmtree(hta_dir, ignore_errors=True)
            table.append(("perflib trace summary --json", label, entry["summary"]))
            if bare:
                entry["ratio_summary_over_bare"] = entry["summary"]["wall_s"] / entry["bare_parse"]["wall_s"]
                table.append(("gzip + json.loads (bare)", label, entry["bare_parse"]))
            else:
                entry["bare_parse"] = None
                entry["note"] = f"bare parse skipped above {args.bare_kineto_max:,} events (memory)"
            if "hta" in entry:
                entry["hta_over_summary"] = entry["hta"]["wall_s"] / entry["summary"]["wall_s"]
                failed = " (failed: see notes)" if entry["hta"].get("notes") else ""
                table.append((f"HTA load + temporal breakdown{failed}", label, entry["hta"]))
            results["kineto"].append(entry)
            if n is not None:
                path.unlink()

        if rocpd_size:
            t = time.perf_counter()
            db = writers.write_rocpd(frame.iloc[:rocpd_size], work / f"bench{rocpd_size}_results.db")
            print(f"wrote {rocpd_size:,} rocpd dispatches ({db.stat().st_size / 2**20:.0f} MiB) in "
                  f"{time.perf_counter() - t:.0f} s", file=sys.stderr)
            label = f"rocpd, {rocpd_size:,} rows, {db.stat().st_size / 2**20:,.0f} MiB"
            rocpd = measure([*perflib, str(db), "--json"], runs(rocpd_size))
            table.append(("perflib trace summary --json", label, rocpd))
            results["rocpd"] = {"rows": rocpd_size, "mib": db.stat().st_size / 2**20, "summary": rocpd}
            db.unlink()

        if cupti_size:
            t = time.perf_counter()
            text = write_cupti(frame.iloc[:cupti_size], work / f"cupti{cupti_size}.txt.gz")
            mib = text.stat().st_size / 2**20
            print(f"wrote {cupti_size:,} CUPTI kernels and their launches ({mib:.0f} MiB gz) in "
                  f"{time.perf_counter() - t:.0f} s", file=sys.stderr)
            label = f"CUPTI text, {cupti_size:,} kernels + launches, {mib:,.0f} MiB gz"
            entry = {"kernels": cupti_size, "records": 2 * cupti_size, "mib_gz": mib,
                     "summary": measure([*perflib, str(text), "--json"], runs(cupti_size)),
                     "bare_gunzip": measure([sys.executable, "-c", BARE_GUNZIP, str(text)], runs(cupti_size))}
            table += [("perflib trace summary --json", label, entry["summary"]),
                      ("zlib gunzip (bare)", label, entry["bare_gunzip"])]
            if not args.no_in_memory:
                entry["in_memory"] = measure([sys.executable, "-c", IN_MEMORY_CUPTI, str(text)], 1)
                entry["speedup_over_in_memory"] = entry["in_memory"]["wall_s"] / entry["summary"]["wall_s"]
                table.append(("in-memory path (read_cupti_text_by_line + summarize)", label, entry["in_memory"]))
            results["cupti"] = entry
            text.unlink()

        if rocjson_size:
            results["rocjson"] = _rocjson(frame.iloc[:rocjson_size], work, perflib, runs(rocjson_size),
                                          not args.no_in_memory, table)
        results["cut"] = [_cut(frame, n, work, runs(n), not args.no_in_memory and n <= args.cut_in_memory_max, table,
                               fmt) for fmt in _names(args.cut_formats) for n in cut_sizes]
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)

    results["measurements"] = [{"what": w, "input": i, **m} for w, i, m in table]
    print(f"\nbest of {repeat} runs ({repeat_large} from {LARGE:,} rows; the in-memory path and HTA on generated "
          f"files: 1; HTA on real traces: {args.hta_repeat}), each a fresh subprocess incl. start-up; peak RSS "
          f"of the child; load average at start {results['host']['load_avg'][0]:.2f} on {os.cpu_count()} CPUs\n")
    width = max(len(w) for w, _, _ in table)
    iwidth = max(len(i) for _, i, _ in table)
    print(f"{'what':<{width}}  {'input':<{iwidth}}  {'wall s':>8}  {'peak RSS MiB':>12}")
    for w, i, m in table:
        print(f"{w:<{width}}  {i:<{iwidth}}  {m['wall_s']:>8.2f}  {m['max_rss_mib']:>12.0f}")
    print()
    for r in results["csv"]:
        print(f"CSV {r['rows']:>11,}: summary / bare read {r['ratio_summary_over_bare']:.2f}x (goal <= 1.5x), "
              f"peak {r['summary']['max_rss_mib'] / GIB:.2f} GiB (goal <= 2 GiB at 10M), "
              f"{r['summary']['wall_s'] / r['rows'] * 1e6:.2f} s per 1M")
    if "hta" in results:
        h = results["hta"]
        print(f"HTA / perflib, same Kineto file ({h['rows']:,} rows)  {h['speedup_same_file']:.1f}x   (goal >= 30x)")
        for n, x in h["speedup_vs_scaled_hta_on_csv"].items():
            print(f"HTA scaled to {int(n):,} rows / perflib on the CSV  {x:.1f}x   (goal >= 30x; {h['note']})")
    for k in results["kineto"]:
        ratio = f"summary / bare parse {k['ratio_summary_over_bare']:.2f}x (goal <= 1x)" if k["bare_parse"] else k["note"]
        print(f"Kineto {Path(k['path']).name}: {ratio}, peak {k['summary']['max_rss_mib'] / GIB:.2f} GiB")
        if "hta" in k:
            print(f"Kineto {Path(k['path']).name}: HTA / perflib {k['hta_over_summary']:.1f}x (goal >= 10x)"
                  + "".join(f"; {note}" for note in k["hta"].get("notes", [])))
    if "rocpd" in results:
        r = results["rocpd"]
        print(f"rocpd {r['rows']:,}: {r['summary']['wall_s']:.1f} s, peak {r['summary']['max_rss_mib'] / GIB:.2f} GiB "
              "(goal <= 2 GiB)")
    if "rocjson" in results:
        r = results["rocjson"]
        versus = "".join(f", {what} {r[key]['wall_s']:.1f} s, peak {r[key]['max_rss_mib'] / GIB:.2f} GiB"
                         for key, what in (("in_memory", "in-memory path"), ("bare_parse", "bare orjson.loads"))
                         if key in r)
        print(f"rocprofv3 JSON {r['rows']:,} ({r['mib']:,.0f} MiB): {r['summary']['wall_s']:.1f} s, peak "
              f"{r['summary']['max_rss_mib'] / GIB:.2f} GiB{versus}")
    if "cupti" in results:
        c = results["cupti"]
        versus = (f", {c['speedup_over_in_memory']:.1f}x faster than the in-memory path "
                  f"({c['in_memory']['wall_s']:.1f} s, peak {c['in_memory']['max_rss_mib'] / GIB:.2f} GiB)"
                  if "in_memory" in c else "")
        print(f"CUPTI text {c['kernels']:,} kernels: {c['summary']['wall_s']:.1f} s, peak "
              f"{c['summary']['max_rss_mib'] / GIB:.2f} GiB{versus}")
    for c in results.get("cut", []):
        versus = (f"; in-memory path {c['in_memory']['wall_s']:.1f} s, peak {c['in_memory']['max_rss_mib'] / GIB:.2f} "
                  "GiB, the same cuts" if "in_memory" in c else "")
        print(f"trace cut, {c['format']} {c['rows']:,} ({c['mib']:,.0f} MiB, {c['levels']} windows, "
              f"{sum(c['dispatches_cut']):,} "
              f"dispatches cut): {c['cut']['wall_s']:.1f} s, peak {c['cut']['max_rss_mib'] / GIB:.2f} GiB "
              f"(goal <= 2 GiB at 10M){versus}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
        print(f"\nresults written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
