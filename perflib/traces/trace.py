"""The canonical trace record: dispatch, API and marker tables on one clock (docs/SCHEMA.md §1), and
the modes a reader reads it in."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

CLOCKS = ("monotonic", "boottime", "realtime", "unknown")
"""A trace's clock: `realtime` is the Unix epoch; `unknown` lets the level's clocks decide."""


class ReadMode(enum.Enum):
    """How much of a trace a read keeps (docs/SCHEMA.md §1). Every figure of `perflib.attribution` is
    the same to the ns whichever mode read the trace."""

    FULL = "full"
    """Every table, every dispatch column, names as text: what a notebook and the page read."""
    LEAN = "lean"
    """Only the dispatch columns a summary reads (`schema.LEAN_DISPATCH_COLUMNS`, names as a categorical),
    in one pass whose memory grows with the dispatches, not with the file: `perflib trace summary`."""
    LEAN_IDS = "lean-ids"
    """LEAN with device, queue and stream too (`schema.ID_COLUMNS`): every dispatch column, names still
    as codes, about 54 bytes a dispatch: what a cut reads (`perflib.cut`)."""

    @property
    def lean(self) -> bool:
        """The dispatches as a lean table (LEAN or LEAN_IDS)."""
        return self is not ReadMode.FULL

    @property
    def ids(self) -> bool:
        """A lean table that keeps the id columns (LEAN_IDS)."""
        return self is ReadMode.LEAN_IDS


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
