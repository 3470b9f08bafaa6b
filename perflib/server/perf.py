"""The `perf` profiler kind: Linux `perf record` samples a native CPU server (llama-server on the CPU) for
its whole life, and `perf script` turns the samples into text that `perflib.traces` reads.

- Wrap: `perf record -e cpu-clock -F 999 -g -k CLOCK_MONOTONIC --no-buildid -o DIR/perf.data [profiler.args]
  -- <server>`, given at least `GRACE_S` to stop. The stop signal goes to perf alone, which passes it
  on to the server: llama-server takes a second SIGTERM as "terminate now" and aborts.
  `cpu-clock` is a software event (the kernel's timer), which `perf_event_open` allows in VMs and
  containers without hardware counters; 999 Hz keeps the overhead near 0.1% of a core a thread and
  stays off the kernel's timer tick; `-g` records the call chain, of which only the user function
  that entered the kernel is read (`perflib.traces.perf_script`); `-k CLOCK_MONOTONIC` stamps the
  samples on the clock the run folders record, so the level windows cut without guessing.
  `profiler.args` come after these, so `args: [-F, "4999"]` samples faster.
- Capture: once the server has stopped (perf writes perf.data when its child exits, within the
  grace period), `perf script -F comm,pid,tid,time,period,event,ip,sym,dso --ns --header` writes
  `DIR/perf-script.txt` (its stderr in `DIR/perf-script.log`): the lifetime capture that
  `perflib.cut` cuts into each run's window, then gzips. perf.data stays beside it, as captured.

Where perf is missing, or the kernel forbids sampling (`perf_event_paranoid` above 2 for a user
without CAP_PERFMON), the wrap says so before the server starts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from perflib.errors import PerflibError

KIND = "perf"
DATA, SCRIPT, SCRIPT_LOG = "perf.data", "perf-script.txt", "perf-script.log"
FREQUENCY_HZ = 999
RECORD = ("record", "-e", "cpu-clock", "-F", str(FREQUENCY_HZ), "-g", "-k", "CLOCK_MONOTONIC", "--no-buildid")
"""`perf record`'s options before the output file and `profiler.args`. `--no-buildid`: perf skips reading
every sample again at its exit to collect the binaries' build ids (seconds on a loaded machine, inside the
server's grace period); `perf script` finds the symbols by the binaries' paths, unchanged since."""
GRACE_S = 30.0
"""The least grace period a perf-wrapped server gets at its stop: perf writes perf.data's header once its
child has exited, and a SIGKILL before that leaves a file perf script refuses (data size 0)."""
SCRIPT_FIELDS = "comm,pid,tid,time,period,event,ip,sym,dso"
"""What `perf script` prints of each sample (`perflib.traces.perf_script` reads these, and more)."""
PARANOID = Path("/proc/sys/kernel/perf_event_paranoid")


def program(binary: str | None = None) -> str:
    """The `perf` program (`profiler.binary`, else `perf` on PATH); an error says how to get one."""
    named = binary or "perf"
    found = shutil.which(named)
    if found is None:
        raise PerflibError(f"profiler perf: {named} is not on PATH (Debian: apt-get install linux-perf; or give "
                           "profiler.binary)")
    return found


def check_allowed() -> None:
    """An error where the kernel will refuse `perf_event_open` for this user (paranoid level above 2
    without root); nothing where it allows it or cannot tell."""
    try:
        level = int(PARANOID.read_text().strip())
    except (OSError, ValueError):
        return
    if level > 2 and os.geteuid() != 0:
        raise PerflibError(f"profiler perf: {PARANOID} is {level}: the kernel lets no unprivileged user sample "
                           "(set it to 2 or below, or run as a user with CAP_PERFMON)")


def wrap(directory: Path, argv: tuple[str, ...], binary: str | None = None,
         args: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The server's argv under `perf record` (module docstring), its output in `directory`."""
    perf = program(binary)
    check_allowed()
    return (perf, *RECORD, "-o", str(directory / DATA), *args, "--", *argv)


def script_of(directory: Path, binary: str | None = None) -> Path:
    """The capture's `perf script` text (module docstring), made from perf.data where it is not there
    yet (a cut that did not finish finds it, or its gzip, already made)."""
    for name in (SCRIPT, SCRIPT + ".gz"):
        if (directory / name).is_file():
            return directory / name
    data = directory / DATA
    if not data.is_file() or data.stat().st_size == 0:
        raise PerflibError(f"{data}: perf wrote no samples (did the server run, and stop within its grace period?)")
    perf = program(binary)
    out, log = directory / SCRIPT, directory / SCRIPT_LOG
    partial = out.with_name(out.name + ".part")
    with open(partial, "wb") as stdout, open(log, "wb") as stderr:
        done = subprocess.run([perf, "script", "-i", str(data), "-F", SCRIPT_FIELDS, "--ns", "--header"],
                              stdout=stdout, stderr=stderr, check=False)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        said = " ".join(log.read_text(errors="replace").split())[-400:]
        raise PerflibError(f"perf script of {data} failed (exit {done.returncode}): {said}")
    partial.replace(out)
    return out


def launch(c, argv: tuple[str, ...], env: dict[str, str]):  # noqa: ANN001, ANN201 - profilers.Capture, Launched
    """The registry's `launch` of the `perf` kind (`perflib.server.profilers.KINDS`): the server under
    `perf record`, its environment unchanged, its stdout its log."""
    return wrap(c.directory, argv, c.binary, c.args), env, None


def capture(c) -> Path:  # noqa: ANN001 - profilers.Capture (that module names this one by its path)
    """The registry's `capture` of the `perf` kind: the `perf script` text of the server's life."""
    return script_of(c.directory, c.binary)
