"""perflib's own compact trace file: the canonical dispatch table as Parquet.

Profiler text is large (CUPTI prints ~500 bytes a kernel). For committing a trace cut to a
level's window, the dispatch table itself is stored with dictionary-encoded names and zstd, and
the original clock, source format and meta ride in the Parquet key-value metadata, so
`read_trace` gives back exactly what the original reader gave for that window. The host API calls of
the same window (what fills its host gaps, `perflib.attribution.hostgaps`) go to a second file beside
it in the same ns schema, `trace.api.parquet` (`api_path`), and its ranges and marks (the engine's step
ranges, NVTX/roctx ranges, `ProfilerStep#`: what `perflib.attribution.markers` counts steps and phases
from) to a third, `trace.markers.parquet` (`markers_path`); the cut's metadata names each with its row
count (`SIDES`). A cut that names none reads with an empty table and says why (`meta["api_note"]`,
`meta["markers_note"]`: a cut made before perflib kept them, a capture without them, none in the window).

Read back, the file is checked as any profiler output is: the metadata is JSON of the types written
(an unknown clock, a non-object meta, ... are `InputError`s naming the key), the columns are of
their types, and a null time is an `InputError` naming its row (it once read as -1, and gave a
window of 1.7e12 ms of GPU busy).

Light at import on purpose: `perflib.traces` imports this module (it exports `write_trace_parquet`),
and `perflib trace summary` imports that before its Kineto prefetch forks. So pyarrow, numpy and
pandas (through `schema`) load inside the functions that read or write a file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflib.errors import InputError
from perflib.traces.files import said
from perflib.traces.trace import CLOCKS, ReadMode, Trace

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

PARQUET_MAGIC = b"PAR1"
_META_KEY = b"perflib.trace"
_API_KEY = b"perflib.trace.api"
API_SUFFIX = ".api.parquet"
"""How the file of a cut's host API calls is named beside it: `trace.parquet` -> `trace.api.parquet`."""
MARKERS_SUFFIX = ".markers.parquet"
"""How the file of a cut's ranges and marks is named beside it: `trace.parquet` -> `trace.markers.parquet`."""


@dataclass(frozen=True)
class Side:
    """A table a cut keeps in a file beside it: its key in the cut's metadata (`api`, `markers`), the
    file's suffix, the Parquet metadata key that file carries, and what its rows are (for errors)."""

    key: str
    suffix: str
    meta_key: bytes
    what: str
    note: str
    """The meta key the read of a cut sets where it holds none of these rows: why."""


SIDES = (Side("api", API_SUFFIX, _API_KEY, "host API calls", "api_note"),
         Side("markers", MARKERS_SUFFIX, b"perflib.trace.markers", "ranges and marks", "markers_note"))
"""The tables a cut keeps beside its dispatches, each in its own file (`Trace.api`, `Trace.markers`)."""
_SIDE = {side.key: side for side in SIDES}
READ_META = tuple(side.note for side in SIDES)
"""Meta keys the read of a cut adds (why it holds no API calls, no markers), never written back into a cut."""


def side_path(path: str | Path, key: str) -> Path:
    """The file beside a cut that holds its `key` table (`api`, `markers`): `trace.parquet` ->
    `trace.api.parquet`, `trace.markers.parquet`."""
    path = Path(path)
    stem = path.name[: -len(".parquet")] if path.name.endswith(".parquet") else path.name
    return path.with_name(stem + _SIDE[key].suffix)


def api_path(path: str | Path) -> Path:
    """The file beside a cut that holds its host API calls: `trace.parquet` -> `trace.api.parquet`."""
    return side_path(path, "api")


def markers_path(path: str | Path) -> Path:
    """The file beside a cut that holds its ranges and marks: `trace.parquet` -> `trace.markers.parquet`."""
    return side_path(path, "markers")


