"""The streamed rocprofv3 JSON read (`read_trace(path, ReadMode.LEAN)`, `rocprof_json_stream`) gives the
full read's tables and figures: on the real MI350 fixture, and on files written by
`writers.write_rocprof_json` in every layout the stream must cut (compact, spaced, indented, gzip, keys
in any order, several processes, empty buffers, chunks of a few bytes); and every fault is the full
read's `InputError`, with its label."""

from __future__ import annotations

import gzip
import json
import random
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from perflib.attribution import summarize
from perflib.errors import InputError
from perflib.traces import ReadMode, read_trace, rocprof_json, rocprof_json_stream, schema, writers
from tests.support import fixture_paths
from tests.synthetic import decode_trace
from tests.traces.test_hostile import ROCPROF_JSON, table
from tests.traces.test_lean import assert_same_summary

REAL = fixture_paths("rocprofv3/json-mi350/*_results.json.gz")
P0 = "rocprofiler-sdk-tool[0]"
KD = f"{P0}.buffer_records.kernel_dispatch"
TRICKY = 'a "quoted" },{ [bracketed] {name}\\ ядро'
"""A kernel name holding the stream's cut marks, brackets, an escaped quote and backslash, non-ASCII."""


def assert_same_tables(path: Path) -> tuple[Any, Any]:
    """The lean read's tables are the full read's: the dispatches restricted to the lean columns (row
    for row, names as text), the API calls and markers whole, the clock, source and meta (plus `lean`)."""
    full, lean = read_trace(path), read_trace(path, ReadMode.LEAN)
    assert list(lean.dispatches.columns) == list(schema.LEAN_DISPATCH_COLUMNS)
    assert isinstance(lean.dispatches["kernel"].dtype, pd.CategoricalDtype)
    expected = full.dispatches[list(schema.LEAN_DISPATCH_COLUMNS)]
    pd.testing.assert_frame_equal(lean.dispatches.assign(kernel=lean.dispatches["kernel"].astype(str)),
                                  expected.assign(kernel=expected["kernel"].astype(str)))
    pd.testing.assert_frame_equal(lean.api, full.api)
    pd.testing.assert_frame_equal(lean.markers, full.markers)
    assert (lean.clock, lean.source, lean.path) == (full.clock, full.source, full.path)
    assert lean.meta == {**full.meta, "lean": True}
    return full, lean


