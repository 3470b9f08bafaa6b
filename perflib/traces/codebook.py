"""A running dictionary of texts: each distinct text an int32 code, first seen first.

What every streamed reader keeps of a name column (kernel names, API names, domains): one code a row
and each text once, however many chunks it is read in. numpy only (no pandas), so that the Kineto
prefetch child can use it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class Names:
    """A running dictionary: text -> int32 code in first-seen order (names kept once, not per row)."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}

    def encode(self, values: Sequence[str]) -> np.ndarray:
        """The codes of `values`, each new text given the next code."""
        codes = self.codes
        for v in dict.fromkeys(values):  # the distinct ones, in first-seen order: few
            codes.setdefault(v, len(codes))
        return np.fromiter(map(codes.__getitem__, values), dtype=np.int32, count=len(values))

    @property
    def names(self) -> list[str]:
        return list(self.codes)
