"""Campaign overhead: wall time of `perflib campaign run` against the time its levels measured.

Not a test: a measurement. The script copies a campaign file (default: campaigns/demo.yaml, the
local CPU llama-server: a default arm and the same arm under `perf record`, 36 runs) into a fresh
folder and runs it as `make demo` does, `python -m perflib campaign run FILE --data DIR`, with
`--no-contention` (the contention sampler would redo runs that another user of a shared machine
slowed; `--contention` keeps it); `--no-report` leaves the page out, as the rows before 2026-12-05
did (they also gave `--json`, whose answer evaluates the verdicts again after the page). It reads
every run's manifest: a level's own duration is `clocks.end − clocks.start` (CLOCK_MONOTONIC, from
just before its requests are sent until the last one finished). Overhead =
1 − Σ level durations / wall time: imports, the servers' starts and stops, prompts, warm-ups,
/metrics scrapes, writing the run folders and notebooks, the profiler's post-processing, cutting
and attributing the traces, the derived tables and the page.

    python benchmarks/campaign_overhead.py --out benchmarks/results-campaign_overhead-X.json \\
        --rounds 3 --baseline /path/to/another/checkout

`--rounds N` runs the campaign N times and keeps every round, the median round (by overhead) at the
JSON's top level. `--baseline DIR` runs the same campaign with another checkout's perflib (the code
before a change) alternately with this one, round by round, so that both see the same machine: its
rounds and median go under `baseline`. `--papermill` adds a third configuration, this checkout with
`--papermill` (each run's collect.ipynb executed in a kernel), under `papermill`. Goal (issues 14,
23, 31): overhead at most 5% of the campaign's wall time.
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
    parser.add_argument("--keep", action="store_true", help="keep the campaign's folders")
    parser.add_argument("--decode-tokens", type=int,
                        help="replace the campaign's decode_tokens (longer levels, the same fixed costs): shows how "
                             "the overhead share falls with the level length")
    parser.add_argument("--no-report", action="store_true",
                        help="run the matrix only (`campaign run --no-report`), as the rows before 2026-12-05 did")
    parser.add_argument("--contention", action="store_true",
                        help="keep the contention sampler on (as `make demo` does): on a shared machine it redoes "
                             "runs that other work slowed, which is then in the wall time")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each configuration, alternating (default 1)")
    parser.add_argument("--baseline", metavar="DIR",
                        help="another checkout whose perflib runs the same campaign alternately with this one "
                             "(the code before a change), under `baseline`")
    parser.add_argument("--papermill", action="store_true",
                        help="also run the campaign with `--papermill` (each run's collect.ipynb executed in a "
                             "kernel), alternately with the default, under `papermill`")
    args = parser.parse_args(argv)

    import compileall

    extra = [] if args.contention else ["--no-contention"]
    extra += ["--no-report"] if args.no_report else []
    configs: dict[str | None, tuple[Path, list[str]]] = {None: (REPO, extra)}
    if args.baseline:
        configs["baseline"] = (Path(args.baseline).resolve(), extra)
    if args.papermill:
        configs["papermill"] = (REPO, [*extra, "--papermill"])
    for root, _ in configs.values():
        # perflib's bytecode, as an installed package has it (with PYTHONDONTWRITEBYTECODE set, as on the
        # development machine, the editable checkout has none and every process would compile perflib again)
        compileall.compile_dir(str(root / "perflib"), quiet=1)
    rounds: dict[str | None, list[dict]] = {key: [] for key in configs}
    for number in range(1, args.rounds + 1):
        for key, (root, flags) in configs.items():
            print(f"round {number} of {args.rounds}: {key or 'this checkout'}", file=sys.stderr)
            rounds[key].append({"round": number, **measure(args.campaign, args.decode_tokens, root, flags, args.keep)})
    result = {"campaign": args.campaign, "decode_tokens_override": args.decode_tokens, **_summary(rounds[None])}
    for key in configs:
        if key is not None:
            result[key] = {"checkout": str(configs[key][0]) if key == "baseline" else None, **_summary(rounds[key])}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


def _summary(rounds: list[dict]) -> dict:
    """The median round (by overhead share) at the top, every round's figures under `rounds`."""
    middle = sorted(rounds, key=lambda r: r["overhead_share"])[(len(rounds) - 1) // 2]
    brief = [{k: v for k, v in r.items() if k not in ("levels", "method")} for r in rounds]
    return {**middle, "rounds": brief, "overhead_shares": [r["overhead_share"] for r in rounds],
            "overhead_share_median": statistics.median(r["overhead_share"] for r in rounds),
            "overhead_s_median": statistics.median(r["overhead_s"] for r in rounds)}


def measure(source: str, decode_tokens: int | None, root: Path, extra: list[str], keep: bool) -> dict:
    """One `perflib campaign run` of a fresh copy of the campaign, with `root`'s perflib: wall, levels, and
    where the rest lies."""
    work = Path(tempfile.mkdtemp(prefix="perflib-campaign-overhead-"))
    campaign = work / Path(source).name
    shutil.copy(source, campaign)
    if decode_tokens:
        text, n = re.subn(r"(?m)^decode_tokens:\s*\d+", f"decode_tokens: {decode_tokens}", campaign.read_text())
        if n != 1:
            raise SystemExit(f"{source}: no top-level `decode_tokens:` line to replace")
        campaign.write_text(text)
    env = {**os.environ, "PYTHONPATH": str(root) + (os.pathsep + os.environ["PYTHONPATH"]
                                                     if os.environ.get("PYTHONPATH") else "")}
    load_start = os.getloadavg()[0]
    cmd = [sys.executable, "-m", "perflib", "campaign", "run", str(campaign), "--data", str(work / "data"),
           "--reports", str(work / "reports"), *extra]
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
            levels.append({"run": str(manifest.parent.relative_to(work / "data")),
                           "group": str(manifest.parent.parent.relative_to(work / "data")),
                           "start_ns": clocks["start"]["monotonic_ns"], "end_ns": clocks["end"]["monotonic_ns"],
                           "level_s": (clocks["end"]["monotonic_ns"] - clocks["start"]["monotonic_ns"]) / 1e9})
    levels.sort(key=lambda r: r["start_ns"])
    measured = sum(r["level_s"] for r in levels)
    # where the rest went: before the first level (imports, server start, the first run's own start), between
    # levels of one server (each run's end and the next one's start), between groups (a server stopped, its
    # capture cut and its runs attributed, the next one started), after the last (the last group's stop, cut
    # and attribution, the derived tables and the page, exit)
    pairs = list(zip(levels, levels[1:], strict=False))
    gaps = [(b["start_ns"] - a["end_ns"]) / 1e9 for a, b in pairs if a["group"] == b["group"]]
    group_gaps = [(b["start_ns"] - a["end_ns"]) / 1e9 for a, b in pairs if a["group"] != b["group"]]
    after_first = sum(r["level_s"] for i, r in enumerate(levels) if i and levels[i - 1]["group"] == r["group"])
    phases = {"before_first_level_s": (levels[0]["start_ns"] - t0) / 1e9 if levels else None,
              "between_levels_s": sum(gaps) + sum(group_gaps), "between_runs_s": sum(gaps),
              "between_levels_median_s": statistics.median(gaps) if gaps else None,
              "between_groups_s": sum(group_gaps),
              "after_last_level_s": (t1 - levels[-1]["end_ns"]) / 1e9 if levels else None,
              "per_run_share": sum(gaps) / (sum(gaps) + after_first) if gaps else None,
              **_servers_and_page(work, levels, t0, unix0, t1)}
    result = {"args": extra, "runs": len(levels), "wall_s": wall, "levels_s": measured,
              "overhead_s": wall - measured, "overhead_share": 1 - measured / wall, "per_run_overhead_s": (wall - measured) / max(1, len(levels)),
              **phases, "levels": levels, "cpus": os.cpu_count(), "load_average_at_start": load_start,
              "load_average_at_end": os.getloadavg()[0],
              "method": "wall = `python -m perflib campaign run FILE --data DIR` (" + " ".join(extra) + ") as a "
                        "subprocess, server build cached; levels = sum over complete runs of manifest clocks.end - "
                        "clocks.start (monotonic); overhead = 1 - levels / wall; goal <= 5%; before/between/after: "
                        "where the rest lies on the same clock; between runs: gaps between levels of one server, "
                        "between groups: gaps where the (arm, backend) changes; per_run_share = between runs / "
                        "(between runs + the levels that follow a level of their group); server starts and stops "
                        "from server.json's times, attribution and page from the files' modification times "
                        "(realtime, placed on the monotonic clock by the offset read at the start)"}
    label = "campaign run" + (" " + " ".join(extra) if extra else "") + f" ({root})"
    print(f"{label}: {len(levels)} runs in {wall:.1f} s, levels {measured:.1f} s ({100 * measured / wall:.0f}%), "
          f"overhead {100 * result['overhead_share']:.1f}% ({result['per_run_overhead_s']:.2f} s per run); goal <= 5%")
    if levels:
        print(f"  before the first level {phases['before_first_level_s']:.2f} s (server start "
              f"{phases['server_start_s']:.2f} s); between runs {sum(gaps):.2f} s (median "
              f"{phases['between_levels_median_s'] or 0:.3f} s); between groups {sum(group_gaps):.2f} s; after the "
              f"last {phases['after_last_level_s']:.2f} s (servers' starts {phases['server_starts_s']:.2f} s, stops "
              f"{phases['server_stops_s']:.2f} s, attribution {phases['attribution_s']:.2f} s, page "
              f"{phases['page_s'] if phases['page_s'] is not None else float('nan'):.2f} s, then "
              f"{phases['after_page_s'] if phases['after_page_s'] is not None else float('nan'):.2f} s to the exit)")
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return result


def _servers_and_page(work: Path, levels: list[dict], t0: int, unix0: int, t1: int) -> dict:
    """The servers' starts and stops, the attribution of the traced runs and the page, placed on the run's
    clock (server.json's Unix times and the files' modification times, shifted by the offset read at the
    start)."""
    mono = lambda unix_s: t0 + (unix_s * 1e9 - unix0)  # noqa: E731 - Unix seconds on the monotonic clock
    starts = [s for record in (work / "data").rglob("server.json")
              for s in json.loads(record.read_text()).get("starts", [])]
    out: dict = {"to_server_start_s": None, "server_start_s": None, "first_run_start_s": None, "server_stop_s": None,
                 "server_starts_s": 0.0, "server_stops_s": 0.0, "attribution_s": 0.0, "page_s": None,
                 "after_page_s": None}
    if not starts or not levels:
        return out
    first = min(starts, key=lambda s: s["started_at"])
    last = max(starts, key=lambda s: s.get("ended_at") or 0)
    out.update(to_server_start_s=(mono(first["started_at"]) - t0) / 1e9,
               server_start_s=first["ready_at"] - first["started_at"],
               first_run_start_s=(levels[0]["start_ns"] - mono(first["ready_at"])) / 1e9,
               server_stop_s=(mono(last["ended_at"]) - levels[-1]["end_ns"]) / 1e9 if last.get("ended_at") else None,
               server_starts_s=sum(s["ready_at"] - s["started_at"] for s in starts if s.get("ready_at")))
    # each server's stop: from its last level's end to its recorded end; its attribution: from then until its
    # last profile.ipynb was written (cut, perf script and the profiles of its runs)
    for record in (work / "data").rglob("server.json"):
        group = [r for r in levels if r["group"] == str(record.parent.relative_to(work / "data"))]
        ends = [s["ended_at"] for s in json.loads(record.read_text()).get("starts", []) if s.get("ended_at")]
        if not group or not ends:
            continue
        stopped = mono(max(ends))
        out["server_stops_s"] += (stopped - group[-1]["end_ns"]) / 1e9
        profiles = [p.stat().st_mtime_ns for p in record.parent.glob("*/profile.ipynb")]
        if profiles:
            out["attribution_s"] += (t0 + max(profiles) - unix0 - stopped) / 1e9
    pages = [p.stat().st_mtime_ns for p in (work / "reports").glob("*.md")] if (work / "reports").is_dir() else []
    if pages:
        before = max([levels[-1]["end_ns"], *(mono(s["ended_at"]) for s in starts if s.get("ended_at")),
                      *(t0 + p.stat().st_mtime_ns - unix0 for p in (work / "data").rglob("profile.ipynb"))])
        out["page_s"] = (t0 + max(pages) - unix0 - before) / 1e9
        out["after_page_s"] = (t1 - (t0 + max(pages) - unix0)) / 1e9  # the summary printed, the exit
    return out


if __name__ == "__main__":
    sys.exit(main())
