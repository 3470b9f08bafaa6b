"""The canonical trace record: dispatch, API and marker tables on one clock (docs/SCHEMA.md §1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

CLOCKS = ("monotonic", "boottime", "realtime", "unknown")
"""A trace's clock: `realtime` is the Unix epoch; `unknown` lets the level's clocks decide."""

@dataclass(frozen=True, eq=False)
class Trace:
    """One profiler output: dispatch, API and marker tables on one clock (docs/SCHEMA.md §1)."""

    dispatches: pd.DataFrame
    api: pd.DataFrame
    markers: pd.DataFrame
    clock: str
    source: str
    path: str
    meta: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return (
            f"Trace(source={self.source!r}, path={self.path!r}, clock={self.clock!r}, "
            f"dispatches={len(self.dispatches)}, api={len(self.api)}, markers={len(self.markers)})"
        )
