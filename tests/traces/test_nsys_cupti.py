"""Nsight Systems SQLite (built here per FORMATS.md §2.1: no real export is available) and CUPTI
activity text (hand-written after GPU.md's record layout, in tests/data/traces/)."""

from __future__ import annotations

import gzip
import re
import sqlite3
from pathlib import Path

import pytest
from support import DATA

from perflib.traces import read_trace

TRACES = DATA / "traces"
CUPTI_SAMPLE = TRACES / "cupti_trace_injection_sample.txt"


def make_nsys(path: Path, old_name_column: bool = False) -> dict:
    """A tiny export: 2 kernels, 1 memcpy, 1 memset, 2 runtime calls, an NVTX range and mark."""
    gtid = (4242 << 24) | 4243
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
        con.executemany(
            "INSERT INTO StringIds VALUES (?, ?)",
            [
                (1, "void gemv<half>(half const*, float*)"),
                (2, "gemv"),
                (3, "rmsnorm_kernel"),
                (4, "rmsnorm"),
                (5, "cudaLaunchKernel_v7000"),
                (6, "cudaMemcpyAsync_v3020"),
                (7, "decode step"),
            ],
        )
        if old_name_column:
            con.execute(
                "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                "deviceId INTEGER, contextId INTEGER, streamId INTEGER, correlationId INTEGER, "
                "globalPid INTEGER, name TEXT)"
            )
            con.executemany(
                "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?)",
                [
                    (1000, 5000, 0, 1, 7, 11, 4242 << 24, "gemv_old"),
                    (6000, 6500, 0, 1, 7, 12, 4242 << 24, "rms_old"),
                ],
            )
        else:
            con.execute(
                "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, "
                "deviceId INTEGER NOT NULL, contextId INTEGER, streamId INTEGER, correlationId INTEGER, "
                "globalPid INTEGER, demangledName INTEGER, shortName INTEGER, mangledName INTEGER, "
                "gridX INTEGER, gridY INTEGER, gridZ INTEGER, blockX INTEGER, blockY INTEGER, blockZ INTEGER)"
            )
            con.executemany(
                "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [
                    (1000, 5000, 0, 1, 7, 11, 4242 << 24, 1, 2, None, 8, 1, 1, 128, 1, 1),
                    (6000, 6500, 0, 1, 7, 12, 4242 << 24, 3, 4, None, 1, 1, 1, 256, 1, 1),
                ],
            )
        con.execute("CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER PRIMARY KEY, name TEXT, label TEXT)")
        con.execute("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (2, 'CUDA_MEMCPY_DTOH', 'Device-to-Host')")
        con.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, end INTEGER, deviceId INTEGER, "
            "contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER, "
            "copyKind INTEGER, srcKind INTEGER, dstKind INTEGER)"
        )
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (7000, 7400, 0, 1, 7, 13, ?, 512, 2, 1, 0)",
            (4242 << 24,),
        )
        con.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, end INTEGER, deviceId INTEGER, "
            "contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, value INTEGER, "
            "bytes INTEGER, memKind INTEGER)"
        )
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (500, 900, 0, 1, 8, 10, ?, 0, 4096, 1)",
            (4242 << 24,),
        )
        con.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, eventClass INTEGER, "
            "globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER, "
            "callchainId INTEGER)"
        )
        con.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,0,?,?,?,0,NULL)",
            [(800, 950, gtid, 11, 5), (960, 990, gtid, 13, 6)],
        )
        con.execute(
            "CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, rangeId INTEGER, "
            "category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, "
            "textId INTEGER, domainId INTEGER, jsonTextId INTEGER)"
        )
        con.executemany(
            "INSERT INTO NVTX_EVENTS VALUES (?,?,?,NULL,NULL,NULL,?,?,NULL,?,0,NULL)",
            [
                (700, 8000, 59, None, gtid, 7),
                (7500, None, 34, "token out", gtid, None),
                (1, 2, 75, "domain", gtid, None),
            ],
        )
        con.execute(
            "CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT)"
        )
        con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1764410000000000000, '', '')")
    return {"gtid": gtid}