def _overlapping(frame: pd.DataFrame, start_ns: int | None, end_ns: int | None, marks: bool = False) -> pd.DataFrame:
    """The rows overlapping [start_ns, end_ns) (either bound may be open), with a fresh index; `marks`:
    and the rows of no length (a marker table's marks) that lie inside it."""
    if start_ns is not None:
        after = frame["end_ns"] > start_ns
        if marks:
            after |= (frame["end_ns"] == frame["start_ns"]) & (frame["start_ns"] >= start_ns)
        frame = frame[after]
    if end_ns is not None:
        frame = frame[frame["start_ns"] < end_ns]
    return frame.reset_index(drop=True)


LAUNCH_LOOKBACK_NS = 10_000_000_000
"""How far before a cut's start its host tables may reach for the launch calls of its dispatches (10 s)."""


def host_start(trace: Trace, dispatches: pd.DataFrame, start_ns: int | None) -> int | None:
    """Where a cut's host tables (`SIDES`) begin: its own start, or earlier where a dispatch it keeps was
    launched earlier (its API call's start, joined by correlation id, within `LAUNCH_LOOKBACK_NS`). A
    host range precedes the kernels it launched (the launch queue, a long prefill step), so the step
    ranges and launch calls that put a step's kernels on the GPU (`perflib.attribution.markers`) are
    kept with those kernels, and the cut counts the steps of its window as the capture does."""
    # late: not at `import perflib.traces` (module docstring)
    import numpy as np

    api = trace.api
    if start_ns is None or not len(api) or not len(dispatches) or "correlation_id" not in dispatches:
        return start_ns
    ids = dispatches["correlation_id"].to_numpy(dtype=np.int64)
    ids = np.unique(ids[ids >= 0])
    starts = api["start_ns"].to_numpy(dtype=np.int64)
    early = (starts < start_ns) & (starts >= start_ns - LAUNCH_LOOKBACK_NS)
    if not ids.size or not early.any():
        return start_ns
    launched = early & np.isin(api["correlation_id"].to_numpy(dtype=np.int64), ids)
    return int(starts[launched].min()) if launched.any() else start_ns


def _table_of(trace: Trace, key: str) -> pd.DataFrame:
    return trace.api if key == "api" else trace.markers


def write_side_parquet(trace: Trace, key: str, path: str | Path, start_ns: int | None = None,
                       end_ns: int | None = None, name: str | None = None) -> dict[str, Any]:
    """Write the rows of `trace`'s `key` table (`api`: host API calls; `markers`: ranges and marks)
    overlapping [start_ns, end_ns) to `path` (nothing where none does) and return what the cut's own
    metadata says of them (`api`, `markers` there): the file's `name` (default `path`'s; None where
    nothing was written), its rows, the capture's rows and, where the capture held none, why (a note the
    capture's read gave)."""
    # late: not at `import perflib.traces` (module docstring)
    import pandas as pd
    import pyarrow as pa

    side, whole = _SIDE[key], _table_of(trace, key)
    frame = _overlapping(whole, start_ns, end_ns, marks=key == "markers")
    why = "" if len(whole) else str(trace.meta.get(side.note) or "")
    described = {"file": None, "rows": 0, "capture_rows": int(len(whole)), "why": why}
    if not len(frame):
        return described
    frame = frame.drop(columns=[c for c in ("source",) if c in frame.columns])
    for col in ("name", "domain"):
        if isinstance(frame[col].dtype, pd.CategoricalDtype):  # a lean read's codes: text, as the full read's
            frame[col] = frame[col].astype("str")
    table = pa.Table.from_pandas(frame, preserve_index=False)
    info = {"source": trace.source, "cut": {"start_ns": start_ns, "end_ns": end_ns}, "rows": int(len(frame))}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           side.meta_key: json.dumps(info).encode()})
    write_table(table, Path(path), dictionary=("name", "domain"))
    return {**described, "file": name or Path(path).name, "rows": int(len(frame))}


def write_api_parquet(trace: Trace, path: str | Path, start_ns: int | None = None, end_ns: int | None = None,
                      name: str | None = None) -> dict[str, Any]:
    """`write_side_parquet` of the host API calls (`api`)."""
    return write_side_parquet(trace, "api", path, start_ns, end_ns, name)


