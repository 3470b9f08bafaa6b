"""The chunked CUPTI text read (`read_cupti_text`) gives what the whole-file line-by-line read gave
(`read_cupti_text_by_line`), to the ns and name for name, record for record, and the same errors:
on the real captures, on files of the project's writer, and on a file of every quirk the line path
knows, each cut into chunks as small as one byte so that records straddle every chunk boundary."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import DATA, REPO
from synthetic import decode_trace

from perflib.errors import InputError
from perflib.traces import ReadMode, cupti_layouts, cupti_text, read_trace
from perflib.traces.writers.cupti_text import write_cupti_text

TRACES = DATA / "traces"
REAL = [TRACES / "cupti_trace_injection_sample.txt", TRACES / "cupti_h200_sample.txt.gz",
        REPO / "data" / "raw" / "h200-pytorch" / "cupti_decode_window_excerpt.txt.gz"]
BLOCKS = (997, 1 << 20)
"""Bytes read at a time: less than a record (a chunk grows until it holds a whole one), a few records,
more than the file. The small files below are also read one byte at a time."""


def read_both(path: Path, monkeypatch: pytest.MonkeyPatch, block: int) -> tuple[object, object, object]:
    """(by line, chunked, chunked lean) of one file; an error is its message."""
    def attempt(read, **kwargs):
        try:
            return read(path, **kwargs)
        except InputError as exc:
            return str(exc)

    monkeypatch.setattr(cupti_text, "BLOCK", block)
    return (attempt(cupti_text.read_cupti_text_by_line), attempt(cupti_text.read_cupti_text),
            attempt(cupti_text.read_cupti_text, mode=ReadMode.LEAN))


def assert_same(path: Path, monkeypatch: pytest.MonkeyPatch, blocks: tuple[int, ...] = BLOCKS) -> object:
    """Every table, column and meta field of the chunked read equal to the line-by-line read's (or
    the same error), and the lean tables the same records; returns the line-by-line result."""
    for block in blocks:
        old, new, lean = read_both(path, monkeypatch, block)
        if isinstance(old, str):
            assert new == old and lean == old, block
            continue
        pd.testing.assert_frame_equal(new.dispatches, old.dispatches)
        pd.testing.assert_frame_equal(new.api, old.api)
        pd.testing.assert_frame_equal(new.markers, old.markers)
        assert (new.clock, new.source, new.path) == (old.clock, old.source, old.path)
        assert new.meta == old.meta
        assert lean.meta == {**old.meta, "lean": True}
        d = lean.dispatches
        assert list(d.columns) == ["kernel", "start_ns", "end_ns", "correlation_id", "kind", "source"]
        assert d["kernel"].astype(str).tolist() == old.dispatches["kernel"].tolist()
        for column in ("start_ns", "end_ns", "correlation_id"):
            assert d[column].tolist() == old.dispatches[column].tolist(), column
        assert d["kind"].astype(str).tolist() == old.dispatches["kind"].astype(str).tolist()
        api = lean.api.astype({"name": str, "domain": str, "source": str})
        pd.testing.assert_frame_equal(api, old.api.astype({"source": str}))
    return old


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_captures(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not path.is_file():
        pytest.skip(f"{path} not present")
    old = assert_same(path, monkeypatch)
    assert len(old.dispatches) > 0


def test_real_excerpt_is_read_by_the_bulk_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The H200 excerpt's kernel and API records are all of the common layouts: none goes the line way."""
    path = REAL[2]
    if not path.is_file():
        pytest.skip(f"{path} not present")
    seen: list[int] = []
    original = cupti_text._parse

    def counting(path, lines, cut_line, out):
        got = original(path, lines, cut_line, out)
        seen.append(len(got.records))
        return got

    monkeypatch.setattr(cupti_text, "_parse", counting)
    trace = cupti_text.read_cupti_text(path)
    assert sum(seen) == 0 and len(trace.dispatches) == 183 and len(trace.api) == 2554