def test_nsys_export(tmp_path: Path) -> None:
    path = tmp_path / "report.sqlite"
    make_nsys(path)
    trace = read_trace(path)
    assert trace.source == "nsys-sqlite"
    d = trace.dispatches
    assert d["kind"].astype(str).tolist() == ["memset", "kernel", "kernel", "memcpy"]
    assert d["kernel"].tolist()[1:3] == ["void gemv<half>(half const*, float*)", "rmsnorm_kernel"]
    assert d["kernel"].tolist()[3] == "Memcpy Device-to-Host"
    assert d["stream"].tolist() == [8, 7, 7, 7]
    assert trace.api["name"].tolist() == ["cudaLaunchKernel_v7000", "cudaMemcpyAsync_v3020"]
    assert set(trace.api["pid"]) == {4242} and set(trace.api["tid"]) == {4243}
    assert trace.markers["name"].tolist() == ["decode step", "token out"]
    mark = trace.markers.iloc[1]
    epoch = 1764410000000000000  # session-relative times, shifted by the session start to Unix ns
    assert mark["end_ns"] == mark["start_ns"] == epoch + 7500
    assert trace.clock == "realtime" and trace.meta["shifted_by_session_start"]
    assert trace.meta["session_start_utc_epoch_ns"] == epoch
    assert trace.meta["kernel_name_column"] == "demangledName"


def test_nsys_times_already_absolute_are_not_shifted(tmp_path: Path) -> None:
    """Times that cannot be session-relative (a monotonic reading days into uptime) keep the capture
    clock: shifting them by utcEpochNs would put them decades off."""
    path = tmp_path / "abs.sqlite"
    make_nsys(path)
    day = 86_400_000_000_000
    with sqlite3.connect(path) as con:
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                      "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"):
            con.execute(f"UPDATE {table} SET start = start + {3 * day}, end = end + {3 * day}")
    trace = read_trace(path)
    assert trace.clock == "unknown" and not trace.meta["shifted_by_session_start"]
    assert trace.markers.iloc[1]["start_ns"] == 3 * day + 7500