def write_trace_parquet(trace: Trace, path: str | Path, start_ns: int | None = None,
                        end_ns: int | None = None, api: dict[str, Any] | None = None,
                        markers: dict[str, Any] | None = None) -> Path:
    """Write `trace.dispatches` (optionally only dispatches overlapping [start_ns, end_ns]) and its host API
    calls and markers in the same bounds beside it, reaching back to the launch calls of those dispatches
    (`host_start`; `api_path`, `markers_path`, `write_side_parquet`); `api`, `markers`: what
    `write_side_parquet` gave where the caller wrote them itself (`perflib.cut`, through temporary files)."""
    import pyarrow as pa  # late: not at `import perflib.traces` (module docstring)

    path = Path(path)
    frame = _overlapping(trace.dispatches, start_ns, end_ns)
    given, reach = {"api": api, "markers": markers}, host_start(trace, frame, start_ns)
    sides = {key: given[key] if given[key] is not None
             else write_side_parquet(trace, key, side_path(path, key), reach, end_ns) for key in _SIDE}
    table = pa.Table.from_pandas(frame, preserve_index=False)
    meta = {"clock": trace.clock, "source": trace.source, "path": trace.path,
            "meta": {k: v for k, v in trace.meta.items() if k not in READ_META},
            "cut": {"start_ns": start_ns, "end_ns": end_ns}, **sides}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           _META_KEY: json.dumps(meta, default=str).encode()})
    write_table(table, path)
    return path


def write_dispatches(dispatches: pd.DataFrame, path: str | Path) -> Path:
    """A dispatch table alone as a perflib trace file: clock unknown, the source its rows name (the
    registry's writer, `perflib.traces.formats`; a cut writes a whole Trace with `write_trace_parquet`)."""
    from perflib.traces import schema  # late: not at `import perflib.traces` (module docstring)

    sources = dispatches["source"].astype(str).unique() if len(dispatches) else []
    source = str(sources[0]) if len(sources) == 1 else "perflib-parquet"
    trace = Trace(dispatches, schema.empty_api(source), schema.empty_markers(source), "unknown", source, str(path))
    return write_trace_parquet(trace, path)


def write_table(table, path: str | Path, dictionary: tuple[str, ...] = ("kernel", "kind", "source")) -> None:
    """Write a dispatch (or API) table the compact way: names (`dictionary`) dictionary-encoded, the
    integer columns delta-encoded (timestamps in start order differ by little), zstd on top. About 35%
    smaller than plain zstd on a CUPTI server trace; readers see no difference."""
    import pyarrow.parquet as pq  # late: not at `import perflib.traces` (module docstring)

    ints = [f.name for f in table.schema if str(f.type) == "int64"]
    pq.write_table(table, path, compression="zstd", compression_level=9,
                   use_dictionary=[c for c in dictionary if c in table.column_names],
                   column_encoding={c: "DELTA_BINARY_PACKED" for c in ints})


def _info(path: Path, raw: bytes) -> dict[str, Any]:
    """The `perflib.trace` metadata, checked: JSON, an object, and each key of the type perflib writes."""
    where = f"metadata {_META_KEY.decode()}"
    try:
        info = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise InputError(path, where, "JSON text", said(exc, with_type=True)) from exc
    if not isinstance(info, dict):
        raise InputError(path, where, "a JSON object", type(info).__name__)
    checks = {"clock": (lambda v: v in CLOCKS, f"one of {', '.join(CLOCKS)}"),
              "source": (lambda v: isinstance(v, str) and v != "", "a format id"),
              "path": (lambda v: v is None or isinstance(v, str), "the original path as text"),
              "meta": (lambda v: v is None or isinstance(v, dict), "an object of facts"),
              "cut": (lambda v: v is None or (isinstance(v, dict) and all(
                  v.get(k) is None or type(v.get(k)) is int for k in ("start_ns", "end_ns"))),
                      "null or {start_ns, end_ns} as integers or null"),
              **{side.key: (_side_described, "{file: a name beside this file or null, rows, capture_rows: "
                                              "counts, why: text}") for side in SIDES}}
    for key, (ok, expected) in checks.items():
        if key in info and not ok(info[key]):
            raise InputError(path, f"{where}, key {key}", expected, repr(info[key])[:80])
    return info


