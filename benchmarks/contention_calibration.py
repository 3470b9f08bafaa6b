"""Contention signals calibrated: the demo campaign measured quiet and beside two CPU burners, in turns.

Not a test: a measurement. Each round runs `python -m perflib campaign run campaigns/demo.yaml`
(the local CPU llama-server, 18 runs) twice into fresh folders: once on the machine as it is
("quiet"), once with two busy loops (`python -c 'while ...: pass'`, one per core on the 2-core
machine; bounded in time, killed by pid and checked gone) started before it. `--contention-wait 0`
keeps every run as measured, marked or not. From each run's manifest it reads every contention
signal (`perflib.load.contention`, `perflib.load.pressure`):

- `foreign_cpu_share`: other processes' CPU seconds over (window x CPUs), sampled every 0.5 s;
- `wait_per_cpu`: seconds the server's and client's threads waited on a run queue per second they
  ran (/proc/<pid>/task/*/schedstat);
- `server_wait_share`: the server's threads' run-queue wait per second of the window;
- `psi_some_share`: PSI `some` stall time of the cgroup (or system) over the window;

and the run's decode step (Δtokens_predicted_seconds / Δdecode_tokens). Per case it gives each
signal's median, min and max over the runs (and over the short batch-1 runs alone), and per round the
burner/quiet ratio of each median, measured side by side. Run it under the shared lock:

    flock /tmp/perflib-heavy.lock python benchmarks/contention_calibration.py --rounds 2 \\
        --out benchmarks/results-contention_calibration.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SIGNALS = ("foreign_cpu_share", "wait_per_cpu", "server_wait_share", "psi_some_share", "client_wait_per_cpu")
BURN_S = 600


def burners(n: int) -> list[subprocess.Popen]:
    """`n` busy loops that end by themselves after BURN_S seconds at the latest."""
    code = f"import time\nend = time.monotonic() + {BURN_S}\nwhile time.monotonic() < end: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait(timeout=10)
        assert p.poll() is not None, f"burner {p.pid} still running"


def campaign_run(campaign: Path, data: Path, env: dict[str, str]) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "perflib", "campaign", "run", str(campaign), "--data", str(data), "--no-report",
           "--contention-wait", "0", "--json"]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=campaign.parent, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    if proc.returncode not in (0, 3):
        raise SystemExit(f"campaign run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, json.loads(proc.stdout)


def read_runs(data: Path) -> list[dict]:
    from perflib import runs

    out = []
    for manifest in sorted(data.rglob("manifest.json")):
        if ".contended-" in str(manifest) or ".incomplete-" in str(manifest):
            continue
        m = json.loads(manifest.read_text())
        seen = m.get("contention") or {}
        signals = seen.get("signals") or {}
        client_cpu = signals.get("client_cpu_s")
        row = {"run": manifest.parent.name, "batch": m.get("batch"), "context": m.get("context"),
               "seconds": seen.get("seconds"), "contended": seen.get("contended"), "why": seen.get("why"),
               "foreign_cpu_share": seen.get("foreign_cpu_share"), "wait_per_cpu": signals.get("wait_per_cpu"),
               "server_wait_share": signals.get("server_wait_share"), "psi_some_share": signals.get("psi_some_share"),
               "client_wait_per_cpu": (signals["client_wait_s"] / client_cpu if client_cpu else None),
               "server_cpu_s": signals.get("server_cpu_s"), "client_cpu_s": client_cpu,
               "decode_step_ms": runs.summarize_run(manifest.parent).get("decode_step_ms")}
        out.append(row)
    return out


def thresholds() -> dict[str, float | None]:
    from perflib import load

    return {"foreign_cpu_share": load.CPU_THRESHOLD, "wait_per_cpu": load.WAIT_THRESHOLD,
            "psi_some_share": load.PSI_THRESHOLD}


def describe(rows: list[dict]) -> dict:
    out: dict = {}
    for key in (*SIGNALS, "decode_step_ms", "seconds"):
        values = [r[key] for r in rows if isinstance(r.get(key), int | float)]
        out[key] = ({"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}
                    if values else None)
    out["contended"] = sum(1 for r in rows if r.get("contended"))
    out["runs"] = len(rows)
    out["over_threshold"] = {key: sum(1 for r in rows if isinstance(r.get(key), int | float) and r[key] > limit)
                             for key, limit in thresholds().items() if limit is not None}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--campaign", default=str(REPO / "campaigns" / "demo.yaml"))
    parser.add_argument("--rounds", type=int, default=2, help="quiet + burner pairs (default 2)")
    parser.add_argument("--burners", type=int, default=2)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="perflib-contention-calibration-"))
    campaign = work / Path(args.campaign).name
    shutil.copy(args.campaign, campaign)
    env = {**os.environ, "PYTHONPATH": str(REPO) + (os.pathsep + os.environ["PYTHONPATH"]
                                                     if os.environ.get("PYTHONPATH") else "")}
    rounds = []
    try:
        for i in range(1, args.rounds + 1):
            cases = {}
            for case in ("quiet", "burners"):
                procs = burners(args.burners) if case == "burners" else []
                try:
                    time.sleep(0.5 if procs else 0)
                    load = os.getloadavg()[0]
                    wall, result = campaign_run(campaign, work / f"data-{i}-{case}", env)
                finally:
                    stop(procs)
                rows = read_runs(work / f"data-{i}-{case}")
                cases[case] = {"wall_s": wall, "load_average_at_start": load, "done": len(result.get("done", [])),
                               "all": describe(rows), "batch1": describe([r for r in rows if r["batch"] == 1]),
                               "runs": rows}
            ratios = {}
            for key in (*SIGNALS, "decode_step_ms"):
                q, b = cases["quiet"]["all"][key], cases["burners"]["all"][key]
                ratios[key] = b["median"] / q["median"] if q and b and q["median"] else None
            rounds.append({"round": i, **cases, "burner_over_quiet": ratios})
            print(f"round {i}: " + "; ".join(
                f"{key} quiet {cases['quiet']['all'][key]['median']:.3f} burners "
                f"{cases['burners']['all'][key]['median']:.3f}" for key in (*SIGNALS, "decode_step_ms")
                if cases["quiet"]["all"][key] and cases["burners"]["all"][key])
                + f"; contended quiet {cases['quiet']['all']['contended']}/{cases['quiet']['all']['runs']}, "
                f"burners {cases['burners']['all']['contended']}/{cases['burners']['all']['runs']}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    separation = {}
    for key in SIGNALS:
        quiet = [r[key] for rd in rounds for r in rd["quiet"]["runs"] if isinstance(r.get(key), int | float)]
        loaded = [r[key] for rd in rounds for r in rd["burners"]["runs"] if isinstance(r.get(key), int | float)]
        if quiet and loaded:
            separation[key] = {"quiet_max": max(quiet), "burners_min": min(loaded), "quiet_median":
                               statistics.median(quiet), "burners_median": statistics.median(loaded)}
            print(f"{key}: quiet max {max(quiet):.3f} (median {statistics.median(quiet):.3f}), burners min "
                  f"{min(loaded):.3f} (median {statistics.median(loaded):.3f})")
    result = {"campaign": args.campaign, "cpus": os.cpu_count(), "burners": args.burners,
              "thresholds": thresholds(), "separation": separation, "rounds": rounds,
              "method": "per round: `perflib campaign run FILE --no-report --contention-wait 0 --json` quiet, then "
                        f"with {args.burners} busy-loop processes started 0.5 s before; each signal read from the "
                        "run manifests' contention block; medians over the runs; burner_over_quiet = ratio of the "
                        "medians within the round"}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
