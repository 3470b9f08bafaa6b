"""Sweep batch × context against a live server: one run folder per level and repeat, one table.

Two functions are the interface for notebooks and campaigns:

- `run_level(base_url, batch, context, decode_tokens, repeat, out_dir, ...) -> LevelResult`
  measures one run into `<out_dir>/b<batch>_c<context>_r<repeat>/` (docs/SCHEMA.md §2), or
  returns the folder's summary without measuring when its manifest already says `complete`.
- `summarize_run(run_dir) -> dict`: one row of `runs.csv` (docs/SCHEMA.md §4), computed from the
  folder's files alone (no server).

`sweep(...)` runs every (batch, context, repeat) with a progress bar and `level_table(...)` folds
the repeats into one row per level (median and min–max).
"""

from __future__ import annotations

import shutil
import statistics
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflib import rundir
from perflib.errors import PerflibError

RUNS_COLUMNS = (
    "campaign", "arm", "backend", "batch", "context", "repeat",
    "status", "ok", "failed", "ttft_ms", "ttft_p95_ms", "decode_tok_s", "aggregate_tok_s",
    "decode_step_ms", "raw_step_ms", "steady_step_ms", "occupancy", "prefill_chunks", "mixed_steps",
    "decode_steps", "decode_tokens", "own_step_share", "prefill_share", "other_share", "window_ms",
)
"""`runs.csv` columns of docs/SCHEMA.md §4, in order."""

EXTRA_COLUMNS = (
    "decode_tokens_requested", "timings_step_ms", "steady_step_samples", "steady_step_burst_share",
    "steady_step_reason",
    "metrics_available", "metrics_absent", "errors",
)
"""Columns `summarize_run` adds after the SCHEMA ones (an extension, not a change)."""


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


# --------------------------------------------------------------------------------------------
# One run


def run_level(
    base_url: str,
    batch: int,
    context: int,
    decode_tokens: int,
    repeat: int,
    out_dir: Path | str,
    *,
    endpoint: str = "completions",
    dialect: str = "auto",
    server: Any = None,
    campaign: str | None = None,
    arm: str | None = None,
    backend: str | None = None,
    timeout: float = 600.0,
    ignore_eos: bool = True,
    extra_body: Mapping[str, Any] | None = None,
) -> LevelResult:
    """Measure one (batch, context, repeat) run into `<out_dir>/b<batch>_c<context>_r<repeat>/`.

    `batch` requests of `context` prompt tokens (measured with the server's `/tokenize`) and
    `decode_tokens` streamed tokens each (`ignore_eos`) are sent at once, after one short
    warm-up request (kept in `warmup.jsonl`). A folder already `complete` is not re-measured; an
    incomplete one is moved aside to `<name>.incomplete-<n>` first. `server` is the
    `perflib.server.ServerHandle` when perflib started the server: its flags go into the manifest
    and the slice of its log written during the level into the folder's `server.log`.

    Faults never raise: the manifest lists them and says `incomplete` (that includes `/metrics`
    being off: the client records are kept, the counters are marked unavailable).
    """
    import httpx

    from perflib import load

    run_dir = rundir.run_dir_for(out_dir, batch, context, repeat)
    if rundir.is_complete(run_dir):
        return LevelResult(run_dir, rundir.COMPLETE, (), summarize_run(run_dir), skipped=True)
    moved = rundir.move_aside(run_dir) if run_dir.exists() else None
    run_dir.mkdir(parents=True)
    level = run_dir.name
    manifest: dict[str, Any] = {
        "campaign": campaign, "arm": arm, "backend": backend,
        "batch": batch, "context": context, "decode_tokens": decode_tokens, "repeat": repeat,
        "base_url": base_url, "endpoint": endpoint, "server": None, "tools": rundir.tool_versions(),
        "clocks": {"start": None, "end": None},
        "prompt_tokens": {"target": context, "measured": [], "method": None},
        "status": rundir.INCOMPLETE, "errors": ["level started but did not finish"],
        "metrics": None, "warmup_ok": None, "moved_aside": str(moved) if moved else None,
    }
    rundir.write_manifest(run_dir, manifest)

    flags = list(server.flags) if server is not None else None
    version = None
    if server is not None:
        try:
            version = server.identity().get("version")
        except Exception:  # the version line is a nicety; the level does not depend on it
            version = None
    try:
        manifest["server"] = rundir.server_identity(base_url, flags=flags, version=version)
    except httpx.HTTPError as exc:
        message = (f"level {level}: server unreachable at {base_url}: {type(exc).__name__}: "
                   f"{exc or 'connection refused'}; is it running at that address? "
                   "(or let perflib start one with --start-server)")
        manifest["errors"] = [message]
        rundir.write_manifest(run_dir, manifest)
        return LevelResult(run_dir, rundir.INCOMPLETE, (message,), summarize_run(run_dir),
                           unreachable=True, moved_aside=moved)

    log_start = _log_size(server)
    writer = rundir.RunWriter(run_dir)
    try:
        outcome = load.run_sync(load.run_level_async(
            base_url, batch, context, decode_tokens, repeat, writer,
            endpoint=endpoint, model=manifest["server"].get("model"), dialect=dialect,
            ignore_eos=ignore_eos, extra_body=extra_body if extra_body is not None else _extra_body(manifest),
            timeout=timeout,
        ))
    finally:
        _copy_log_slice(server, log_start, run_dir / rundir.SERVER_LOG)
    manifest.update({
        "clocks": outcome.clocks,
        "prompt_tokens": outcome.prompt_tokens,
        "metrics": outcome.metrics,
        "warmup_ok": outcome.warmup_ok,
        "gauge_samples": outcome.gauge_samples,
        "status": rundir.COMPLETE if outcome.complete else rundir.INCOMPLETE,
        "errors": list(outcome.errors),
    })
    rundir.write_manifest(run_dir, manifest)
    return LevelResult(run_dir, manifest["status"], tuple(outcome.errors), summarize_run(run_dir),
                       unreachable=outcome.unreachable, moved_aside=moved)