def _side_described(value: Any) -> bool:
    """Whether the `api` or `markers` a cut's metadata holds is what `write_side_parquet` writes: a plain
    file name beside the cut (never a path) or null, and counts of rows."""
    if not isinstance(value, dict):
        return False
    file, rows, capture = value.get("file"), value.get("rows"), value.get("capture_rows")
    counts = type(rows) is int and rows >= 0 and (capture is None or (type(capture) is int and capture >= 0))
    named = file is None or (isinstance(file, str) and file not in ("", ".", "..") and "/" not in file
                             and "\\" not in file)
    return counts and named and (file is None) == (rows == 0) and isinstance(value.get("why", ""), str)


def _int_column(table: Any, name: str, path: Path, required: bool) -> np.ndarray:
    """An integer column as int64: nulls are -1 (unknown) in ids and an `InputError` naming the row in
    times; a column that is not of an integer type, or holds values beyond int64, is an `InputError`."""
    # late: not at `import perflib.traces` (module docstring)
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    col = table.column(name)
    if not pa.types.is_integer(col.type):
        raise InputError(path, f"column {name}", "an integer column (int64 ns or ids)", str(col.type))
    if col.null_count:
        if required:
            row = int(np.flatnonzero(pc.is_null(col).to_numpy(zero_copy_only=False))[0])
            raise InputError(path, f"row {row + 1}, column {name}", "an integer ns timestamp", "null")
        col = pc.fill_null(col, -1)
    values = col.to_numpy()
    if values.dtype == np.uint64 and values.size and int(values.max()) > 2**63 - 1:
        row = int(np.flatnonzero(values > np.uint64(2**63 - 1))[0])
        raise InputError(path, f"row {row + 1}, column {name}", "an integer that fits int64", str(values[row]))
    return values.astype(np.int64, copy=False)


def _text_column(table: Any, name: str, path: Path) -> np.ndarray:
    """A text column (plain or dictionary-encoded) as str; a null is an `InputError` naming the row."""
    # late: not at `import perflib.traces` (module docstring)
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    col = table.column(name)
    value_type = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
    if not (pa.types.is_string(value_type) or pa.types.is_large_string(value_type)):
        raise InputError(path, f"column {name}", "a text column", str(col.type))
    if col.null_count:
        row = int(np.flatnonzero(pc.is_null(col).to_numpy(zero_copy_only=False))[0])
        raise InputError(path, f"row {row + 1}, column {name}", "a name", "null")
    return col.cast(pa.string()).to_numpy(zero_copy_only=False)


def _open(path: Path, columns: list[str] | None = None) -> tuple[Any, dict[str, Any]]:
    """The file's table (only `columns`, names kept dictionary-encoded, where given) and its checked
    `perflib.trace` metadata; a file that is not a readable perflib trace is an `InputError`."""
    # late: not at `import perflib.traces` (module docstring)
    import pyarrow.parquet as pq

    from perflib.traces import schema

    try:
        if columns is None:
            table = pq.read_table(path)
        else:
            present = pq.read_schema(path).names
            table = pq.read_table(path, columns=[c for c in columns if c in present], read_dictionary=["kernel"])
        names = table.column_names  # decoded here: a damaged file can hold names that are not UTF-8
        raw = (table.schema.metadata or {}).get(_META_KEY)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise InputError(path, None, "a readable Parquet file", said(exc, with_type=True)) from exc
    if raw is None:
        raise InputError(path, "metadata", f"a perflib trace (Parquet metadata key {_META_KEY.decode()!r})",
                         "a Parquet file without it")
    info = _info(path, raw)
    missing = [c for c in (columns or schema.DISPATCH_COLUMNS) if c not in names and c != "source"]
    if missing:
        raise InputError(path, "columns", f"the dispatch columns {schema.DISPATCH_COLUMNS}", f"missing {missing}")
    return table, info


