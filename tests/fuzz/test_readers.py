"""Every reader, fed mutated real files, either refuses with a PerflibError or returns valid tables.

The inputs are real files (public fixtures through `support.fixture`, the project's own samples in
tests/data) and files written by `perflib.traces.writers`. Hypothesis mutates them: bytes (cut, flipped,
inserted, deleted, lines duplicated), JSON values (replaced by wrong types, NaN, infinities, huge and
negative numbers; keys dropped; list items duplicated), CSV cells and columns, SQLite cells, tables and
rows, Parquet metadata and columns. The property, for `read_trace` (and `read_stats`):

- it raises `PerflibError` (an `InputError` naming the file and place, on one line), or returns a `Trace` whose three tables
  pass `schema.validate`, hold int64 ns with end >= start, and whose kinds are canonical;
- it raises nothing else, and finishes within `LIMIT_S`;
- no file appears, changes or goes beside the input (each example has a folder of its own).

The budget is `PERFLIB_FUZZ_EXAMPLES` examples per test (tests/fuzz/conftest.py; tests/README.md).
"""

from __future__ import annotations

import copy
import csv
import io
import json
import math
import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import DATA, fixture, time_limit

from perflib.errors import PerflibError
from perflib.traces import ReadMode, read_stats, read_trace, schema, writers
from perflib.traces.trace import CLOCKS, Trace

FUZZ = settings.get_profile("perflib-fuzz")
LIMIT_S = 30
"""No single read of these small files may take longer: a hang fails the example."""


# --- the inputs -----------------------------------------------------------------------------------


def dispatches(n: int = 12) -> pd.DataFrame:
    rng = np.random.default_rng(9)
    start = np.sort(rng.integers(1_700_000_000_000_000_000, 1_700_000_000_100_000_000, n))
    copy = np.arange(n) % 4 == 3
    return schema.dispatch_frame(
        {"kernel": np.where(copy, np.array(["MEMORY_COPY_HOST_TO_DEVICE", "MEMORY_COPY_DEVICE_TO_HOST"])[np.arange(n) % 2],
                            np.array(["void gemv<half>(half const*, float*)", 'rms "norm", 4', "rope"])[np.arange(n) % 3]),
         "start_ns": start, "end_ns": start + rng.integers(0, 50_000, n), "device": 1 + np.arange(n) % 2,
         "queue": np.where(copy, -1, 2), "stream": np.arange(n) % 3, "correlation_id": np.arange(1, n + 1),
         "kind": np.where(copy, "memcpy", "kernel")},
        "rocprofv3-csv", "fuzz")


def _written(kind: str) -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        table = dispatches()
        if kind.startswith("csv-") and len(kind) == 5:
            return writers.write_kernel_trace_csv(table, folder / "run_kernel_trace.csv", kind[-1])
        if kind == "copy-7.0":
            return writers.write_memory_copy_trace_csv(table, folder / "run_memory_copy_trace.csv", True)
        if kind == "copy-6.3":
            return writers.write_memory_copy_trace_csv(table, folder / "run_memory_copy_trace.csv", False)
        if kind == "rocprof-json":
            return writers.write_rocprof_json(table, folder / "run_results.json")
        if kind == "rocpd":
            return writers.write_rocpd(table, folder / "run_results.db")
        if kind == "rocprof-legacy-db":
            return writers.write_results_db(table, folder / "results.db")
        if kind == "kineto":
            return writers.write_kineto_json(table, folder / "trace.json", base_time_ns=1_699_999_000_000_000_000)
        if kind == "kineto-gz":
            return writers.write_kineto_json(table, folder / "trace.json.gz")
        if kind == "perf":
            return writers.write_perf_script(table, folder / "run.perf-script.txt")
        if kind == "parquet":
            from perflib.traces.parquet import write_trace_parquet

            trace = Trace(table, schema.empty_api("cupti-text"), schema.empty_markers("cupti-text"), "realtime",
                          "cupti-text", "lifetime.txt", {"devices": ["H200"]})
            return write_trace_parquet(trace, folder / "trace.parquet", int(table.start_ns.iloc[2]), None)
        raise AssertionError(kind)
    return make


