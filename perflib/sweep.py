"""Sweep batch × context against a live server: one run folder per level and repeat.

- `run_level(spec) -> LevelResult` measures one run (a `perflib.load.LevelSpec`) into
  `<out_dir>/b<batch>_c<context>_r<repeat>/` (docs/SCHEMA.md §2), or returns the folder's summary
  without measuring when its manifest already says `complete`.
- `sweep(level, batches, contexts, repeats)` runs every (batch, context, repeat) with a progress bar
  and folds the repeats into one row per level (`perflib.runs.level_rows`).

The figures of a run are computed from its folder alone by `perflib.runs.summarize_run`.
"""

from __future__ import annotations

import copy
import functools
import os
import platform
import shutil
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from perflib import devices, load, rundir, runs, server
from perflib.config.model import MAX_RUNS
from perflib.errors import PerflibError
from perflib.version import __version__


@dataclass(frozen=True)
class LevelResult:
    """What `run_level` did: the folder, its status and errors, and its `summarize_run` row.

    `skipped` is True when the folder was already complete and nothing was measured;
    `unreachable` when the server could not be reached at all.
    """

    run_dir: Path
    status: str
    errors: tuple[str, ...]
    summary: dict[str, Any]
    skipped: bool = False
    unreachable: bool = False
    moved_aside: Path | None = None
    contention_note: str = ""
    """What the contention sampler could not tell on this machine ('' where nothing): the sweep says it once;
    the campaign runner says it through `perflib.campaign.contention`."""


def tool_versions() -> dict[str, str]:
    """Versions of perflib, Python, the event loop, httpx and the platform, and the host (`$PERFLIB_HOST`
    or the machine's name: which runner measured the run), for the manifest."""
    return {**_versions(), "event_loop": load.event_loop_name(),
            "host": os.environ.get("PERFLIB_HOST") or socket.gethostname()}


