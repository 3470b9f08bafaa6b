"""The canonical trace tables (docs/SCHEMA.md §1): column lists, dtype coercion and validation.

Every reader hands its columns to `dispatch_frame`, `api_frame` or `marker_frame`, which check
`end_ns >= start_ns` (naming the first bad row), coerce dtypes and sort by `start_ns`, so nothing
half-parsed reaches the analyses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from perflib.errors import InputError

DISPATCH_COLUMNS = (
    "kernel",
    "start_ns",
    "end_ns",
    "device",
    "queue",
    "stream",
    "correlation_id",
    "kind",
    "source",
)
API_COLUMNS = ("name", "start_ns", "end_ns", "pid", "tid", "correlation_id", "domain", "source")
MARKER_COLUMNS = ("name", "start_ns", "end_ns", "pid", "tid", "domain", "source")

DISPATCH_KINDS = ("kernel", "memcpy", "memset", "cpu_op", "sample")
"""What a dispatch row is: GPU work (a kernel, a copy, a fill), a CPU operator standing for the device's work
where there is no GPU (Kineto `cpu_op`, `perflib.traces.kineto`), or one sample of a sampling profiler
(`perflib.traces.perf_script`)."""

LEAN_DISPATCH_COLUMNS = ("kernel", "start_ns", "end_ns", "correlation_id", "kind", "source")
"""The columns of a lean dispatch table (`read_trace(path, ReadMode.LEAN)`): what `trace summary` reads.
`kernel` is a categorical (int32 codes into the distinct names), so a dispatch costs about 30 bytes
whatever its name's length; `device`, `queue` and `stream` are left out."""

ID_COLUMNS = ("device", "queue", "stream")
"""What a lean table read with its ids (`read_trace(path, ReadMode.LEAN_IDS)`) adds: with them it holds
every column of `DISPATCH_COLUMNS`, the names still as a categorical, which is what a cut writes."""

_INT_COLUMNS = {"start_ns", "end_ns", "device", "queue", "stream", "correlation_id", "pid", "tid"}

# Where-label for row i of a table: e.g. CSV "line {i+2}", JSON "kernel_dispatch[{i}]".
RowLabel = Callable[[int], str]


def _row_label_default(i: int) -> str:
    return f"row {i + 1}"


INT64_MAX = 2**63 - 1


def _as_int64(values: Any, n: int, fill: int = -1, required: tuple[object, RowLabel, str] | None = None) -> np.ndarray:
    """int64 of ids or times. An id that is not an integer (NaN, null, 1.5, text) is `fill` (unknown).
    A time (`required` = (path, label, column)) must be an int64 integer: anything else is an
    `InputError` naming its row, never a -1 or a truncated float that reads as a time."""
    if values is None:
        return np.full(n, fill, dtype=np.int64)
    if np.isscalar(values):
        return np.full(n, values, dtype=np.int64)
    if isinstance(values, pd.Series):
        values = values.to_numpy()
    arr = np.asarray(values)
    if arr.dtype == np.int64:
        return arr
    kind = arr.dtype.kind
    if kind == "i" or (kind == "u" and (not arr.size or int(arr.max()) <= INT64_MAX)):
        return arr.astype(np.int64)
    if kind == "f":
        ok = np.isfinite(arr) & (np.abs(arr) < 2.0**63)
        ok[ok] = arr[ok] == np.floor(arr[ok])
    elif kind in "uO":
        ok = np.array([type(v) in (int, np.int64) and -(2**63) <= v <= INT64_MAX for v in arr.tolist()], dtype=bool)
    else:  # booleans, text, dates: not ns, not ids
        ok = np.zeros(arr.shape, dtype=bool)
    if required is not None and not ok.all():
        path, label, column = required
        i = int(np.flatnonzero(~ok)[0])
        raise InputError(path, f"{label(i)}, column {column}", "an int64 integer (ns)", repr(arr[i])[:80])
    out = np.full(arr.shape, fill, dtype=np.int64)
    if ok.any():
        out[ok] = arr[ok].astype(np.int64) if kind != "O" else np.array(arr[ok].tolist(), dtype=np.int64)
    return out


