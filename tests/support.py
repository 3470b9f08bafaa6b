"""Where the tests' inputs live, in one place (tests/README.md says which kind goes where).

- `REPO`: the checkout; committed real captures are under `REPO / "data" / "raw"`.
- `DATA`: `tests/data`, small samples the project made itself (each folder has a README).
- `fixtures_dir()`: the public fixtures, `../shared/fixtures` beside the clone as CI lays them out,
  or `$PERFLIB_FIXTURES`; `fixture(*parts)` is one of them, or a skip that says where it looked.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"


def run_cli(*argv: str) -> tuple[int, str]:
    """`perflib ARGV` in this process: its exit code and what it printed on stdout."""
    from perflib.cli import (
        main,  # imported when called: support is imported by every test, perflib's CLI is not
    )

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


def fixtures_dir() -> Path:
    """The public fixtures folder: `$PERFLIB_FIXTURES`, else `../shared/fixtures` beside the clone."""
    return Path(os.environ.get("PERFLIB_FIXTURES", REPO.parent / "shared" / "fixtures"))


def fixture(*parts: str) -> Path:
    """One public fixture file or folder; the test is skipped, saying where, when it is absent."""
    path = fixtures_dir().joinpath(*parts)
    if not path.exists():
        pytest.skip(f"public fixture {path} not found (CI lays ../shared/fixtures beside the clone; "
                    "or set PERFLIB_FIXTURES)")
    return path


def fixture_paths(pattern: str) -> list[Path]:
    """Public fixtures matching a glob below the fixtures folder, for parametrize (empty when absent)."""
    root = fixtures_dir()
    return sorted(root.glob(pattern)) if root.is_dir() else []


MINIMAL_CAMPAIGN = """\
name: t
model: {name: tiny}
backends:
  - name: cpu
    url: http://127.0.0.1:9
batches: [1, 2]
contexts: [64]
decode_tokens: 8
"""
"""The smallest valid campaign file: one backend by URL, two batches, one context."""


class Hang(AssertionError):
    """An example that ran past its time limit: a failure, never a perflib error."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise `Hang` in the main thread if the block takes longer than `seconds` (SIGALRM)."""
    def expire(signum, frame):  # noqa: ANN001, ARG001
        raise Hang(f"took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ------------------------------------------------------------------------------ processes left behind


def _proc_stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time) of `pid` from /proc, read here rather than through perflib so
    that the check does not rest on the code it checks; None where it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text[text.rfind(")") + 2:].split()
    return int(fields[1]), fields[0], int(fields[19])


def live_descendants(root: int | None = None) -> dict[tuple[int, int], str]:
    """{(pid, start time): command line} of every live (not zombie) descendant of `root` (default: this
    process), by parent pid in /proc."""
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    stats: dict[int, tuple[int, str, int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _proc_stat(int(entry.name))) is not None:
            stats[int(entry.name)] = stat
            children.setdefault(stat[0], []).append(int(entry.name))
    out: dict[tuple[int, int], str] = {}
    todo = list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, ()))
        if stats[pid][1] in ("Z", "X"):
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = "?"
        out[(pid, stats[pid][2])] = cmd[:200]
    return out


def _subreaper(on: bool) -> None:
    """Make this process the one that orphans of its descendants are reparented to (Linux
    PR_SET_CHILD_SUBREAPER), so that a process that escaped with setsid and lost its parent is still
    found below it."""
    import ctypes

    ctypes.CDLL(None).prctl(36, 1 if on else 0, 0, 0, 0)


def _reap_zombies() -> None:
    """Collect this process's zombie children that no Popen waits for (orphans reparented here)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _proc_stat(int(entry.name))) and stat[0] == os.getpid() \
                and stat[1] == "Z":
            try:
                os.waitpid(int(entry.name), os.WNOHANG)
            except ChildProcessError:
                pass


@contextmanager
def no_process_left(grace_s: float = 10.0) -> Iterator[None]:
    """Fail, naming them, where the block leaves a process alive that it started: a descendant of this
    process that was not there before, or one that escaped (setsid) and was orphaned (this process is
    made a subreaper meanwhile, so orphans come back below it). Those found are killed so that they do
    not outlive the test run either. Waits up to `grace_s` for processes that are stopping."""
    _subreaper(True)
    before = set(live_descendants())
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        deadline = time.monotonic() + grace_s
        left = {k: v for k, v in live_descendants().items() if k not in before}
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            _reap_zombies()
            left = {k: v for k, v in live_descendants().items() if k not in before}
        for pid, _ in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)
        _reap_zombies()
        _subreaper(False)
        if left and not failed:
            raise AssertionError("processes left alive by the test: "
                                 + "; ".join(f"pid {pid}: {cmd}" for (pid, _), cmd in sorted(left.items())))


def write_page(campaign, data_dir: Path | None = None, reports_dir: Path | None = None, date: str | None = None,
               tables=None) -> Path:
    """The page as `perflib campaign report` writes it (`perflib.publish`): the derived tables (`tables` where
    given) and the page's other inputs written, the verdicts decided, then the page drawn from them."""
    from perflib.publish import Published, publish

    decided = Published.of(campaign, tables) if tables is not None else None
    return publish(campaign, data_dir, reports_dir, date, decided).page
