"""One load level: N streamed requests sent at once, with `/metrics` scraped around them.

One level = N concurrent streaming requests at (batch N, context C prompt tokens, decode tokens D),
sent in one wave after an unrecorded warm-up, with `/metrics` scraped right before and right after
and gauges sampled in between. Every request yields one record (docs/SCHEMA.md §2), handed to the
sink the moment the request finishes, so a crash loses nothing already measured.

A level's repeats measured one after the other on one server share what is per level (`Repeats`):
the prompts of every repeat are sized before the first, one warm-up warms the server for all, and the
scrape after repeat r is the scrape before repeat r+1, as nothing reaches the server between them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from perflib import metrics
from perflib.clocks import monotonic_ns, now_clocks
from perflib.errors import PerflibError
from perflib.load import tls
from perflib.load.prompts import Prompt, ServerUnreachable, make_prompts
from perflib.load.request import RequestRecord
from perflib.load.spec import LevelSpec
from perflib.load.stream import stream_request

WARMUP_MAX_TOKENS = 4



class LevelSink(Protocol):
    """Where a level's outputs go as they are produced (the run folder, in `perflib.sweep`)."""

    def request(self, record: RequestRecord) -> None: ...
    def warmup(self, record: RequestRecord) -> None: ...
    def gauges(self, sample: dict[str, Any]) -> None: ...
    def metrics(self, which: str, text: str) -> None: ...


class MemorySink:
    """A `LevelSink` that keeps everything in lists (tests, notebooks)."""

    def __init__(self) -> None:
        self.records: list[RequestRecord] = []
        self.warmups: list[RequestRecord] = []
        self.gauge_samples: list[dict[str, Any]] = []
        self.metrics_text: dict[str, str] = {}

    def request(self, record: RequestRecord) -> None:
        self.records.append(record)

    def warmup(self, record: RequestRecord) -> None:
        self.warmups.append(record)

    def gauges(self, sample: dict[str, Any]) -> None:
        self.gauge_samples.append(sample)

    def metrics(self, which: str, text: str) -> None:
        self.metrics_text[which] = text


@dataclass
class LevelOutcome:
    """What one level produced besides the records already handed to the sink."""

    records: list[RequestRecord]
    prompt_tokens: dict[str, Any]
    clocks: dict[str, dict[str, int] | None]
    metrics: dict[str, Any]
    errors: list[str]
    warmup_ok: bool | None = None
    gauge_samples: int = 0
    unreachable: bool = False
    warmup_from: str | None = None
    """The run whose warm-up request warmed the server for this one (its own name where it sent it)."""
    metrics_before_from: str | None = None
    """The run whose scrape after is this one's scrape before (`Repeats`); None where it was scraped for it."""

    @property
    def complete(self) -> bool:
        return not self.errors


@dataclass
class Repeats:
    """What the repeats of one level share when they are measured one after the other on one server.

    The first repeat measured sizes the prompts of every repeat in `planned` (each distinct: the level's
    nonce and the repeat in its prefix), sends the one warm-up request, and scrapes `/metrics` before its
    wave. Each later repeat takes its sized prompts, finds the server warm (the repeat before it has just
    run), and takes the scrape after the repeat before it as its own scrape before: the same exposition,
    read when that repeat's last request had finished, with nothing sent to the server until this
    repeat's requests. Anything that reaches the server between two repeats ends that: a repeat measured
    again sizes new prompts and scrapes afresh; `interrupted()` (a profiler toggled over HTTP, a server
    started again) makes the next repeat warm up and scrape afresh."""

    planned: tuple[int, ...]
    """The repeats the caller will measure, in order."""
    nonce: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    prompts: dict[int, list[Prompt]] = field(default_factory=dict)
    """Sized ahead, by repeat: each is taken by its repeat's first attempt."""
    sized: bool = False
    warmed_by: str | None = None
    warmup_ok: bool | None = None
    after: tuple[str, metrics.Snapshot] | None = None
    """(run, its scrape after), while nothing has reached the server since."""
    base_url: str | None = None
    """The server they were measured on: another one (a restart elsewhere) is an interruption."""

    identity: dict[str, Any] | None = None
    """The server's identity as the first repeat read it (`perflib.sweep.run_level`)."""

    def on(self, base_url: str) -> None:
        """The server the next repeat is measured on: another than before is an interruption."""
        if self.base_url != base_url:
            self.interrupted()
            self.base_url = base_url

    def interrupted(self) -> None:
        """Something reached the server (or another server serves now): the next repeat warms up and scrapes."""
        self.warmed_by, self.warmup_ok, self.after, self.identity = None, None, None, None


