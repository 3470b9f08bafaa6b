"""A per-run profiler's files kept with their run (`perflib.campaign.runtrace`, `perflib.cut.cut_kineto`,
`perflib.server.profilers.await_files`), on real vLLM 0.32 CPU traces: the committed campaign's
(`data/raw/vllm-cpu`, made by `perflib campaign run campaigns/vllm-cpu.yaml`)."""

from __future__ import annotations

import gzip
import json
import shutil
import threading
import time
from pathlib import Path

import pytest
from support import REPO

from perflib import rundir
from perflib.campaign.runtrace import EXTRA, TRACE, keep_run_trace
from perflib.clocks import CLOCK_KEYS
from perflib.cut import cut_kineto
from perflib.server import profilers

TRACED = REPO / "data" / "raw" / "vllm-cpu" / "compiled-torch" / "vllm-cpu"
REALTIME = CLOCK_KEYS["realtime"]


def _run() -> Path:
    runs = sorted(p for p in TRACED.glob("b4_c*_r*") if (p / TRACE).is_file())
    assert runs, f"no traced vLLM run under {TRACED}"
    return runs[0]


def _doc(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def _timed(event: dict) -> bool:
    return event.get("ph") != "M" and isinstance(event.get("ts"), int | float)


def _unix_ns(event: dict, base: int) -> tuple[int, int]:
    start = int(round(event["ts"] * 1000)) + base
    return start, int(round((event["ts"] + float(event.get("dur") or 0)) * 1000)) + base


def test_a_kineto_cut_keeps_exactly_the_events_of_its_window(tmp_path: Path) -> None:
    run = _run()
    doc = _doc(run / TRACE)
    base, events = doc["baseTimeNanoseconds"], doc["traceEvents"]
    clocks = rundir.read_manifest(run)["clocks"]
    # a window narrower than the kept one: its first and last 100 ms off
    narrow = {"start": {REALTIME: clocks["start"][REALTIME] + 100_000_000},
              "end": {REALTIME: clocks["end"][REALTIME] - 100_000_000}}
    cut = cut_kineto(run / TRACE, tmp_path / "cut.json.gz", narrow, margin_ns=0)
    lo, hi = narrow["start"][REALTIME], narrow["end"][REALTIME]
    timed = [e for e in events if _timed(e)]
    inside = [e for e in timed if _unix_ns(e, base)[1] > lo and _unix_ns(e, base)[0] < hi]
    untimed = [e for e in events if not _timed(e)]  # metadata: process and thread names
    kept = _doc(tmp_path / "cut.json.gz")
    assert 0 < len(inside) < len(timed) and untimed  # the narrower window drops events; metadata is there
    assert cut.kept == len(kept["traceEvents"]) == len(inside) + len(untimed) and cut.events == len(events)
    assert (cut.start_ns, cut.end_ns) == (lo, hi)
    assert kept["baseTimeNanoseconds"] == base and kept.get("vllm_version") == doc.get("vllm_version")
    steps = [e for e in kept["traceEvents"] if e.get("cat") == "user_annotation"]
    assert steps and all(e["name"].startswith("execute_context_") for e in steps)


def test_a_kineto_file_it_cannot_place_is_copied_whole_and_says_why(tmp_path: Path) -> None:
    run = _run()
    doc = _doc(run / TRACE)
    no_base = tmp_path / "no-base.json"
    no_base.write_text(json.dumps({k: v for k, v in doc.items() if k != "baseTimeNanoseconds"}))
    cut = cut_kineto(no_base, tmp_path / "out.json.gz", rundir.read_manifest(run)["clocks"])
    assert cut.kept == cut.events == len(doc["traceEvents"]) and "baseTimeNanoseconds" in cut.note
    cut = cut_kineto(run / TRACE, tmp_path / "out2.json.gz", None)
    assert cut.kept == cut.events and "no level clocks" in cut.note


def _stop_wrote(capture: Path, run: Path) -> list[Path]:
    """What one `/stop_profile` of vLLM 0.32 writes (the worker's trace, the API process's, the tables),
    made from a committed run: its trace as the worker's, its trace-extra files as the rest."""
    capture.mkdir(parents=True)
    files = [capture / "rank0.1796404742839301961.pt.trace.json.gz"]
    shutil.copy(run / TRACE, files[0])
    for extra in sorted((run / EXTRA).iterdir()):
        shutil.copy(extra, capture / extra.name)
        files.append(capture / extra.name)
    return files


def test_the_workers_trace_goes_into_its_run_folder_cut_and_the_rest_beside_it(tmp_path: Path) -> None:
    committed = _run()
    run = tmp_path / "run"
    shutil.copytree(committed, run, ignore=shutil.ignore_patterns(TRACE, EXTRA, "*.ipynb"))
    manifest = rundir.read_manifest(run)
    for key in ("trace_path", "trace_made_by", "trace_cut"):
        manifest.pop(key, None)
    manifest["trace_lost"] = "an earlier attempt's loss"
    rundir.write_manifest(run, manifest)
    written = _stop_wrote(tmp_path / "capture" / "torch", committed)
    assert profilers.pick_trace("torch", written) == written[0]  # rank0: the worker, not the API process
    assert keep_run_trace("torch", run, written, 2.0, 120.0, tmp_path / "capture" / "torch") is None
    assert not list((tmp_path / "capture" / "torch").iterdir())
    after = rundir.read_manifest(run)
    assert after["trace_path"] == TRACE and "trace_lost" not in after
    assert after["trace_made_by"] == {"profiler": "torch", "from": written[0].name, "waited_s": 2.0,
                                      "files": sorted(p.name for p in written)}
    assert after["trace_cut"]["events_kept"] == len(_doc(run / TRACE)["traceEvents"])
    assert sorted(p.name for p in (run / EXTRA).iterdir()) == sorted(p.name for p in written[1:])


def test_what_a_stop_lost_is_said(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    capture = tmp_path / "capture"
    assert "no trace file appeared" in keep_run_trace("torch", run, [], 120.0, 120.0, capture)
    capture.mkdir()
    table = capture / "rank0.profiler_out.txt"
    table.write_text("op table\n")
    assert "no trace file among" in keep_run_trace("torch", run, [table], 3.0, 120.0, capture)
    assert (run / EXTRA / table.name).is_file()
    broken = capture / "rank0.1.pt.trace.json.gz"
    broken.write_bytes(gzip.compress(b'{"traceEvents": [')[:-9])  # cut short while it was written
    lost = keep_run_trace("torch", run, [broken], 120.0, 120.0, capture)
    assert "still being written" in lost and "could not be read" in lost and (run / broken.name).is_file()


def test_the_wait_ends_once_the_trace_stops_growing(tmp_path: Path) -> None:
    capture = tmp_path / "capture"
    capture.mkdir()
    before = profilers.files_under(capture)
    target = capture / "rank0.5.pt.trace.json.gz"

    def write() -> None:  # as vLLM does: the file appears after the stop and grows for a while
        time.sleep(0.3)
        with open(target, "wb") as out:
            for _ in range(4):
                out.write(b"x" * 1000)
                out.flush()
                time.sleep(0.2)

    writer = threading.Thread(target=write)
    writer.start()
    found, waited = profilers.await_files("torch", capture, before, timeout_s=30, settle_s=0.5, poll_s=0.05)
    writer.join()
    assert found == [target] and target.stat().st_size == 4000 and waited < 30
    found, waited = profilers.await_files("torch", capture, {target}, timeout_s=0.3, settle_s=0.1, poll_s=0.05)
    assert found == [] and waited >= 0.3


@pytest.mark.parametrize(("names", "picked"), [
    (["vm_1.async_llm.2.pt.trace.json.gz", "rank0.3.pt.trace.json.gz", "rank0.profiler_out.txt"],
     "rank0.3.pt.trace.json.gz"),
    (["1764-TP-0.trace.json.gz", "1764-TP-1.trace.json.gz"], "1764-TP-0.trace.json.gz"),
    (["a.pt.trace.json", "bigger.pt.trace.json"], "bigger.pt.trace.json"),
    (["profiler_out.txt"], None),
])
def test_the_runs_trace_is_the_workers(tmp_path: Path, names: list[str], picked: str | None) -> None:
    paths = []
    for i, name in enumerate(names):
        (tmp_path / name).write_bytes(b"x" * (10 + i))
        paths.append(tmp_path / name)
    found = profilers.pick_trace("torch", paths)
    assert (found.name if found else None) == picked
