"""Each level's figures checked against independent measures, and contended runs left out.

A shared machine, a server that splits its batch, or a trace whose steps were miscounted all give a
figure that looks fine and is wrong. These checks compare what was measured two ways:

| check | compares | must hold |
| --- | --- | --- |
| `tokens` | the server's Δdecode tokens against the client's Σ (completion tokens − 1) | within 2% |
| `counter_vs_client` | at batch 1: the counter step against the client's steady step | within 0.8–1.25× |
| `timings_vs_counter` | at batch 1: the responses' `timings` step against the counter step | within 0.9–1.1× |
| `spread` | the repeats' decode step, slowest over fastest | at most 1.5× |
| `trace_steps` | the trace's step count in its decode window against that window over the client's steady step | 0.75–1.33× |
| `trace_loss` | the run's trace against its window: the capture covers it, lost no record, was made | nothing lost (`perflib.derive`: runs.csv `trace_loss`) |
| `unanswered` | the gauge sampler's `/metrics` scrapes during the run (`perflib.runs.unanswered`) | none failed: a failed scrape (10 s timeout) is a server whose loop answered nothing that long |

A level that fails a check is *suspect*: the page says why beside the level and beside every
verdict that rests on it. A run whose manifest says it was contended (`perflib.load.contention`:
other processes used the CPUs) is *left out* of every median and verdict, and counted as such.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

LEVEL_KEYS = ["arm", "backend", "batch", "context"]
LIMITS = {"tokens": (0.98, 1.02), "counter_vs_client": (0.8, 1.25), "timings_vs_counter": (0.9, 1.1),
          "spread": (1.0, 1.5), "trace_steps": (0.75, 1.33)}
"""Each check's accepted range of its ratio."""


def text(column: pd.Series) -> pd.Series:
    """A runs table's text column (`left_out`, `metrics_problem`) with missing as "": read back from CSV,
    a column empty on every row is float NaN, which pandas will not fill with a string."""
    return column.astype(object).fillna("").astype(str)


def _flag(frame: pd.DataFrame, column: str) -> pd.Series:
    if column not in frame.columns:
        return pd.Series(False, index=frame.index)
    return frame[column].map(lambda v: str(v).lower() in ("true", "1", "1.0"))


def left_out(runs: pd.DataFrame) -> pd.Series:
    """Per run: why it is left out of medians and verdicts ('' where it is used). Incomplete runs
    are not counted here: they never enter."""
    out = pd.Series("", index=runs.index, dtype=object)
    if not len(runs):
        return out
    contended = _flag(runs, "contended")
    complete = runs["status"].astype(str) == "complete" if "status" in runs.columns else True
    why = runs["contention_why"] if "contention_why" in runs.columns else pd.Series("", index=runs.index)
    for idx in runs.index[contended & complete]:
        text = str(why.get(idx) or "contended")
        out[idx] = text if text.startswith("contended") else f"contended: {text}"
    return out


def left_out_at(runs: pd.DataFrame | None, **where: Any) -> tuple[int, str]:
    """(complete runs left out among those whose columns equal `where`, the first one's reason)."""
    if runs is None or not len(runs) or "status" not in runs.columns:
        return 0, ""
    mask = runs["status"].astype(str) == "complete"
    for column, value in where.items():
        if value is not None and column in runs.columns:
            mask &= runs[column].astype(str) == str(value)
    why = runs["left_out"] if "left_out" in runs.columns else left_out(runs)
    reasons = [w for w in text(why[mask]) if w]
    return len(reasons), (reasons[0] if reasons else "")


def left_out_text(runs: pd.DataFrame | None, what: str, **where: Any) -> str:
    """'all 3 complete runs <what> left out as contended (why)', or '' where none was left out."""
    n, why = left_out_at(runs, **where)
    if not n:
        return ""
    return (f"{'its' if n == 1 else 'all'} {n} complete run{'s' if n != 1 else ''} {what} left out as contended "
            f"({why.removeprefix('contended: ')})")