def _head_of(*parts: str, lines: int = 4000) -> Callable[[Path], Path]:
    """The first `lines` lines of a gzipped text sample of tests/data, as plain text (mutations then reach
    the parser, not only gzip's checks)."""
    def make(folder: Path) -> Path:
        import gzip

        src = DATA.joinpath(*parts)
        out = folder / src.name.removesuffix(".gz")
        out.write_text("\n".join(gzip.decompress(src.read_bytes()).decode().splitlines()[:lines]) + "\n")
        return out
    return make


def _copied(*parts: str, data: bool = False) -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        src = DATA.joinpath(*parts) if data else fixture(*parts)
        out = folder / src.name
        shutil.copyfile(src, out)
        return out
    return make


INPUTS: dict[str, tuple[Callable[[Path], Path], Callable[[Path], Any]]] = {
    **{f"csv-{v}": (_written(f"csv-{v}"), read_trace) for v in "ABCDE"},
    "copy-7.0": (_written("copy-7.0"), read_trace),
    "copy-6.3": (_written("copy-6.3"), read_trace),
    "marker-api-csv": (_copied("rocprofv3", "rocm7.0-docs", "marker_api_trace.csv"), read_trace),
    "stats-rocprofv3": (_copied("rocprofv3", "readme-excerpts", "Rocprofv3_OpenMP__omp_kernel_stats.csv"), read_stats),
    "stats-legacy": (_copied("traces", "results.stats.csv", data=True), read_stats),
    "stats-legacy-real": (_copied("external", "rocprof-legacy", "hpctraining_finite-difference_results.stats.csv"),
                          read_stats),
    "rocprof-json": (_written("rocprof-json"), read_trace),
    "rocpd": (_written("rocpd"), read_trace),
    "rocprof-legacy-db": (_written("rocprof-legacy-db"), read_trace),
    "legacy": (_copied("traces", "results.csv", data=True), read_trace),
    "kineto": (_written("kineto"), read_trace),
    "kineto-gz": (_written("kineto-gz"), read_trace),
    "kineto-real": (_copied("kineto", "a100_triton_example.json.gz"), read_trace),
    "nsys-real": (_copied("external", "nsys", "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite"), read_trace),
    "cupti": (_copied("traces", "cupti_trace_injection_sample.txt", data=True), read_trace),
    "parquet": (_written("parquet"), read_trace),
    "perf": (_written("perf"), read_trace),
    "perf-real": (_head_of("traces", "perf_llama_server_b4.perf-script.txt.gz"), read_trace),
    "kineto-cpu-real": (_copied("traces", "vllm_cpu_rank0.pt.trace.json.gz", data=True), read_trace),
}
"""Input name -> (how to make it in a folder, the reader)."""


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> Callable[[str], tuple[Path, Callable[[Path], Any]]]:
    """The base file of an input (made once per module) and its reader."""
    root = tmp_path_factory.mktemp("fuzz-bases")
    made: dict[str, Path] = {}

    def get(name: str) -> tuple[Path, Callable[[Path], Any]]:
        make, reader = INPUTS[name]
        if name not in made:
            folder = root / name
            folder.mkdir(exist_ok=True)
            made[name] = make(folder)
        return made[name], reader
    return get


# --- the property ---------------------------------------------------------------------------------




def listing(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()}


def valid_trace(trace: Trace) -> None:
    assert trace.clock in CLOCKS
    for frame, columns in ((trace.dispatches, schema.DISPATCH_COLUMNS), (trace.api, schema.API_COLUMNS),
                           (trace.markers, schema.MARKER_COLUMNS)):
        schema.validate(frame, columns)
        assert frame["start_ns"].dtype == np.int64 and frame["end_ns"].dtype == np.int64
        assert bool((frame["end_ns"] >= frame["start_ns"]).all())
        assert not frame["source"].isna().any()
    kinds = trace.dispatches["kind"]
    assert not kinds.isna().any() and set(kinds.astype(str)) <= set(schema.DISPATCH_KINDS)
    assert not trace.dispatches["kernel"].isna().any()
    json.dumps(trace.meta, default=str)  # the Parquet form writes it so


