"""Client-side arithmetic of a run: the steady step, the decode-window split, and the run's row.

Everything here is computed from a run folder's files alone (docs/SCHEMA.md §2 and §4), with no
server: `steady_step` and `decode_window_decomposition` over the request records,
`summarize_run(run_dir)` for one `runs.csv` row (client figures, counter figures from
`perflib.metrics.diff` of the two scrapes, and the two above), and `level_rows` for the medians
over repeats of each (batch, context).

Definitions (docs/SCHEMA.md §4): the steady step is the median ITL while all N requests decode at
once; the own-step share is (n − 1) × steady step / decode window; the prefill share is the part of
the window that the union of the *other* requests' [start, first token] covers; the rest is "other".

Where the client sees no window with every request decoding (`client_window`: long prefills staggered
so that the first requests finish before the last starts decoding, or a stream that arrives in one
chunk), the steady step and decode tok/s are n/a with that reason, the level's decode is measured
from the server side (its counters; a trace's own steps over the run's decode span, or over the
requests' span where the stream was coalesced), and the row
suggests the `decode_tokens` that would overlap the requests.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perflib import metrics, rundir, safeinput
from perflib.errors import InputError, PerflibError
from perflib.intervals import covered_ns, union_intervals

MIN_STEADY_SAMPLES = 8
"""Fewest ITL samples inside the all-decoding span for a client steady step."""

BURST_ITL_MS = 0.1
"""An ITL below this is two chunks read back to back in one burst, not a decode step."""

MAX_BURST_SHARE = 0.25
"""Above this share of burst ITLs the client did not see the steps (starved reader or writer)."""

COALESCED_TOKENS_PER_CHUNK = 4.0
"""Above this many completion tokens per token-carrying chunk (the median request's) the stream was
coalesced: its chunks do not time the decode steps (a server or proxy that buffers, a starved client)."""

ALL_DECODING, DECODE_SPAN, REQUEST_SPAN = "all requests decoding", "decode span", "request span"
"""The windows a level's decode is read over: every request decoding (SERVERS.md §5.2); the run's decode
span, first request's first token to last request's last token; the requests' span, first request sent
to last token (a stream whose every token came at one instant)."""


@dataclass(frozen=True)
class ClientWindow:
    """The window a level's decode is read over, from its request records (CLOCK_MONOTONIC ns): `kind`
    (`ALL_DECODING`, `DECODE_SPAN`, `REQUEST_SPAN`), why the client's all-decoding window was not used
    or does not time the steps ('' where it does), the stagger (the last first token after the first
    request's last, ns) and the coalesced stream ('64 tokens in 1 chunk'), where seen."""

    kind: str
    start_ns: int
    end_ns: int
    why: str = ""
    stagger_ns: int | None = None
    coalesced: str = ""

    @property
    def client_steps(self) -> bool:
        """Whether the client's chunks time the decode steps in this window."""
        return self.kind == ALL_DECODING and not self.coalesced


def _duration(ns: int) -> str:
    return f"{ns / 1e9:.1f} s" if ns >= 1e9 else f"{ns / 1e6:.0f} ms"


def _instants(chunk_ns: Sequence[int]) -> int:
    """How many instants a stream's chunks reached the client at: chunks read within `BURST_ITL_MS` of the
    one before are one arrival (a buffered stream read in one burst gives many chunks, one instant)."""
    times = sorted(int(t) for t in chunk_ns)
    if not times:
        return 0
    gap = BURST_ITL_MS * 1e6
    return 1 + sum(1 for a, b in zip(times, times[1:], strict=False) if b - a >= gap)


def _coalesced(records: Sequence[Mapping[str, Any]]) -> str:
    """'64 tokens in 1 chunk' where the median request's stream carried more than
    `COALESCED_TOKENS_PER_CHUNK` tokens per arrival (`_instants`: one token a chunk, but every chunk read
    at one instant, is as coalesced as one chunk of every token), else ''."""
    seen = []
    for r in records:
        chunks_ns = r.get("chunk_ns") or []
        tokens = r.get("completion_tokens") or len(chunks_ns)
        chunks = max(1, _instants(chunks_ns))
        if tokens > 1:
            seen.append((tokens / chunks, tokens, chunks))
    if not seen:
        return ""
    seen.sort()
    ratio, tokens, chunks = seen[len(seen) // 2]
    if ratio <= COALESCED_TOKENS_PER_CHUNK:
        return ""
    of = f" (the median of {len(seen)} requests)" if len(seen) > 1 else ""
    return f"{tokens} tokens in {chunks} chunk{'s' if chunks != 1 else ''}{of}"


def client_window(records: Sequence[Mapping[str, Any]]) -> ClientWindow | None:
    """The window of a level's successful requests (those with a first and a last token; None where none
    has): the requests' span where the stream was coalesced, else every request decoding where there is
    such a window, else the run's decode span (requests staggered), else the requests' span; with why, in
    the words the page prints."""
    ok = [r for r in records if r.get("first_token_ns") is not None and r.get("last_token_ns") is not None]
    if not ok:
        return None
    lo, hi = max(int(r["first_token_ns"]) for r in ok), min(int(r["last_token_ns"]) for r in ok)
    first, last = min(int(r["first_token_ns"]) for r in ok), max(int(r["last_token_ns"]) for r in ok)
    coalesced = _coalesced(ok)
    stagger = None
    if coalesced:
        # A coalesced stream's token times are when the client read them, after the server made them: a
        # window between two reads can start after the decode began (a loaded llama-server: one request's
        # 24 tokens read at once, 95 ms of decode by its own timings before that read). Only the requests'
        # span surely holds the whole decode.
        at_once = ("every token came at one instant" if last == first else
                   "each request's tokens came at one instant"
                   if all(int(r["last_token_ns"]) == int(r["first_token_ns"]) for r in ok) else
                   "the token times are when the client read them")
        why = f"stream coalesced: {coalesced}; {at_once}"
    else:
        if hi > lo:
            return ClientWindow(ALL_DECODING, lo, hi)
        stagger = lo - hi if len(ok) > 1 else None
        why = (f"requests staggered: the last first token came {_duration(stagger)} after the first request finished"
               if stagger is not None else "")
        if last > first:
            return ClientWindow(DECODE_SPAN, first, last, why, stagger)
        why = f"{why}; every token came at one instant".removeprefix("; ")
    sent = min((int(r["start_ns"]) for r in ok if r.get("start_ns") is not None), default=first)
    return ClientWindow(REQUEST_SPAN, sent, max(last, sent + 1), f"{why}, so the decode is read from the first "
                        "request sent to the last token", stagger, coalesced)


def overlap_decode_tokens(window: ClientWindow | None, step_ms: float | None, decode_tokens: Any) -> int | None:
    """The `decode_tokens` that would give a window with every request decoding, for requests staggered by
    `window.stagger_ns`: the first request must decode through the stagger at `step_ms` a token (the step
    while the others prefill, e.g. the counter step), then `MIN_STEADY_SAMPLES` steps with all decoding.
    None where the requests were not staggered or a figure is missing."""
    if window is None or window.stagger_ns is None or not step_ms or step_ms <= 0:
        return None
    try:
        asked = int(decode_tokens)
    except (TypeError, ValueError):
        return None
    return asked + math.ceil(window.stagger_ns / 1e6 / step_ms) + MIN_STEADY_SAMPLES


MIN_DECODE_ONLY_STEPS = MIN_STEADY_SAMPLES
"""Fewest decode steps the decode-only part of a decode span must hold for a trace to be attributed over
it instead of over the span (`decode_only`): the bar a client steady step needs, so that a per-step figure
stands on as many steps as the step itself does."""


@dataclass(frozen=True)
class DecodeOnly:
    """The longest part of a window in which no request of the level is in prefill (none between its
    start and its first token), in CLOCK_MONOTONIC ns; `steps` the decode steps in it as the client counts
    them (the most token chunks one request received inside it: the request decoding through all of it;
    0 where the stream was coalesced, its chunks timing no step), `prefill_share` the share of the whole
    window that some request's prefill covers, `decoding` the mean number of requests decoding over the
    part, `parts` how many separate decode-only parts the window has."""

    start_ns: int
    end_ns: int
    steps: int
    prefill_share: float
    decoding: float
    parts: int
    window_ns: int

    @property
    def usable(self) -> bool:
        """Whether it holds at least `MIN_DECODE_ONLY_STEPS` steps: a trace is then attributed over it."""
        return self.end_ns > self.start_ns and self.steps >= MIN_DECODE_ONLY_STEPS

    def describe(self) -> str:
        """'the decode-only part (no request in prefill): 356 ms, 4.4% of the window, 63 steps, 4.6 requests
        decoding on average'."""
        length = self.end_ns - self.start_ns
        share = f", {100 * length / self.window_ns:.1f}% of the span" if self.window_ns > 0 else ""
        of = f" (the longest of {self.parts})" if self.parts > 1 else ""
        return (f"the decode-only part{of} (no request in prefill): {_duration(length)}{share}, {self.steps} steps, "
                f"{self.decoding:.1f} requests decoding on average")


def _prefill_spans(records: Sequence[Mapping[str, Any]], hi: int, coalesced: bool = False) -> list[tuple[int, int]]:
    """Each request's prefill, [start, first token] (a request with no first token: to its end, else to
    `hi`): while it lasts, the server's steps carry its prompt. In a coalesced stream the first token's
    time is when the client read it: the prefill is then [start, start + the server's `timings.prompt_ms`]
    where the server reports it (llama.cpp), its length the server's own."""
    spans = []
    for r in records:
        if r.get("start_ns") is None:
            continue
        end = r.get("first_token_ns") if r.get("first_token_ns") is not None else r.get("end_ns")
        end = int(end) if end is not None else hi
        timings = r.get("timings")
        prompt_ms = timings.get("prompt_ms") if isinstance(timings, dict) else None
        if coalesced and isinstance(prompt_ms, int | float) and prompt_ms >= 0:
            end = min(end, int(r["start_ns"]) + round(prompt_ms * 1e6))
        spans.append((int(r["start_ns"]), end))
    return spans


def decode_only(records: Sequence[Mapping[str, Any]], start_ns: int, end_ns: int,
                coalesced: bool = False) -> DecodeOnly | None:
    """Where in `[start_ns, end_ns)` no request is in prefill (`DecodeOnly`), or None for an empty window or
    records that do not say when their requests were sent.
    A level's requests are sent together, so the prefill spans form one block and the decode-only part of a
    decode span is one interval: the last first token to the last request's last token; where there are
    several, the longest is taken."""
    spans = _prefill_spans(records, end_ns, coalesced)
    if end_ns <= start_ns or not spans:  # no record says when its request was sent: its prefill is not known
        return None
    gs, ge, _ = union_intervals(np.array([a for a, _ in spans], dtype=np.int64),
                                np.array([b for _, b in spans], dtype=np.int64))
    window = end_ns - start_ns
    covered = covered_ns(start_ns, end_ns, gs, ge)
    inside = (ge > start_ns) & (gs < end_ns)
    edges = np.concatenate(([start_ns], np.minimum(ge[inside], end_ns)))  # each free part starts at a block's end
    stops = np.concatenate((np.maximum(gs[inside], start_ns), [end_ns]))
    free = [(int(a), int(b)) for a, b in zip(edges, stops, strict=True) if b > a]
    if not free:
        return DecodeOnly(start_ns, start_ns, 0, covered / window, 0.0, 0, window)
    lo, hi = max(free, key=lambda p: (p[1] - p[0], -p[0]))
    steps = 0 if coalesced else max((sum(1 for t in (r.get("chunk_ns") or []) if lo < int(t) <= hi)
                                     for r in records), default=0)
    decoding = sum(max(0, min(hi, int(r["last_token_ns"])) - max(lo, int(r["first_token_ns"]))) for r in records
                   if r.get("first_token_ns") is not None and r.get("last_token_ns") is not None) / (hi - lo)
    return DecodeOnly(lo, hi, steps, covered / window, decoding, len(free), window)


# --------------------------------------------------------------------------------------------
# steady step and decode-window decomposition


@dataclass(frozen=True)
class SteadyStep:
    """Median ITL while all N requests decode at once; `step_ms` None with `reason` otherwise."""

    step_ms: float | None
    samples: int
    span_start_ns: int | None
    span_end_ns: int | None
    reason: str | None = None
    burst_share: float | None = None


def steady_step(records: Sequence[Mapping[str, Any]], min_samples: int = MIN_STEADY_SAMPLES) -> SteadyStep:
    """The client-side steady decode step of a level.

    Span = [last request's first token, first request's last token]: every request of the level
    is decoding. Samples = ITLs whose both chunk ends lie inside the span (from `chunk_ns`),
    pooled over requests; the median of at least `min_samples` of them, else None with why. Where
    there is no such span, or the stream was coalesced (`client_window`), None with its why.

    When more than `MAX_BURST_SHARE` of the samples are under `BURST_ITL_MS`, the chunks reached
    the client in bursts (the client, or the server's HTTP writer, was starved of CPU while the
    steps ran), so their gaps say nothing about the step: None with that reason, never a
    near-zero "step".
    """
    if not records:
        return SteadyStep(None, 0, None, None, "no requests")
    for rec in records:
        if rec.get("first_token_ns") is None or rec.get("last_token_ns") is None:
            return SteadyStep(None, 0, None, None,
                              f"request {rec.get('request_id')} produced no token, so all "
                              f"{len(records)} never decoded together")
    window = client_window(records)
    assert window is not None  # every record has its first and last token
    if not window.client_steps:  # staggered or coalesced: the client's chunks do not time the steps
        return SteadyStep(None, 0, window.start_ns, window.end_ns, window.why)
    span_start, span_end = window.start_ns, window.end_ns
    samples: list[int] = []
    for rec in records:
        ts = rec.get("chunk_ns") or []
        for a, b in zip(ts, ts[1:], strict=False):
            if a >= span_start and b <= span_end:
                samples.append(b - a)
    if len(samples) < min_samples:
        return SteadyStep(None, len(samples), span_start, span_end,
                          f"only {len(samples)} ITL samples while all requests decode (need {min_samples})")
    burst = sum(1 for x in samples if x < BURST_ITL_MS * 1e6) / len(samples)
    if burst > MAX_BURST_SHARE:
        return SteadyStep(None, len(samples), span_start, span_end,
                          f"chunks arrived in bursts: {100 * burst:.0f}% of {len(samples)} ITL samples are under "
                          f"{BURST_ITL_MS * 1000:.0f} us (client or server HTTP thread starved of CPU)", burst)
    return SteadyStep(statistics.median(samples) / 1e6, len(samples), span_start, span_end, None, burst)


@dataclass(frozen=True)
class Decomposition:
    """Each request's decode window split into own steps, others' prefill, their overlap and the rest.

    Shares are medians over the requests (each request's part / its window); `per_request`
    holds `request_id, window_ms, own_ms, prefill_ms, overlap_ms, other_ms`. Where the own steps
    and the others' prefill together exceed the window (llama.cpp batches prefill rows with decode
    rows, so one step is both), the excess is `overlap`, counted in both: own + prefill − overlap +
    other = 100%, and no share is negative while the own steps fit the window.
    """

    own_step_share: float | None
    prefill_share: float | None
    other_share: float | None
    window_ms: float | None
    per_request: list[dict[str, Any]]
    reason: str | None = None
    overlap_share: float | None = None


def decode_window_decomposition(records: Sequence[Mapping[str, Any]], step_ms: float | None) -> Decomposition:
    """docs/SCHEMA.md §4: own = (n − 1) × steady step; prefill = the window's overlap with the
    union of the OTHER requests' [start, first token]; overlap = the part of own + prefill beyond
    the window (at most the prefill: steps that were both); other = window − own − prefill + overlap.
    Other is negative only where the own steps alone exceed the window, which is reported, not clamped.

    Requests without a decode window (no tokens, n ≤ 1) are skipped. The prefill intervals of the
    others are taken from every request that reached its first token.
    """
    windows = [r for r in records
               if r.get("first_token_ns") is not None and r.get("last_token_ns") is not None
               and (r.get("completion_tokens") or 0) > 1 and r["last_token_ns"] > r["first_token_ns"]]
    prefill_spans = {id(r): (int(r["start_ns"]), int(r["first_token_ns"]))
                     for r in records if r.get("first_token_ns") is not None}
    per_request: list[dict[str, Any]] = []
    if not windows:
        return Decomposition(None, None, None, None, [], "no request has a decode window")
    for rec in windows:
        lo, hi = int(rec["first_token_ns"]), int(rec["last_token_ns"])
        spans = [span for key, span in prefill_spans.items() if key != id(rec)]
        gs, ge, _ = union_intervals(np.array([a for a, _ in spans], dtype=np.int64),
                                    np.array([b for _, b in spans], dtype=np.int64))
        window_ns = hi - lo
        prefill_ns = covered_ns(lo, hi, gs, ge)
        own_ns = (int(rec["completion_tokens"]) - 1) * step_ms * 1e6 if step_ms is not None else None
        overlap_ns = min(prefill_ns, max(0.0, own_ns + prefill_ns - window_ns)) if own_ns is not None else None
        per_request.append({
            "request_id": rec.get("request_id"),
            "window_ms": window_ns / 1e6,
            "own_ms": own_ns / 1e6 if own_ns is not None else None,
            "prefill_ms": prefill_ns / 1e6,
            "overlap_ms": overlap_ns / 1e6 if overlap_ns is not None else None,
            "other_ms": (window_ns - own_ns - prefill_ns + overlap_ns) / 1e6 if own_ns is not None else None,
        })
    window_ms = statistics.median(p["window_ms"] for p in per_request)
    prefill_share = statistics.median(p["prefill_ms"] / p["window_ms"] for p in per_request)
    if step_ms is None:
        return Decomposition(None, prefill_share, None, window_ms, per_request, "no steady step")
    own_share = statistics.median(p["own_ms"] / p["window_ms"] for p in per_request)
    other_share = statistics.median(p["other_ms"] / p["window_ms"] for p in per_request)
    overlap_share = statistics.median(p["overlap_ms"] / p["window_ms"] for p in per_request)
    return Decomposition(own_share, prefill_share, other_share, window_ms, per_request, None, overlap_share)


# --------------------------------------------------------------------------------------------
# one run folder's row


RUNS_COLUMNS = (
    "campaign", "arm", "backend", "batch", "context", "repeat",
    "status", "ok", "failed", "ttft_ms", "ttft_p95_ms", "decode_tok_s", "aggregate_tok_s",
    "decode_step_ms", "raw_step_ms", "steady_step_ms", "occupancy", "prefill_chunks", "mixed_steps",
    "decode_steps", "decode_tokens", "own_step_share", "prefill_share", "other_share", "window_ms",
)
"""`runs.csv` columns of docs/SCHEMA.md §4, in order."""

EXTRA_COLUMNS = (
    "decode_tokens_requested", "timings_step_ms", "steady_step_samples", "steady_step_burst_share",
    "steady_step_reason", "overlap_share", "client_decode_tokens", "contended", "contention_why",
    "metrics_available", "metrics_absent", "metrics_problem", "errors", "decode_tok_s_reason", "decode_window",
    "decode_window_why", "suggested_decode_tokens", "unanswered_s", "unanswered_scrapes",
)
"""Columns `summarize_run` adds after the SCHEMA ones (an extension, not a change)."""


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

    Client figures over the successful requests (`_client_figures`), the steady step and the
    decode-window shares over the same requests, and counter figures from `perflib.metrics.diff` of
    `metrics_before.txt` and `metrics_after.txt` (None when either is missing). Extra columns:
    `EXTRA_COLUMNS`. Only successes enter the statistics (LOADGEN §1); a failed request leaves the
    level incomplete.

    Every file is read through its check (`perflib.rundir.read_manifest`, `read_requests`,
    `read_gauges`, `perflib.metrics.parse_exposition`): a bad value is an `InputError` naming the file,
    the line or field and the expectation, so a caller can report the folder and go on with the rest.
    """
    run_dir = Path(run_dir)
    manifest = rundir.read_manifest(run_dir)
    records = rundir.read_requests(run_dir / rundir.REQUESTS)
    ok = [r for r in records if r.get("ok")]
    row: dict[str, Any] = {name: None for name in (*RUNS_COLUMNS, *EXTRA_COLUMNS)}
    row.update({key: manifest.get(key) for key in ("campaign", "arm", "backend", "batch", "context", "repeat",
                                                      "status")})
    row["decode_tokens_requested"] = manifest.get("decode_tokens")
    row["errors"] = list(manifest.get("errors") or [])
    row["ok"] = len(ok)
    row["failed"] = len(records) - len(ok) + max(0, int(manifest.get("batch") or 0) - len(records))
    row.update(_client_figures(ok))
    steady = steady_step(ok)
    row.update(steady_step_ms=steady.step_ms, steady_step_samples=steady.samples,
               steady_step_burst_share=steady.burst_share, steady_step_reason=steady.reason)
    window = client_window(ok)
    if window is not None and window.coalesced:  # the client's first tokens are when it read them: no window
        parts = Decomposition(None, None, None, None, [], window.why)
    else:
        parts = decode_window_decomposition(ok, steady.step_ms)
    row.update(own_step_share=parts.own_step_share, prefill_share=parts.prefill_share,
               other_share=parts.other_share, overlap_share=parts.overlap_share, window_ms=parts.window_ms)
    samples = rundir.read_gauges(run_dir / rundir.GAUGES)
    row.update(_counter_figures(run_dir, manifest, records, samples, row["errors"]))
    row.update(unanswered(samples))
    row.update(_window_figures(ok, row))
    seen = manifest.get("contention") if isinstance(manifest.get("contention"), dict) else {}
    row.update(contended=bool(seen.get("contended")), contention_why=seen.get("why") or None)
    return row


def unanswered(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How long the server left `/metrics` unanswered during the run, from the gauge sampler's scrapes
    (`gauges.jsonl`): `unanswered_s`, the longest span from a failed scrape's start to the start of the next
    scrape that was answered (to the last failed one's start where none was: a lower bound), and
    `unanswered_scrapes`, the failed scrapes. A scrape times out after 10 s, so one failure is a server whose
    loop answered nothing for that long (llama-server answers `/metrics` between its steps). None without
    gauge samples."""
    if not samples:
        return {"unanswered_s": None, "unanswered_scrapes": None}
    longest, failed, since = 0.0, 0, None
    for sample in sorted((s for s in samples if s.get("t_ns") is not None), key=lambda s: int(s["t_ns"])):
        t = int(sample["t_ns"])
        if sample.get("gauges") is None:
            failed += 1
            since = t if since is None else since
            longest = max(longest, (t - since) / 1e9)
        elif since is not None:
            longest, since = max(longest, (t - since) / 1e9), None
    return {"unanswered_s": round(longest, 3), "unanswered_scrapes": failed}


def _window_figures(ok: Sequence[Mapping[str, Any]], row: Mapping[str, Any]) -> dict[str, Any]:
    """Which window the level's decode is read over and why (`client_window`); decode tok/s left n/a with
    the stream's reason where it was coalesced, or why it is n/a; and, for staggered requests, the
    `decode_tokens` that would overlap them (`overlap_decode_tokens`, at the counter step, else at the
    first request to finish's own mean inter-token time)."""
    window = client_window(ok)
    out: dict[str, Any] = {"decode_window": window.kind if window else None,
                           "decode_window_why": window.why if window else None, "suggested_decode_tokens": None,
                           "decode_tok_s_reason": None}
    if window is not None and window.coalesced:
        out["decode_tok_s"] = None  # a chunk of many tokens times nothing: (n - 1) / ~0 s is not a rate
        out["decode_tok_s_reason"] = f"{window.why}; the server's counters give the decode step"
    elif row.get("decode_tok_s") is None:
        out["decode_tok_s_reason"] = ("no successful request" if not ok else
                                      "no request produced two tokens at two instants")
    if window is not None and window.stagger_ns is not None:
        step = row.get("decode_step_ms")
        if not step:
            first = min(ok, key=lambda r: int(r["last_token_ns"]))
            n = int(first.get("completion_tokens") or len(first.get("chunk_ns") or []))
            step = (int(first["last_token_ns"]) - int(first["first_token_ns"])) / 1e6 / (n - 1) if n > 1 else None
        out["suggested_decode_tokens"] = overlap_decode_tokens(window, step, row.get("decode_tokens_requested"))
    return out


def _client_figures(ok: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """`ttft_ms` mean and `ttft_p95_ms` nearest-rank (mlxcel's harness), `decode_tok_s` mean of the
    per-request rates, `aggregate_tok_s` = Σ completion tokens / (last stream close − first start),
    and `timings_step_ms` = Σ `predicted_ms` / Σ (`predicted_n` − 1) over the requests' `timings`: the
    counter formula from the responses, which corrects `predicted_per_token_ms` for dividing n − 1
    intervals by n."""
    ttfts = [r["ttft_ms"] for r in ok if r.get("ttft_ms") is not None]
    rates = [r["decode_tok_s"] for r in ok if r.get("decode_tok_s") is not None]
    out: dict[str, Any] = {"ttft_ms": _mean(ttfts), "ttft_p95_ms": nearest_rank(ttfts, 95),
                           "decode_tok_s": _mean(rates), "aggregate_tok_s": None}
    ends = [r["end_ns"] for r in ok if r.get("end_ns") is not None]
    if ok and ends:
        span_ns = max(ends) - min(r["start_ns"] for r in ok)
        tokens = sum(r.get("completion_tokens") or 0 for r in ok)
        out["aggregate_tok_s"] = tokens * 1e9 / span_ns if span_ns > 0 else None
    predicted_ms = predicted_steps = 0.0
    for r in ok:
        t = r.get("timings") or {}
        n, ms = t.get("predicted_n"), t.get("predicted_ms")
        if isinstance(n, int | float) and isinstance(ms, int | float) and n > 1:
            predicted_ms += ms
            predicted_steps += n - 1
    out["timings_step_ms"] = predicted_ms / predicted_steps if predicted_steps else None
    # the decode tokens the client saw: the first token of each request came from its prefill
    out["client_decode_tokens"] = sum(max(0, int(r.get("completion_tokens") or 0) - 1) for r in ok) if ok else None
    return out


def _counter_figures(run_dir: Path, manifest: Mapping[str, Any], records: Sequence[Mapping[str, Any]],
                     samples: Sequence[Mapping[str, Any]], errors: list[str]) -> dict[str, Any]:
    """Counter figures of the two scrapes; counters of a server no dialect knows are unavailable, with
    why appended to `errors`, and a bad file is an `InputError` naming it."""
    before = run_dir / rundir.METRICS_BEFORE
    after = run_dir / rundir.METRICS_AFTER
    out: dict[str, Any] = {"metrics_available": False, "metrics_absent": None, "metrics_problem": None}
    if not (before.is_file() and after.is_file()):
        return out
    info = manifest.get("metrics") or {}
    dialect = info.get("dialect") or "auto"
    if dialect not in ("auto", *metrics.DIALECTS):
        raise InputError(run_dir / rundir.MANIFEST, "field metrics.dialect",
                         f"auto or one of {', '.join(metrics.DIALECTS)}", repr(dialect))
    texts = [metrics.parse_exposition(safeinput.read_text(path, "Prometheus exposition text") or "", str(path))
             for path in (before, after)]
    finished = sum(1 for r in records if r.get("completion_tokens") is not None)
    gauges = [s["gauges"] for s in samples if s.get("gauges")]  # the run's gauge samples, read once
    try:
        delta = metrics.diff(texts[0], texts[1], dialect=dialect, requests=finished,
                             process_start_before=info.get("process_start_before"),
                             process_start_after=info.get("process_start_after"), gauge_samples=gauges).to_dict()
    except PerflibError as exc:  # metrics of a server no dialect knows: the client figures still stand
        errors.append(f"{after}: counters unavailable: {exc}")
        return out
    out["metrics_available"] = True
    out["metrics_problem"] = delta.get("problem")  # reset, NaN, impossible: why the figures are n/a
    absent = list(delta.get("absent") or [])
    for key in ("decode_step_ms", "raw_step_ms", "occupancy", "prefill_chunks", "mixed_steps", "decode_steps",
                "decode_tokens"):
        out[key] = delta.get(key)
    # A counter the dialect has no name for (llama.cpp: prefill chunks, mixed steps) is absent too.
    absent += [key for key in ("prefill_chunks", "mixed_steps") if out[key] is None and key not in absent]
    out["metrics_absent"] = absent
    return out


LEVEL_FIGURES = (
    "ok", "failed", "ttft_ms", "decode_tok_s", "aggregate_tok_s", "decode_step_ms", "steady_step_ms", "occupancy",
    "prefill_chunks", "own_step_share", "raw_step_ms", "timings_step_ms", "prefill_share", "other_share",
    "window_ms", "ttft_p95_ms", "mixed_steps", "decode_steps", "decode_tokens",
)
"""Figures that `level_rows` folds over repeats (median, min and max)."""

def level_rows(summaries: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (batch, context): each figure's median over repeats with its min and max.

    Keys per figure `f`: `f` (median), `f_min`, `f_max` (None where no repeat has it), plus
    `repeats`, `complete` (repeats whose run is complete), `contended` (complete repeats whose level
    saw other processes' CPU above the threshold), `counters` (`ok`, `no /metrics`, or why they were
    not usable: `reset`, `NaN`, `impossible`) and `prefill_chunks_absent` (the server has no such counter).
    """
    groups: dict[tuple[int, int], list[Mapping[str, Any]]] = {}
    for s in summaries:
        groups.setdefault((s["batch"], s["context"]), []).append(s)
    rows = []
    for (batch, context), runs in sorted(groups.items()):
        row: dict[str, Any] = {"batch": batch, "context": context, "repeats": len(runs),
                               "complete": sum(1 for s in runs if s.get("status") == rundir.COMPLETE),
                               "contended": sum(1 for s in runs if s.get("status") == rundir.COMPLETE
                                                and s.get("contended"))}
        for key in LEVEL_FIGURES:
            values = [s[key] for s in runs if s.get(key) is not None]
            row[key] = statistics.median(values) if values else None
            row[f"{key}_min"] = min(values) if values else None
            row[f"{key}_max"] = max(values) if values else None
        problems = [str(s["metrics_problem"]).split(":")[0] for s in runs if s.get("metrics_problem")]
        usable = any(s.get("metrics_available") and not s.get("metrics_problem") for s in runs)
        row["counters"] = ("ok" if usable else problems[0] if problems else
                           "ok" if any(s.get("metrics_available") for s in runs) else "no /metrics")
        row["prefill_chunks_absent"] = any("prefill_chunks" in (s.get("metrics_absent") or []) for s in runs)
        rows.append(row)
    return rows


