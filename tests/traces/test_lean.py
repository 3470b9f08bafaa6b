"""The lean read (`read_trace(path, ReadMode.LEAN)`, what `trace summary` uses) gives every figure of the
full read to the ns: on the real fixtures, and on generated files in every format it streams, cut into
many chunks, with ties, copies and fills, compact JSON, absolute-epoch Kineto times and CUPTI text."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perflib.attribution import summarize
from perflib.errors import InputError
from perflib.traces import ReadMode, kineto_stream, read_trace, writers
from tests.support import REPO, fixture_paths
from tests.synthetic import decode_trace

TABLES = ("gap_buckets", "largest_gaps", "step_table", "classes", "kernels")


def assert_same_summary(path: Path, **kwargs) -> None:
    """Every figure of the summary, all kernels and gaps listed, equal between the full and lean reads."""
    full, lean = read_trace(path), read_trace(path, ReadMode.LEAN)
    assert len(lean.dispatches) == len(full.dispatches)
    assert (lean.dispatches["start_ns"].to_numpy() == full.dispatches["start_ns"].to_numpy()).all()
    assert (lean.dispatches["end_ns"].to_numpy() == full.dispatches["end_ns"].to_numpy()).all()
    assert lean.dispatches["kernel"].astype(str).tolist() == full.dispatches["kernel"].astype(str).tolist()
    assert lean.clock == full.clock
    a, b = summarize(full, top=10**9, **kwargs), summarize(lean, top=10**9, **kwargs)
    assert a.to_dict() == b.to_dict()
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(a, name).reset_index(drop=True), getattr(b, name).reset_index(drop=True),
                                      check_dtype=False)


REAL = [p for p in fixture_paths("kineto/*.json.gz") + fixture_paths("external/kineto/*.json.gz")
        + fixture_paths("rocprofv3/*/*kernel_trace*.csv") + fixture_paths("rocprofv3/*/memory_copy_trace.csv")]
REAL += sorted((REPO / "data" / "raw" / "h200-pytorch").glob("*.json.gz"))[:2]
REAL += [REPO / "data" / "raw" / "h200-pytorch" / "cupti_decode_window_excerpt.txt.gz",
         REPO / "tests" / "data" / "traces" / "cupti_h200_sample.txt.gz",
         REPO / "tests" / "data" / "traces" / "cupti_trace_injection_sample.txt"]


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_fixtures_same_summary(path: Path) -> None:
    assert_same_summary(path)


def test_real_rocprofv3_directory_same_summary() -> None:
    dirs = fixture_paths("rocprofv3")
    if not dirs:
        pytest.skip("no public fixtures")
    assert_same_summary(dirs[0].parent / "rocprofv3")


def _mixed(seed: int = 1) -> pd.DataFrame:
    """A decode trace with copies and fills, some starting at the same ns as a kernel (ties keep order)."""
    frame, _ = decode_trace(steps=12, layers=3, seed=seed)
    frame = frame.copy()
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(frame), size=40, replace=False)
    extra = frame.iloc[pick].copy()
    extra["kernel"] = ["MEMORY_COPY_HOST_TO_DEVICE" if i % 2 else "Memset (Device)" for i in range(len(extra))]
    extra["kind"] = pd.Categorical(["memcpy" if i % 2 else "memset" for i in range(len(extra))],
                                   categories=["kernel", "memcpy", "memset"])
    extra["end_ns"] = extra["start_ns"] + 1500
    out = pd.concat([frame, extra], ignore_index=True).sort_values("start_ns", kind="stable", ignore_index=True)
    out["correlation_id"] = np.arange(1, len(out) + 1, dtype=np.int64)
    return out


@pytest.mark.parametrize("version", ["A", "B", "C", "D", "E"])
def test_generated_csv_same_summary(tmp_path: Path, version: str) -> None:
    frame = _mixed()
    kernels = frame[frame["kind"] == "kernel"]
    path = writers.write_kernel_trace_csv(kernels, tmp_path / "x_kernel_trace.csv", version=version)
    assert_same_summary(path)


def test_generated_gzip_csv_and_directory_same_summary(tmp_path: Path) -> None:
    frame = _mixed(2)
    kernels, copies = frame[frame["kind"] == "kernel"], frame[frame["kind"] == "memcpy"]
    (tmp_path / "run").mkdir()
    path = writers.write_kernel_trace_csv(kernels, tmp_path / "run" / "a_kernel_trace.csv")
    writers.write_memory_copy_trace_csv(copies, tmp_path / "run" / "a_memory_copy_trace.csv")
    assert_same_summary(tmp_path / "run")
    gz = tmp_path / "b_kernel_trace.csv.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert_same_summary(gz)
    lean = read_trace(tmp_path / "run", ReadMode.LEAN).dispatches
    assert set(lean["kind"].astype(str)) == {"kernel", "memcpy"}


def test_generated_rocpd_same_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from perflib.traces import rocpd

    monkeypatch.setattr(rocpd, "LEAN_CHUNK", 7)  # many chunks
    frame = _mixed(3)
    path = writers.write_rocpd(frame[frame["kind"] != "memset"], tmp_path / "x_results.db")
    assert_same_summary(path)


@pytest.mark.parametrize("base", [None, 1_700_000_000_000_000_000])
@pytest.mark.parametrize("block", [257, 4096, 1 << 20])
def test_generated_kineto_same_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base: int | None,
                                       block: int) -> None:
    monkeypatch.setattr(kineto_stream, "BLOCK", block)
    frame = _mixed(4)
    frame["kernel"] = frame["kernel"].astype(str).where(frame.index % 7 != 3, 'a "quoted", [bracketed] {name}\\')
    path = writers.write_kineto_json(frame, tmp_path / "t.json.gz", base_time_ns=base)
    assert_same_summary(path)


@pytest.mark.parametrize("block", [211, 4096, 1 << 22])
def test_generated_cupti_text_same_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    """Kernels with their launch records, copies and fills, names with `", `, cut into chunks mid-record."""
    from perflib.traces import cupti_text

    monkeypatch.setattr(cupti_text, "BLOCK", block)
    frame = _mixed(9)
    frame["kernel"] = frame["kernel"].astype(str).where(frame.index % 7 != 3, 'a "quoted", [bracketed] {name}')
    frame["kernel"] = frame["kernel"].where(frame["kind"] != "memcpy", "Memcpy HtoD")
    frame["start_ns"] += 1_764_410_000_000_000_000
    frame["end_ns"] += 1_764_410_000_000_000_000
    path = writers.write_cupti_text(frame, tmp_path / "server.txt.gz")
    assert_same_summary(path)
    lean = read_trace(path, ReadMode.LEAN)
    assert lean.meta["lean"] and len(lean.api) == int((frame["kind"] == "kernel").sum())


def test_summary_command_on_cupti_text(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`trace summary --json` reads CUPTI text lean: the figures of the line-by-line whole-file read."""
    from perflib.cli import main
    from perflib.traces import cupti_text

    frame = _mixed(10)
    frame["start_ns"] += 1_764_410_000_000_000_000
    frame["end_ns"] += 1_764_410_000_000_000_000
    path = writers.write_cupti_text(frame, tmp_path / "cupti.txt")
    assert main(["trace", "summary", str(path), "--json", "--top", "1000"]) == 0
    out = json.loads(capsys.readouterr().out)
    expected = summarize(cupti_text.read_cupti_text_by_line(path), top=1000).to_dict()
    assert {k: out[k] for k in expected} == expected and out["source"] == "cupti-text"