def http_client(timeout: float) -> httpx.AsyncClient:
    """An httpx client that opens a new connection for every request (no keep-alive pool)."""
    return httpx.AsyncClient(
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=0),
        timeout=httpx.Timeout(timeout, connect=10.0),
        trust_env=False,  # a proxy from the environment must not sit between client and server
        verify=tls.context(),
    )


def _scrape_client() -> httpx.Client:
    """One sync client for a level's scrapes: building an httpx client loads a CA bundle (tens of
    ms under the GIL), which must not happen every gauge sample while streams are being timed."""
    return httpx.Client(timeout=10.0, trust_env=False, limits=httpx.Limits(max_keepalive_connections=0),
                        verify=tls.context())


async def _scrape(base_url: str, client: httpx.Client) -> Any:
    """`perflib.metrics.scrape` in a thread, so the event loop keeps reading streams meanwhile."""
    return await asyncio.to_thread(metrics.scrape, base_url, client=client)


async def _sample_gauges(base_url: str, client: httpx.Client, dialect: str, sink: LevelSink, interval: float,
                         stop: asyncio.Event, counter: list[int]) -> None:
    """Scrape gauges every `interval` s until `stop` is set; a failed scrape is recorded as such.

    Stopping waits for the scrape in flight, so the "after" scrape never overlaps a gauge scrape
    (one scraper per server).
    """
    while not stop.is_set():
        t_ns = monotonic_ns()
        sample: dict[str, Any] = {"t_ns": t_ns, "unix_ns": time.time_ns()}
        try:
            snap = await _scrape(base_url, client)
            sample["gauges"] = metrics.gauge_values(snap.text, dialect)
        except Exception as exc:  # a failed sample is data, not a crash
            sample["gauges"] = None
            sample["error"] = f"{type(exc).__name__}: {exc}"
        sink.gauges(sample)
        counter[0] += 1
        try:
            await asyncio.wait_for(stop.wait(), max(0.0, interval - (monotonic_ns() - t_ns) / 1e9))
        except TimeoutError:
            pass


def _unreachable_message(base_url: str, what: str, exc: BaseException) -> str:
    return (f"server unreachable at {base_url} ({what}): {type(exc).__name__}: {exc or 'connection refused'}; "
            "is it running at that address? (or let perflib start one with --start-server)")


async def run_level_async(spec: LevelSpec, sink: LevelSink, on_started: Callable[[], None] | None = None,
                          repeats: Repeats | None = None) -> LevelOutcome:
    """Measure one level: prompts, warm-up, `/metrics` before, N requests at once with gauges
    sampled, `/metrics` after the last request finished. Never raises for a fault of the server:
    every fault lands in `LevelOutcome.errors` (and the failed requests' records).

    `repeats`: what this level's repeats share (`Repeats`): this repeat's prompts sized ahead, the
    warm-up done once, the scrape before taken over from the repeat before it.

    `clocks.start` is read just before the N requests are sent, `clocks.end` right after the
    last one finished. `on_started` is called right after they are sent (tests use it).

    `spec.workers` > 1 sends the requests from that many worker processes (`perflib.load.workers`,
    round-robin), for servers that stream faster than one client process reads; everything
    else (prompts, warm-up, scrapes, gauges, clocks, the sink) stays in this process.

    `spec.request_timeout` bounds each request from its send to its last byte, `spec.idle_timeout` the
    time without a byte once its stream has begun (`perflib.load.stream.stream_request`): a stalled server
    fails the level's requests with the timeout named, and the level ends instead of waiting. (Where the
    folder, the server and the contention sampling come in: `perflib.sweep.run_level`.)
    """
    if spec.workers < 1:
        raise PerflibError(f"workers must be at least 1, not {spec.workers}")
    outcome = LevelOutcome(records=[], prompt_tokens={"target": spec.context, "measured": [], "method": None},
                           clocks={"start": None, "end": None},
                           metrics={"available": None, "dialect": spec.dialect, "error": None,
                                    "process_start_before": None, "process_start_after": None}, errors=[])
    shared = repeats or Repeats((spec.repeat,))
    shared.on(spec.base_url)
    with _scrape_client() as scrape_client:
        async with http_client(spec.request_timeout) as client:
            level = _Level(spec, sink, outcome, client, scrape_client, shared.nonce)
            prompts = await level.shared_prompts(shared)
            if prompts is None or not await level.shared_warm_up(shared):
                shared.interrupted()
                return outcome
            before = await level.shared_before(shared) if spec.scrape_metrics else None
            shared.after = None
            await level.wave(prompts, gauges=before is not None, on_started=on_started)
            if before is not None:
                after = await level.scrape("after")
                shared.after = (spec.name, after) if after is not None and outcome.complete else None
    return outcome