def test_nsys_very_old_name_column(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    make_nsys(path, old_name_column=True)
    trace = read_trace(path)
    kernels = trace.dispatches[trace.dispatches["kind"] == "kernel"]
    assert kernels["kernel"].tolist() == ["gemv_old", "rms_old"]


def _sample_records() -> list[tuple[str, int, int]]:
    """(kind, start, end) of each record line in the sample, read with a plain regex."""
    out = []
    for line in CUPTI_SAMPLE.read_text().splitlines():
        m = re.match(r'^([A-Z_]+)(?: "[^"]*"| [A-Z_]+)? ?\[ (\d+), (\d+) \]', line)
        if m:
            out.append((m[1], int(m[2]), int(m[3])))
    return out


@pytest.mark.parametrize("gz", [False, True])
def test_cupti_text(tmp_path: Path, gz: bool) -> None:
    path = CUPTI_SAMPLE
    if gz:
        path = tmp_path / "cupti.txt.gz"
        path.write_bytes(gzip.compress(CUPTI_SAMPLE.read_bytes()))
    records = _sample_records()
    gpu = [r for r in records if r[0] in ("KERNEL", "CONCURRENT_KERNEL", "MEMCPY", "MEMSET")]
    host = [r for r in records if r[0] in ("RUNTIME", "DRIVER")]
    trace = read_trace(path)
    assert trace.source == "cupti-text" and trace.clock == "realtime"
    d = trace.dispatches
    assert len(d) == len(gpu)
    assert d["start_ns"].tolist() == sorted(r[1] for r in gpu)
    assert len(trace.api) == len(host)
    assert trace.meta["overhead_records"] == sum(r[0] == "OVERHEAD" for r in records)
    names = d["kernel"].tolist()
    assert names[0].startswith("void k_set_rows<float, long, __half>(")  # demangled
    assert names[1].startswith("void flash_attn_ext_f16<128, 128")
    assert "plain_c_kernel" in names  # not mangled: kept as printed
    assert d["stream"].tolist() == [15, 15, 15, 16, 7]  # last record lists streamId first: order-free
    assert d["kind"].astype(str).tolist() == ["kernel", "kernel", "memcpy", "memset", "kernel"]
    assert d["correlation_id"].tolist() == [11, 11, 12, 13, 14]
    assert trace.meta["graph_launched"] == 2
    assert trace.api["name"].tolist() == ["cuGraphLaunch", "cudaGraphLaunch_v10000"]
    assert trace.api["domain"].tolist() == ["cuda_driver", "cuda_runtime"]


def test_cupti_real_h200_capture() -> None:
    """The lead's capture of `cupti_trace_injection` on the H200 (PyTorch process, with the sample's
    own log lines and MEMORY2 records interleaved): counts and ids checked against a plain scan."""
    path = TRACES / "cupti_h200_sample.txt.gz"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    kernels, streams = [], []
    for i, line in enumerate(lines):
        if line.startswith("CONCURRENT_KERNEL ["):
            kernels.append(int(re.search(r"\[ (\d+),", line)[1]))
            ids = lines[i + 2]
            streams.append(int(re.search(r"streamId (\d+)", ids)[1]))
    api = sum(line.startswith(("RUNTIME [", "DRIVER [")) for line in lines)
    trace = read_trace(path)
    assert trace.clock == "realtime"
    assert len(trace.dispatches) == len(kernels) > 0
    assert trace.dispatches["start_ns"].tolist() == sorted(kernels)
    assert sorted(trace.dispatches["stream"]) == sorted(streams)
    assert len(trace.api) == api
    assert not trace.dispatches["kernel"].str.startswith("_Z").any()  # all demangled
    assert trace.meta["overhead_records"] == sum(line.startswith("OVERHEAD ") for line in lines)


def test_perflib_cupti_library_capture_on_the_h200() -> None:
    """A whole capture by perflib's own CUPTI library (20 eager steps, then 20 CUDA-graph replays of 34
    kernel nodes): every kernel the program launched is in it, graph replays included, and the reader
    takes it whole, as its stats beside it count it (scripts/h200/cupti_perflib.sh)."""
    import json

    path = TRACES / "perflib_cupti_h200_decode_like.txt.gz"
    stats = json.loads((TRACES / "perflib_cupti_h200_decode_like.stats.json").read_text())
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    by_kind: dict[str, int] = {}
    for line in lines:
        kind = line.split(" ", 1)[0] if line and not line[0].isspace() else None
        if kind in stats["records_by_kind"]:
            by_kind[kind] = by_kind.get(kind, 0) + 1
    assert by_kind == stats["records_by_kind"] and stats["dropped_records"] == 0 and stats["complete"] is True
    trace = read_trace(path)
    kinds = {k: n for k, n in trace.dispatches["kind"].value_counts().to_dict().items() if n}  # kinds present
    assert kinds == {"kernel": 1360, "memcpy": 81, "memset": 43}
    assert kinds["kernel"] == stats["records_by_kind"]["CONCURRENT_KERNEL"]
    assert trace.meta["malformed_record_lines"] == 0 and trace.meta["graph_launched"] >= 20
    assert len(trace.api) == stats["records_by_kind"]["RUNTIME"] + stats["records_by_kind"]["DRIVER"]


def test_cupti_record_garbled_by_interleaved_server_output_is_skipped_and_counted(tmp_path):
    """The H200 campaign lost a trace this way: llama-server's stdout landed inside a record line."""
    from perflib.traces.cupti_text import read_cupti_text

    good = [
        'CONCURRENT_KERNEL [ 1000, 2000 ] duration 1000, "k_a", correlationId 1',
        "\tdeviceId 0, contextId 1, streamId 7",
        'CONCURRENT_KERNEL [ 3000, 4500 ] duration 1500, "k_b", correlationId 2',
        "\tdeviceId 0, contextId 1, streamId 7",
    ] * 30
    garbled = 'CONCURRENT_KERNEL [ 17959510.05.968.012 097926961803, 1795951097926965963 ] duration 4160, "k_c"'
    path = tmp_path / "server.log"
    path.write_text("\n".join(good[:4] + [garbled] + good[4:]) + "\n")
    trace = read_cupti_text(path)
    assert len(trace.dispatches) == 60
    assert trace.meta["malformed_record_lines"] == 1
    assert trace.meta["malformed_record_line_numbers"] == [5]


def test_cupti_file_mostly_garbled_is_refused(tmp_path):
    from perflib.errors import InputError
    from perflib.traces.cupti_text import read_cupti_text

    lines = ['CONCURRENT_KERNEL [ 1000, 2000 ] duration 1000, "k_a", correlationId 1'] + [
        "CONCURRENT_KERNEL [ 12x, 3 ] nonsense"] * 20
    path = tmp_path / "bad.log"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="garbled"):
        read_cupti_text(path)