def valid_stats(stats: pd.DataFrame) -> None:
    assert list(stats.columns) == ["name", "calls", "total_ns", "average_ns", "percentage", "min_ns", "max_ns",
                                   "stddev"]
    assert stats["calls"].dtype == np.int64 and stats["total_ns"].dtype == np.int64
    assert not stats["name"].isna().any()


def check(data: bytes, name: str, reader: Callable[[Path], Any], root: Path) -> None:
    """Write `data` as `name` in a folder of its own, read it, and hold the property."""
    folder = Path(tempfile.mkdtemp(dir=root))
    try:
        path = folder / name
        path.write_bytes(data)
        before = listing(folder)
        try:
            with time_limit(LIMIT_S):
                out = reader(path)
        except PerflibError as exc:
            assert "\n" not in str(exc), "the command line prints an error as one line"
            assert str(path) in str(exc), "an input error names its file"
            out = None
        assert listing(folder) == before, "the read created, changed or removed a file beside its input"
        if isinstance(out, Trace):
            valid_trace(out)
        elif out is not None:
            valid_stats(out)
        if reader is read_trace:
            agrees_lean(path, out)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def agrees_lean(path: Path, full: Trace | None) -> None:
    """The streamed reads on the same bytes: where the whole read gives a Trace, the lean read gives its
    lean columns and the lean read with ids its whole dispatch table (what `trace summary` and `trace cut`
    read); any fault is one line naming the file, never another exception."""
    for ids in (False, True):
        try:
            with time_limit(LIMIT_S):
                lean = read_trace(path, ReadMode.LEAN_IDS if ids else ReadMode.LEAN)
        except PerflibError as exc:
            assert "\n" not in str(exc) and str(path) in str(exc)
            assert full is None, f"the lean read (ids={ids}) refused what the whole read took: {exc}"
            continue
        if full is None:
            continue
        columns = list(schema.DISPATCH_COLUMNS if ids else schema.LEAN_DISPATCH_COLUMNS)
        got = lean.dispatches[columns]  # a file without dispatches: the canonical empty table, every column
        pd.testing.assert_frame_equal(got.assign(kernel=got["kernel"].astype(str)),
                                      full.dispatches[columns].assign(kernel=full.dispatches["kernel"].astype(str)))


# --- mutations ------------------------------------------------------------------------------------

byte_op = st.tuples(st.sampled_from(["cut", "flip", "insert", "delete", "dup-line", "zero"]),
                    st.integers(0, 2**31), st.binary(min_size=1, max_size=8))


def mutate_bytes(raw: bytes, ops: list[tuple[str, int, bytes]]) -> bytes:
    out = bytearray(raw)
    for op, at, blob in ops:
        i = at % (len(out) + 1)
        if op == "cut":
            del out[i:]
        elif op == "flip" and out:
            out[i % len(out)] ^= blob[0] or 1
        elif op == "insert":
            out[i:i] = blob
        elif op == "delete":
            del out[i:i + len(blob) * 16]
        elif op == "zero":
            out[i:i + len(blob) * 64] = bytes(len(out[i:i + len(blob) * 64]))
        elif op == "dup-line":
            lines = bytes(out).split(b"\n")
            j = at % len(lines)
            out = bytearray(b"\n".join([*lines[:j + 1], lines[j], *lines[j + 1:]]))
    return bytes(out)


HOSTILE_VALUES = st.one_of(
    st.sampled_from([None, True, False, "", "x", "12", "0x1f", "1.5", [], {}, [1], {"a": 1}, float("nan"),
                     float("inf"), float("-inf"), 2**63, 2**63 - 1, 2**64 + 3, -(2**63) - 1, 10**30, -1, 0, 1e300,
                     -1e300, 0.5, -0.0, 2**53 + 1, 1712195495505582.988]),
    st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6),
)