def _mixed(seed: int) -> pd.DataFrame:
    """Kernels with awkward names (quotes, `", `, brackets, tabs, non-ASCII, mangled), copies and fills."""
    frame, _ = decode_trace(steps=6, layers=2, seed=seed)
    frame = frame.copy()
    names = frame["kernel"].astype(str).to_numpy(dtype=object)
    odd = ['a "quoted", [bracketed] {name}', 'ends with ", ', "tab\there", "µs ünïcode", "_Z3foov", "foo()",
           "_Z10k_set_rowsIfl6__halfEvPKT_PKT0_PT1_lllllllllllllll", "_Zbroken", ""]
    for i, name in enumerate(odd):
        names[(7 * i + 3) % len(names)] = name
    frame["kernel"] = names
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(frame), size=20, replace=False)
    extra = frame.iloc[pick].copy()
    extra["kernel"] = ["Memcpy HtoD" if i % 3 == 0 else "Memcpy DtoH" if i % 3 == 1 else "Memset" for i in range(20)]
    extra["kind"] = pd.Categorical(["memcpy" if i % 3 < 2 else "memset" for i in range(20)],
                                   categories=["kernel", "memcpy", "memset"])
    extra["end_ns"] = extra["start_ns"] + 1500
    out = pd.concat([frame, extra], ignore_index=True).sort_values("start_ns", kind="stable", ignore_index=True)
    out["start_ns"] += 1_764_410_000_000_000_000
    out["end_ns"] += 1_764_410_000_000_000_000
    out["correlation_id"] = np.arange(1, len(out) + 1, dtype=np.int64)
    out["device"], out["stream"] = 0, np.arange(len(out)) % 3 + 7
    return out


@pytest.mark.parametrize("runtime", [True, False])
@pytest.mark.parametrize("suffix", [".txt", ".txt.gz"])
def test_generated_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runtime: bool, suffix: str) -> None:
    path = write_cupti_text(_mixed(3), tmp_path / f"server{suffix}", runtime=runtime)
    old = assert_same(path, monkeypatch, (97, 4096, 1 << 20))
    lean = read_trace(path, ReadMode.LEAN).dispatches
    assert set(lean["kind"].astype(str)) == {"kernel", "memcpy", "memset"}
    assert "foo()" in set(lean["kernel"].cat.categories) and len(set(lean["kernel"].cat.categories)) == len(
        lean["kernel"].cat.categories)  # `_Z3foov` and `foo()`: one category once demangled
    assert (len(old.api) > 0) == runtime