@functools.cache
def _versions() -> dict[str, str]:
    """What cannot change while this process runs, read once: each distribution's metadata is a file search."""
    tools = {"perflib": __version__, "python": sys.version.split()[0], "platform": platform.platform()}
    for dist in ("httpx", "httpcore", "h11"):
        try:
            tools[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            tools[dist] = "not installed"
    return tools


def run_level(spec: load.LevelSpec, repeats: load.Repeats | None = None) -> LevelResult:
    """Measure one run into `spec.run_dir` (`<out_dir>/b<batch>_c<context>_r<repeat>/`).

    `batch` requests of `context` prompt tokens (measured with the server's `/tokenize`) and
    `decode_tokens` streamed tokens each (`ignore_eos`) are sent at once, after one short
    warm-up request (kept in `warmup.jsonl`). A folder already `complete` is not re-measured; an
    incomplete one is moved aside to `<name>.incomplete-<n>` first. `spec.server` is what perflib knows
    of a server it started (`perflib.load.ServerInfo`): its flags go into the manifest and the slice of its log
    written during the level into the folder's `server.log`.

    Faults never raise: the manifest lists them and says `incomplete` (that includes `/metrics`
    being off: the client records are kept, the counters are marked unavailable).

    With `spec.contention_threshold` set (the default) the level samples what else uses this machine
    while it runs (`perflib.load.contention`: other processes' CPU, load, steal; the server found by its
    listening port is not "other"; and the kernel's count of the server's and client's run-queue waits,
    over `wait_threshold` seconds per CPU second, and the PSI stall share over `psi_threshold`,
    `perflib.load.pressure`) into `manifest["contention"]`;
    a contended level stays complete and says so, and `perflib campaign run` redoes it.

    `spec.workers` > 1 sends the level's requests from that many processes (`perflib.load.workers`) into
    the same `requests.jsonl`; the manifest says how many.

    `spec.timeout` bounds each request (default `perflib.load.request_timeout_for(decode_tokens)`),
    `spec.idle_timeout` the time without a byte once its stream has begun (None: no limit); a request
    that hits one fails with the timeout named, and the level is incomplete. The manifest keeps both.

    `repeats`: what this level's repeats measured one after the other share (`perflib.load.Repeats`): the
    prompts sized ahead, one warm-up (`warmup_from` names the run that sent it; only its folder has
    `warmup.jsonl`), the scrape before taken over from the repeat before (`metrics_before_from` names it:
    this run's `metrics_before.txt` is that run's `metrics_after.txt`, byte for byte), the server's identity
    read once.
    """
    batch, context, repeat, base_url = spec.batch, spec.context, spec.repeat, spec.base_url
    run_dir = spec.run_dir
    if rundir.is_complete(run_dir):
        summary, problem = _summary(run_dir, batch, context, repeat)
        status = UNREADABLE if problem else rundir.COMPLETE
        return LevelResult(run_dir, status, (problem,) if problem else (), summary, skipped=True)
    moved = rundir.move_aside(run_dir) if run_dir.exists() else None
    run_dir.mkdir(parents=True)
    started = spec.server
    manifest = {"campaign": spec.campaign, "arm": spec.arm, "backend": spec.backend, **_started_manifest(
        base_url, spec.endpoint, batch, context, spec.decode_tokens, repeat),
        "moved_aside": str(moved) if moved else None, "workers": spec.workers,
        "timeouts": {"request_s": spec.request_timeout, "idle_s": spec.idle_timeout}}
    rundir.write_manifest(run_dir, manifest)
    try:
        manifest["server"] = _identity(spec, repeats)
    except httpx.HTTPError as exc:
        message = (f"level {run_dir.name}: server unreachable at {base_url}: {type(exc).__name__}: "
                   f"{exc or 'connection refused'}; is it running at that address? "
                   "(or let perflib start one with --start-server)")
        manifest["errors"] = [message]
        rundir.write_manifest(run_dir, manifest)
        summary, _ = _summary(run_dir, batch, context, repeat)
        return LevelResult(run_dir, rundir.INCOMPLETE, (message,), summary, unreachable=True, moved_aside=moved)

    log_path = started.log_path if started else None
    log_start = _log_size(log_path)
    sampler = None
    if spec.contention:  # the server's processes found by its port: only where other processes are sampled
        sampler = load.ContentionSampler(_own_pids(base_url, started), threshold=spec.contention_threshold,
                                         wait_threshold=spec.wait_threshold, psi_threshold=spec.psi_threshold)
        sampler.start()
    sent = replace(spec, model=spec.model or manifest["server"].get("model"),
                   extra_body=spec.extra_body if spec.extra_body is not None else _extra_body(manifest))
    try:
        outcome = load.run_sync(load.run_level_async(sent, rundir.RunWriter(run_dir), repeats=repeats))
    finally:
        seen = sampler.stop() if sampler is not None else None
        _copy_log_slice(log_path, log_start, run_dir / rundir.SERVER_LOG)
    manifest["contention"] = seen.as_dict() if seen is not None else {"available": False, "contended": False,
                                                                       "note": "not sampled (--no-contention)"}
    manifest.update({
        "clocks": outcome.clocks,
        "prompt_tokens": outcome.prompt_tokens,
        "metrics": outcome.metrics,
        "warmup_ok": outcome.warmup_ok,
        "warmup_from": outcome.warmup_from,
        "metrics_before_from": outcome.metrics_before_from,
        "gauge_samples": outcome.gauge_samples,
        "status": rundir.COMPLETE if outcome.complete else rundir.INCOMPLETE,
        "errors": list(outcome.errors),
    })
    rundir.write_manifest(run_dir, manifest)
    summary, problem = _summary_checked(run_dir, manifest, outcome.errors)
    status = UNREADABLE if problem else manifest["status"]
    return LevelResult(run_dir, status, (*outcome.errors, *([problem] if problem else [])), summary,
                       unreachable=outcome.unreachable, moved_aside=moved,
                       contention_note=seen.note if seen is not None and seen.note else "")


def _identity(spec: load.LevelSpec, repeats: load.Repeats | None) -> dict[str, Any]:
    """The manifest's `server`: what the server answers of itself (`/props`, `/v1/models`) and what perflib
    knows of a server it started; read once for a level's repeats on one server."""
    if repeats is not None:
        repeats.on(spec.base_url)
        if repeats.identity is not None:
            return copy.deepcopy(repeats.identity)
    started = spec.server
    identity = load.server_identity(spec.base_url, flags=list(started.flags) if started else None,
                                    version=started.version if started else None)
    identity.update(started.started() if started else {})
    if repeats is not None:
        repeats.identity = copy.deepcopy(identity)
    return identity


def _summary_checked(run_dir: Path, manifest: dict[str, Any], errors: list[str]) -> tuple[dict[str, Any], str | None]:
    """`_summary` of a level just measured; where its counters reset or were NaN (`REMEASURED`), the
    client's records stand but the counters' figures are n/a, so the level is marked incomplete (its
    manifest, `errors`) and measured again on a rerun."""
    batch, context, repeat = manifest["batch"], manifest["context"], manifest["repeat"]
    summary, problem = _summary(run_dir, batch, context, repeat)
    counters = str(summary.get("metrics_problem") or "")
    if counters.startswith(REMEASURED) and manifest["status"] == rundir.COMPLETE:
        errors.append(f"level {run_dir.name}: counters {counters}; the level is kept incomplete and measured "
                      "again on the next run")
        manifest.update(status=rundir.INCOMPLETE, errors=list(errors))
        rundir.write_manifest(run_dir, manifest)
        summary, problem = _summary(run_dir, batch, context, repeat)
    return summary, problem


REMEASURED = ("reset", "NaN")
"""Counter problems (`perflib.metrics.MetricsDelta.problem`) that leave a level incomplete: a restart or a
counter the server could not compute says nothing about the level, so a rerun measures it again."""


UNREADABLE = "unreadable"
"""A `LevelResult.status` (never a manifest's): the folder is there, but its summary failed on a
file that is not what it should be (a record's `timings` a list, a garbage `/metrics` body, a
dialect perflib does not know). The sweep reports it and measures the rest; the folder is kept."""


def _summary(run_dir: Path, batch: int, context: int, repeat: int) -> tuple[dict[str, Any], str | None]:
    """`summarize_run` of the folder, or (an empty row of this level, why) where a file in it is bad:
    one bad folder never stops a sweep, neither the first time nor on a rerun."""
    try:
        return runs.summarize_run(run_dir), None
    except PerflibError as exc:
        problem = f"level {run_dir.name}: cannot summarize {run_dir}: {exc}"
    row: dict[str, Any] = {name: None for name in (*runs.RUNS_COLUMNS, *runs.EXTRA_COLUMNS)}
    row.update(batch=batch, context=context, repeat=repeat, status=UNREADABLE, errors=[problem], ok=0, failed=0,
               contended=False)
    return row, problem


def _started_manifest(base_url: str, endpoint: str, batch: int, context: int, decode_tokens: int,
                      repeat: int) -> dict[str, Any]:
    """The manifest a level writes before it sends anything: incomplete until it ends."""
    return {
        "batch": batch, "context": context, "decode_tokens": decode_tokens, "repeat": repeat,
        "base_url": base_url, "endpoint": endpoint, "server": None, "tools": tool_versions(),
        "host": devices.host_name(), "device": devices.this_device().as_dict(),  # which worker's GPU (issue 29)
        "clocks": {"start": None, "end": None},
        "prompt_tokens": {"target": context, "measured": [], "method": None},
        "status": rundir.INCOMPLETE, "errors": ["level started but did not finish"],
        "metrics": None, "warmup_ok": None,
    }


def _own_pids(base_url: str, started: load.ServerInfo | None) -> set[int]:
    """The server's processes, which are not contention: the one perflib started, and whatever
    listens on the URL's port where the URL is this host."""
    pids: set[int] = {os.getpid()}  # and so this client's own load workers
    if started is not None and started.pid is not None:
        pids.add(started.pid)
    parts = urlsplit(base_url)
    if parts.hostname in ("127.0.0.1", "localhost", "::1", "0.0.0.0") and parts.port:
        pids |= load.listening_pids(parts.port)
    return pids


def _extra_body(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Server-specific request fields: llama.cpp gets `cache_prompt: false` (prompts are unique too)."""
    identity = manifest.get("server") or {}
    return {"cache_prompt": False} if identity.get("kind") == "llama.cpp" else {}


def _log_size(path: str | None) -> int | None:
    try:
        return Path(path).stat().st_size if path else None
    except OSError:
        return None


def _copy_log_slice(path: str | None, start: int | None, target: Path) -> None:
    """Copy the bytes the server logged since `start` (this level's slice) to `target`."""
    if not path or start is None:
        return
    try:
        with open(path, "rb") as src, open(target, "wb") as dst:
            src.seek(start)
            shutil.copyfileobj(src, dst)
    except OSError:
        pass


@dataclass
class SweepResult:
    out_dir: Path
    runs: list[dict[str, Any]] = field(default_factory=list)
    levels: list[dict[str, Any]] = field(default_factory=list)
    results: list[LevelResult] = field(default_factory=list)
    server_log: Path | None = None


def _run_plan(level: load.LevelSpec, plan: list[tuple[int, int, int]], handle: server.ServerHandle | None,
              progress: bool, result: SweepResult) -> None:
    """Every (batch, context, repeat) of the plan in turn, each `level` at that point; stops at a server
    that cannot be reached or that perflib started and that died, after the level's folder was marked
    incomplete."""
    from tqdm import tqdm  # late: 8 ms (measured) that `import perflib.campaign` skips

    bar = tqdm(total=len(plan), unit="run", file=sys.stderr, disable=not progress)
    try:
        for batch, context, repeat in plan:
            bar.set_description(rundir.run_name(batch, context, repeat))
            res = run_level(level.at(batch, context, repeat))
            result.results.append(res)
            load.say_once(res.contention_note)
            if progress and res.summary.get("contended") and not res.skipped:
                tqdm.write(f"perflib: {res.run_dir.name} contended: {res.summary.get('contention_why')}",
                           file=sys.stderr)
            result.runs.append(res.summary)
            bar.update(1)
            if res.unreachable:
                raise PerflibError(f"{res.errors[0] if res.errors else 'server unreachable'}; run folder "
                                   f"{res.run_dir} is marked incomplete and will be re-measured on a rerun")
            if handle is not None and not handle.alive():
                raise PerflibError(
                    f"llama-server exited (code {handle.process.returncode}) during level {res.run_dir.name}; "
                    f"the level is marked incomplete, records measured so far are in {res.run_dir}; "
                    f"server log: {handle.log_path}")
    finally:
        bar.close()


def _check_matrix(base_url: str | None, start_server: bool, batches: Sequence[int], contexts: Sequence[int],
                  decode_tokens: int, repeats: int) -> None:
    if start_server and base_url:
        raise PerflibError("give either --base-url or --start-server, not both")
    if not start_server and not base_url:
        raise PerflibError("no server: give --base-url URL of a running server, or --start-server to let "
                           "perflib start llama-server")
    for name, values in (("batch", batches), ("context", contexts)):
        if not values or any(v < 1 for v in values):
            raise PerflibError(f"--{name} needs positive integers, got {list(values)}")
    if decode_tokens < 2:
        raise PerflibError(f"--decode-tokens must be at least 2 (a decode rate needs two tokens), got {decode_tokens}")
    if repeats < 1:
        raise PerflibError(f"--repeats must be at least 1, got {repeats}")
    count = len(batches) * len(contexts) * repeats
    if count > MAX_RUNS:
        raise PerflibError(f"expected at most {MAX_RUNS} runs, found {count} ({len(batches)} batches x "
                           f"{len(contexts)} contexts x {repeats} repeats)")


def sweep(level: load.LevelSpec, batches: Sequence[int], contexts: Sequence[int], repeats: int, *,
          start_server: bool = False, model: Path | str | None = None, threads: int | None = None,
          progress: bool = True) -> SweepResult:
    """Every (batch, context, repeat) as a run folder under `level.out_dir`, then one row per level.

    `level` is every level's spec but for its batch, context and repeat, which come from the matrix
    (`LevelSpec.at`). With `start_server`, perflib starts llama-server itself
    (`perflib.server.start_local_llama`) with `--parallel max(batches)` and room for the longest context in
    every slot, and `level.base_url` must be empty; its whole log is `<out_dir>/server.log` and each run
    folder gets the slice written during its level. `model` defaults to the project's random-weight test
    model.

    A run that cannot reach the server stops the sweep with a `PerflibError` naming the level and
    URL, after its manifest was marked incomplete; records already measured stay on disk.
    """
    _check_matrix(level.base_url, start_server, batches, contexts, level.decode_tokens, repeats)
    if level.workers < 1:
        raise PerflibError(f"--workers must be at least 1, got {level.workers}")
    out = level.out_dir
    out.mkdir(parents=True, exist_ok=True)
    result = SweepResult(out_dir=out)
    handle = None
    if start_server:
        handle = server.start_local_llama(parallel=max(batches), context=max(contexts),
                                          decode_tokens=level.decode_tokens, log_path=out / rundir.SERVER_LOG,
                                          model=Path(model) if model else None, threads=threads)
        result.server_log = handle.log_path
        level = replace(level, base_url=handle.base_url, server=load.ServerInfo.of(handle))
    plan = [(b, c, r) for b in batches for c in contexts for r in range(1, repeats + 1)]
    try:
        _run_plan(level, plan, handle, progress, result)
    finally:
        if handle is not None:
            handle.stop()
    result.levels = runs.level_rows(result.runs)
    return result