def _column(table: Any, c: str, path: Path) -> np.ndarray:
    """Column `c` checked as its reader expects: text for names and kinds, int64 for the rest."""
    try:
        if c in ("kernel", "kind"):
            return _text_column(table, c, path)
        return _int_column(table, c, path, required=c in ("start_ns", "end_ns"))
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - values pyarrow cannot convert (text that is not UTF-8, ...)
        raise InputError(path, f"column {c}", "values that can be read", said(exc, with_type=True)) from exc


NO_API_KEPT = "this trace cut holds GPU dispatches only: it was made before perflib kept the host API records"
NO_API_IN_WINDOW = "no host API call of the capture overlaps this cut's window"
NO_MARKERS_KEPT = ("this trace cut holds no ranges or marks: it was made before perflib kept them beside its "
                   "dispatches (cut it again from its capture to keep the engine's step ranges)")
NO_MARKERS_IN_WINDOW = "no range or mark of the capture overlaps this cut's window"
_WHY = {"api": (NO_API_KEPT, NO_API_IN_WINDOW), "markers": (NO_MARKERS_KEPT, NO_MARKERS_IN_WINDOW)}
"""Per side table: why a cut holds none of its rows, where it was made before perflib kept them, and
where none was in its window."""


def _side(path: Path, info: dict[str, Any], source: str, key: str) -> tuple[pd.DataFrame, str]:
    """The cut's `key` table (`api`: host API calls, `markers`: ranges and marks; the file its metadata
    names beside it), or none and why: a cut made before perflib kept them, or none in the window (''
    where the capture held none: its source format says why, as for the capture itself,
    `perflib.attribution.hostgaps`). A file the metadata names that is missing, or holds other rows, is an
    `InputError`: the cut would read as one without them."""
    # late: not at `import perflib.traces` (module docstring)
    import pyarrow.parquet as pq

    from perflib.traces import schema

    side = _SIDE[key]
    columns, empty, frame = ((schema.API_COLUMNS, schema.empty_api, schema.api_frame) if key == "api"
                             else (schema.MARKER_COLUMNS, schema.empty_markers, schema.marker_frame))
    described = info.get(key)
    kept_none, none_in_window = _WHY[key]
    if described is None:
        return empty(source), kept_none
    if described["file"] is None:
        why = described.get("why") or (none_in_window if described.get("capture_rows") else "")
        return empty(source), why
    near = path.with_name(described["file"])
    try:
        table = pq.read_table(near)
        raw = (table.schema.metadata or {}).get(side.meta_key)
    except Exception as exc:  # pyarrow raises several types for a missing or damaged file
        raise InputError(near, None, f"the {side.what} that {path.name} names (a readable Parquet file)",
                         said(exc, with_type=True)) from exc
    if raw is None or table.num_rows != described["rows"]:
        raise InputError(near, "metadata", f"the {described['rows']} {side.what} that {path.name} names "
                         f"(Parquet metadata key {side.meta_key.decode()!r})",
                         f"{table.num_rows} rows" + ("" if raw is not None else ", without that key"))
    missing = [c for c in columns if c != "source" and c not in table.column_names]
    if missing:
        raise InputError(near, "columns", f"the {side.what}' columns {columns}", f"missing {missing}")
    values: dict[str, Any] = {}
    for c in columns[:-1]:
        try:
            values[c] = (_text_column(table, c, near) if c in ("name", "domain")
                         else _int_column(table, c, near, required=c in ("start_ns", "end_ns")))
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - values pyarrow cannot convert (text that is not UTF-8, ...)
            raise InputError(near, f"column {c}", "values that can be read", said(exc, with_type=True)) from exc
    return frame(values, source, near), ""


def _trace(dispatches: Any, info: dict[str, Any], path: Path) -> Trace:
    source = info.get("source", "perflib-parquet")
    meta = dict(info.get("meta") or {})
    meta["original_path"] = info.get("path")
    meta["cut"] = info.get("cut")
    tables = {}
    for side in SIDES:
        tables[side.key], why = _side(path, info, source, side.key)
        if why:
            meta[side.note] = why
    return Trace(dispatches=dispatches, api=tables["api"], markers=tables["markers"],
                 clock=info.get("clock", "unknown"), source=source, path=str(path), meta=meta)


