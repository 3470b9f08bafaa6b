"""Campaign overhead: wall time of `perflib campaign run` against the time its levels measured.

Not a test: a measurement. The script copies a campaign file (default: campaigns/demo.yaml, the
local CPU llama-server, 18 runs) into a fresh folder, runs `python -m perflib campaign run` on it
with `--no-report` (the page is not part of running the matrix), and reads every run's manifest:
a level's own duration is `clocks.end − clocks.start` (CLOCK_MONOTONIC, from just before its
requests are sent until the last one finished). Overhead = 1 − Σ level durations / wall time: the
server start, prompts, warm-ups, /metrics scrapes, notebooks (and with `--papermill` their kernels),
writing files.

    python benchmarks/campaign_overhead.py --out benchmarks/results-campaign_overhead.json --papermill

runs the campaign as `perflib campaign run` does by default (each run measured in the runner's own
process, its notebook written from the results) and then, with `--papermill`, through each run's
collect.ipynb executed in a kernel: the JSON holds the first at its top level and the second under
`papermill`. Goal (issue 14 item 4, issue 23): overhead at most 5% of the campaign's wall time.
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
    parser.add_argument("--papermill", action="store_true",
                        help="also run the campaign with `--papermill` (each run's collect.ipynb executed in a "
                             "kernel), right after the default run, for the two side by side")
    args = parser.parse_args(argv)

    import compileall

    # perflib's bytecode, as an installed package has it (with PYTHONDONTWRITEBYTECODE set, as on the
    # development machine, the editable checkout has none and every process would compile perflib again)
    compileall.compile_dir(str(REPO / "perflib"), quiet=1)
    result = {"campaign": args.campaign, "decode_tokens_override": args.decode_tokens,
              **measure(args.campaign, args.decode_tokens, [], args.keep)}
    if args.papermill:
        result["papermill"] = measure(args.campaign, args.decode_tokens, ["--papermill"], args.keep)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


def measure(source: str, decode_tokens: int | None, extra: list[str], keep: bool) -> dict:
    """One `perflib campaign run` of a fresh copy of the campaign: wall, levels, and where the rest lies."""
    work = Path(tempfile.mkdtemp(prefix="perflib-campaign-overhead-"))
    campaign = work / Path(source).name
    shutil.copy(source, campaign)
    if decode_tokens:
        text, n = re.subn(r"(?m)^decode_tokens:\s*\d+", f"decode_tokens: {decode_tokens}", campaign.read_text())
        if n != 1:
            raise SystemExit(f"{source}: no top-level `decode_tokens:` line to replace")
        campaign.write_text(text)
    env = {**os.environ, "PYTHONPATH": str(REPO) + (os.pathsep + os.environ["PYTHONPATH"]
                                                     if os.environ.get("PYTHONPATH") else "")}
    load_start = os.getloadavg()[0]
    cmd = [sys.executable, "-m", "perflib", "campaign", "run", str(campaign), "--no-report", "--no-contention", "--json",
           *extra]
    t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)  # the manifests' clock: where each level lies in the run
    unix0 = time.time_ns()
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
            warmup = json.loads((manifest.parent / "warmup.jsonl").read_text().splitlines()[0])
            levels.append({"run": str(manifest.parent.relative_to(work / "data")), "warmup_ns": warmup["start_ns"],
                           "start_ns": clocks["start"]["monotonic_ns"], "end_ns": clocks["end"]["monotonic_ns"],
                           "level_s": (clocks["end"]["monotonic_ns"] - clocks["start"]["monotonic_ns"]) / 1e9})
    levels.sort(key=lambda r: r["start_ns"])
    measured = sum(r["level_s"] for r in levels)
    # where the rest went: before the first level (imports, server start, the first run's own start), between
    # levels (each run's end and the next one's start: summary, notebook, manifest, identity, prompt sizing, then
    # its warm-up and the scrape before), after the last (its scrape, summary and notebook; server stop, exit)
    gaps = [(b["start_ns"] - a["end_ns"]) / 1e9 for a, b in zip(levels, levels[1:], strict=False)]
    runner = [(b["warmup_ns"] - a["end_ns"]) / 1e9 for a, b in zip(levels, levels[1:], strict=False)]
    phases = {"before_first_level_s": (levels[0]["start_ns"] - t0) / 1e9 if levels else None,
              "between_levels_s": sum(gaps), "between_levels_median_s": statistics.median(gaps) if gaps else None,
              "between_levels_to_warmup_median_s": statistics.median(runner) if runner else None,
              "after_last_level_s": (t1 - levels[-1]["end_ns"]) / 1e9 if levels else None,
              "per_run_share": sum(gaps) / (sum(gaps) + sum(r["level_s"] for r in levels[1:])) if gaps else None,
              **_before_and_after(work, levels, t0, unix0, t1)}
    result = {"args": extra, "runs": len(levels), "wall_s": wall, "levels_s": measured,
              "overhead_share": 1 - measured / wall, "per_run_overhead_s": (wall - measured) / max(1, len(levels)),
              **phases, "levels": levels, "cpus": os.cpu_count(), "load_average_at_start": load_start,
              "method": "wall = `python -m perflib campaign run FILE --no-report --no-contention` as a subprocess, "
                        "server build cached; levels = sum over complete runs of manifest clocks.end - clocks.start "
                        "(monotonic); overhead = 1 - levels / wall; goal <= 5%; before/between/after: where the rest lies "
                        "on the same clock; per_run_share = between / (between + levels after the first); "
                        "to_warmup: from a level's end to the next run's warm-up request (the runner's own work "
                        "between runs); server start/stop from server.json's times (realtime)"}
    label = "campaign run" + (" " + " ".join(extra) if extra else "")
    print(f"{label}: {len(levels)} runs in {wall:.1f} s, levels {measured:.1f} s ({100 * measured / wall:.0f}%), "
          f"overhead {100 * result['overhead_share']:.1f}% ({result['per_run_overhead_s']:.2f} s per run); goal <= 5%")
    if levels:
        print(f"  before the first level {phases['before_first_level_s']:.2f} s (start to server start "
              f"{phases['to_server_start_s']:.2f} s, server start {phases['server_start_s']:.2f} s, first run's own "
              f"start {phases['first_run_start_s']:.2f} s); between levels {sum(gaps):.2f} s (median "
              f"{phases['between_levels_median_s'] or 0:.3f} s a run, {phases['between_levels_to_warmup_median_s'] or 0:.3f} "
              f"s of it before the warm-up; {100 * (phases['per_run_share'] or 0):.0f}% of the runs after the first); "
              f"after the last {phases['after_last_level_s']:.2f} s (server stop {phases['server_stop_s']:.2f} s)")
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return result


def _before_and_after(work: Path, levels: list[dict], t0: int, unix0: int, t1: int) -> dict:
    """The server's start and stop placed on the run's clock (server.json's Unix times, shifted by the offset
    read at the start): command start to server start, the server's own start, from ready to the first level."""
    starts = [s for record in (work / "data").rglob("server.json")
              for s in json.loads(record.read_text()).get("starts", [])]
    if not starts or not levels:
        return {"to_server_start_s": None, "server_start_s": None, "first_run_start_s": None, "server_stop_s": None}
    first = min(starts, key=lambda s: s["started_at"])
    last = max(starts, key=lambda s: s.get("ended_at") or 0)
    mono = lambda unix_s: t0 + (unix_s * 1e9 - unix0)  # noqa: E731 - Unix seconds on the monotonic clock
    return {"to_server_start_s": (mono(first["started_at"]) - t0) / 1e9,
            "server_start_s": first["ready_at"] - first["started_at"],
            "first_run_start_s": (levels[0]["start_ns"] - mono(first["ready_at"])) / 1e9,
            "server_stop_s": (mono(last["ended_at"]) - levels[-1]["end_ns"]) / 1e9 if last.get("ended_at") else None}


if __name__ == "__main__":
    sys.exit(main())