def _as_str(values: Any) -> pd.Series:
    if isinstance(values, pd.Series):
        return values.reset_index(drop=True).astype("str")
    return pd.Series(values, dtype="str")


def check_intervals(
    start: np.ndarray, end: np.ndarray, path: object, label: RowLabel = _row_label_default, what: str = ""
) -> None:
    """Raise `InputError` naming the first row whose end is before its start."""
    bad = np.flatnonzero(end < start)
    if bad.size:
        i = int(bad[0])
        raise InputError(
            path,
            label(i),
            f"an end timestamp >= its start{what}",
            f"start {int(start[i])} ns, end {int(end[i])} ns ({bad.size} such rows)",
        )


def _frame(
    columns: tuple[str, ...],
    data: Mapping[str, Any],
    source: str,
    path: object,
    label: RowLabel,
    what: str,
) -> pd.DataFrame:
    start = _as_int64(data["start_ns"], 0, required=(path, label, "start_ns"))
    n = len(start)
    end = _as_int64(data["end_ns"], n, required=(path, label, "end_ns"))
    check_intervals(start, end, path, label, what)
    out: dict[str, Any] = {}
    for col in columns:
        if col == "source":
            out[col] = pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[source])
        elif col == "kind":
            kind = data.get("kind", "kernel")
            if isinstance(kind, str):
                out[col] = pd.Categorical.from_codes(
                    np.full(n, DISPATCH_KINDS.index(kind), dtype=np.int8), categories=list(DISPATCH_KINDS)
                )
            else:
                out[col] = pd.Categorical.from_codes(kind_codes(kind, path, label), categories=list(DISPATCH_KINDS))
        elif col == "start_ns":
            out[col] = start
        elif col == "end_ns":
            out[col] = end
        elif col in _INT_COLUMNS:
            out[col] = _as_int64(data.get(col), n)
        else:
            value = data.get(col, "")
            out[col] = pd.Series([value] * n, dtype="str") if isinstance(value, str) else _as_str(value)
    frame = pd.DataFrame(out)
    if n > 1 and not bool(np.all(start[1:] >= start[:-1])):
        frame = frame.sort_values("start_ns", kind="stable", ignore_index=True)
    return frame


def kind_codes(values: Any, path: object, label: RowLabel = _row_label_default) -> np.ndarray:
    """int8 codes into `DISPATCH_KINDS` of each row's kind as text; another kind is an `InputError`
    naming its row."""
    values = np.asarray(values, dtype=object)
    codes = pd.Index(DISPATCH_KINDS).get_indexer(values)
    unknown = np.flatnonzero(codes < 0)
    if unknown.size:
        i = int(unknown[0])
        raise InputError(path, f"{label(i)}, column kind", "kind " + ", ".join(DISPATCH_KINDS[:-1]) + " or "
                         + DISPATCH_KINDS[-1], repr(values[i])[:80])
    return codes.astype(np.int8)


