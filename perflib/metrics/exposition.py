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
        """`name{label="value",...}` with labels sorted and values escaped as the format writes them
        (`\\`, `\"`, `\n`), so labelled samples stay distinguishable and print on one line."""
        if not self.labels:
            return self.name
        inner = ",".join(f'{k}="{escape_label(v)}"' for k, v in self.labels)
        return f"{self.name}{{{inner}}}"


def escape_label(value: str) -> str:
    """A label value as the exposition format writes it: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _bad_line(text: str) -> tuple[int, str] | None:
    """Line number and text of the first sample line prometheus_client rejects (only called on errors)."""
    from prometheus_client.parser import text_string_to_metric_families  # late: see _families

    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            list(text_string_to_metric_families(stripped + "\n"))
        except Exception:  # any parser failure marks the line
            return number, stripped
    return None


def _families(text: str) -> list[Sample]:
    """Every sample of `text` in order (prometheus_client's parser)."""
    # late: 41 ms (measured); `perflib --help` and perflib.config import perflib.metrics for its names
    from prometheus_client.parser import text_string_to_metric_families

    samples: list[Sample] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = tuple(sorted((str(k), str(v)) for k, v in s.labels.items()))
            samples.append(Sample(s.name, labels, float(s.value), family.type))
    return samples


def _first_duplicate(samples: Sequence[Sample]) -> Sample | None:
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for s in samples:
        if (s.name, s.labels) in seen:
            return s
        seen.add((s.name, s.labels))
    return None


def _duplicate_line(text: str) -> int | None:
    """The line of the first repeated series: the shortest prefix of whole lines that holds a
    duplicate, found by bisection (only called on the error path)."""
    lines = text.splitlines(keepends=True)
    lo, hi = 1, len(lines)
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            has = _first_duplicate(_families("".join(lines[:mid]))) is not None
        except Exception:  # noqa: BLE001 - a prefix that does not parse holds no answer
            has = False
        lo, hi = (lo, mid) if has else (mid + 1, hi)
    return lo if lines else None


def parse_exposition(text: str, source: str = "<text>") -> tuple[Sample, ...]:
    """Parse Prometheus exposition text (format 0.0.4) into samples.

    Uses `prometheus_client.parser.text_string_to_metric_families`, which drops `_total` from counter
    *family* names and adds it to every counter sample (a llama.cpp gauge typed `counter`, such as
    `llamacpp:n_busy_slots_per_decode` in some builds, comes back as `..._total`); the name tables
    below match with `(_total)?` for that reason. A line the parser rejects raises `InputError`
    naming `source` and the line.

    The format allows each series (a name with one set of labels) once per scrape: a repeated one is
    an `InputError` with its line, never two values summed. NaN and ±Inf are kept as such (a float
    that is not finite): `perflib.metrics.diff` reports them and derives nothing from them.
    """
    try:
        samples = _families(text)
    except Exception as exc:  # prometheus_client raises ValueError, TypeError, IndexError, ...
        bad = _bad_line(text)
        where = f"line {bad[0]}" if bad else None
        found = repr(bad[1][:120]) if bad else str(exc)[:200]
        raise InputError(source, where, "Prometheus exposition text (`name{labels} value`)", found) from exc
    twice = _first_duplicate(samples)
    if twice is not None:
        line = _duplicate_line(text)
        raise InputError(source, f"line {line}" if line else None,
                         "each series once (one sample per name and set of labels)", f"{twice.key[:160]} again")
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
