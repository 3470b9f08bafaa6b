"""Prometheus exposition text (format 0.0.4) parsed into samples, and one scrape's record."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from perflib.errors import InputError


@dataclass(frozen=True)
class Sample:
    """One exposition sample. `name` is as prometheus_client reports it: counters always end in `_total`."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    kind: str  # the family's `# TYPE`: counter, gauge, histogram, summary, unknown, ...

    @property
    def key(self) -> str:
        """`name{label="value",...}` with labels sorted, so labelled samples stay distinguishable."""
        if not self.labels:
            return self.name
        inner = ",".join(f'{k}="{v}"' for k, v in self.labels)
        return f"{self.name}{{{inner}}}"


def _bad_line(text: str) -> tuple[int, str] | None:
    """Line number and text of the first sample line prometheus_client rejects (only called on errors)."""
    from prometheus_client.parser import text_string_to_metric_families

    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            list(text_string_to_metric_families(stripped + "\n"))
        except Exception:  # any parser failure marks the line
            return number, stripped
    return None


def parse_exposition(text: str, source: str = "<text>") -> tuple[Sample, ...]:
    """Parse Prometheus exposition text (format 0.0.4) into samples.

    Uses `prometheus_client.parser.text_string_to_metric_families`, which drops `_total` from counter
    *family* names and adds it to every counter sample (a llama.cpp gauge typed `counter`, such as
    `llamacpp:n_busy_slots_per_decode` in some builds, comes back as `..._total`); the name tables
    below match with `(_total)?` for that reason. A line the parser rejects raises `InputError`
    naming `source` and the line.
    """
    from prometheus_client.parser import text_string_to_metric_families

    samples: list[Sample] = []
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = tuple(sorted((str(k), str(v)) for k, v in s.labels.items()))
                samples.append(Sample(s.name, labels, float(s.value), family.type))
    except Exception as exc:  # prometheus_client raises ValueError, TypeError, IndexError, ...
        bad = _bad_line(text)
        where = f"line {bad[0]}" if bad else None
        found = repr(bad[1][:120]) if bad else str(exc)
        raise InputError(source, where, "Prometheus exposition text (`name{labels} value`)", found) from exc
    return tuple(samples)


@dataclass(frozen=True)
class Snapshot:
    """One `/metrics` scrape: the body, the server's start time (header) and when it was taken."""

    text: str
    process_start: float | None
    taken: dict[str, int]
    url: str = ""


def as_samples(snapshot: str | Sequence[Sample] | Snapshot, source: str) -> tuple[Sample, ...]:
    """Samples of exposition text, a `Snapshot` or samples already parsed."""
    if isinstance(snapshot, Snapshot):
        return parse_exposition(snapshot.text, snapshot.url or source)
    if isinstance(snapshot, str):
        return parse_exposition(snapshot, source)
    return tuple(snapshot)