def json_slots(node: Any, out: list) -> list:
    """Every (container, key) of a JSON document, depth first."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        out.append((node, key))
        json_slots(value, out)
    return out


def mutate_json(doc: Any, edits: list[tuple[int, str, Any]]) -> Any:
    for at, action, value in edits:
        slots = json_slots(doc, [])
        if not slots:
            return copy.deepcopy(value)
        parent, key = slots[at % len(slots)]
        if action == "replace":
            parent[key] = copy.deepcopy(value)  # never the strategy's own list or dict: no cycles
        elif action == "drop":
            del parent[key]
        elif action == "duplicate" and isinstance(parent, list):
            parent.insert(key, json.loads(json.dumps(parent[key])))
        elif action == "wrap":
            parent[key] = [parent[key]]
    return doc


json_edit = st.tuples(st.integers(0, 2**31), st.sampled_from(["replace", "replace", "replace", "drop", "duplicate",
                                                               "wrap"]), HOSTILE_VALUES)

CELL_TEXT = st.one_of(st.sampled_from(["", "abc", "1.5", "-1", "99999999999999999999", "-9223372036854775809",
                                       "nan", '"', ",", "\n", "Agent x", "Agent 99999999999999999999", "1e5",
                                       "\x00", "GPU -3", " 12 ", "MEMORY_COPY_DEVICE_TO_HOST", "0x10"]),
                      st.text(max_size=5), st.integers().map(str))
csv_edit = st.tuples(st.sampled_from(["cell", "cell", "cell", "drop-column", "dup-row", "drop-row", "swap"]),
                     st.integers(0, 2**31), st.integers(0, 2**31), CELL_TEXT)


def mutate_csv(text: str, edits: list[tuple[str, int, int, str]]) -> str:
    rows = list(csv.reader(io.StringIO(text)))
    for op, r, c, value in edits:
        if not rows:
            break
        i = r % len(rows)
        if op == "cell" and rows[i]:
            rows[i][c % len(rows[i])] = value
        elif op == "drop-column" and rows[0]:
            j = c % len(rows[0])
            rows = [row[:j] + row[j + 1:] for row in rows]
        elif op == "dup-row":
            rows.insert(i, list(rows[i]))
        elif op == "drop-row":
            del rows[i]
        elif op == "swap":
            j = c % len(rows)
            rows[i], rows[j] = rows[j], rows[i]
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_MINIMAL, lineterminator="\n").writerows(rows)
    return out.getvalue()


SQL_VALUES = st.sampled_from(["NULL", "'text'", "1.5", "-1", "0", "9223372036854775807", "-9223372036854775808",
                              "x'00ff'", "4611686018427387904", "'12'", "1e300", "-0.0", "''"])
sql_edit = st.tuples(st.sampled_from(["cell", "cell", "cell", "delete-rows", "drop", "dup-rows"]),
                     st.integers(0, 2**31), st.integers(0, 2**31), st.integers(0, 2**31), SQL_VALUES)


def mutate_sqlite(path: Path, tables: list[str], edits: list[tuple[str, int, int, int, str]]) -> None:
    con = sqlite3.connect(path)
    try:
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        pool = [t for t in tables if t in names] or sorted(names)
        for op, t, row, col, value in edits:
            table = pool[t % len(pool)]
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
            n = con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
            try:
                if op == "cell" and cols and n:
                    rowid = con.execute(f'SELECT rowid FROM "{table}" LIMIT 1 OFFSET {row % n}').fetchone()[0]
                    con.execute(f'UPDATE "{table}" SET "{cols[col % len(cols)]}" = {value} WHERE rowid = {rowid}')
                elif op == "delete-rows":
                    con.execute(f'DELETE FROM "{table}"')
                elif op == "drop":
                    con.execute(f'DROP TABLE "{table}"')
                    names.discard(table)
                    pool = [p for p in pool if p != table] or sorted(names)  # a file of one table: none left
                    if not pool:
                        break
                elif op == "dup-rows":
                    con.execute(f'INSERT INTO "{table}" SELECT * FROM "{table}"')
            except sqlite3.Error:  # a constraint the schema keeps (NOT NULL, a primary key): another edit
                pass
        con.commit()
    finally:
        con.close()


# --- the tests ------------------------------------------------------------------------------------

BYTE_INPUTS = sorted(INPUTS)
JSON_INPUTS = ["rocprof-json", "kineto", "kineto-real", "kineto-cpu-real"]
CSV_INPUTS = ["csv-A", "csv-B", "csv-C", "csv-D", "csv-E", "copy-7.0", "copy-6.3", "marker-api-csv",
              "stats-rocprofv3", "stats-legacy", "legacy"]
SQL_TABLES = {
    "rocpd": [],  # all of them: the suffixed tables behind the views
    "rocprof-legacy-db": ["KERN"],
    "nsys-real": ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_RUNTIME",
                  "NVTX_EVENTS", "StringIds", "TARGET_INFO_SESSION_START_TIME", "ANALYSIS_DETAILS",
                  "EXPORT_META_DATA"],
}


@pytest.mark.parametrize("name", BYTE_INPUTS)
def test_mutated_bytes(name: str, bases, tmp_path: Path) -> None:
    src, reader = bases(name)
    raw = src.read_bytes()

    @FUZZ
    @given(st.lists(byte_op, min_size=1, max_size=4))
    def run(ops):
        check(mutate_bytes(raw, ops), src.name, reader, tmp_path)

    run()


@pytest.mark.parametrize("name", JSON_INPUTS)
def test_mutated_json_values(name: str, bases, tmp_path: Path) -> None:
    import gzip

    src, reader = bases(name)
    raw = src.read_bytes()
    gz = raw[:2] == b"\x1f\x8b"
    text = gzip.decompress(raw) if gz else raw

    @FUZZ
    @given(st.lists(json_edit, min_size=1, max_size=3))
    def run(edits):
        doc = mutate_json(json.loads(text), edits)
        out = json.dumps(doc).encode()  # NaN and Infinity as the non-standard tokens Python writes
        check(gzip.compress(out) if gz else out, src.name, reader, tmp_path)

    run()


@pytest.mark.parametrize("name", CSV_INPUTS)
def test_mutated_csv_cells(name: str, bases, tmp_path: Path) -> None:
    src, reader = bases(name)
    text = src.read_text()

    @FUZZ
    @given(st.lists(csv_edit, min_size=1, max_size=3))
    def run(edits):
        check(mutate_csv(text, edits).encode(), src.name, reader, tmp_path)

    run()


@pytest.mark.parametrize("name", sorted(SQL_TABLES))
def test_mutated_sqlite(name: str, bases, tmp_path: Path) -> None:
    src, reader = bases(name)

    @FUZZ
    @given(st.lists(sql_edit, min_size=1, max_size=3))
    def run(edits):
        work = Path(tempfile.mkdtemp(dir=tmp_path)) / src.name
        shutil.copyfile(src, work)
        mutate_sqlite(work, SQL_TABLES[name], edits)
        data = work.read_bytes()
        shutil.rmtree(work.parent)
        check(data, src.name, reader, tmp_path)

    run()


def _column_values(kind: str, n: int) -> Any:
    import pyarrow as pa

    values = {
        "nulls": pa.nulls(n, pa.int64()), "some-null": pa.array([None if i % 3 == 1 else i for i in range(n)]),
        "floats": pa.array([i + 0.5 for i in range(n)]), "nan": pa.array([math.nan] * n),
        "text": pa.array([str(i) for i in range(n)]), "huge-uint": pa.array([2**64 - 1] * n, pa.uint64()),
        "negative": pa.array([-(10**18)] * n), "bools": pa.array([i % 2 == 0 for i in range(n)]),
        "odd-kinds": pa.array(["gpu", "kernel"] * (n // 2) + ["kernel"] * (n % 2)),
        "int32": pa.array(list(range(n)), pa.int32()),
    }
    return values[kind]


parquet_edit = st.one_of(
    st.tuples(st.just("meta"), st.lists(json_edit, min_size=1, max_size=2)),
    st.tuples(st.just("column"), st.sampled_from(list(schema.DISPATCH_COLUMNS)),
              st.sampled_from(["nulls", "some-null", "floats", "nan", "text", "huge-uint", "negative", "bools",
                               "odd-kinds", "int32", "drop"])),
    st.tuples(st.just("meta-bytes"), st.binary(max_size=12)),
)


def test_mutated_parquet(bases, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    src, reader = bases("parquet")
    base = pq.read_table(src)

    @FUZZ
    @given(st.lists(parquet_edit, min_size=1, max_size=3))
    def run(edits):
        table = base
        for edit in edits:
            meta = table.schema.metadata or {}
            if edit[0] == "meta":
                try:
                    doc = json.loads(meta.get(b"perflib.trace", b"{}"))
                except ValueError:  # a previous edit left bytes that are not JSON
                    doc = {}
                doc = mutate_json(doc, edit[1])
                table = table.replace_schema_metadata({**meta, b"perflib.trace": json.dumps(doc).encode()})
            elif edit[0] == "meta-bytes":
                table = table.replace_schema_metadata({**meta, b"perflib.trace": edit[1]})
            elif edit[1] in table.column_names:
                i = table.schema.get_field_index(edit[1])
                if edit[2] == "drop":
                    table = table.remove_column(i)
                else:
                    table = table.set_column(i, edit[1], _column_values(edit[2], table.num_rows))
        out = io.BytesIO()
        pq.write_table(table, out)
        check(out.getvalue(), src.name, reader, tmp_path)

    run()


def _outcome(read: Callable[[Path], Any], path: Path) -> Any:
    try:
        with time_limit(LIMIT_S):
            return read(path)
    except PerflibError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
        return exc


def _non_finite(node: Any) -> bool:
    """Whether the document holds NaN or an infinity: the whole read then parses all of it with the standard
    parser (orjson refuses them), the stream only the chunk or value that holds it, so an integer beyond 64
    bits elsewhere is an int in one and a float in the other."""
    if isinstance(node, float):
        return not math.isfinite(node)
    items = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    return any(_non_finite(v) for v in items)


def test_streamed_rocprof_json_agrees_with_the_whole_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutated rocprofv3 JSON (kernels, copies, API calls, markers), streamed in chunks of about two records:
    the same error as the whole read, word for word, or the same tables (the dispatches' lean columns)."""
    from perflib.traces import rocprof_json_stream

    monkeypatch.setattr(rocprof_json_stream, "PARSE", 300)
    table = dispatches()
    kernels = table[table["kind"] == "kernel"]
    api = pd.DataFrame({"name": "hipLaunchKernel", "start_ns": kernels["start_ns"] - 900,
                        "end_ns": kernels["start_ns"] - 100, "correlation_id": kernels["correlation_id"]})
    markers = pd.DataFrame({"name": ["step 0", "mark"], "start_ns": table["start_ns"].iloc[[0, 3]].to_numpy(),
                            "end_ns": table["end_ns"].iloc[[2, 3]].to_numpy(), "correlation_id": [900, 901]})
    src = writers.write_rocprof_json(table, tmp_path / "base_results.json", api=api, markers=markers)
    base = json.loads(src.read_text())

    @FUZZ
    @given(st.lists(json_edit, min_size=1, max_size=3))
    def run(edits):
        doc = mutate_json(copy.deepcopy(base), edits)
        path = Path(tempfile.mkdtemp(dir=tmp_path)) / "x_results.json"
        path.write_text(json.dumps(doc, separators=(",", ":")))
        full, lean = _outcome(read_trace, path), _outcome(lambda p: read_trace(p, ReadMode.LEAN), path)
        if _non_finite(doc):
            assert isinstance(full, PerflibError) == isinstance(lean, PerflibError) or isinstance(full, Trace)
        elif isinstance(full, PerflibError):
            assert str(lean) == str(full)
        else:
            assert isinstance(lean, Trace), str(lean)
            columns = list(schema.LEAN_DISPATCH_COLUMNS)
            got, expected = lean.dispatches, full.dispatches[columns]
            pd.testing.assert_frame_equal(got.assign(kernel=got["kernel"].astype(str)),
                                          expected.assign(kernel=expected["kernel"].astype(str)))
            pd.testing.assert_frame_equal(lean.api, full.api)
            pd.testing.assert_frame_equal(lean.markers, full.markers)
            assert lean.meta == {**full.meta, "lean": True}
        shutil.rmtree(path.parent)

    run()