# --- the real fixture -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_fixture_same_tables_and_summary(path: Path) -> None:
    full, lean = assert_same_tables(path)
    assert len(lean.dispatches) == 43_915 and lean.meta["kernel_name_field"] == "formatted_kernel_name"
    assert_same_summary(path)


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_fixture_in_1_kib_chunks(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut every kilobyte (records, kernel_symbols, agents), read in 64 KiB blocks: the same tables."""
    monkeypatch.setattr(rocprof_json_stream, "PARSE", 1024)
    monkeypatch.setattr(rocprof_json_stream, "BLOCK", 1 << 16)
    assert_same_tables(path)


# --- generated files ------------------------------------------------------------------------------


def _trace(seed: int, steps: int = 10, shift: int = 0) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Kernels (one with `TRICKY` for a name) and copies both ways, some starting at the same ns as a
    kernel (ties keep their order), a launch call for each kernel, and one marker range per step
    plus a mark."""
    frame, truth = decode_trace(steps=steps, layers=2, seed=seed)
    frame = frame.copy()
    frame["kernel"] = frame["kernel"].astype(str).where(frame.index % 11 != 4, TRICKY)
    rng = np.random.default_rng(seed)
    extra = frame.iloc[rng.choice(len(frame), size=12, replace=False)].copy()
    extra["kernel"] = ["MEMORY_COPY_HOST_TO_DEVICE" if i % 2 else "MEMORY_COPY_DEVICE_TO_HOST" for i in range(12)]
    extra["kind"] = pd.Categorical(["memcpy"] * 12, categories=["kernel", "memcpy", "memset"])
    extra["end_ns"] = extra["start_ns"] + 1_500
    frame = pd.concat([frame, extra], ignore_index=True).sort_values("start_ns", kind="stable", ignore_index=True)
    frame["start_ns"] += shift
    frame["end_ns"] += shift
    frame["correlation_id"] = np.arange(1, len(frame) + 1, dtype=np.int64) + shift // 1000
    frame["device"] = 1 + seed % 2
    k = frame[frame["kind"] == "kernel"]
    api = pd.DataFrame({"name": np.where(np.arange(len(k)) % 5 == 0, "hipModuleLaunchKernel", "hipLaunchKernel"),
                        "start_ns": k["start_ns"].to_numpy() - 4_000, "end_ns": k["start_ns"].to_numpy() - 1_000,
                        "tid": 7, "correlation_id": k["correlation_id"].to_numpy()})
    starts, ends = np.asarray(truth["starts"]) + shift, np.asarray(truth["ends"]) + shift
    markers = pd.DataFrame({"name": [f"step {i}" for i in range(len(starts))] + ["sync"],
                            "start_ns": [*(starts - 500).tolist(), int(starts[0])],
                            "end_ns": [*(ends - 600).tolist(), int(starts[0])], "tid": 8})
    markers["correlation_id"] = np.arange(len(markers), dtype=np.int64) + 10**9 + shift // 1000
    return frame, api, markers


def _doc(tmp_path: Path, seed: int = 1, processes: int = 1) -> dict:
    """A rocprofv3 JSON document of `processes` processes, written by the writer and loaded."""
    procs = []
    for i in range(processes):
        frame, api, markers = _trace(seed + i, shift=i * 7_000_000)
        path = writers.write_rocprof_json(frame, tmp_path / f"w{i}_results.json", pid=100 + i, api=api,
                                          markers=markers)
        procs += json.loads(path.read_text())["rocprofiler-sdk-tool"]
        path.unlink()
    return {"rocprofiler-sdk-tool": procs}


def _shuffled(value: Any, rng: random.Random) -> Any:
    """Every object's keys in a random order (lists keep theirs)."""
    if isinstance(value, dict):
        keys = list(value)
        rng.shuffle(keys)
        return {k: _shuffled(value[k], rng) for k in keys}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


def _with_extras(doc: dict) -> dict:
    """Keys the reader skips, with content: top-level keys on both sides, buffers it does not read
    (odd types included: the full read ignores them), callback records, code objects."""
    for proc in doc["rocprofiler-sdk-tool"]:
        buffers = proc["buffer_records"]
        buffers["memory_allocation"] = [{"size": 1, "kind": "x", "start_timestamp": 1.5, "n": [1, {"a": [2]}]}] * 30
        buffers["pc_sample_host_trap"] = {"nested": [[1, 2], [3]], "text": "]}{["}
        proc["callback_records"] = {"hip_api": [{"kind": 5, "args": {"ptr": "0x1"}}] * 40, "names": ["},{"] * 5}
        proc["code_objects"] = [{"uri": "file:///a.co", "size": 10}] * 20
    return {"before": {"a": [1, 2, {"b": None}]}, **doc, "after": [[], {}, "x", 1.25, None, True]}


def _write(doc: dict, path: Path, style: str) -> Path:
    """`doc` as compact (rocprofv3's own), spaced (json.dumps' default) or indented JSON; gzipped for .gz."""
    kwargs = {"compact": {"separators": (",", ":")}, "spaced": {}, "indented": {"indent": 2}}[style]
    text = json.dumps(doc, ensure_ascii=False, **kwargs).encode()
    path.write_bytes(gzip.compress(text) if path.name.endswith(".gz") else text)
    return path


CASES = [  # style, gzip, parse bytes, block bytes, keys shuffled and extras
    ("compact", False, None, None, False),
    ("compact", True, 1024, 4096, True),
    ("spaced", False, 5, 7, True),
    ("indented", True, 1024, 300, False),
    ("indented", False, 3, 1 << 20, True),
    ("compact", False, 64, 97, True),
]


@pytest.mark.parametrize(("style", "gz", "parse", "block", "odd"), CASES)
def test_generated_same_tables_and_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, style: str, gz: bool,
                                           parse: int | None, block: int | None, odd: bool) -> None:
    """Two processes with kernels, copies, API calls and markers, in each layout and chunk size: the
    full read's tables and every summary figure, steps from the markers included."""
    if parse:
        monkeypatch.setattr(rocprof_json_stream, "PARSE", parse)
    if block:
        monkeypatch.setattr(rocprof_json_stream, "BLOCK", block)
    doc = _doc(tmp_path, processes=2)
    if odd:
        doc = _shuffled(_with_extras(doc), random.Random(parse or 0))
    path = _write(doc, tmp_path / ("x_results.json.gz" if gz else "x_results.json"), style)
    full, lean = assert_same_tables(path)
    assert set(lean.dispatches["kind"].astype(str)) == {"kernel", "memcpy"}
    assert TRICKY in set(lean.dispatches["kernel"].astype(str))
    assert sorted(set(lean.api["pid"])) == [100, 101] and len(lean.markers) == 2 * 11
    assert_same_summary(path, steps=r"^step \d+")
    assert "ranges (host ranges, on the kernels they launched)" in summarize(lean, steps=r"^step \d+").step_method