QUIRKS = [
    "Calling CUPTI API: cuptiSubscribe(&globals.subscriberHandle, (CUpti_CallbackFunc)pTraceCallback, pUserData)",
    "\tdeviceId 9, streamId 9",  # continuation before any record: nobody's
    "DEVICE NVIDIA H200 [ 0 ]",
    "CONTEXT computeApiKind CUDA, contextId 1, deviceId 0, nullStreamId 7, CIG mode 0",
    'RUNTIME [ 1000, 1500 ] duration 500, "cudaLaunchKernel_v7000", cbid 211, processId 1, threadId 2, correlationId 1',
    'CONCURRENT_KERNEL [ 2000, 3000 ] duration 1000, "k_plain", correlationId 1, cacheConfigRequested 0, '
    "cacheConfigExecuted 0",
    "\tgrid [ 16, 1, 1 ], block [ 256, 1, 1 ], cluster [ 0, 0, 0 ], sharedMemory (static 0, dynamic 0)",
    "\tdeviceId 0, contextId 1, streamId 7, graphId 0, graphNodeId 0, channelId 0, channelType COMPUTE",
    'CONCURRENT_KERNEL [ 3000, 3500 ] duration 500, "k_log_in_between", correlationId 2, cacheConfigRequested 0, '
    "cacheConfigExecuted 0",
    "srv  update_slots: id  0 | task 3 | kv cache rm [0, end)",  # the server's log: the record loses its ids
    "\tdeviceId 0, contextId 1, streamId 7, graphId 3, graphNodeId 0, channelId 0, channelType COMPUTE",
    'CONCURRENT_KERNEL [ 4000, 4100 ] duration 100, "name "with", quotes", correlationId 3, cacheConfigRequested 0, '
    "cacheConfigExecuted 0",
    "\tstreamId 5, deviceId 1, contextId 1, graphId 10, graphNodeId 4294967297, channelId 2, channelType COMPUTE",
    "\tcorrelationId 33, deviceId 2",  # a third continuation line: its pairs win
    "  source (null)",
    'KERNEL [ 4200, 4300 ] duration 100, "_Z3foov", correlationId 4, cacheConfigRequested 0, cacheConfigExecuted 0',
    "\tdeviceId 0, contextId 1, streamId 99999999999999999999, graphId 1, graphNodeId 0, channelId 0, channelType C",
    'KERNEL [ 4300, 4400 ] duration 100, "foo()", correlationId 5, cacheConfigRequested 0, cacheConfigExecuted 0\r',
    "\tdeviceId 0, contextId 1, streamId 8, graphId 0, graphNodeId 0, channelId 0, channelType COMPUTE\r",
    'CONCURRENT_KERNEL [ 9000000000000000000, 9000000000000000100 ] duration 100, "k_nine", correlationId -6, '
    "cacheConfigRequested 0, cacheConfigExecuted 0",
    'CONCURRENT_KERNEL [ 0004500, 04600 ] duration 100, "", correlationId 0007, cacheConfigRequested 0, '
    "cacheConfigExecuted 0",
    "CONCURRENT_KERNEL [ 4600, 4700 ] duration 100, correlationId 8",  # no name
    'CONCURRENT_KERNEL  [ 4700,4800 ]  duration 100 , "k_spaces" , correlationId 9',
    'CONCURRENT_KERNEL [ 4800, 4900 ] duration 100, "k\ttab µs", correlationId 10, cacheConfigRequested '
    + "1" * 30 + ", cacheConfigExecuted 0",
    'CONCURRENT_KERNEL [ 99999999999999999999, 99999999999999999999 ] duration 0, "k_garbled"',
    "CONCURRENT_KERNEL [ 17959510.05.968.012 097926961803, 1795951097926965963 ] duration 4160, \"k_c\"",
    'MEMCPY "HtoD" [ 5000, 5200 ] duration 200, size 512, copyCount 1, srcKind PAGEABLE, dstKind DEVICE, '
    "correlationId 11",
    "\tdeviceId 0, contextId 1, streamId 15, graphId 0, graphNodeId 0, channelId 3, channelType ASYNC_MEMCPY",
    'MEMCPY "" [ 5300, 5400 ] duration 100, size 1, copyCount 1, srcKind DEVICE, dstKind DEVICE, correlationId 12',
    'MEMCPY " PtoP " [ 5400, 5500 ] duration 100, size 1, copyCount 1, srcKind DEVICE, dstKind DEVICE_2, '
    "correlationId 13",
    "MEMSET [ 5500, 5600 ] duration 100, value 0, size 4096, correlationId 14",
    "\tdeviceId 0, contextId 1, streamId 16, graphId 0, graphNodeId 0, channelId 3, channelType COMPUTE",
    "MEMSET [ 5600, 5700 ] duration 100, value -1, size 4096, correlationId 15",
    "MEMORY2 [ 5700 ] memoryOperationType ALLOCATE, memoryKind DEVICE, size 2097152, address 1, pc 0,",
    "  deviceId 0, contextId 1, streamId 4294967295, processId 563, correlationId 136, isAsync 0,",
    "",
    "OVERHEAD CUPTI_BUFFER_FLUSH [ 6000, 6100 ] duration 100, THREAD, id 4243, correlation id 0",
    "OVERHEAD LAZY_FUNCTION_LOADING [ 6100, 99999999999999999999 ] duration 100, THREAD, id 4243",
    'DRIVER [ 6200, 6300 ] duration 100, "cuGraphLaunch", cbid 514, processId 1, threadId 2, correlationId 16',
    'DRIVER [ 6300, 6400 ] duration 100, "cuLaunch", cbid 514, processId 1, threadId 3771216640, correlationId 17, '
    "extra 5",
    'RUNTIME [ 6400, 6500 ] duration 100, "cudaMemcpy", cbid 31, threadId 2, processId 1, correlationId 18',
    "RUNTIME [ 6500, 6600 ] duration 100, cbid 31, processId 1, threadId 2, correlationId 19",
    'RUNTIME [ ١٢٣, ١٢٤ ] duration 1, "unicode digits", cbid 1, processId 1, threadId 2, correlationId 20',
    'RUNTIME [ 6600, 6700 ] duration 100, "cudaFree", cbid 1, processId 1, threadId 2, correlationId 21',
    "\tthreadId 77",
    'CONCURRENT_KERNEL [ 7000, 8000 ] duration 1000, "k_last", correlationId 22, cacheConfigRequested 0, '
    "cacheConfigExecuted 0",
    "\tgrid [ 1, 1, 1 ], block [ 32, 1, 1 ], cluster [ 0, 0, 0 ], sharedMemory (static 0, dynamic 0)",
    "\tdeviceId 0, contextId 1, streamId 7, graphId 0, graphNodeId 0, channelId 0, channelType COMPUTE",
]
"""A capture with every quirk the line path reads: log lines between and inside records, names that
hold `", `, ids in any order or missing or beyond int64, a later continuation line's pair winning,
CRLF, leading zeros, a 19-digit time beyond the bulk path's reach, Unicode digits, a garbled line,
unnamed records, odd spacing, overhead records, and two names that demangle alike."""