@dataclass
class _Level:
    """One level in progress: its spec, where its outputs go, and the clients it sends with."""

    spec: LevelSpec
    sink: LevelSink
    outcome: LevelOutcome
    client: httpx.AsyncClient
    scrape_client: httpx.Client
    nonce: str

    def _unreachable(self, message: str) -> None:
        self.outcome.errors.append(f"level {self.spec.name}: {message}")
        self.outcome.unreachable = True

    async def shared_prompts(self, shared: Repeats) -> list[Prompt] | None:
        """This repeat's prompts: sized ahead by the level's first repeat, else sized now (the first repeat
        sizes every planned repeat's; a repeat measured again, new ones: then the server was reached)."""
        s = self.spec
        prompts = shared.prompts.pop(s.repeat, None)
        if prompts is None:
            ahead = [r for r in shared.planned if r != s.repeat] if not shared.sized else []
            again = shared.sized
            sized: dict[int, list[Prompt]] = {}
            for repeat in [s.repeat, *ahead]:
                # a repeat measured again gets prompts of its own: the first attempt's may be cached
                tag = f"{self.nonce}{'-' + uuid.uuid4().hex[:4] if again else ''} r{repeat}"
                got = await self.prompts(tag)
                if got is None:
                    return None
                sized[repeat] = got
            shared.sized = True
            shared.after = None  # /tokenize reached the server since the last scrape
            prompts = sized.pop(s.repeat)
            shared.prompts.update(sized)
        self.outcome.prompt_tokens = {"target": s.context, "measured": [p.tokens for p in prompts],
                                      "method": prompts[0].method if prompts else None}
        return prompts

    async def prompts(self, tag: str) -> list[Prompt] | None:
        """Prompts distinct per request, repeat and run, sized with the server; None when unreachable."""
        s = self.spec
        try:
            return await make_prompts(self.client, s.base_url, endpoint=s.endpoint, count=s.batch,
                                      target=s.context, tag=tag)
        except ServerUnreachable as exc:
            self._unreachable(str(exc))
            return None
        except httpx.HTTPError as exc:
            self._unreachable(_unreachable_message(s.base_url, "sizing prompts", exc))
            return None

    async def shared_warm_up(self, shared: Repeats) -> bool:
        """The level's one warm-up: sent by the first repeat (or after an interruption), else found done."""
        if shared.warmed_by is None:
            if not await self.warm_up():
                return False
            shared.warmed_by, shared.warmup_ok = self.spec.name, self.outcome.warmup_ok
            shared.after = None
        self.outcome.warmup_from, self.outcome.warmup_ok = shared.warmed_by, shared.warmup_ok
        return True

    async def shared_before(self, shared: Repeats) -> metrics.Snapshot | None:
        """The scrape before the wave: the repeat before's scrape after where nothing reached the server
        since (written into this run's sink as its own), else scraped now."""
        if shared.after is None:
            return await self.scrape("before")
        name, snap = shared.after
        info = self.outcome.metrics
        info["available"], info["process_start_before"] = True, snap.process_start
        self.sink.metrics("before", snap.text)
        self.outcome.metrics_before_from = name
        return snap

    async def warm_up(self) -> bool:
        """One short request, recorded apart; False when it got no answer at all."""
        warm = await stream_request(self.client, self.spec.request(
            f"{self.spec.name}-warmup", f"[{self.nonce} warm-up] hello", WARMUP_MAX_TOKENS))
        self.sink.warmup(warm)
        self.outcome.warmup_ok = warm.ok
        if warm.status is None:
            self._unreachable(f"warm-up request failed: {warm.error}")
            return False
        return True

    async def scrape(self, which: str) -> Any:
        """`/metrics` before or after the wave, written to the sink; None (noted) when it failed."""
        snap = await _scrape_or_note(self.spec.base_url, self.scrape_client, which, self.outcome.metrics,
                                     self.outcome.errors, self.spec.name)
        if snap is not None:
            self.sink.metrics(which, snap.text)
        return snap

    async def wave(self, prompts: list[Prompt], gauges: bool, on_started: Callable[[], None] | None) -> None:
        """The N requests at once, each record written as soon as it finishes, gauges sampled meanwhile."""
        s, outcome = self.spec, self.outcome

        async def one(i: int) -> RequestRecord:
            prompt = prompts[i]
            rec = await stream_request(self.client, s.request(f"{s.name}-{i}", prompt.text, s.decode_tokens,
                                                              prompt.tokens, prompt.method))
            self.sink.request(rec)
            return rec

        gauge_count = [0]
        gauge_task = None
        stop = asyncio.Event()
        if gauges and s.gauge_interval > 0:
            gauge_task = asyncio.create_task(_sample_gauges(s.base_url, self.scrape_client, s.dialect, self.sink,
                                                            s.gauge_interval, stop, gauge_count))
        try:
            if s.workers > 1 and s.batch > 1:
                outcome.records = await self._wave_in_workers(prompts, on_started)
            else:
                outcome.clocks["start"] = now_clocks()
                tasks = [asyncio.create_task(one(i)) for i in range(s.batch)]
                if on_started is not None:
                    on_started()
                outcome.records = list(await asyncio.gather(*tasks))
        finally:
            outcome.clocks["end"] = now_clocks()
            if gauge_task is not None:
                stop.set()
                await gauge_task
        outcome.gauge_samples = gauge_count[0]
        if len(outcome.records) < s.batch:  # a worker died: its requests have no record
            return
        failed = [r for r in outcome.records if not r.ok]
        if failed:
            outcome.errors.append(f"level {s.name}: {len(failed)} of {s.batch} requests failed "
                                  f"(first: {failed[0].error})")


    async def _wave_in_workers(self, prompts: list[Prompt], on_started: Callable[[], None] | None
                               ) -> list[RequestRecord]:
        """The wave sent from `spec.workers` processes; `clocks.start` once all are ready to send.

        A worker that fails leaves the records already written and an error naming how many requests
        have none; the level is then incomplete."""
        # late: `python -m perflib.load.workers` imports this package first; had it imported workers,
        # runpy would warn that the module it runs was already imported
        from perflib.load import workers

        s, outcome = self.spec, self.outcome
        jobs = [[s.request(f"{s.name}-{i}", prompts[i].text, s.decode_tokens, prompts[i].tokens,
                           prompts[i].method) for i in share]
                for share in workers.split(s.batch, s.workers)]
        written: list[RequestRecord] = []

        def take(rec: RequestRecord) -> None:
            written.append(rec)
            self.sink.request(rec)

        def go() -> None:
            outcome.clocks["start"] = now_clocks()
            if on_started is not None:
                on_started()

        try:
            return await workers.run_wave(jobs, take, go)
        except workers.WorkerFailed as exc:
            outcome.errors.append(f"level {s.name}: {exc}; {s.batch - len(written)} of {s.batch} requests "
                                  "have no record")
            return written


