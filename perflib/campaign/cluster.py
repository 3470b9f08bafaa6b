"""One campaign across hosts and GPUs: each (arm, backend) group measured on a Dask worker, gathered here.

`perflib campaign run FILE --cluster tcp://HOST:8786` (`RunOptions(cluster=...)`,
`open_campaign(...).run(cluster=...)`) connects to a Dask distributed scheduler, checks its workers
(the same perflib version as this runner; every backend left to measure offered by one, as the
resource `backend-<name>`), and sends each group as one task to a worker holding its backend's
resource. The task runs the group as a `perflib campaign run --only` child on the worker
(`perflib.campaign.worker`); the runner then fetches the group's files in bounded chunks and checks
them against the worker's listing (`perflib.campaign.transfer`), and the caller writes the page from
the gathered run folders. With a shared `--data` every file already matches and nothing is copied.

Faults: a task whose worker dies is resubmitted by the scheduler (the run it interrupted is left
incomplete there and measured again); a group whose workers died `allowed-failures` times, or whose
backend no worker offers any more for `GONE_S`, is left for the next `campaign run`; a run whose copy
did not match its listing is measured again once, then left; a lost scheduler is one error naming
what was gathered, the workers keeping what they measured. Dask is the optional extra
`perflib[cluster]`, imported only here and only when `--cluster` is given.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import ipaddress
import logging
import os
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from perflib import rundir
from perflib.campaign import transfer, worker
from perflib.campaign.options import RunOptions
from perflib.config import Campaign, RunSpec
from perflib.errors import PerflibError
from perflib.version import __version__

RESOURCE = "backend-{}"
"""The Dask resource a worker offers for each backend it serves (one at a time: `backend-cuda=1`)."""
CONNECT_S = 30.0
"""Seconds to reach the scheduler, then for every backend's worker to join it."""
POLL_S = 2.0
GONE_S = 120.0
"""A group waits this long for a worker offering its backend to come back before it is left."""
MAX_TRIES = 2
"""Attempts per group: a run whose copy did not match its listing is measured again once."""


@dataclass
class Gathered:
    """What the workers did, as the runner's result counts it (labels `arm/backend/bB_cC_rR`)."""

    done: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    contended: list[str] = field(default_factory=list)
    claimed: list[tuple[str, str]] = field(default_factory=list)
    kept_contended: list[str] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)


def resource(backend: str) -> str:
    return RESOURCE.format(backend)


def open_warning(address: str) -> str:
    """The warning for a scheduler reached without TLS off this machine ('' for loopback or tls://)."""
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    host = parts.hostname or ""
    if parts.scheme not in ("tcp", "ws") or host == "localhost":
        return ""
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).is_loopback:
            return ""
    return (f"warning: the scheduler {address} is reached without TLS: anyone who can reach it can run code on "
            "every worker; use tls:// with certificates (docs/CLUSTER.md)")


def _distributed() -> Any:
    try:
        import distributed  # late: the optional extra perflib[cluster], needed only with --cluster
    except ImportError:
        raise PerflibError("--cluster needs Dask distributed, the extra perflib[cluster]: "
                           "pip install 'perflib[cluster]'") from None
    return distributed


@contextlib.contextmanager
def _quiet_dask() -> Iterator[None]:
    """Dask's own log lines (a lost connection is an ERROR with a traceback) held back while this runner
    talks to it: what matters is said once, as a perflib line."""
    names = ["distributed", *(n for n in logging.root.manager.loggerDict if n.startswith("distributed."))]
    levels = {name: logging.getLogger(name).level for name in names}  # dask's config sets some of their own
    for name in names:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def _say(message: str) -> None:
    print(f"perflib: {message}", file=sys.stderr, flush=True)