def _kineto_doc(frame: pd.DataFrame, path: Path, **kwargs) -> dict:
    writers.write_kineto_json(frame, path, **kwargs)
    return json.loads(gzip.decompress(path.read_bytes()))


@pytest.mark.parametrize("block", [300, 1 << 20])
def test_compact_kineto_with_markers_and_launches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    """One-line JSON (no `},` between lines), `args` before other keys, launches, step annotations and
    the top-level keys after traceEvents: the numpy cut, the launch join and the markers all agree."""
    monkeypatch.setattr(kineto_stream, "BLOCK", block)
    frame, truth = decode_trace(steps=6, layers=2, seed=5)
    frame["correlation_id"] = np.arange(1, len(frame) + 1, dtype=np.int64)
    doc = _kineto_doc(frame, tmp_path / "a.json.gz", base_time_ns=1_000)
    events = [{"args": e.pop("args"), **e} for e in doc["traceEvents"]]
    for e in list(events):
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2,
                       "ts": e["ts"] - 3.5, "dur": 2.0, "args": {"correlation": e["args"]["correlation"]}})
    for i, (s, t) in enumerate(zip(truth["starts"], truth["ends"], strict=True)):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 2,
                       "ts": (s - 1_000 - 10_000) / 1000, "dur": (t - s) / 1000})
    doc = {"traceEvents": events, **{k: v for k, v in doc.items() if k != "traceEvents"}}
    path = tmp_path / "compact.json"
    path.write_text(json.dumps(doc, separators=(",", ":")))
    assert_same_summary(path)
    lean = read_trace(path, ReadMode.LEAN)
    assert len(lean.api) == len(frame) and len(lean.markers) == 6
    assert summarize(lean).step_method.startswith("ProfilerStep")