async def _scrape_or_note(base_url: str, client: httpx.Client, which: str, info: dict[str, Any], errors: list[str],
                          level: str) -> Any:
    """Scrape `/metrics`; a 501/404 or a lost connection is noted in `info` and `errors`."""
    try:
        snap = await _scrape(base_url, client)
    except metrics.MetricsUnavailable as exc:
        if which == "after" and info.get("available"):  # it answered before the level: not a missing flag
            info["available"] = False
            info["error"] = f"/metrics stopped answering during the level: {exc}"
            errors.append(f"level {level}: counters unavailable: {base_url}/metrics answered at the first scrape, "
                          f"before the level, but not after it: {exc} (did the server restart or turn its metrics "
                          "off mid-run?)")
            return None
        info["available"] = False
        info["error"] = f"/metrics unavailable ({which} the level): {exc}"
        errors.append(f"level {level}: counters unavailable: {base_url}/metrics: {exc} "
                      "(start llama-server with --metrics)")
        return None
    except (httpx.HTTPError, OSError, PerflibError) as exc:
        info["available"] = info["available"] if which == "after" else False
        info["error"] = f"/metrics scrape {which} the level failed: {type(exc).__name__}: {exc}"
        errors.append(f"level {level}: {info['error']}")
        return None
    info["available"] = True
    info[f"process_start_{which}"] = getattr(snap, "process_start", None)
    return snap

