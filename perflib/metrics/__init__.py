"""Server `/metrics` counters: exposition text, per-server names, deltas and the derived figures.

A load level is judged by counter deltas between a scrape right before it and one right after its
last request finished (docs/reference/SERVERS.md §0). A figure that cannot be computed is None, never 0;
a missing metric is reported in `absent`, not raised.

- `perflib.metrics.exposition`: parse exposition text into samples.
- `perflib.metrics.names`: canonical names → each server's names, with old aliases.
- `perflib.metrics.dialects`: the registry, one entry per server: its names, detection, derivation, caption.
- `perflib.metrics.delta`: difference two snapshots, detect resets (`diff`, `MetricsDelta`).
- `perflib.metrics.figures`: the SERVERS.md §5 figures, one function per dialect.
- `perflib.metrics.scrape`: `GET /metrics` over HTTP.
"""

from perflib.metrics.delta import MetricsDelta, diff
from perflib.metrics.dialects import (
    DIALECTS,
    NAME_TABLES,
    Dialect,
    canonical_values,
    detect_dialect,
    gauge_values,
    occupancy_caption,
)
from perflib.metrics.exposition import Sample, Snapshot, parse_exposition
from perflib.metrics.figures import FIGURE_HELP, FIGURES
from perflib.metrics.names import MetricName
from perflib.metrics.scrape import MetricsUnavailable, classify_metrics_response, scrape

__all__ = [
    "DIALECTS", "FIGURES", "FIGURE_HELP", "NAME_TABLES", "Dialect", "MetricName", "MetricsDelta", "MetricsUnavailable", "Sample",
    "Snapshot", "canonical_values", "classify_metrics_response", "detect_dialect", "diff", "gauge_values",
    "occupancy_caption", "parse_exposition", "scrape",
]
