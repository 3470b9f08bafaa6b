"""What runs inside a cluster worker: one (arm, backend) group as a `perflib campaign run --only` child.

The Dask worker process itself runs no server, profiler or measurement. `run_group` starts
`python -m perflib campaign run FILE --only arm=A backend=B --data DIR --no-report --json` as its child,
with the worker's environment (its pinned GPU, CPU set and host name: `perflib cluster worker`), and
waits for it. The child is tied to the thread that waits for it (`PR_SET_PDEATHSIG`, SIGTERM): a worker
killed mid-run takes the child down, which marks the run in progress incomplete and stops its server
as any terminated runner does (`perflib.campaign.interrupts`, `perflib.server.lifetime`). The group's
folder is then listed (`perflib.campaign.transfer`) for the runner to fetch and check.

The claim files stay the protocol between runners (`perflib.campaign.claims`): a group resubmitted
after its worker died may find the dying runner still holding its claim; it waits for the claim to
be released (or to go stale) and runs again. The worker's data folder is `$PERFLIB_CLUSTER_DATA`
(`perflib cluster worker --data`), else the runner's own `--data` path (a shared folder). Its log,
`cluster.log` beside the run folders, keeps each child's stderr.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflib import devices, rundir
from perflib.campaign import claims, transfer
from perflib.server import lifetime
from perflib.version import __version__

DATA_VARIABLE = "PERFLIB_CLUSTER_DATA"
"""The worker's own data folder (`perflib cluster worker --data`); unset: the runner's `--data`."""
LOG = "cluster.log"
"""Beside the run folders of a group: each child runner's stderr, appended."""
LOG_TAIL = 4000
"""Characters of this attempt's log sent back to the runner."""


@dataclass(frozen=True)
class GroupRequest:
    """What the runner sends for one group: the campaign file (its path on the runner, that path relative
    to the runner's folder, its SHA-256), the runner's data folder, the group, the runner's options as
    `campaign run` flags, the run folders to move aside and measure again (their copy did not match)."""

    campaign_file: str
    campaign_relative: str | None
    campaign_sha256: str
    data: str
    campaign: str
    arm: str
    backend: str
    args: tuple[str, ...] = ()
    redo: tuple[str, ...] = ()
    claim_wait_s: float = 120.0


@dataclass(frozen=True)
class GroupOutcome:
    """What a worker did with a group: who and where, the child's exit status and `--json` report, the
    tail of its log, the group's listing (`transfer.Entry.as_list` rows), or the error that kept it
    from running."""

    worker: str
    address: str
    host: str
    device: str
    data: str
    exit_code: int | None = None
    report: dict[str, Any] | None = None
    log_tail: str = ""
    listing: list[list] = field(default_factory=list)
    error: str | None = None


def facts(dask_worker: Any = None) -> dict[str, Any]:
    """This worker as the runner checks it before it sends anything (`Client.run` passes `dask_worker`)."""
    resources = dict(getattr(getattr(dask_worker, "state", None), "total_resources", {}) or {})
    return {"perflib": __version__, "name": str(getattr(dask_worker, "name", "")), "host": devices.host_name(),
            "data": os.environ.get(DATA_VARIABLE), "resources": resources,
            "device": devices.this_device().describe()}


def sha256_text(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def campaign_here(request: GroupRequest) -> Path | str:
    """The campaign file on this worker: the runner's path, else that path relative to this worker's
    folder, whichever holds the same bytes; else why not (a text naming both)."""
    tried = [Path(request.campaign_file)] + ([Path(request.campaign_relative)] if request.campaign_relative else [])
    for path in tried:
        if path.is_file() and sha256_text(path) == request.campaign_sha256:
            return path.resolve()
    differs, missing = "differs from the runner's copy", "no such file"
    seen = "; ".join(f"{p}: {differs if p.is_file() else missing}" for p in tried)
    return (f"the campaign file is not on this worker as the runner has it (SHA-256 "
            f"{request.campaign_sha256[:12]}…): {seen}")


def data_root(request: GroupRequest) -> Path:
    return Path(os.environ.get(DATA_VARIABLE) or request.data).resolve()


def child_argv(request: GroupRequest, campaign_file: Path, data: Path) -> list[str]:
    """The child runner's command line."""
    return [sys.executable, "-m", "perflib", "campaign", "run", str(campaign_file), "--only",
            f"arm={request.arm}", f"backend={request.backend}", "--data", str(data), "--no-report", "--json",
            *request.args]


def run_group(request: GroupRequest) -> GroupOutcome:
    """Long: in a Dask worker's task thread, measure one group by a child runner and list its folder (see
    the module's docstring); a claim held by a runner that is still stopping is waited for."""
    from distributed import get_worker  # late: runs only inside a Dask worker (the optional perflib[cluster])

    worker = get_worker()
    data = data_root(request)
    where = dict(worker=str(worker.name), address=str(worker.address), host=devices.host_name(),
                 device=devices.this_device().describe(), data=str(data))
    found = campaign_here(request)
    if isinstance(found, str):
        return GroupOutcome(**where, error=found)
    group = transfer.group_path(request.campaign, request.arm, request.backend)
    group_dir = data / group
    group_dir.mkdir(parents=True, exist_ok=True)
    for name in request.redo:  # their copy did not arrive whole at the runner: measured again
        if rundir.parse_run_name(name) and (group_dir / name).exists():
            rundir.move_aside(group_dir / name, "copy-mismatch")
    deadline = time.monotonic() + request.claim_wait_s
    while True:
        code, report, tail = _child(child_argv(request, found, data), group_dir / LOG, where)
        if not (report or {}).get("nothing_done") or time.monotonic() > deadline:
            break
        while claims.holder(group_dir / claims.CLAIM) is not None and time.monotonic() < deadline:
            time.sleep(0.5)  # the runner of an attempt whose worker died is still stopping its server
    listing = [e.as_list() for e in transfer.listing(data, group)]
    return GroupOutcome(**where, exit_code=code, report=report, log_tail=tail, listing=listing)


def _child(argv: list[str], log: Path, where: dict[str, str]) -> tuple[int, dict[str, Any] | None, str]:
    """Run the child runner, its stderr appended to `log`; (exit status, its JSON report or None, this
    attempt's log tail)."""
    with open(log, "ab") as err:
        start = err.tell()
        err.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} worker {where['worker']} on {where['host']} "
                  f"({where['device']}): {' '.join(argv[1:])}\n".encode())
        err.flush()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                preexec_fn=lifetime.tie_to_waiting_thread(signal.SIGTERM))
        out, _ = proc.communicate()
    with open(log, "rb") as handle:
        handle.seek(max(start, log.stat().st_size - LOG_TAIL))
        tail = handle.read().decode(errors="replace")
    report = None
    lines = [line for line in out.decode(errors="replace").splitlines() if line.startswith("{")]
    if lines:
        try:
            report = json.loads(lines[-1])
        except json.JSONDecodeError:
            report = None
    return proc.returncode, report if isinstance(report, dict) else None, tail
