"""How a campaign is run: one frozen `RunOptions`, built by `perflib campaign run` from its flags and by
`perflib.open_campaign(...).run()` from its keywords, handed whole to the runner
(`perflib.campaign.runner.CampaignRun`) and, as `campaign run` flags, to a cluster's workers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from perflib.campaign.contention import WAIT_BUDGET_S
from perflib.campaign.notebooks import NOTEBOOKS
from perflib.load.contention import CPU_THRESHOLD, PSI_THRESHOLD, WAIT_THRESHOLD

Log = Callable[[str], None]
"""Where the runner says a line (on stderr, above the progress bar)."""


@dataclass(frozen=True)
class RunOptions:
    """Everything about a campaign run that is not the campaign file or its data folders."""

    only: Mapping[str, set[str]] | None = None
    """The matrix restricted (`--only arm=after batch=1,4`: key -> values); None: every run."""
    guard: bool = False
    """The GPU guard: wait for an idle GPU, watch it, redo runs that saw another GPU process."""
    guard_idle_s: float = 90.0
    max_attempts: int = 5
    """Attempts at a run the GPU guard found contended."""
    contention_threshold: float | None = CPU_THRESHOLD
    """Share of the CPUs other processes may use during a level (`perflib.load.contention`); None samples
    nothing (`--no-contention`)."""
    wait_threshold: float | None = WAIT_THRESHOLD
    """Run-queue wait per CPU second of the server's and client's threads."""
    psi_threshold: float | None = PSI_THRESHOLD
    """PSI stall share of a level."""
    contention_wait_s: float = WAIT_BUDGET_S
    """Seconds the whole campaign may wait for quiet CPUs before redoing contended runs."""
    papermill: bool = False
    """Measure each run by executing `collect.ipynb` (and attribute it by `profile.ipynb`) with papermill."""
    kernel_name: str | None = None
    """The Jupyter kernel for `papermill` (None: one that runs this Python)."""
    notebooks: Path = NOTEBOOKS
    """The folder of the notebooks `papermill` executes."""
    progress: bool = True
    """The progress bar and the runner's lines on stderr."""
    write_page: bool = True
    """Derive the tables and write the page at the end (`--no-report`: False)."""
    cluster: str | None = None
    """A Dask scheduler's address: each (arm, backend) measured on a worker (`perflib.campaign.cluster`)."""

    def worker_flags(self) -> tuple[str, ...]:
        """These options as the `campaign run` flags a cluster worker's child runner is given."""
        args: list[str] = []
        if self.guard:
            args += ["--guard", "--guard-idle-s", f"{self.guard_idle_s:g}"]
        if self.contention_threshold is None:
            args.append("--no-contention")
        else:
            args += ["--contention-threshold", f"{self.contention_threshold:g}"]
        for value, flag in ((self.wait_threshold, "--wait-threshold"), (self.psi_threshold, "--psi-threshold"),
                            (self.contention_wait_s, "--contention-wait")):
            if value is not None:
                args += [flag, f"{value:g}"]
        if self.papermill:
            args.append("--papermill")
            if self.kernel_name:
                args += ["--kernel", self.kernel_name]
        return tuple(args)