def _write(tmp_path: Path, lines: list[str], name: str = "quirks.log", end: str = "\n",
           raw: bytes | None = None) -> Path:
    path = tmp_path / name
    data = raw if raw is not None else ("\n".join(lines) + end).encode()
    path.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return path


@pytest.mark.parametrize("end", ["\n", ""])
@pytest.mark.parametrize("name", ["quirks.log", "quirks.log.gz"])
def test_every_quirk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, end: str, name: str) -> None:
    old = assert_same(_write(tmp_path, QUIRKS * 3, name, end), monkeypatch, (1, 5, 64, 333, 1 << 20))
    assert old.meta["malformed_record_lines"] == 9 and old.meta["overhead_records"] == 3
    assert old.meta["graph_launched"] == 6
    names = set(old.dispatches["kernel"])
    assert {'name "with", quotes', "foo()", "Memcpy", "Memcpy  PtoP", "Memset", "Concurrent_Kernel"} <= names
    assert "unicode digits" in set(old.api["name"])


def test_invalid_utf8_is_read_as_the_whole_file_read_decodes_it(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    text = ("\n".join(QUIRKS[4:8]) + "\n").encode()
    raw = text.replace(b"k_plain", b"k_\xff\xe2\x82plain") + text.replace(b"k_plain", b"k_\xc3")
    old = assert_same(_write(tmp_path, [], raw=raw), monkeypatch, (1, 3, 1 << 20))
    assert old.dispatches["kernel"].tolist() == ["k_\ufffd\ufffdplain", "k_\ufffd"]


@pytest.mark.parametrize("lines, found", [
    (QUIRKS[4:8] + ['CONCURRENT_KERNEL [ 1764410000000010000, 17644100'], "truncated"),
    (QUIRKS[4:8] + ["CONCURRENT_KERNEL [ 12x, 3 ] nonsense"] * 20, "garbled"),
    (QUIRKS[4:8] + ['CONCURRENT_KERNEL [ 9000, 3000 ] duration 1, "k", correlationId 1'] * 2, "end timestamp"),
    (QUIRKS[4:8] + ['RUNTIME [ 9000, 3000 ] duration 1, "k", cbid 1, processId 1, threadId 2, correlationId 1'],
     "API call"),
])
def test_errors_are_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: list[str], found: str) -> None:
    path = _write(tmp_path, lines, end="" if found == "truncated" else "\n")
    for block in (1, 9, 1 << 20):
        old, new, lean = read_both(path, monkeypatch, block)
        assert isinstance(old, str) and found in old
        assert new == old and lean == old