def usable(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs that enter medians and verdicts: complete and not left out."""
    if runs is None or not len(runs):
        return runs
    keep = runs["status"].astype(str) == "complete" if "status" in runs.columns else pd.Series(True, index=runs.index)
    if "left_out" in runs.columns:
        keep &= text(runs["left_out"]) == ""
    return runs[keep]


def _num(frame: pd.DataFrame, column: str) -> pd.Series:
    return pd.to_numeric(frame[column], errors="coerce") if column in frame.columns else pd.Series(dtype=float)


def _ratio_check(name: str, value: float | None, text: str) -> str | None:
    lo, hi = LIMITS[name]
    if value is None or pd.isna(value) or lo <= value <= hi:
        return None
    return f"{name}: {text} ({value:.2f}x, expected {lo:g}–{hi:g}x)"


def counter_over_client(used: pd.DataFrame) -> float | None:
    """The `counter_vs_client` check's ratio: the median counter step over the median client steady step of
    a level's used runs (None where either is missing)."""
    step, steady = _num(used, "decode_step_ms").median(), _num(used, "steady_step_ms").median()
    return float(step / steady) if pd.notna(step) and pd.notna(steady) and steady > 0 else None


def step_spread(used: pd.DataFrame) -> float | None:
    """The `spread` check's ratio: the repeats' decode step, slowest over fastest (None under two repeats)."""
    steps = _num(used, "decode_step_ms").dropna()
    return float(steps.max() / steps.min()) if len(steps) >= 2 and steps.min() > 0 else None


def _level_failures(used: pd.DataFrame, traced: pd.DataFrame, batch: int) -> list[str]:
    """The failed checks of one level's used runs (and its traced runs)."""
    fails: list[str] = []
    tokens, seen = _num(used, "decode_tokens"), _num(used, "client_decode_tokens")
    for (_, row), server, client in zip(used.iterrows(), tokens, seen, strict=False):
        if pd.notna(server) and pd.notna(client) and client > 0:
            fails.append(_ratio_check("tokens", server / client, f"r{row.get('repeat')}: the server counted "
                                      f"{server:,.0f} decode tokens, the client saw {client:,.0f}") or "")
    step, steady = _num(used, "decode_step_ms").median(), _num(used, "steady_step_ms").median()
    if batch == 1:
        fails.append(_ratio_check("counter_vs_client", counter_over_client(used), f"counter step {step:.2f} ms "
                                  f"against the client's steady step {steady:.2f} ms") or "")
    timings = _num(used, "timings_step_ms").median()
    if batch == 1 and pd.notna(timings) and pd.notna(step) and step > 0:
        fails.append(_ratio_check("timings_vs_counter", timings / step, f"timings step {timings:.2f} ms against "
                                  f"the counter step {step:.2f} ms") or "")
    steps = _num(used, "decode_step_ms").dropna()
    fails.append(_ratio_check("spread", step_spread(used), f"repeats' decode step "
                              f"{steps.min() if len(steps) else 0:.2f}-{steps.max() if len(steps) else 0:.2f} ms") or "")
    fails += _trace_step_failures(used, traced)
    fails += _trace_loss_failures(used)
    fails += _unanswered_failures(used)
    return [f for f in fails if f]


def _unanswered_failures(used: pd.DataFrame) -> list[str]:
    """A run during which the server left `/metrics` unanswered: its loop stalled, so the level's TTFT and
    client window hold the stall, whatever its decode step says."""
    if "unanswered_scrapes" not in used.columns:
        return []
    out = []
    for repeat, n, span in zip(used["repeat"], _num(used, "unanswered_scrapes"), _num(used, "unanswered_s"),
                               strict=False):
        if pd.notna(n) and n > 0:
            out.append(f"unanswered: r{repeat}: the server left /metrics unanswered for "
                       f"{span if pd.notna(span) else 0:.1f} s ({n:.0f} scrape{'s' if n != 1 else ''} timed out or "
                       "failed): its loop stalled mid-run, and the level's TTFT holds the stall")
    return out


def _trace_loss_failures(used: pd.DataFrame) -> list[str]:
    """A run whose trace does not cover its window, lost records or was never made (`perflib.derive`):
    the level's trace figures rest on fewer or partial traces."""
    if "trace_loss" not in used.columns:
        return []
    return [f"trace_loss: r{repeat}: {text.strip().replace('; ', ', ')}"  # '; ' separates the checks
            for repeat, text in zip(used["repeat"], used["trace_loss"], strict=False)
            if isinstance(text, str) and text.strip()]


def _trace_step_failures(used: pd.DataFrame, traced: pd.DataFrame) -> list[str]:
    """Steps the trace found in its decode window against the steps the client's steady step gives
    that window: a trace that counted layers (or merged steps) is off by the layer count."""
    if traced is None or not len(traced) or "steady_step_ms" not in used.columns:
        return []
    steady = {int(r): s for r, s in zip(used["repeat"], _num(used, "steady_step_ms"), strict=False) if pd.notna(s)}
    out = []
    for repeat, steps, window in zip(traced["repeat"], _num(traced, "steps"), _num(traced, "window_ms"), strict=False):
        step_ms = steady.get(int(repeat))
        if step_ms and pd.notna(steps) and pd.notna(window) and window > 0:
            expected = window / step_ms
            out.append(_ratio_check("trace_steps", steps / expected, f"r{repeat}: the trace counts {steps:.0f} steps "
                                    f"in its {window:.0f} ms decode window, the client's steady step "
                                    f"{step_ms:.2f} ms gives {expected:.0f}") or "")
    return out


def level_checks(runs: pd.DataFrame, trace_runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per level: complete runs, runs used, runs left out and why, failed checks, suspect."""
    cols = [*LEVEL_KEYS, "complete", "used", "left_out", "left_out_why", "checks", "suspect"]
    if runs is None or not len(runs):
        return pd.DataFrame(columns=cols)
    runs = runs.assign(left_out=runs["left_out"] if "left_out" in runs.columns else left_out(runs))
    complete = runs[runs["status"].astype(str) == "complete"] if "status" in runs.columns else runs
    rows = []
    for key, at in complete.groupby(LEVEL_KEYS, sort=True):
        level = dict(zip(LEVEL_KEYS, key, strict=True))
        used = usable(at)
        out_why = [w for w in text(at["left_out"]) if w]
        traced = _select_level(trace_runs, level)
        fails = _level_failures(used, traced, int(level["batch"]))
        rows.append({**level, "complete": len(at), "used": len(used), "left_out": len(out_why),
                     "left_out_why": out_why[0] if out_why else "", "checks": "; ".join(fails),
                     "suspect": bool(fails)})
    return pd.DataFrame(rows, columns=cols)


def _select_level(frame: pd.DataFrame | None, level: dict[str, Any]) -> pd.DataFrame | None:
    if frame is None or not len(frame):
        return None
    mask = pd.Series(True, index=frame.index)
    for k, v in level.items():
        mask &= frame[k].astype(str) == str(v)
    return frame[mask]


def suspect_reasons(checks: pd.DataFrame, arms: Sequence[str | None], backend: str | None,
                    batches: Sequence[int | None], context: int | None) -> list[str]:
    """The failed checks and left-out runs of the levels a verdict rests on, one line per level."""
    if checks is None or not len(checks):
        return []
    mask = pd.Series(True, index=checks.index)
    if backend is not None:
        mask &= checks["backend"].astype(str) == str(backend)
    if context is not None:
        mask &= checks["context"].astype(str) == str(context)
    wanted_arms = {str(a) for a in arms if a is not None}
    if wanted_arms:
        mask &= checks["arm"].astype(str).isin(wanted_arms)
    wanted_batches = {str(b) for b in batches if b is not None}
    if wanted_batches:
        mask &= checks["batch"].astype(str).isin(wanted_batches)
    out = []
    for row in checks[mask].itertuples(index=False):
        where = f"{row.arm} b{row.batch} c{row.context}"
        if row.suspect:
            out.append(f"{where}: {row.checks}")
        if row.left_out:
            out.append(f"{where}: {row.used} of {row.complete} runs used, {row.left_out} left out ({row.left_out_why})")
    return out
