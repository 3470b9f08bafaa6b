"""A dispatch table's kinds and kernel names as integer codes, without copying strings."""

from __future__ import annotations

import numpy as np
import pandas as pd

_KINDS = ("kernel", "memcpy", "memset")


def kind_codes(dispatches: pd.DataFrame) -> tuple[np.ndarray, tuple[str, ...]]:
    """Per row 0 = kernel, 1 = memcpy, 2 = memset (from the categorical's codes: no string copies)."""
    n = len(dispatches)
    if "kind" not in dispatches:
        return np.zeros(n, dtype=np.int8), _KINDS
    kind = dispatches["kind"]
    if isinstance(kind.dtype, pd.CategoricalDtype):
        remap = np.array([_KINDS.index(str(c)) if str(c) in _KINDS else 0 for c in kind.cat.categories] + [0], dtype=np.int8)
        return remap[kind.cat.codes.to_numpy()], _KINDS  # code -1 (missing) maps to the trailing 0
    values = kind.astype(str).to_numpy()
    return np.select([values == "memcpy", values == "memset"], [1, 2], 0).astype(np.int8), _KINDS


def kernel_codes(kernel: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Integer code per row and the distinct names; a missing name gets its own `<unnamed>` code."""
    if isinstance(kernel.dtype, pd.CategoricalDtype):
        # numbered by first appearance, as text is below, so that a lean table (categorical names)
        # gives the very codes, names and ties of the full one; unused categories are dropped
        raw = kernel.cat.codes.to_numpy()
        if raw.size and raw.min() < 0:
            raw = np.where(raw < 0, np.nan, raw)  # missing: the trailing `<unnamed>` code, as for text
        first, used = pd.factorize(raw, sort=False)
        categories = kernel.cat.categories
        codes, names = first.astype(np.int64), [str(categories[int(u)]) for u in used]
    else:
        raw, uniques = pd.factorize(kernel, sort=False)
        codes, names = raw.astype(np.int64), [str(u) for u in uniques]
    if codes.size and codes.min() < 0:
        codes = np.where(codes < 0, len(names), codes)
        names.append("<unnamed>")
    return codes, names