def _extra_body(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Server-specific request fields: llama.cpp gets `cache_prompt: false` (prompts are unique too)."""
    server = manifest.get("server") or {}
    return {"cache_prompt": False} if server.get("kind") == "llama.cpp" else {}


def _log_size(server: Any) -> int | None:
    path = getattr(server, "log_path", None)
    try:
        return Path(path).stat().st_size if path else None
    except OSError:
        return None


def _copy_log_slice(server: Any, start: int | None, target: Path) -> None:
    """Copy the bytes the server logged since `start` (this level's slice) to `target`."""
    path = getattr(server, "log_path", None)
    if not path or start is None:
        return
    try:
        with open(path, "rb") as src, open(target, "wb") as dst:
            src.seek(start)
            shutil.copyfileobj(src, dst)
    except OSError:
        pass


# --------------------------------------------------------------------------------------------
# Summary of one run folder (runs.csv row)


def nearest_rank(values: Sequence[float], p: float) -> float | None:
    """Percentile by nearest rank, `sorted[round(p/100·(n−1))]` (mlxcel's harness)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[round(p / 100 * (len(ordered) - 1))]


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def summarize_run(run_dir: Path | str) -> dict[str, Any]:
    """One `runs.csv` row (docs/SCHEMA.md §4) from the run folder's files alone.

    Client figures over the successful requests: `ttft_ms` mean and `ttft_p95_ms` nearest-rank
    (mlxcel's harness), `decode_tok_s` mean of the per-request rates, `aggregate_tok_s` = Σ
    completion tokens / (last stream close − first start). Counter figures from
    `perflib.metrics.diff` of `metrics_before.txt` and `metrics_after.txt` (None when either is
    missing). `steady_step_ms` and the shares from `perflib.load.steady_step` and
    `decode_window_decomposition` over all the run's requests. Extra columns: `EXTRA_COLUMNS`
    (`timings_step_ms` = Σ `predicted_ms` / Σ (`predicted_n` − 1) over the requests' `timings`: the
    counter formula from the responses, which corrects `predicted_per_token_ms` for dividing n − 1
    intervals by n).
    """
    from perflib import load

    run_dir = Path(run_dir)
    manifest = rundir.read_manifest(run_dir)
    records = rundir.read_jsonl(run_dir / rundir.REQUESTS)
    ok = [r for r in records if r.get("ok")]
    row: dict[str, Any] = {name: None for name in (*RUNS_COLUMNS, *EXTRA_COLUMNS)}
    row.update({key: manifest.get(key) for key in ("campaign", "arm", "backend", "batch", "context", "repeat",
                                                      "status")})
    row["decode_tokens_requested"] = manifest.get("decode_tokens")
    row["errors"] = list(manifest.get("errors") or [])
    row["ok"] = len(ok)
    row["failed"] = len(records) - len(ok) + max(0, int(manifest.get("batch") or 0) - len(records))

    ttfts = [r["ttft_ms"] for r in ok if r.get("ttft_ms") is not None]
    row["ttft_ms"] = _mean(ttfts)
    row["ttft_p95_ms"] = nearest_rank(ttfts, 95)
    rates = [r["decode_tok_s"] for r in ok if r.get("decode_tok_s") is not None]
    row["decode_tok_s"] = _mean(rates)
    ends = [r["end_ns"] for r in ok if r.get("end_ns") is not None]
    if ok and ends:
        span_ns = max(ends) - min(r["start_ns"] for r in ok)
        tokens = sum(r.get("completion_tokens") or 0 for r in ok)
        row["aggregate_tok_s"] = tokens * 1e9 / span_ns if span_ns > 0 else None
    predicted_ms = predicted_steps = 0.0
    for r in ok:
        t = r.get("timings") or {}
        n, ms = t.get("predicted_n"), t.get("predicted_ms")
        if isinstance(n, int | float) and isinstance(ms, int | float) and n > 1:
            predicted_ms += ms
            predicted_steps += n - 1
    row["timings_step_ms"] = predicted_ms / predicted_steps if predicted_steps else None

    # only successes enter the statistics (LOADGEN §1); a failed request leaves the level incomplete
    steady = load.steady_step(ok)
    row["steady_step_ms"] = steady.step_ms
    row["steady_step_samples"] = steady.samples
    row["steady_step_burst_share"] = steady.burst_share
    row["steady_step_reason"] = steady.reason
    parts = load.decode_window_decomposition(ok, steady.step_ms)
    row["own_step_share"] = parts.own_step_share
    row["prefill_share"] = parts.prefill_share
    row["other_share"] = parts.other_share
    row["window_ms"] = parts.window_ms

    row.update(_counter_figures(run_dir, manifest, records))
    return row


def _counter_figures(run_dir: Path, manifest: Mapping[str, Any], records: Sequence[Mapping[str, Any]]
                     ) -> dict[str, Any]:
    before = run_dir / rundir.METRICS_BEFORE
    after = run_dir / rundir.METRICS_AFTER
    out: dict[str, Any] = {"metrics_available": False, "metrics_absent": None}
    if not (before.is_file() and after.is_file()):
        return out
    from perflib import metrics

    info = manifest.get("metrics") or {}
    finished = sum(1 for r in records if r.get("completion_tokens") is not None)
    gauges = [s["gauges"] for s in rundir.read_jsonl(run_dir / rundir.GAUGES) if s.get("gauges")]
    delta = metrics.diff(before.read_text(), after.read_text(), dialect=(info.get("dialect") or "auto"),
                         requests=finished, process_start_before=info.get("process_start_before"),
                         process_start_after=info.get("process_start_after"), gauge_samples=gauges).to_dict()
    out["metrics_available"] = True
    absent = list(delta.get("absent") or [])
    for key in ("decode_step_ms", "raw_step_ms", "occupancy", "prefill_chunks", "mixed_steps", "decode_steps",
                "decode_tokens"):
        out[key] = delta.get(key)
    # A counter the dialect has no name for (llama.cpp: prefill chunks, mixed steps) is absent too.
    absent += [key for key in ("prefill_chunks", "mixed_steps") if out[key] is None and key not in absent]
    out["metrics_absent"] = absent
    return out


# --------------------------------------------------------------------------------------------
# Per-level table


TABLE_FIGURES = (
    ("ok", "ok", "{:.0f}"),
    ("failed", "failed", "{:.0f}"),
    ("ttft_ms", "TTFT (ms)", "{:.1f}"),
    ("decode_tok_s", "decode (tok/s/req)", "{:.1f}"),
    ("aggregate_tok_s", "aggregate (tok/s)", "{:.1f}"),
    ("decode_step_ms", "step, counters (ms)", "{:.2f}"),
    ("steady_step_ms", "steady step, client (ms)", "{:.2f}"),
    ("occupancy", "occupancy (slots/step)", "{:.2f}"),
    ("prefill_chunks", "prefill chunks (count)", "{:.0f}"),
    ("own_step_share", "own-step share (%)", "{:.1f}"),
)
"""(summary key, header with unit, format) of each figure in the per-level table."""

COUNTER_KEYS = frozenset({"decode_step_ms", "occupancy", "prefill_chunks"})


def level_rows(summaries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (batch, context): each figure's median over repeats with its min and max.

    Keys per figure `f`: `f` (median), `f_min`, `f_max` (None where no repeat has it), plus
    `repeats`, `complete` (repeats whose run is complete), `counters` (`ok` or `no /metrics`)
    and `prefill_chunks_absent` (the server has no such counter).
    """
    groups: dict[tuple[int, int], list[Mapping[str, Any]]] = {}
    for s in summaries:
        groups.setdefault((s["batch"], s["context"]), []).append(s)
    rows = []
    for (batch, context), runs in sorted(groups.items()):
        row: dict[str, Any] = {"batch": batch, "context": context, "repeats": len(runs),
                               "complete": sum(1 for s in runs if s.get("status") == rundir.COMPLETE)}
        for key in (*(f[0] for f in TABLE_FIGURES), "raw_step_ms", "timings_step_ms", "prefill_share",
                    "other_share", "window_ms", "ttft_p95_ms", "mixed_steps", "decode_steps", "decode_tokens"):
            values = [s[key] for s in runs if s.get(key) is not None]
            row[key] = statistics.median(values) if values else None
            row[f"{key}_min"] = min(values) if values else None
            row[f"{key}_max"] = max(values) if values else None
        row["counters"] = "ok" if any(s.get("metrics_available") for s in runs) else "no /metrics"
        row["prefill_chunks_absent"] = any("prefill_chunks" in (s.get("metrics_absent") or []) for s in runs)
        rows.append(row)
    return rows


def _cell(row: Mapping[str, Any], key: str, fmt: str) -> str:
    if key in COUNTER_KEYS and row.get("counters") != "ok":
        return "n/a (no /metrics)"
    if key == "prefill_chunks" and row.get("prefill_chunks_absent") and row.get(key) is None:
        return "absent"
    value = row.get(key)
    if value is None:
        return "n/a"
    scale = 100.0 if key == "own_step_share" else 1.0
    lo, hi = row.get(f"{key}_min"), row.get(f"{key}_max")
    text = fmt.format(value * scale)
    if lo is not None and hi is not None and fmt.format(lo * scale) != fmt.format(hi * scale):
        text += f" ({fmt.format(lo * scale)}–{fmt.format(hi * scale)})"
    return text


def format_level_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The per-level table: medians over repeats with (min–max), units in the headers."""
    from tabulate import tabulate

    headers = ["batch", "context (tokens)", "runs complete", *(f[1] for f in TABLE_FIGURES)]
    body = [[row["batch"], row["context"], f"{row['complete']}/{row['repeats']}",
             *(_cell(row, key, fmt) for key, _, fmt in TABLE_FIGURES)] for row in rows]
    note = ("medians over repeats, (min–max) where they differ; step, counters = Δtokens_predicted_seconds / "
            "Δdecode tokens from /metrics; steady step, client = median ITL while all requests decode; "
            "own-step share = median over requests of (n−1) × steady step / decode window")
    return tabulate(body, headers=headers, tablefmt="simple", disable_numparse=True) + "\n" + note


# --------------------------------------------------------------------------------------------
# Sweep


@dataclass
class SweepResult:
    out_dir: Path
    runs: list[dict[str, Any]] = field(default_factory=list)
    levels: list[dict[str, Any]] = field(default_factory=list)
    results: list[LevelResult] = field(default_factory=list)
    server_log: Path | None = None


def sweep(
    base_url: str | None,
    batches: Sequence[int],
    contexts: Sequence[int],
    decode_tokens: int,
    repeats: int,
    out_dir: Path | str,
    *,
    endpoint: str = "completions",
    dialect: str = "auto",
    start_server: bool = False,
    model: Path | str | None = None,
    threads: int | None = None,
    progress: bool = True,
    timeout: float = 600.0,
) -> SweepResult:
    """Every (batch, context, repeat) as a run folder under `out_dir`, then one row per level.

    With `start_server`, perflib starts llama-server itself (`perflib.server`) with
    `--parallel max(batches)` and `--ctx-size` = max(batches) × (max(contexts) + decode_tokens +
    margin), since llama-server splits the context evenly across slots; its whole log is
    `<out_dir>/server.log` and each run folder gets the slice written during its level. `model`
    defaults to the project's random-weight test model.

    A run that cannot reach the server stops the sweep with a `PerflibError` naming the level and
    URL, after its manifest was marked incomplete; records already measured stay on disk.
    """
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
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = SweepResult(out_dir=out)
    handle = None
    if start_server:
        handle = _start_server(out, max(batches), max(contexts), decode_tokens, model, threads)
        result.server_log = handle.log_path
        base_url = handle.base_url
    assert base_url is not None
    plan = [(b, c, r) for b in batches for c in contexts for r in range(1, repeats + 1)]
    from tqdm import tqdm

    bar = tqdm(total=len(plan), unit="run", file=sys.stderr, disable=not progress)
    try:
        for batch, context, repeat in plan:
            bar.set_description(f"b{batch} c{context} r{repeat}")
            res = run_level(base_url, batch, context, decode_tokens, repeat, out, endpoint=endpoint,
                            dialect=dialect, server=handle, timeout=timeout)
            result.results.append(res)
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
        if handle is not None:
            handle.stop()
    result.levels = level_rows(result.runs)
    return result


def _start_server(out: Path, parallel: int, context: int, decode_tokens: int, model: Path | str | None,
                  threads: int | None) -> Any:
    from perflib import server

    binary = server.ensure_llama_server(progress=True)
    model_path = Path(model) if model else server.ensure_test_model()
    if not model_path.is_file():
        raise PerflibError(f"{model_path}: model file not found (--model expects a GGUF file)")
    ctx = server.ctx_size_for(parallel, context, decode_tokens)
    return server.start_llama_server(model_path, parallel=parallel, ctx_size=ctx, threads=threads,
                                     log_path=out / rundir.SERVER_LOG, binary=binary)
