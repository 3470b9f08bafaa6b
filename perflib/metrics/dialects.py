"""The registry of `/metrics` dialects: one `Dialect` entry per server, the only place that knows which
names a server writes, how its text is told from the others', how its figures are derived and how the
page words its occupancy.

A new server is one entry: its name table (`perflib.metrics.names`, SERVERS.md §1-§4), its derivation
(`perflib.metrics.figures`, one function, SERVERS.md §5), the sample-name prefixes that tell its text,
the gauge of requests it is serving, and the caption of its occupancy formula. `tests/metrics/
test_dialects.py` runs every entry through detection, the name table and its derivation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from perflib.errors import PerflibError
from perflib.metrics import figures as fig
from perflib.metrics import names
from perflib.metrics.exposition import Sample, as_samples
from perflib.metrics.names import MetricName


@dataclass(frozen=True)
class Dialect:
    """One server's `/metrics`: its names, how to tell it, how its figures are derived and captioned."""

    name: str
    """The dialect id (`--dialect`, a campaign's `dialect:`, a preset's `dialect`)."""
    server: str
    """The server in words."""
    names: tuple[MetricName, ...]
    """Canonical metric -> the server's names, new before old."""
    derive: Callable[[fig.Counters], fig.Derived]
    """Its SERVERS.md §5 figures from the canonical deltas."""
    marks: tuple[str, ...]
    """Sample-name prefixes only this server writes (mlxcel also writes llama.cpp's `llamacpp:`)."""
    running: str
    """Canonical gauge of the requests it is serving: above 0 after a level, the scrape came too early."""
    occupancy: str
    """How the page says its occupancy is computed (the formula its `derive` uses)."""
    yields_to: tuple[str, ...] = ()
    """Dialects whose marks win where both are present (llama.cpp yields to mlxcel, which copies it)."""


DIALECTS: dict[str, Dialect] = {d.name: d for d in (
    Dialect("mlxcel", "mlxcel-server (lablup/mlxcel)", names.MLXCEL_NAMES, fig.derive_mlxcel, ("mlxcel_",),
            "requests_processing", "occupancy (mlxcel) is Δdecode_tokens / Δdecode_steps"),
    Dialect("llamacpp", "llama.cpp llama-server", names.LLAMACPP_NAMES, fig.derive_llamacpp, ("llamacpp:",),
            "requests_processing",
            "occupancy (llama.cpp, no decode-step counter) is the window average of n_busy_slots_per_decode "
            "over Δn_decode_total calls, prompt batches and slots still in prefill included",
            yields_to=("mlxcel",)),
    Dialect("vllm", "vLLM (V1 engine)", names.VLLM_NAMES, fig.derive_vllm, ("vllm:",), "num_requests_running",
            "occupancy (vLLM) is Δgeneration_tokens_total / Δiteration_tokens_total_count per engine step, "
            "prefill steps included"),
    Dialect("sglang", "SGLang", names.SGLANG_NAMES, fig.derive_sglang, ("sglang:",), "num_running_reqs",
            "occupancy (SGLang) is the mean of num_running_reqs sampled during the level"),
)}
"""Every server perflib reads, in the order help texts list them."""

NAME_TABLES: dict[str, tuple[MetricName, ...]] = {d.name: d.names for d in DIALECTS.values()}
"""Dialect -> its name table (a view of `DIALECTS`)."""


def detect_dialect(text_or_samples: str | Sequence[Sample]) -> str | None:
    """The dialect whose marks the text's sample names carry (one that another present dialect's marks
    override yields to it: mlxcel over llamacpp), or None if none is present."""
    samples = as_samples(text_or_samples, "<text>")
    seen = {s.name for s in samples}
    present = [d for d in DIALECTS.values() if any(n.startswith(d.marks) for n in seen)]
    found = [d for d in present if not any(other.name in d.yields_to for other in present)]
    return found[0].name if found else None


def resolve_dialect(dialect: str, *snapshots: Sequence[Sample]) -> str:
    """`dialect` checked against the registry, or (`auto`) the first snapshot's detected dialect."""
    if dialect != "auto":
        if dialect not in DIALECTS:
            raise PerflibError(f"unknown metrics dialect {dialect!r}: expected auto or one of {', '.join(DIALECTS)}")
        return dialect
    for samples in snapshots:
        found = detect_dialect(samples)
        if found:
            return found
    every = [m for d in DIALECTS.values() for m in d.marks]
    marks = ", ".join(every[:-1]) + " or " + every[-1]
    raise PerflibError(f"cannot tell the server from its /metrics text: no {marks} sample found; "
                       "pass dialect= (or --dialect) explicitly")


def canonical_values(text_or_samples: str | Sequence[Sample], dialect: str = "auto") -> dict[str, float]:
    """Every canonical metric present in one snapshot -> its value (histograms as `_sum`/`_count`)."""
    samples = as_samples(text_or_samples, "<text>")
    dialect = resolve_dialect(dialect, samples)
    out: dict[str, float] = {}
    for spec in DIALECTS[dialect].names:
        server_name = names.present_name(spec, samples)
        if server_name is not None:
            out.update(names.values_for(spec, server_name, samples))
    return out


def gauge_values(text: str | Sequence[Sample], dialect: str = "auto") -> dict[str, float]:
    """Gauges worth sampling during a level (SERVERS.md §0: sample every 0.3-1 s, report mean/max).

    llama.cpp/mlxcel: `requests_processing`, `requests_deferred` (mlxcel also batch size, slots, queue,
    paged KV blocks); vLLM: `num_requests_running`, `num_requests_waiting`, `kv_cache_usage`; SGLang:
    `num_running_reqs`, `num_queue_reqs`, `num_used_tokens`, `kv_cache_usage`, `gen_throughput`,
    `cache_hit_rate`. Not returned: llama.cpp's `prompt_tokens_seconds`/`predicted_tokens_seconds`,
    which every scrape resets (they mean "since the previous scrape by anyone", so sampling would both
    read and disturb them), and `n_busy_slots_per_decode`, a lifetime average. KV usage on llama.cpp
    is absent on current builds (removed upstream): the key is then missing, not 0.
    """
    samples = as_samples(text, "<text>")
    dialect = resolve_dialect(dialect, samples)
    out: dict[str, float] = {}
    for spec in DIALECTS[dialect].names:
        if spec.kind != "gauge" or not spec.sampled:
            continue
        server_name = names.present_name(spec, samples)
        if server_name is not None:
            out.update(names.values_for(spec, server_name, samples))
    return out


def occupancy_caption(dialects: Sequence[str]) -> str:
    """The occupancy formulas of the given dialects (SERVERS.md §5), one clause each; `auto` or none
    known adds the general pointer."""
    texts = [DIALECTS[d].occupancy for d in dialects if d in DIALECTS]
    if "auto" in dialects or not texts:
        texts.append("occupancy is the dialect's own formula (SERVERS.md §5; `perflib metrics diff --help`)")
    return "; ".join(texts) + "."