def test_absolute_epoch_kineto_exact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unix-epoch µs with 3 decimals and no base (float64 keeps 0.25 µs there): exact ns from the text."""
    monkeypatch.setattr(kineto_stream, "BLOCK", 2048)
    frame, _ = decode_trace(steps=5, layers=2, seed=6)
    epoch = 1_712_195_495_505_582_988
    frame["start_ns"] += epoch
    frame["end_ns"] += epoch
    path = writers.write_kineto_json(frame, tmp_path / "abs.json")
    lean = read_trace(path, ReadMode.LEAN)
    assert lean.meta["ts_parse"].startswith("decimal text")
    assert lean.dispatches["start_ns"].tolist() == frame["start_ns"].tolist()
    assert_same_summary(path)


@pytest.mark.parametrize("text, where", [
    ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}', "file cut"),
    ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "x", "dur": 1}]}', "traceEvents[0]"),
    ('{"other": 1}', "traceEvents"),
    ('[1, 2]', "traceEvents"),
])
def test_lean_kineto_errors_name_the_fault(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(InputError, match=where.replace("[", r"\[").replace("]", r"\]")):
        kineto_stream.read_kineto_lean(path)


@pytest.mark.parametrize("where", ["name", "key"])
def test_lean_kineto_text_that_is_not_utf8_is_the_full_reads_error(tmp_path: Path, where: str) -> None:
    """Bad UTF-8 in an event (parsed in a chunk) or in a top-level key (read whole): both reads refuse it
    as "UTF-8 JSON text" at the same byte of the file (the stream once passed a bad key and called a bad
    name "JSON numbers of a sensible length")."""
    events = [{"ph": "X", "cat": "kernel", "name": "k\u00e9", "ts": i, "dur": 1, "pid": 0, "tid": 7,
               "args": {"correlation": i}} for i in range(1, 4)]
    raw = json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}, ensure_ascii=False).encode()
    bad = raw.replace("\u00e9".encode(), b"\xff", 1) if where == "name" else raw.replace(b"displayTime", b"display\xffTime")
    path = tmp_path / "bad.json"
    path.write_bytes(bad)
    with pytest.raises(InputError) as full:
        read_trace(path)
    with pytest.raises(InputError) as lean:
        kineto_stream.read_kineto_lean(path)
    at = "byte {}".format(bad.index(b"\xff"))
    for exc in (full.value, lean.value):
        assert exc.where == at and "UTF-8 JSON text" in str(exc)


@pytest.mark.parametrize("closed", [True, False])
def test_lean_kineto_syntax_error_names_the_byte_the_standard_parser_names(tmp_path: Path, closed: bool) -> None:
    """A fault in compact events is found by the scan's cut; its byte is the standard parser's, also
    where the cut closes the array (it was one too high there)."""
    event = '{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1,"args":{"a":1},"pid":0}'
    bad = event.replace(',"pid":0', ',"pid":0 "tid":1')
    text = '{"traceEvents":[' + ",".join([event, bad] + ([] if closed else [event] * 5000)) + "]}"
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(json.JSONDecodeError) as parser:
        json.loads(text)
    with pytest.raises(InputError) as lean:
        kineto_stream.read_kineto_lean(path)
    assert lean.value.where == f"byte {parser.value.pos}"


def test_real_nsys_same_summary() -> None:
    for path in fixture_paths("external/nsys/*.sqlite"):
        assert_same_summary(path)


@pytest.mark.parametrize("version", ["2022", "2024"])
@pytest.mark.parametrize("with_markers", [False, True])
@pytest.mark.parametrize("unix", [False, True])
def test_generated_nsys_same_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str,
                                     with_markers: bool, unix: bool) -> None:
    """Chunked kernels, copies and fills; the launches read as the full read gives them (what fills the host
    gaps is told from them), and the session-relative shift decided on the same times either way."""
    from perflib.traces import nsys

    monkeypatch.setattr(nsys, "LEAN_CHUNK", 5)
    frame, truth = decode_trace(steps=6, layers=2, seed=7)
    mixed = _mixed(7)
    if unix:
        for f in (frame, mixed):
            f["start_ns"] += 1_760_000_000_000_000_000
            f["end_ns"] += 1_760_000_000_000_000_000
    markers = None
    if with_markers:
        shift = 1_760_000_000_000_000_000 if unix else 0
        markers = pd.DataFrame({"name": [f"step {i}" for i in range(6)],
                                "start_ns": [s + shift - 500 for s in truth["starts"]],
                                "end_ns": [e + shift - 600 for e in truth["ends"]]})
    frame["correlation_id"] = np.arange(1, len(frame) + 1, dtype=np.int64)
    path = writers.write_nsys_sqlite(mixed if not with_markers else frame, tmp_path / "x.sqlite", markers=markers,
                                     version=version)
    assert_same_summary(path, **({"steps": r"^step \d+"} if with_markers else {}))
    lean, full = read_trace(path, ReadMode.LEAN), read_trace(path)
    assert len(lean.api) > 0
    pd.testing.assert_frame_equal(lean.api, full.api)


@pytest.mark.parametrize("version", ["B", "D", "E"])
def test_summary_command_with_the_csv_read_in_a_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture, version: str) -> None:
    """`trace summary` parses a large kernel_trace.csv in a thread while pandas imports: same JSON as
    the full read, and a file the thread cannot parse still gets the reader's own error."""
    from perflib.cli import main
    from perflib.traces import prefetch

    monkeypatch.setattr(prefetch, "CSV_MIN_BYTES", 0)
    monkeypatch.setattr(prefetch.os, "cpu_count", lambda: 2)
    frame = _mixed(8)
    path = writers.write_kernel_trace_csv(frame[frame["kind"] == "kernel"], tmp_path / "x_kernel_trace.csv",
                                          version=version)
    assert isinstance(prefetch.start_csv(path), prefetch.ArrowCSV)
    assert main(["trace", "summary", str(path), "--json", "--top", "1000"]) == 0
    out = json.loads(capsys.readouterr().out)
    expected = summarize(read_trace(path), top=1000).to_dict()
    assert {k: out[k] for k in expected} == expected
    bad = tmp_path / "bad_kernel_trace.csv"
    lines = path.read_text().splitlines()
    bad.write_text("\n".join([*lines[:3], lines[3] + ",1", *lines[4:]]) + "\n")  # a column too many
    assert main(["trace", "summary", str(bad)]) == 2
    assert "line 4" in capsys.readouterr().err
