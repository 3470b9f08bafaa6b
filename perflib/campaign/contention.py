"""What a campaign does about runs that other work on the machine contended, said as it happens.

A run whose manifest says it was contended (`perflib.load.contention`) is redone once the CPUs are
quiet, up to `attempts` attempts, and then kept, marked contended (the page leaves it out of medians
and verdicts). Waiting for quiet CPUs is bounded over the whole campaign by `budget_s`: once spent,
contended runs are kept, marked, at once. The first contended run prints one line (who used the
CPUs, what perflib does, how to override), the progress bar counts redone and kept runs, and the
end of the campaign says how long it waited in all (`summary`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflib import load, rundir
from perflib.load.contention import QUIET_WINDOW_S

if TYPE_CHECKING:
    from tqdm import tqdm

ATTEMPTS = 3
"""Attempts at a run that other processes contended before the last one is kept, marked."""
WAIT_BUDGET_S = 180.0
"""Seconds a campaign may wait in all for quiet CPUs before redoing contended runs."""
WAIT_CAP_S = 120.0
"""The longest one wait for quiet CPUs lasts (a run is then redone whatever the CPUs do)."""


def contention_record(run_dir: Path) -> dict[str, Any]:
    """The manifest's `contention` block, or {}."""
    manifest = rundir.read_manifest(run_dir, missing_ok=True) or {}
    seen = manifest.get("contention")
    return seen if isinstance(seen, dict) else {}


def busiest(record: dict[str, Any], n: int = 3) -> str:
    """'python3 (pid 812) 97%, ...' of a core: the other processes that used the most CPU over the run."""
    seconds = float(record.get("seconds") or 0)
    top = [t for t in record.get("top") or [] if isinstance(t, dict)][:n]
    if not top or seconds <= 0:
        return ""
    return ", ".join(f"{t.get('name')} (pid {t.get('pid')}) {100 * float(t.get('cpu_s') or 0) / seconds:.0f}% "
                     "of a core" for t in top)


@dataclass
class CpuContention:
    """The campaign's contended runs: redone, kept marked, and the wait for quiet CPUs against its budget."""

    budget_s: float = WAIT_BUDGET_S
    attempts: int = ATTEMPTS
    log: Callable[[str], None] = lambda message: None
    bar: tqdm | None = None
    """The campaign's progress bar, whose postfix counts the runs redone and kept."""
    waited_s: float = 0.0
    redone: int = 0
    kept: list[str] = field(default_factory=list)
    _told: set[str] = field(default_factory=set)

    def observe(self, run_dir: Path) -> str:
        """After a run: its contention reason ('' where quiet); says once what this kernel cannot tell."""
        record = contention_record(run_dir)
        note = str(record.get("note") or "")
        if note and "not sampled" not in note:
            self._once("note", note)
        return str(record.get("why") or "contended") if record.get("contended") else ""

    def should_redo(self, label: str, run_dir: Path, attempt: int) -> bool:
        """Whether a contended attempt is redone (attempts and wait budget left); the first contended
        run of the campaign says at once who used the CPUs and what perflib does."""
        redo = attempt < self.attempts and self.left_s() >= QUIET_WINDOW_S
        record = contention_record(run_dir)
        why = str(record.get("why") or "contended").removeprefix("contended: ").split("; heaviest others:")[0]
        who = busiest(record)
        self._once("first", f"{label} contended ({why}); "
                   + (f"busiest other processes: {who}; " if who else "no other process stood out; ")
                   + self.plan() + "; to measure anyway: --no-contention, or --contention-threshold / --wait-threshold / "
                   "--psi-threshold to allow more, --contention-wait 0 never to wait")
        return redo

    def left_s(self) -> float:
        """What is left of the wait budget, in seconds."""
        return max(0.0, self.budget_s - self.waited_s)

    def plan(self) -> str:
        if self.attempts <= 1 or self.budget_s < QUIET_WINDOW_S:
            return "perflib keeps contended runs marked contended and leaves them out of medians and verdicts"
        return (f"perflib waits for quiet CPUs and redoes a contended run (up to {self.attempts} attempts, at most "
                f"{self.budget_s:.0f} s of waiting in all), then keeps it marked contended and leaves it out of "
                "medians and verdicts")

    def wait(self, label: str) -> None:
        """Wait for quiet CPUs within what is left of the budget, before `label` is redone."""
        self.redone += 1
        self.show(label)
        start = time.monotonic()
        load.wait_quiet(timeout_s=min(WAIT_CAP_S, self.left_s()))
        self.waited_s += time.monotonic() - start
        if self.left_s() < QUIET_WINDOW_S:
            self._once("budget", f"waited {self.waited_s:.0f} s in all for quiet CPUs (--contention-wait "
                       f"{self.budget_s:g}): contended runs from now on are kept, marked contended, without waiting")

    def keep(self, label: str) -> None:
        """A contended run kept, marked."""
        self.kept.append(label)
        self.show(label)

    def show(self, label: str) -> None:
        """The progress bar's postfix: the run, and the runs redone and kept contended so far."""
        if self.bar is not None:
            self.bar.set_postfix_str(self.postfix(label))

    def postfix(self, label: str) -> str:
        counts = [f"{n} {what}" for n, what in ((self.redone, "redone"), (len(self.kept), "kept contended")) if n]
        return ", ".join([label, *counts])

    def summary(self) -> str:
        """The campaign's last word on contention, '' where no run was contended."""
        if not self.redone and not self.kept:
            return ""
        kept = len(self.kept)
        return (f"waited {self.waited_s:.0f} s in all for quiet CPUs; {self.redone} attempt"
                f"{'s' if self.redone != 1 else ''} redone; {kept} run{'s' if kept != 1 else ''} kept marked "
                "contended (left out of medians and verdicts)")

    def _once(self, key: str, message: str) -> None:
        if key not in self._told:
            self._told.add(key)
            self.log(message)
