"""Campaign overhead: wall time of `perflib campaign run` against the time its levels measured.

Not a test: a measurement. The script copies a campaign file (default: campaigns/demo.yaml, the
local CPU llama-server, 18 runs) into a fresh folder, runs `python -m perflib campaign run` on it
with `--no-report` (the page is not part of running the matrix), and reads every run's manifest:
a level's own duration is `clocks.end − clocks.start` (CLOCK_MONOTONIC, from just before its
requests are sent until the last one finished). Overhead = 1 − Σ level durations / wall time: the
server start, prompts, warm-ups, /metrics scrapes, notebooks and their kernels, writing files.

    python benchmarks/campaign_overhead.py --out benchmarks/results-campaign_overhead.json

Goal (issue 14 item 4): overhead at most 5% of the campaign's wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--campaign", default=str(REPO / "campaigns" / "demo.yaml"))
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the campaign's folder")
    parser.add_argument("--decode-tokens", type=int,
                        help="replace the campaign's decode_tokens (longer levels, the same fixed costs): shows how "
                             "the overhead share falls with the level length")
    args = parser.parse_args(argv)

    import compileall

    # perflib's bytecode, as an installed package has it (with PYTHONDONTWRITEBYTECODE set, as on the
    # development machine, the editable checkout has none and every process would compile perflib again)
    compileall.compile_dir(str(REPO / "perflib"), quiet=1)
    work = Path(tempfile.mkdtemp(prefix="perflib-campaign-overhead-"))
    campaign = work / Path(args.campaign).name
    shutil.copy(args.campaign, campaign)
    if args.decode_tokens:
        text, n = re.subn(r"(?m)^decode_tokens:\s*\d+", f"decode_tokens: {args.decode_tokens}", campaign.read_text())
        if n != 1:
            raise SystemExit(f"{args.campaign}: no top-level `decode_tokens:` line to replace")
        campaign.write_text(text)
    env = {**os.environ, "PYTHONPATH": str(REPO) + (os.pathsep + os.environ["PYTHONPATH"]
                                                     if os.environ.get("PYTHONPATH") else "")}
    load_start = os.getloadavg()[0]
    cmd = [sys.executable, "-m", "perflib", "campaign", "run", str(campaign), "--no-report", "--no-contention", "--json"]
    t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)  # the manifests' clock: where each level lies in the run
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, check=False)
    t1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    wall = (t1 - t0) / 1e9
    if proc.returncode != 0:
        raise SystemExit(f"campaign run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    levels = []
    for manifest in sorted((work / "data").rglob("manifest.json")):
        m = json.loads(manifest.read_text())
        clocks = m.get("clocks") or {}
        if m.get("status") == "complete" and clocks.get("start") and clocks.get("end"):
            levels.append({"run": str(manifest.parent.relative_to(work / "data")),
                           "start_ns": clocks["start"]["monotonic_ns"], "end_ns": clocks["end"]["monotonic_ns"],
                           "level_s": (clocks["end"]["monotonic_ns"] - clocks["start"]["monotonic_ns"]) / 1e9})
    levels.sort(key=lambda r: r["start_ns"])
    measured = sum(r["level_s"] for r in levels)
    # where the rest went: before the first level (imports, server start, kernel), between levels (each run's
    # warm-up, prompt sizing, scrapes, notebook), after the last (kernel and server stop, exit)
    gaps = [(b["start_ns"] - a["end_ns"]) / 1e9 for a, b in zip(levels, levels[1:], strict=False)]
    phases = {"before_first_level_s": (levels[0]["start_ns"] - t0) / 1e9 if levels else None,
              "between_levels_s": sum(gaps), "between_levels_median_s": statistics.median(gaps) if gaps else None,
              "after_last_level_s": (t1 - levels[-1]["end_ns"]) / 1e9 if levels else None,
              "per_run_share": sum(gaps) / (sum(gaps) + sum(r["level_s"] for r in levels[1:])) if gaps else None}
    result = {"campaign": args.campaign, "decode_tokens_override": args.decode_tokens, "runs": len(levels), "wall_s": wall, "levels_s": measured,
              "overhead_share": 1 - measured / wall, "per_run_overhead_s": (wall - measured) / max(1, len(levels)),
              **phases, "levels": levels, "cpus": os.cpu_count(), "load_average_at_start": load_start,
              "method": "wall = `python -m perflib campaign run FILE --no-report --no-contention` as a subprocess, "
                        "server build cached; levels = sum over complete runs of manifest clocks.end - clocks.start "
                        "(monotonic); overhead = 1 - levels / wall; goal <= 5%; before/between/after: where the rest lies "
                        "on the same clock; per_run_share = between / (between + levels after the first)"}
    print(f"{len(levels)} runs in {wall:.1f} s, levels {measured:.1f} s ({100 * measured / wall:.0f}%), overhead "
          f"{100 * result['overhead_share']:.0f}% ({result['per_run_overhead_s']:.2f} s per run); goal <= 5%")
    if levels:
        print(f"before the first level {phases['before_first_level_s']:.2f} s; between levels {sum(gaps):.2f} s "
              f"(median {phases['between_levels_median_s'] or 0:.3f} s a run, {100 * (phases['per_run_share'] or 0):.0f}% "
              f"of the runs after the first); after the last {phases['after_last_level_s']:.2f} s")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