def companion_files(path: str | Path) -> list[Path]:
    """The files a read of `path` reads besides it: a cut's host API calls (`api_path`) and its ranges
    and marks (`markers_path`), where its metadata names them. What keys a stored attribution of the cut
    (`perflib.runcache`)."""
    import pyarrow.parquet as pq  # late: not at `import perflib.traces` (module docstring)

    path = Path(path)
    if path.is_dir() or not path.name.endswith(".parquet"):
        return []
    try:
        raw = (pq.read_schema(path).metadata or {}).get(_META_KEY)
        info = json.loads(raw) if raw else {}
    except Exception:  # noqa: BLE001 - not a cut that can be read: the read itself names the fault
        return []
    if not isinstance(info, dict):
        return []
    described = [info.get(side.key) for side in SIDES]
    return [path.with_name(d["file"]) for d in described
            if isinstance(d, dict) and _side_described(d) and d["file"] is not None]


def read(path: str | Path, mode: ReadMode = ReadMode.FULL) -> Trace:
    """A perflib trace file in `mode`: every column (`read_trace_parquet`) or the lean ones only
    (`read_trace_parquet_lean`)."""
    if mode.lean:
        return read_trace_parquet_lean(path, mode.ids)
    return read_trace_parquet(path)


def read_trace_parquet(path: str | Path) -> Trace:
    """Read a file written by `write_trace_parquet` back into a `Trace`."""
    from perflib.traces import schema  # late: not at `import perflib.traces` (module docstring)

    path = Path(path)
    table, info = _open(path)
    columns = {c: _column(table, c, path) for c in schema.DISPATCH_COLUMNS[:-1]}  # source: from the metadata
    return _trace(schema.dispatch_frame(columns, info.get("source", "perflib-parquet"), path), info, path)


def read_trace_parquet_lean(path: str | Path, ids: bool = False) -> Trace:
    """`read_trace_parquet` with a lean dispatch table (`schema.LEAN_DISPATCH_COLUMNS`; `ids`: with
    device, queue and stream): only those columns are read, the names kept as dictionary codes, so a
    name's text is decoded once, not once a row. The same rows, times and checks as the full read."""
    from perflib.traces import schema  # late: not at `import perflib.traces` (module docstring)

    path = Path(path)
    id_names = list(schema.ID_COLUMNS) if ids else []
    table, info = _open(path, ["kernel", "start_ns", "end_ns", *id_names, "correlation_id", "kind"])
    codes, names = _name_codes(table, path)
    kinds = schema.kind_codes(_column(table, "kind", path), path)
    frame = schema.lean_dispatch_frame(codes, names, _column(table, "start_ns", path), _column(table, "end_ns", path),
                                       _column(table, "correlation_id", path), kinds,
                                       info.get("source", "perflib-parquet"), path,
                                       ids={c: _column(table, c, path) for c in id_names} if ids else None)
    return _trace(frame, info, path)


def _name_codes(table: Any, path: Path) -> tuple[np.ndarray, list[str]]:
    """int32 codes and distinct names (first seen first) of the `kernel` column; a null, or a column
    that is not text, is the full read's `InputError` naming it."""
    # late: not at `import perflib.traces` (module docstring)
    import pyarrow as pa
    import pyarrow.compute as pc

    from perflib.traces.csvread import dictionary_codes

    col = table.column("kernel")
    value_type = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
    if col.null_count or not (pa.types.is_string(value_type) or pa.types.is_large_string(value_type)):
        _column(table, "kernel", path)  # raises, naming the column or the row
    try:
        if not pa.types.is_dictionary(col.type):
            table = table.set_column(table.column_names.index("kernel"), "kernel", pc.dictionary_encode(col))
        return dictionary_codes(table, "kernel")
    except Exception as exc:  # noqa: BLE001 - names pyarrow cannot decode (not UTF-8, ...)
        raise InputError(path, "column kernel", "values that can be read", said(exc, with_type=True)) from exc