def test_cut_gzip_is_the_same_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = gzip.compress(("\n".join(QUIRKS * 50) + "\n").encode())
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(whole[: len(whole) // 2])
    old, new, lean = read_both(path, monkeypatch, 1000)
    assert isinstance(old, str) and "complete gzip stream" in old and new == old and lean == old
    path = tmp_path / "plain.txt.gz"
    path.write_bytes(b"CONCURRENT_KERNEL [ 1, 2 ]\n")
    old, new, lean = read_both(path, monkeypatch, 1000)
    assert "magic bytes" in old and new == old and lean == old


def test_layouts_reject_what_they_cannot_read_exactly() -> None:
    """A 19-digit time from 9e18 up, 20 digits, a quote-less name and CRLF go the line-by-line way."""
    lines = [
        'RUNTIME [ 8999999999999999999, 9000000000000000000 ] duration 1, "a", cbid 1, processId 1, threadId 1, '
        "correlationId 1",
        'RUNTIME [ 1, 2 ] duration 1, "a", cbid 1, processId 1, threadId 1, correlationId 1',
        'RUNTIME [ 1, 2 ] duration 1, "a", cbid 1, processId 1, threadId 1, correlationId 12345678901234567890',
        'RUNTIME [ 1, 2 ] duration 1, "a, cbid 1, processId 1, threadId 1, correlationId 1',
        'RUNTIME [ 1, 2 ] duration 1, "a", cbid 1, processId 1, threadId 1, correlationId 1\r',
        'RUNTIME [ 8999999999999999999, 8999999999999999999 ] duration 1, "", cbid 1, processId 0, threadId 0, '
        "correlationId 0",
    ]
    data = ("\n".join(lines) + "\n").encode()
    chunk = cupti_layouts.Chunk(data)
    ok, fields = cupti_layouts.match(chunk, cupti_layouts.LAYOUTS[0], chunk.line_starts())
    assert ok.tolist() == [False, True, False, False, False, True]
    assert fields["start"][ok].tolist() == [1, 8999999999999999999]
    assert [data[s:e] for s, e in zip(fields["name_start"][ok], fields["name_end"][ok], strict=True)] == [b"a", b""]


@settings(max_examples=60, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=st.lists(st.tuples(st.sampled_from(["flip", "insert", "delete", "dup-line", "cut"]), st.integers(0, 2**31),
                              st.sampled_from([b"\n", b"\t", b"  ", b'"', b", ", b"9", b"\r", b"\xff", b"x", b"[ "])),
                    min_size=1, max_size=6),
       block=st.sampled_from([1, 13, 256, 1 << 20]))
def test_mutated_captures_read_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ops: list,
                                        block: int) -> None:
    """Bytes flipped, inserted, deleted, lines duplicated, the file cut: both reads still agree."""
    out = bytearray(("\n".join(QUIRKS) + "\n").encode())
    for op, at, blob in ops:
        i = at % (len(out) + 1)
        if op == "flip" and out:
            out[i % len(out)] ^= blob[0]
        elif op == "insert":
            out[i:i] = blob
        elif op == "delete":
            del out[i:i + len(blob) * 7]
        elif op == "cut":
            del out[i:]
        else:
            lines = bytes(out).split(b"\n")
            j = at % len(lines)
            out = bytearray(b"\n".join([*lines[:j + 1], lines[j], *lines[j + 1:]]))
    assert_same(_write(tmp_path, [], "mutated.log", raw=bytes(out)), monkeypatch, (block,))
