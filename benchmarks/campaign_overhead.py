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
import shutil
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
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="perflib-campaign-overhead-"))
    campaign = work / Path(args.campaign).name
    shutil.copy(args.campaign, campaign)
    env = {**os.environ, "PYTHONPATH": str(REPO) + (os.pathsep + os.environ["PYTHONPATH"]
                                                     if os.environ.get("PYTHONPATH") else "")}
    cmd = [sys.executable, "-m", "perflib", "campaign", "run", str(campaign), "--no-report", "--no-contention", "--json"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"campaign run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    levels = []
    for manifest in sorted((work / "data").rglob("manifest.json")):
        m = json.loads(manifest.read_text())
        clocks = m.get("clocks") or {}
        if m.get("status") == "complete" and clocks.get("start") and clocks.get("end"):
            levels.append({"run": str(manifest.parent.relative_to(work / "data")),
                           "level_s": (clocks["end"]["monotonic_ns"] - clocks["start"]["monotonic_ns"]) / 1e9})
    measured = sum(r["level_s"] for r in levels)
    result = {"campaign": args.campaign, "runs": len(levels), "wall_s": wall, "levels_s": measured,
              "overhead_share": 1 - measured / wall, "per_run_overhead_s": (wall - measured) / max(1, len(levels)),
              "levels": levels, "cpus": os.cpu_count(),
              "method": "wall = `python -m perflib campaign run FILE --no-report --no-contention` as a subprocess, "
                        "server build cached; levels = sum over complete runs of manifest clocks.end - clocks.start "
                        "(monotonic); overhead = 1 - levels / wall; goal <= 5%"}
    print(f"{len(levels)} runs in {wall:.1f} s, levels {measured:.1f} s ({100 * measured / wall:.0f}%), overhead "
          f"{100 * result['overhead_share']:.0f}% ({result['per_run_overhead_s']:.2f} s per run); goal <= 5%")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