def run_on_cluster(campaign: Campaign, data: Path, options: RunOptions) -> Gathered:
    """Measure every incomplete run of the campaign on the cluster at `options.cluster` and gather its run
    folders into `data` (the page is the caller's); the workers' runners are given these options as
    flags (`RunOptions.worker_flags`); see the module's docstring."""
    address = str(options.cluster)
    data = Path(data).resolve()
    runs = [r for r in campaign.expand(options.only) if not campaign.backend(r.backend).trace_only]
    todo = [r for r in runs if not rundir.is_complete(r.run_dir(data))]
    got = Gathered(skipped=[r.label for r in runs if r not in todo])
    groups: dict[tuple[str, str], list[RunSpec]] = {}
    for run in todo:
        groups.setdefault((run.arm, run.backend), []).append(run)
    if not groups:
        return got
    distributed = _distributed()
    warning = open_warning(address)
    if warning:
        _say(warning)
    with _quiet_dask():
        try:
            client = distributed.Client(address, timeout=CONNECT_S, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise PerflibError(f"--cluster {address}: no scheduler answered within {CONNECT_S:g} s "
                               f"({type(exc).__name__}: {exc})") from None
        try:
            workers = _check_workers(client, {b for _, b in groups}, address)
            if options.progress:
                for facts in workers.values():
                    _say(f"worker {facts['name']} on {facts['device']}: "
                         f"{', '.join(sorted(facts['resources'])) or 'no backend'}")
            _Session(client, distributed, campaign, data, options, got).run(groups)
        except (concurrent.futures.CancelledError, distributed.comm.CommClosedError) as exc:
            if client.status == "running":
                raise
            raise PerflibError(f"lost the scheduler at {address} ({type(exc).__name__}); {len(got.done)} runs "
                               f"were gathered into {data}; what the workers measured since stays in their data "
                               "folders: run the same command again to gather it") from None
        finally:
            with contextlib.suppress(Exception):  # a closed connection has nothing left to close
                client.close(timeout=5)
    return got


def _check_workers(client: Any, backends: set[str], address: str) -> dict[str, dict[str, Any]]:
    """Each worker's facts, once every backend has a worker or `CONNECT_S` passed; a worker of another
    perflib version, or a backend no worker offers, is an error naming them."""
    deadline = time.monotonic() + CONNECT_S
    while True:
        answers = client.run(worker.facts, on_error="return")
        mute = {a: e for a, e in answers.items() if not isinstance(e, dict)}
        if mute:  # a perflib without `perflib.campaign.worker`, or none at all
            address_of, why = next(iter(sorted(mute.items(), key=lambda kv: kv[0])))
            said = str(why) if type(why) is Exception else f"{type(why).__name__}: {why}"  # Dask wraps some
            raise PerflibError(f"--cluster {address}: worker {address_of} could not answer ({said}): install "
                               f"perflib {__version__} (perflib[cluster]) on every worker")
        workers = answers
        offered = {r for f in workers.values() for r in f["resources"]}
        missing = sorted(b for b in backends if resource(b) not in offered)
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    other = {a: f for a, f in workers.items() if f["perflib"] != __version__}
    if other:
        names = "; ".join(f"worker {f['name'] or a} ({a}) runs perflib {f['perflib']}" for a, f in sorted(other.items()))
        raise PerflibError(f"--cluster {address}: {names}, this runner perflib {__version__}: install the same "
                           "perflib on every worker")
    if missing:
        have = "; ".join(f"{f['name'] or a}: {', '.join(sorted(f['resources'])) or 'none'}"
                         for a, f in sorted(workers.items())) or "no worker connected"
        raise PerflibError(f"--cluster {address}: no worker offers backend {', '.join(missing)} (resource "
                           f"{', '.join(resource(b) for b in missing)}; workers: {have}); start one with "
                           f"`perflib cluster worker {address} --backend {missing[0]}`")
    return workers


class _Session:
    """One runner's groups in flight on the cluster: submitted, awaited, gathered, resubmitted."""

    def __init__(self, client: Any, distributed: Any, campaign: Campaign, data: Path, options: RunOptions,
                 got: Gathered):
        self.client, self.distributed, self.campaign, self.data, self.got = client, distributed, campaign, data, got
        path = Path(campaign.path).resolve()
        relative = os.path.relpath(path, Path.cwd()) if path.is_relative_to(Path.cwd()) else None
        self.base = worker.GroupRequest(str(path), relative, worker.sha256_text(path), str(data), campaign.name,
                                        "", "", options.worker_flags())
        self.groups: dict[tuple[str, str], list[RunSpec]] = {}
        self.pending: dict[Any, tuple[tuple[str, str], int]] = {}
        self.missing_since: dict[str, float] = {}

    def submit(self, key: tuple[str, str], tries: int, redo: tuple[str, ...] = ()) -> None:
        arm, backend = key
        request = dataclasses.replace(self.base, arm=arm, backend=backend, redo=redo)
        future = self.client.submit(worker.run_group, request, resources={resource(backend): 1}, pure=False,
                                    key=f"perflib-{self.campaign.name}-{arm}-{backend}-{uuid.uuid4().hex[:8]}")
        self.pending[future] = (key, tries)

    def run(self, groups: dict[tuple[str, str], list[RunSpec]]) -> None:
        self.groups = groups
        for key in groups:
            self.submit(key, 1)
        checked = time.monotonic()
        while self.pending:
            done = [f for f in self.pending if f.status != "pending"]
            for future in done:
                key, tries = self.pending.pop(future)
                self._finished(future, key, tries)
            if time.monotonic() - checked > POLL_S:
                self._forget_gone()
                checked = time.monotonic()
            if not done:
                time.sleep(0.2)

    def _fail(self, key: tuple[str, str], why: str, only: set[str] | None = None) -> None:
        for run in self.groups[key]:
            if (only is None or run.run_dir(self.data).name in only) and not rundir.is_complete(run.run_dir(self.data)):
                self.got.failed.append((run.label, why))

    def _finished(self, future: Any, key: tuple[str, str], tries: int) -> None:
        """One group's task ended: its outcome counted, its files fetched and checked, a mismatch redone."""
        arm, backend = key
        try:
            outcome: worker.GroupOutcome = future.result()
        except self.distributed.KilledWorker as exc:
            self._fail(key, f"its worker died while measuring it ({exc}); left for the next campaign run")
            return
        except concurrent.futures.CancelledError:
            raise  # the scheduler is gone: `run_on_cluster` says so
        except Exception as exc:  # noqa: BLE001 - a task that raised is that group's failure; the others go on
            self._fail(key, f"the worker's task failed: {type(exc).__name__}: {exc}")
            return
        if outcome.error:
            self._fail(key, f"worker {outcome.worker}: {outcome.error}")
            return
        report = outcome.report or {}
        self._count(report)
        pulled = transfer.pull(transfer.entries(outcome.listing), self.data,
                               transfer.group_path(self.campaign.name, arm, backend), self._reader(outcome))
        _say(f"{arm}/{backend}: worker {outcome.worker} on {outcome.device}: {len(report.get('done', []))} runs "
             f"measured, {len(report.get('failed', []))} failed; {pulled.copied} files "
             f"({pulled.bytes / 1e6:.1f} MB) copied and checked, {pulled.unchanged} already here")
        if outcome.report is None:
            last = [line for line in outcome.log_tail.splitlines() if line.startswith("perflib:")]
            self._fail(key, f"worker {outcome.worker}: `campaign run` exited {outcome.exit_code}"
                            + (f": {last[-1]}" if last else ""))
        bad = {unit for unit, _ in pulled.rejected if rundir.parse_run_name(unit)}
        if bad and tries < MAX_TRIES:
            _say(f"{arm}/{backend}: {len(bad)} run folders did not arrive whole ({pulled.rejected[0][1]}); "
                 "measuring them again")
            self.submit(key, tries + 1, tuple(sorted(bad)))
        elif bad:
            why = "; ".join(w for _, w in pulled.rejected)
            self._fail(key, f"the copy from worker {outcome.worker} did not match its listing twice ({why}); "
                            "left for the next campaign run", only=bad)

    def _count(self, report: Mapping[str, Any]) -> None:
        got = self.got
        got.done += list(report.get("done", []))
        got.skipped += list(report.get("skipped", []))
        got.failed += [(f["run"], f["error"]) for f in report.get("failed", [])]
        got.contended += list(report.get("contended", []))
        got.kept_contended += list(report.get("kept_contended", []))
        got.claimed += [(c["group"], c["holder"]) for c in report.get("claimed", [])]

    def _reader(self, outcome: worker.GroupOutcome) -> Any:
        """`read(path, offset, size)` of the outcome's worker: a bounded chunk through the scheduler."""
        def read(path: str, offset: int, size: int) -> bytes:
            answer = self.client.run(transfer.read_chunk, outcome.data, path, offset, size, workers=[outcome.address])
            if outcome.address not in answer:
                raise PerflibError(f"worker {outcome.worker} ({outcome.address}) is gone; {path} not fetched")
            return answer[outcome.address]

        return _guarded(read)

    def _forget_gone(self) -> None:
        """Groups whose backend no worker has offered for `GONE_S` are cancelled and left."""
        offered = {r for w in self.client.scheduler_info(n_workers=-1).get("workers", {}).values()
                   for r in (w.get("resources") or {})}
        now = time.monotonic()
        for future, (key, _) in list(self.pending.items()):
            name = resource(key[1])
            if name in offered:
                self.missing_since.pop(name, None)
                continue
            since = self.missing_since.setdefault(name, now)
            if now - since > GONE_S:
                future.cancel()
                del self.pending[future]
                self._fail(key, f"no worker has offered {name} for {GONE_S:g} s (its workers left); left for the "
                                "next campaign run")


def _guarded(read: Any) -> Any:
    """`read`, a worker that left mid-copy turned into an empty answer: the file then does not match its
    listing and its run is measured again."""
    def call(path: str, offset: int, size: int) -> bytes:
        try:
            return read(path, offset, size)
        except Exception:  # noqa: BLE001 - whatever the worker or the connection raised: the copy is short
            return b""

    return call
