"""Reader facts from the real files of public projects in `../shared/fixtures/external/` (SOURCES.md):
each count or value is read here independently (sqlite3, csv, plain json) so that every assertion can fail."""

from __future__ import annotations

import csv
import sqlite3
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support import REPO, fixture

from perflib.traces import read_trace

NSYS = ("external", "nsys", "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite")


def query(path: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_nsys_2022_export_meta_table_and_counts() -> None:
    """Nsight Systems 2022.2 calls its metadata table EXPORT_META_DATA, has no ENUM_CUDA_MEMCPY_OPER and an
    empty MEMSET table: 5 kernels, 15 copies, 22 NVTX ranges (SOURCES.md)."""
    path = fixture(*NSYS)
    tables = {r[0] for r in query(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "EXPORT_META_DATA" in tables and "META_DATA_EXPORT" not in tables and "ENUM_CUDA_MEMCPY_OPER" not in tables
    trace = read_trace(path)
    assert trace.meta["export_schema_version"] == "2.9.1"
    assert trace.meta["export_product_version"] == "2022.2.1.31"
    assert trace.meta["export_meta_table"] == "EXPORT_META_DATA"
    kinds = trace.dispatches["kind"].astype(str).value_counts().to_dict()
    assert kinds == {"kernel": 5, "memcpy": 15}  # the MEMSET table is there, and empty
    assert query(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET")[0][0] == 0
    ranges = query(path, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59")[0][0]
    assert len(trace.markers) == ranges == 22
    assert (trace.markers["end_ns"] > trace.markers["start_ns"]).all()
    assert len(trace.api) == query(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0][0] == 95


def test_nsys_2022_copies_are_named_by_cupti_copy_kind() -> None:
    """Without the enum table, copies are named by CUPTI's numbering (1 host-to-device, 2 device-to-host)."""
    path = fixture(*NSYS)
    by_kind = dict(query(path, "SELECT copyKind, count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY copyKind"))
    trace = read_trace(path)
    names = Counter(trace.dispatches.loc[trace.dispatches["kind"] == "memcpy", "kernel"])
    assert names == {"Memcpy Host-to-Device": by_kind[1], "Memcpy Device-to-Host": by_kind[2]}
    assert set(trace.dispatches.loc[trace.dispatches["kind"] == "kernel", "kernel"]) == {
        "saxpy(double *, double *, double *, double, int)"}


def test_nsys_2022_times_are_session_relative_and_the_shift_holds() -> None:
    """What the real export shows about its clock: every time lies within [0, ANALYSIS_DETAILS.duration],
    utcEpochNs is the instant its utcTime text names, and session start + the last time falls before the
    export was made. So times are ns since the session start, and utcEpochNs + time is Unix ns."""
    path = fixture(*NSYS)
    ((epoch, utc_text),) = query(path, "SELECT utcEpochNs, utcTime FROM TARGET_INFO_SESSION_START_TIME")
    ((duration,),) = query(path, "SELECT duration FROM ANALYSIS_DETAILS")
    export_text = dict(query(path, "SELECT name, value FROM EXPORT_META_DATA"))["EXPORT_TIME_UTC"]
    raw = query(path, "SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
                      "SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL "
                      "SELECT start, end FROM CUPTI_ACTIVITY_KIND_RUNTIME UNION ALL "
                      "SELECT start, end FROM NVTX_EVENTS WHERE eventType = 59")
    assert all(0 <= s <= e <= duration for s, e in raw)
    start_of = datetime.fromisoformat(utc_text).replace(tzinfo=UTC)
    assert epoch // 10**9 == int(start_of.timestamp())
    exported = datetime.fromisoformat(export_text).replace(tzinfo=UTC)
    assert epoch + max(e for _, e in raw) < int(exported.timestamp()) * 10**9

    trace = read_trace(path)
    assert trace.clock == "realtime" and trace.meta["shifted_by_session_start"]
    assert trace.meta["session_duration_ns"] == duration and "ANALYSIS_DETAILS" in trace.meta["clock_note"]
    kernels = sorted(s + epoch for (s,) in query(path, "SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    got = trace.dispatches.loc[trace.dispatches["kind"] == "kernel", "start_ns"].tolist()
    assert got == kernels


def test_nsys_times_outside_the_session_are_not_shifted(tmp_path: Path) -> None:
    """A copy of the real export whose times no longer fit the session's length keeps its own clock."""
    import shutil

    path = tmp_path / "moved.sqlite"
    shutil.copy(fixture(*NSYS), path)
    path.chmod(0o644)  # the fixture is read-only, and so is its copy
    with sqlite3.connect(path) as con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + 3000000000, end = end + 3000000000")
    con.close()
    trace = read_trace(path)
    assert trace.clock == "unknown" and not trace.meta["shifted_by_session_start"]
    assert "outside the session" in trace.meta["clock_note"]


def legacy_rows() -> list[dict[str, str]]:
    with open(fixture("external", "rocprof-legacy", "hpctraining_finite-difference_results.csv"), newline="") as fh:
        return list(csv.DictReader(fh))


def test_legacy_rocprof_names_lose_both_kd_suffixes() -> None:
    """Names end in ` [clone .kd]` or in a bare `.kd` (`__amd_rocclr_fillBufferAligned.kd`): both go."""
    rows = legacy_rows()
    assert len(rows) == 1004
    raw = {r["KernelName"] for r in rows}
    assert any(n.endswith(" [clone .kd]") for n in raw) and "__amd_rocclr_fillBufferAligned.kd" in raw
    trace = read_trace(fixture("external", "rocprof-legacy", "hpctraining_finite-difference_results.csv"))
    assert trace.source == "rocprof-legacy" and len(trace.dispatches) == 1004
    names = set(trace.dispatches["kernel"])
    assert not any(n.endswith(".kd") or n.endswith("]") for n in names)
    assert names == {n.removesuffix(" [clone .kd]").removesuffix(".kd") for n in raw}
    assert "__amd_rocclr_fillBufferAligned" in names
    assert trace.dispatches["start_ns"].tolist() == sorted(int(r["BeginNs"]) for r in rows)


def test_legacy_stats_names_match_the_trace_and_counts_agree() -> None:
    from perflib.traces import read_stats

    trace = read_trace(fixture("external", "rocprof-legacy", "hpctraining_finite-difference_results.csv"))
    stats = read_stats(fixture("external", "rocprof-legacy", "hpctraining_finite-difference_results.stats.csv"))
    d = trace.dispatches
    calls = d["kernel"].value_counts().to_dict()
    assert set(stats["name"]) <= set(calls)  # every stats name is a trace name
    assert set(stats["name"]) == set(calls)
    assert dict(zip(stats["name"], stats["calls"], strict=True)) == calls
    assert int(stats["calls"].sum()) == len(d) == 1004
    busy = (d["end_ns"] - d["start_ns"]).groupby(d["kernel"]).sum().to_dict()
    assert dict(zip(stats["name"], stats["total_ns"], strict=True)) == busy


KINETO_BUILDS = {
    # file below the fixtures folder -> the GPU it was captured on (SOURCES.md) -> its build
    "external/kineto/tracelens_sglang_Qwen3-8B_decode_mi300x.json.gz": "rocm",  # MI300X, HIP 7.2
    "external/kineto/tracelens_vllm_decode_full_graph_execution_mi300x.json.gz": "rocm",  # MI300X, HIP 7.0
    "external/kineto/tracelens_h100_Qwen1.5-0.5B-Chat__1016005.json.gz": "cuda",  # H100
    "kineto/mi250_minitoy_train_ROCm6_2_kineto.json.gz": "rocm",  # MI250, ROCm 6.2
    "kineto/a100_event_sync_trace.json.gz": "cuda",
    "kineto/a100_simple_add_trace.json.gz": "cuda",
    "kineto/a100_triton_example.json.gz": "cuda",
}


def load_gz_json(path: Path) -> dict:
    import gzip
    import json

    return json.loads(gzip.decompress(path.read_bytes()))


@pytest.mark.parametrize("rel", sorted(KINETO_BUILDS))
def test_every_kineto_fixture_gets_its_build(rel: str) -> None:
    path = fixture(*rel.split("/"))
    assert read_trace(path).meta["build"] == KINETO_BUILDS[rel]


def test_committed_h200_kineto_traces_are_cuda() -> None:
    paths = sorted((REPO / "data" / "raw" / "h200-pytorch").glob("*.json.gz"))
    assert paths
    for path in paths:
        assert read_trace(path).meta["build"] == "cuda", path


def test_rocm_build_with_every_device_name_empty() -> None:
    """The vLLM MI300X trace names no device, yet HIP and roctracer versions and warp size 64 say ROCm."""
    path = fixture("external", "kineto", "tracelens_vllm_decode_full_graph_execution_mi300x.json.gz")
    doc = load_gz_json(path)
    assert doc["deviceProperties"] and all(d["name"] == "" for d in doc["deviceProperties"])
    assert "hip_runtime_version" in doc and {d["warpSize"] for d in doc["deviceProperties"]} == {64}
    trace = read_trace(path)
    assert trace.meta["build"] == "rocm" and "hip_runtime_version" in trace.meta["build_evidence"]


def test_rocm_build_told_by_warp_size_alone_and_unknown_without_evidence(tmp_path: Path) -> None:
    """The same trace with its version fields removed is still ROCm (warp size 64); with the warp size
    removed too, nothing tells, and the build is `unknown`, not a guessed `cuda`."""
    import gzip
    import json

    doc = load_gz_json(fixture("external", "kineto", "tracelens_vllm_decode_full_graph_execution_mi300x.json.gz"))
    for key in ("hip_runtime_version", "hip_driver_version", "roctracer_version"):
        doc.pop(key, None)
    path = tmp_path / "no_versions.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    trace = read_trace(path)
    assert trace.meta["build"] == "rocm" and "warpSize 64" in trace.meta["build_evidence"]
    for d in doc["deviceProperties"]:
        d.pop("warpSize")
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert read_trace(path).meta["build"] == "unknown"
