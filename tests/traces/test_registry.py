"""The registry of trace formats (`perflib.traces.formats`): every format is one entry, and each entry's
file is told as that format and reads back, in every `ReadMode`, as the dispatches it was written from."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support import REPO

from perflib.traces import FORMATS, ReadMode, detect_format, read_trace, schema

COMPARED = ["kernel", "start_ns", "end_ns", "kind"]
"""What every format carries as written (ids are each format's own: queue, for one, only rocprofv3 has)."""


def kernel_table(n: int = 60, seed: int = 3) -> pd.DataFrame:
    """`n` kernels on two devices and streams, distinct starts, plain names (no format renames them)."""
    rng = np.random.default_rng(seed)
    start = 10**12 + np.cumsum(rng.integers(2_000, 50_000, n))
    names = np.array(["gemm_kernel", "rms_norm_kernel", "attention_decode"])[rng.integers(0, 3, n)]
    return schema.dispatch_frame({
        "kernel": names, "start_ns": start, "end_ns": start + rng.integers(500, 40_000, n),
        "device": rng.integers(0, 2, n), "queue": rng.integers(0, 2, n), "stream": rng.integers(1, 3, n),
        "correlation_id": np.arange(1, n + 1), "kind": "kernel",
    }, "synthetic", "registry")


def _dir_of_csv(table: pd.DataFrame, tmp: Path) -> Path:
    """A rocprofv3 output folder in its default layout, holding the CSV writer's kernel trace."""
    (tmp / "run" / "host").mkdir(parents=True)
    FORMATS["rocprofv3-csv"].write(table, tmp / "run" / "host" / "11_kernel_trace.csv")
    return tmp / "run"


WITHOUT_WRITER: dict[str, Callable[[pd.DataFrame, Path], Path]] = {"rocprofv3-dir": _dir_of_csv}
"""How to make an example of each format that has no writer of its own; a new format needs a writer or
a line here."""


def example(name: str, table: pd.DataFrame, tmp: Path) -> Path:
    fmt = FORMATS[name]
    if fmt.writer is None:
        return WITHOUT_WRITER[name](table, tmp)
    return fmt.write(table, tmp / f"trace{fmt.suffix}")


def _plain(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    out = frame[columns].sort_values(["start_ns", "end_ns"], ignore_index=True)
    return out.assign(**{c: out[c].astype(str) for c in ("kernel", "kind") if c in columns})


@pytest.mark.parametrize("name", list(FORMATS))
def test_every_format_is_detected_and_round_trips_in_every_mode(tmp_path: Path, name: str) -> None:
    table = kernel_table()
    path = example(name, table, tmp_path)
    assert detect_format(path) == name
    full = read_trace(path, ReadMode.FULL)
    expected = table if FORMATS[name].kind is None else table.assign(kind=FORMATS[name].kind)
    pd.testing.assert_frame_equal(_plain(full.dispatches, COMPARED), _plain(expected, COMPARED))
    assert list(full.dispatches.columns) == list(schema.DISPATCH_COLUMNS)
    lean = read_trace(path, ReadMode.LEAN)
    assert list(lean.dispatches.columns) == list(schema.LEAN_DISPATCH_COLUMNS)
    with_ids = read_trace(path, ReadMode.LEAN_IDS)
    for got, columns in ((lean, schema.LEAN_DISPATCH_COLUMNS), (with_ids, schema.DISPATCH_COLUMNS)):
        pd.testing.assert_frame_equal(_plain(got.dispatches, list(columns)), _plain(full.dispatches, list(columns)))
        assert isinstance(got.dispatches["kernel"].dtype, pd.CategoricalDtype)


def test_every_format_without_a_writer_has_an_example_and_only_those() -> None:
    assert {n for n, f in FORMATS.items() if f.writer is None} == set(WITHOUT_WRITER)


def test_entry_read_and_write_name_real_functions() -> None:
    """`module:function` references resolve (a typo fails here, not at the first such file a user reads)."""
    import importlib

    for fmt in FORMATS.values():
        for ref in filter(None, (fmt.reader, fmt.writer)):
            module, _, function = ref.partition(":")
            assert callable(getattr(importlib.import_module(module), function)), ref


def test_the_first_entry_that_claims_a_file_wins(tmp_path: Path) -> None:
    """Detection goes by `FORMATS` order: a `.csv` name beats JSON text, rocprofv3's tool key beats Kineto."""
    table = kernel_table(5)
    json_named_csv = FORMATS["kineto"].write(table, tmp_path / "odd.csv")
    assert detect_format(json_named_csv) == "rocprofv3-csv"
    assert detect_format(FORMATS["rocprofv3-json"].write(table, tmp_path / "x.json")) == "rocprofv3-json"
    assert detect_format(FORMATS["kineto"].write(table, tmp_path / "y.json")) == "kineto"


def test_a_file_of_no_format_names_every_format(tmp_path: Path) -> None:
    from perflib.errors import InputError

    path = tmp_path / "notes.txt"
    path.write_text("nothing a profiler wrote\n")
    with pytest.raises(InputError) as err:
        detect_format(path)
    assert all(f.what in str(err.value) for f in FORMATS.values())


def test_read_trace_takes_a_mode_not_a_flag(tmp_path: Path) -> None:
    path = FORMATS["kineto"].write(kernel_table(5), tmp_path / "k.json")
    with pytest.raises(TypeError, match="ReadMode"):
        read_trace(path, True)  # the former `lean` flag, passed by position


def test_detection_and_the_registry_load_no_reader(tmp_path: Path) -> None:
    """Importing `perflib.traces` and detecting a file loads neither pandas nor numpy nor a reader module,
    so that the Kineto prefetch forks before the heavy imports."""
    path = FORMATS["kineto"].write(kernel_table(5), tmp_path / "k.json")
    code = ("import sys, json; from perflib.traces import detect_format; fmt = detect_format(sys.argv[1]); "
            "print(json.dumps([fmt, sorted(m for m in sys.modules if m in ('pandas', 'numpy', 'pyarrow') "
            "or m in ('perflib.traces.kineto', 'perflib.traces.kineto_stream', 'perflib.traces.rocprof_csv'))]))")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True,
                         cwd=REPO)
    assert json.loads(out.stdout) == ["kineto", []]