def test_keys_in_any_order_and_kernel_ids_per_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kernel_symbols and strings after buffer_records, buffer_records first, the process list before
    other top-level keys; two processes whose kernel ids mean different kernels: each read by its own
    symbols."""
    monkeypatch.setattr(rocprof_json_stream, "PARSE", 200)
    doc = _doc(tmp_path, processes=2)
    a, b = doc["rocprofiler-sdk-tool"]
    last = len(b["kernel_symbols"]) - 1
    for sym in b["kernel_symbols"][1:]:
        sym["kernel_id"] = last + 1 - sym["kernel_id"]
    b["kernel_symbols"] = [b["kernel_symbols"][0], *reversed(b["kernel_symbols"][1:])]
    for r in b["buffer_records"]["kernel_dispatch"]:
        r["dispatch_info"]["kernel_id"] = last + 1 - r["dispatch_info"]["kernel_id"]
    order_a = ["buffer_records", "metadata", "kernel_symbols", "agents", "strings"]
    order_b = ["strings", "buffer_records", "agents", "kernel_symbols", "metadata"]
    doc = {"rocprofiler-sdk-tool": [{k: a[k] for k in order_a}, {k: b[k] for k in order_b}], "z": 1}
    path = _write(doc, tmp_path / "x_results.json", "compact")
    full, lean = assert_same_tables(path)
    truth = pd.concat([_trace(1)[0], _trace(2, shift=7_000_000)[0]])
    assert sorted(lean.dispatches["kernel"].astype(str)) == sorted(truth["kernel"].astype(str))


def test_repeated_keys_count_their_last_value(tmp_path: Path) -> None:
    """JSON with a key twice: the last value counts, as orjson's whole parse keeps it."""
    doc = _doc(tmp_path)
    text = json.dumps(doc, separators=(",", ":"))
    records = json.dumps(doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"][:5])
    text = text.replace('"kernel_dispatch":[', f'"kernel_dispatch":{records},"kernel_dispatch":[', 1)
    text = '{"rocprofiler-sdk-tool":[],' + text[1:]
    path = tmp_path / "x_results.json"
    path.write_text(text)
    full, lean = assert_same_tables(path)
    assert len(lean.dispatches) == len(_trace(1)[0])


@pytest.mark.parametrize("case", ["no-processes", "empty-buffers", "null-buffers", "no-buffer-keys",
                                  "copies-only", "kernels-only"])
def test_empty_and_partial_buffers(tmp_path: Path, case: str) -> None:
    doc = _doc(tmp_path)
    proc = doc["rocprofiler-sdk-tool"][0]
    buffers = proc["buffer_records"]
    if case == "no-processes":
        doc["rocprofiler-sdk-tool"] = []
    elif case == "empty-buffers":
        proc["buffer_records"] = {k: [] for k in buffers}
    elif case == "null-buffers":
        proc["buffer_records"] = None
    elif case == "no-buffer-keys":
        proc["buffer_records"] = {}
    elif case == "copies-only":
        buffers["kernel_dispatch"] = []
    else:
        buffers["memory_copy"], buffers["hip_api"], buffers["marker_api"] = [], None, {}
    path = _write(doc, tmp_path / "x_results.json", "spaced")
    full, lean = assert_same_tables(path)
    rows = {"no-processes": 0, "empty-buffers": 0, "null-buffers": 0, "no-buffer-keys": 0, "copies-only": 12}
    assert len(lean.dispatches) == rows.get(case, len(_trace(1)[0]) - 12)
    assert lean.meta["processes"] == (0 if case == "no-processes" else 1)


def test_directory_of_json_files_read_lean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rocprofv3 output folder holding JSON (one gzipped): its lean read streams each file."""
    monkeypatch.setattr(rocprof_json_stream, "PARSE", 512)
    calls = []
    real = rocprof_json_stream.read_json_lean
    monkeypatch.setattr(rocprof_json_stream, "read_json_lean", lambda p, *a: calls.append(p) or real(p, *a))
    (tmp_path / "run" / "host").mkdir(parents=True)
    _write(_doc(tmp_path, seed=1), tmp_path / "run" / "host" / "11_results.json", "compact")
    _write(_doc(tmp_path, seed=3), tmp_path / "run" / "host" / "12_results.json.gz", "compact")
    full, lean = assert_same_tables(tmp_path / "run")
    assert len(calls) == 2 and len(lean.meta["files"]) == 2
    assert_same_summary(tmp_path / "run")


def test_summary_command_reads_json_lean(tmp_path: Path, capsys: pytest.CaptureFixture,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`trace summary --json` on a rocprofv3 JSON file: the stream's figures, the full read's values."""
    from perflib.cli import main

    path = _write(_doc(tmp_path), tmp_path / "x_results.json", "compact")
    expected = summarize(rocprof_json.read_json(path), top=1000).to_dict()
    monkeypatch.setattr(rocprof_json, "read_json", lambda p: pytest.fail("the full read was used"))
    assert main(["trace", "summary", str(path), "--json", "--top", "1000"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {k: out[k] for k in expected} == expected


# --- faults ---------------------------------------------------------------------------------------


def _errors(path: Path) -> tuple[InputError, InputError]:
    """The full read's and the stream's error for one file (each must raise)."""
    with pytest.raises(InputError) as full:
        rocprof_json.read_json(path)
    with pytest.raises(InputError) as lean:
        rocprof_json_stream.read_json_lean(path)
    assert lean.value.path == str(path) and "\n" not in str(lean.value)
    return full.value, lean.value


@pytest.mark.parametrize(("mutate", "where", "expected"), [c[1:] for c in ROCPROF_JSON],
                         ids=[c[0] for c in ROCPROF_JSON])
def test_odd_types_give_the_full_reads_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mutate, where: str,
                                             expected: str) -> None:
    """Every odd type of test_hostile, read in chunks of about one record: the same error, word for word."""
    monkeypatch.setattr(rocprof_json_stream, "PARSE", 150)
    path = writers.write_rocprof_json(table(), tmp_path / "x_results.json")
    doc = json.loads(path.read_text())
    mutate(doc)
    _write(doc, path, "compact")
    full, lean = _errors(path)
    assert str(lean) == str(full)
    assert (lean.where or "").startswith(where) and expected in lean.expected


def _big(tmp_path: Path, change) -> Path:
    """A file of 600+ dispatches (read in chunks of ~2 records), `change`d in its parsed form."""
    frame, _ = decode_trace(steps=40, layers=2, seed=11)
    path = writers.write_rocprof_json(frame, tmp_path / "x_results.json")
    doc = json.loads(path.read_text())
    change(doc["rocprofiler-sdk-tool"][0], doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"])
    return _write(doc, path, "compact")


def _set(record: dict, value: Any, *keys: str) -> None:
    for key in keys[:-1]:
        record = record[key]
    record[keys[-1]] = value


FAULTS: list[tuple[str, Any, str, str]] = [
    ("float-time-late", lambda p, kd: _set(kd[601], 5.0, "start_timestamp"), f"{KD}[601]", "an integer start_ns"),
    ("time-beyond-int64", lambda p, kd: _set(kd[480], 2**63, "end_timestamp"), f"{KD}[480]", "fits int64"),
    ("time-beyond-64-bits", lambda p, kd: _set(kd[480], 2**64 + 1, "end_timestamp"), f"{KD}[480]",
     "an integer end_ns"),
    ("negative-beyond-int64", lambda p, kd: _set(kd[7], -(2**63) - 1, "start_timestamp"), f"{KD}[7]",
     "an integer start_ns"),
    ("missing-symbol", lambda p, kd: p["kernel_symbols"].pop(), f"{P0}.kernel_symbols", "a symbol for every kernel_id"),
    ("end-before-start", lambda p, kd: _set(kd[333], 1, "end_timestamp"), f"{KD}[333]", "an end timestamp >= its start"),
    # the fields in order, whatever chunk each fault is in: kernel_id's at 600 before start's at 3
    ("two-faults-field-order", lambda p, kd: (_set(kd[3], 1.5, "start_timestamp"),
                                              _set(kd[600], "7", "dispatch_info", "kernel_id")),
     f"{KD}[600]", "an integer kernel_id"),
    # a record lacking a field (at 650) before any value of a wrong type (at 2)
    ("missing-field-before-types", lambda p, kd: (_set(kd[2], 1.5, "end_timestamp"), kd[650].pop("correlation_id")),
     f"{KD}[650]", "its correlation_id field"),
    ("dispatch-info-list", lambda p, kd: _set(kd[420], [], "dispatch_info"), f"{KD}[420]", "its kernel_id field"),
    ("buffer-a-string", lambda p, kd: _set(p, "x", "buffer_records", "memory_copy"),
     f"{P0}.buffer_records.memory_copy", "a list of records"),
    ("api-tid-null", lambda p, kd: p["buffer_records"].__setitem__("hip_api", [
        {"kind": 5, "operation": 1, "thread_id": None, "start_timestamp": 1, "end_timestamp": 2,
         "correlation_id": {"internal": 1}}]), f"{P0}.buffer_records.hip_api[0]", "an integer tid"),
]


@pytest.mark.parametrize(("change", "where", "expected"), [c[1:] for c in FAULTS], ids=[c[0] for c in FAULTS])
def test_record_faults_in_small_chunks_give_the_full_reads_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 change, where: str, expected: str) -> None:
    """Labels count records over the whole buffer, and the fault named is the one the whole read finds."""
    monkeypatch.setattr(rocprof_json_stream, "PARSE", 700)
    full, lean = _errors(_big(tmp_path, change))
    assert str(lean) == str(full)
    assert lean.where == where and expected in lean.expected


def _valid_text(tmp_path: Path) -> bytes:
    return json.dumps(_doc(tmp_path), separators=(",", ":")).encode()


@pytest.mark.parametrize("at", ["kernel_dispatch", "kernel_symbols", "strings", "memory_copy", "end"])
def test_cut_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at: str) -> None:
    """A file cut inside each part: "complete JSON" at a byte, the file named; a gzip cut: the full
    read's error, word for word."""
    monkeypatch.setattr(rocprof_json_stream, "PARSE", 256)
    text = _valid_text(tmp_path)
    cut = len(text) - 1 if at == "end" else text.index(f'"{at}":'.encode()) + len(at) + 40
    path = tmp_path / "x_results.json"
    path.write_bytes(text[:cut])
    full, lean = _errors(path)
    assert full.expected == "complete JSON"
    assert lean.expected == "complete JSON" or "the end of the file" in (lean.found or ""), str(lean)
    assert lean.where.startswith("byte ") and int(lean.where[5:]) <= cut
    gz = tmp_path / "x_results.json.gz"
    packed = gzip.compress(text)
    gz.write_bytes(packed[: len(packed) * cut // len(text)])
    full, lean = _errors(gz)
    assert str(lean) == str(full) and "gzip" in lean.expected


def test_cut_inside_records_says_which_array(tmp_path: Path) -> None:
    text = _valid_text(tmp_path)
    path = tmp_path / "x_results.json"
    path.write_bytes(text[: text.index(b'"kernel_dispatch":[') + 400])
    full, lean = _errors(path)
    assert "file cut" in (lean.found or "") and "kernel_dispatch" in (lean.found or "")


@pytest.mark.parametrize(("text", "where", "expected"), [
    (b"garbage, not JSON", "byte 0", "complete JSON"),
    (b'{"rocprofiler-sdk-tool": [{"buffer_records": {"kernel_dispatch": [{"size": 1,, }]}}]}', "byte",
     "complete JSON"),
    (b'{"rocprofiler-sdk-tool": [{"buffer_records": {}}]} trailing', "byte", "complete JSON"),
    (b"[1, 2]", "top level", "rocprofiler-sdk-tool"),
    (b'{"other": 1}', "top level", "rocprofiler-sdk-tool"),
    (b'{"rocprofiler-sdk-tool": 5}', "top level", "rocprofiler-sdk-tool"),
    (b'{"rocprofiler-sdk-tool": [], "rocprofiler-sdk-tool": 3}', "top level", "rocprofiler-sdk-tool"),
    (b'{"rocprofiler-sdk-tool": [{"metadata": {}}]}', P0, "a process object with buffer_records"),
    (b'{"rocprofiler-sdk-tool": [{"buffer_records": {}}, 7]}', "rocprofiler-sdk-tool[1]", "a process object"),
    (b'{"x": ' + b"[" * 5000 + b"]" * 5000 + b', "rocprofiler-sdk-tool": []}', None, "nested to a sensible depth"),
    (b'{"rocprofiler-sdk-tool": [{"metadata": {"pid": ' + b"7" * 5000 + b'}, "buffer_records": {}}]}', None,
     "numbers of a sensible length"),
])
def test_garbage_and_odd_documents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: bytes, where: str | None,
                                   expected: str) -> None:
    """Not JSON, not one whole value, not rocprofv3's object, too deep, too long a number: an
    InputError naming the file and where, what the full read expects too."""
    monkeypatch.setattr(rocprof_json_stream, "PARSE", 16)
    path = tmp_path / "x_results.json"
    path.write_bytes(text)
    full, lean = _errors(path)
    assert expected in lean.expected and expected in full.expected
    if where is None:
        assert lean.where is None and str(lean) == str(full)
    else:
        assert lean.where.startswith(where)
    if where is not None and not where.startswith("byte"):
        assert str(lean) == str(full)


@pytest.mark.parametrize("text", [
    b'{"rocprofiler-sdk-tool": [{"\xedetadata": {}, "buffer_records": {}}]}',  # a key
    b'{"rocprofiler-sdk-tool": [{"summary": "\xff", "buffer_records": {}}]}',  # a value skipped
    b'{"rocprofiler-sdk-tool": [{"metadata": {"node": "\xc3("}, "buffer_records": {}}]}',  # a value read whole
    b'{"rocprofiler-sdk-tool": [{"buffer_records": {"kernel_dispatch": [{"a": 1}, {"b": "\xfe"}, {}]}}]}',  # a chunk
    b'{"rocprofiler-sdk-tool": [{"buffer_records": {"hip_api": [{"a": "\xfe"}]}}]}',  # its array's last chunk
])
def test_text_that_is_not_utf8(tmp_path: Path, text: bytes) -> None:
    """Where a whole-file parse refuses bytes that are not UTF-8, so does the stream, at the same byte."""
    path = tmp_path / "x_results.json"
    path.write_bytes(text)
    full, lean = _errors(path)
    assert lean.expected == full.expected == "UTF-8 JSON text" and lean.where == full.where


def test_binary_garbage(tmp_path: Path) -> None:
    path = tmp_path / "x_results.json"
    path.write_bytes(bytes(range(256)) * 4)
    _errors(path)
    path.write_bytes(b'{"rocprofiler-sdk-tool": [{"buffer_records": {"kernel_dispatch": [{"a": "\xff\xfe"}]}}]}')
    _errors(path)


# --- memory ---------------------------------------------------------------------------------------


def _peak_bytes(read, path: Path) -> int:
    """Peak Python and numpy allocation (tracemalloc) while `read(path)` runs."""
    tracemalloc.start()
    try:
        read(path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_memory_grows_with_the_dispatches_not_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same 5,000 dispatches, alone (2.5 MB) and beside 18 MB of records the tables do not read: the
    lean read's peak (blocks of 128 KiB, chunks of 32 KiB) grows by less than 1 MiB and stays below the
    smaller file's size; the full read's grows by more than the extra text."""
    monkeypatch.setattr(rocprof_json_stream, "BLOCK", 1 << 17)
    monkeypatch.setattr(rocprof_json_stream, "PARSE", 1 << 15)
    frame, _ = decode_trace(steps=250, layers=2, seed=12)
    small = writers.write_rocprof_json(frame, tmp_path / "small_results.json")
    doc = json.loads(small.read_text())
    filler = {"size": 48, "kind": 14, "operation": 1, "thread_id": 9, "correlation_id": {"internal": 1, "external": 0},
              "start_timestamp": 10, "end_timestamp": 20, "address": {"handle": 4096}, "allocation_size": 64}
    doc["rocprofiler-sdk-tool"][0]["buffer_records"]["memory_allocation"] = [filler] * 60_000
    doc["rocprofiler-sdk-tool"][0]["callback_records"] = {"hip_api": [filler] * 40_000}
    big = _write(doc, tmp_path / "big_results.json", "compact")
    extra = big.stat().st_size - small.stat().st_size
    assert extra > 16e6 and len(frame) > 5_000
    lean_small, lean_big = (_peak_bytes(rocprof_json_stream.read_json_lean, p) for p in (small, big))
    full_small, full_big = (_peak_bytes(rocprof_json.read_json, p) for p in (small, big))
    assert lean_big - lean_small < 1 << 20 < extra < full_big - full_small
    assert lean_big < small.stat().st_size
