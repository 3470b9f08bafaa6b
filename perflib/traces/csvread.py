"""CSV profiler tables read with pyarrow: the header, typed columns, and errors with line and column.

Shared by the rocprofv3 CSV reader and the legacy rocprof reader. Parsing is pyarrow's
multi-threaded CSV reader with typed columns; Python only looks at the file row by row when pyarrow
refuses it, to name the line and column in the error.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from perflib.errors import InputError
from perflib.traces import files

_AGENT_NUMBER = re.compile(r"(-?\d+)\s*$")


def header_of(path: Path) -> list[str]:
    """The header row as written (quotes removed), from the first line of the file."""
    head = files.read_head(path)
    text = head.decode("utf-8", errors="replace")
    first = text.split("\n", 1)[0].rstrip("\r")  # a CSV line ends at \n only (splitlines also splits at \v, \f, ...)
    if not first.strip():
        raise InputError(path, "line 1", "a CSV header line", "an empty file" if not text else "a blank line")
    try:
        return next(csv.reader([first]))
    except csv.Error as exc:  # a stray \r inside the line, say
        raise InputError(path, "line 1", "a CSV header line", files.said(exc)) from exc


def columns(path: Path, header: list[str], kind: str, required: Sequence[str] = ()) -> dict[str, str]:
    """Map lower-case canonical header names to the names as written; check the `required` ones."""
    names = {h.strip().lower(): h for h in header}
    missing = [c for c in required if c not in names]
    if missing:
        raise InputError(
            path,
            "line 1",
            f"a {kind} header with column(s) {', '.join(missing)} (case-insensitive)",
            ",".join(header),
        )
    return names


# --- pyarrow read, with a Python fallback that names the line and column ---------------------------


def locate_error(path: Path, header: list[str], int_columns: set[str], arrow_message: str) -> InputError:
    """Scan the file with the csv module to find the first row pyarrow refused."""
    text = files.read_bytes(path).decode("utf-8", errors="replace")
    ends_with_newline = text.endswith("\n")
    lower = [h.strip().lower() for h in header]
    int_idx = [i for i, h in enumerate(lower) if h in int_columns]
    reader = csv.reader(io.StringIO(text))
    try:
        next(reader)
        last_line = text.count("\n") + (0 if ends_with_newline else 1)
        for row in reader:
            line = reader.line_num
            if not row:
                continue
            if len(row) != len(header):
                cut = (not ends_with_newline) and line >= last_line
                return InputError(
                    path,
                    f"line {line}",
                    f"{len(header)} columns as in the header",
                    f"{len(row)}" + (" (the file ends mid-row: truncated?)" if cut else ""),
                )
            for i in int_idx:
                value = row[i].strip()
                try:
                    number = int(value)
                except ValueError:
                    return InputError(
                        path, f"line {line}, column {header[i]}", "an integer (ns or id)", repr(row[i])
                    )
                if not -(2**63) <= number < 2**63:
                    return InputError(path, f"line {line}, column {header[i]}", "an integer that fits int64 (ns or id)",
                                      repr(row[i])[:80])
    except csv.Error as exc:
        return InputError(path, f"line {reader.line_num}", "well-formed CSV", files.said(exc))
    return InputError(path, None, "CSV that pyarrow can parse", arrow_message)


def read_arrow(path: Path, header: list[str], types: dict[str, Any], int_columns: set[str],
               stream_gzip: bool = False) -> Any:
    """pyarrow table of the columns in `types` (keys are names as written). `stream_gzip`: a gzip file
    is decompressed as it is parsed rather than into memory first (the lean read's bounded memory)."""
    source: Any = str(path)
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == files.GZIP_MAGIC or files.is_gzip_name(path):
        source = (pa.CompressedInputStream(pa.OSFile(str(path)), "gzip") if stream_gzip and magic == files.GZIP_MAGIC
                  else io.BytesIO(files.read_bytes(path)))
    try:
        return pacsv.read_csv(
            source,
            read_options=pacsv.ReadOptions(block_size=1 << 24),
            convert_options=pacsv.ConvertOptions(
                include_columns=list(types),
                column_types=types,
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except pa.ArrowException as exc:  # ArrowInvalid, ArrowTypeError, ArrowKeyError (a header pyarrow reads otherwise)
        raise locate_error(path, header, int_columns, files.said(exc)) from exc


def int_column(table: Any, name: str | None, n: int, path: Path, required: bool = False,
               expected: str = "an integer timestamp (ns)") -> np.ndarray:
    """An int64 column; an empty cell is -1 (unknown), or with `required` an `InputError` naming its line."""
    if name is None:
        return np.full(n, -1, dtype=np.int64)
    col = table.column(name)
    if col.null_count:
        if required:
            first = int(np.flatnonzero(pc.is_null(col).to_numpy(zero_copy_only=False))[0])
            raise InputError(path, f"line {first + 2}, column {name}", expected, "an empty cell")
        col = pc.fill_null(col, -1)
    return col.to_numpy().astype(np.int64, copy=False)


def agent_column(table: Any, name: str | None, n: int) -> np.ndarray:
    """Agent ids as written (`4`, `"Agent 4"`, `"GPU 3"`, empty) to int64 (-1 unknown).

    The column is read dictionary-encoded, so only the distinct values go through Python.
    """
    if name is None:
        return np.full(n, -1, dtype=np.int64)
    parts = []
    for chunk in table.column(name).chunks:
        values = chunk.dictionary.to_pylist()
        lookup = np.array([agent_number(v) for v in values] + [-1], dtype=np.int64)
        idx = chunk.indices.fill_null(len(values)).to_numpy()
        parts.append(lookup[idx])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def agent_number(value: str | None) -> int:
    """`4`, `"Agent 4"`, `"GPU 3"` -> 4, 3; empty, other text, or a number past int64 -> -1 (unknown)."""
    if value is None:
        return -1
    match = _AGENT_NUMBER.search(value)
    if not match or len(match.group(1)) > 20:
        return -1
    number = int(match.group(1))
    return number if -(2**63) <= number < 2**63 else -1


def dictionary_codes(table: Any, name: str) -> tuple[np.ndarray, list[str]]:
    """int32 codes and the distinct values of a column read as `dictionary<int32, string>`.

    pyarrow gives each block its own dictionary; one running dictionary in first-seen order maps them
    all, so only the distinct values of each block pass through Python, never a row's text.
    """
    running: dict[str, int] = {}
    parts = []
    for chunk in table.column(name).chunks:
        values = chunk.dictionary.to_pylist()
        remap = np.array([running.setdefault(v, len(running)) for v in values], dtype=np.int32)
        parts.append(remap[chunk.indices.to_numpy(zero_copy_only=False)] if len(values) else
                     np.zeros(len(chunk), dtype=np.int32))
    codes = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    return codes, list(running)


def string_column(table: Any, name: str) -> pd.Series:
    return table.column(name).to_pandas().astype("str")


def line_label(i: int) -> str:
    return f"line {i + 2}"