def copy_devices(directions: list[str], codes: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """A copy's `device`, its GPU end: the source agent for a `*_TO_HOST` copy, else the destination.
    `codes` index each row's direction in `directions` (-1, no direction: the destination)."""
    to_host = np.array([d.upper().endswith("TO_HOST") for d in directions] + [False], dtype=bool)
    return np.where(to_host[np.asarray(codes, dtype=np.int64)], src, dst)


def lean_dispatch_frame(
    codes: np.ndarray, names: list[str], start: np.ndarray, end: np.ndarray, correlation_id: np.ndarray | None,
    kind: str | np.ndarray, source: str, path: object, label: RowLabel = _row_label_default,
    ids: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """A lean dispatch table (`LEAN_DISPATCH_COLUMNS`) from name codes into `names`, checked and
    sorted by start as `dispatch_frame` does (a stable sort, so rows keep the same order as there).
    `kind` is one kind for all rows or int8 codes into `DISPATCH_KINDS`. `ids`: the `ID_COLUMNS` too
    (int64 arrays or one value each; a missing one is -1), placed as in `DISPATCH_COLUMNS`."""
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    n = start.size
    check_intervals(start, end, path, label)
    kind_code = (np.full(n, DISPATCH_KINDS.index(kind), dtype=np.int8) if isinstance(kind, str)
                 else np.asarray(kind, dtype=np.int8))
    frame = pd.DataFrame({
        "kernel": pd.Categorical.from_codes(np.asarray(codes, dtype=np.int32), categories=pd.Index(names, dtype=object),
                                            validate=False),
        "start_ns": start,
        "end_ns": end,
        "correlation_id": np.full(n, -1, dtype=np.int64) if correlation_id is None else np.asarray(correlation_id, np.int64),
        "kind": pd.Categorical.from_codes(kind_code, categories=list(DISPATCH_KINDS), validate=False),
        "source": pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[source], validate=False),
    }, copy=False)
    if ids is not None:
        for i, col in enumerate(ID_COLUMNS):
            frame.insert(3 + i, col, _as_int64(ids.get(col), n))
    if n > 1 and not bool(np.all(start[1:] >= start[:-1])):
        frame = frame.take(np.argsort(start, kind="stable")).reset_index(drop=True)
    return frame


def dispatch_frame(
    data: Mapping[str, Any], source: str, path: object, label: RowLabel = _row_label_default
) -> pd.DataFrame:
    """The canonical dispatch table from column arrays (missing ids become -1), sorted by start."""
    return _frame(DISPATCH_COLUMNS, data, source, path, label, "")


def api_frame(
    data: Mapping[str, Any], source: str, path: object, label: RowLabel = _row_label_default
) -> pd.DataFrame:
    """The canonical API table (host API calls), sorted by start."""
    return _frame(API_COLUMNS, data, source, path, label, " (API call)")


def marker_frame(
    data: Mapping[str, Any], source: str, path: object, label: RowLabel = _row_label_default
) -> pd.DataFrame:
    """The canonical marker table (ranges and marks; a mark has end == start), sorted by start."""
    return _frame(MARKER_COLUMNS, data, source, path, label, " (marker)")


def empty_dispatches(source: str) -> pd.DataFrame:
    return dispatch_frame({"start_ns": [], "end_ns": []}, source, "")


def empty_api(source: str) -> pd.DataFrame:
    return api_frame({"start_ns": [], "end_ns": []}, source, "")


def empty_markers(source: str) -> pd.DataFrame:
    return marker_frame({"start_ns": [], "end_ns": []}, source, "")


def concat(frames: list[pd.DataFrame], columns: tuple[str, ...]) -> pd.DataFrame:
    """Concatenate canonical tables, keep categoricals, re-sort by start."""
    frames = [f for f in frames if len(f)] or frames[:1]
    if len(frames) == 1:
        return frames[0]
    lean = [f for f in frames if "kernel" in f and isinstance(f["kernel"].dtype, pd.CategoricalDtype)]
    if len(lean) == len(frames):  # lean tables: one union of the names, never a column of text
        kernel = union_categoricals([f["kernel"] for f in frames], ignore_order=True)
        frames = [f.drop(columns="kernel") for f in frames]
    else:
        kernel = None
    out = pd.concat(frames, ignore_index=True)
    if kernel is not None:
        out.insert(0, "kernel", kernel)
    for col in ("kind", "source"):
        if col in columns:
            cats = sorted({c for f in frames for c in f[col].cat.categories})
            if col == "kind":
                cats = list(DISPATCH_KINDS)
            out[col] = pd.Categorical(out[col].astype("str"), categories=cats)
    return out.sort_values("start_ns", kind="stable", ignore_index=True)


def validate(frame: pd.DataFrame, columns: tuple[str, ...]) -> None:
    """Assert a frame follows the canonical schema (used by tests and by writers on their input)."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"trace table lacks columns {missing}")
    for col in columns:
        if col in _INT_COLUMNS and frame[col].dtype != np.int64:
            raise ValueError(f"column {col} must be int64, is {frame[col].dtype}")
