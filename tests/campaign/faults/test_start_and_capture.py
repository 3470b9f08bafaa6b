"""What a failure says (issue 21, weak): a server that cannot start shows its log's last meaningful lines
(a bind error), not a message that ends at "...server.log:"; a missing profiler names `profiler.binary`;
a profiler killed while it flushed says so; a cut stopped half-way is done again by the next run from
the capture still on disk; a full disk names the file it could not write."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import pytest
from faultkit import arm_dir_of, server_record, standin_program, write_campaign
from support import REPO

from perflib import atomic, rundir
from perflib import campaign as pc

BIND = "main: loading model|error: bind: Address already in use|main: exiting due to HTTP server error"


def test_a_server_that_cannot_start_shows_the_cause_from_its_log(tmp_path):
    path = write_campaign(tmp_path, "--fail", BIND)
    done = subprocess.run([sys.executable, "-m", "perflib", "campaign", "run", str(path), "--no-report",
                           "--no-contention"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    (failed,) = [ln for ln in done.stderr.splitlines() if ln.startswith("  FAILED")]
    assert "exited before it was healthy (exit code 1;" in failed
    assert "error: bind: Address already in use | main: exiting due to HTTP server error" in failed
    assert not failed.rstrip().endswith("server.log:") and "main: loading model" not in failed
    (start,) = server_record(arm_dir_of(path))["starts"]
    assert start["ended"] == "did not start" and "Address already in use" in start["error"]


def test_a_missing_profiler_binary_names_profiler_binary(tmp_path):
    path = write_campaign(tmp_path, profiler="{kind: nsys, binary: /nonexistent/nsys}")
    result = pc.run_campaign(pc.load_campaign(path), progress=False, write_page=False, contention_threshold=None)
    ((_, error),) = result.failed
    assert "'/nonexistent/nsys' is not an executable file or a program on PATH" in error
    assert "profiler.binary" in error and "perflib server build" not in error


def test_a_profiler_killed_while_it_flushes_says_so(tmp_path):
    """The rocprofv3 stand-in takes 60 s to flush once the server stopped; the grace period is 1 s: the
    runner kills it, and the run's manifest says why it has no trace."""
    prof = standin_program(tmp_path, "standin_rocprofv3.py")
    path = write_campaign(tmp_path, grace_s=1.0,
                          profiler=f"{{kind: rocprofv3, binary: {prof}, args: [--standin-flush-s, '60']}}")
    result = pc.run_campaign(pc.load_campaign(path), progress=False, write_page=False, contention_threshold=None)
    assert result.failed == ()  # its counters stand: the run is complete, its trace lost (partial)
    ((label, error),) = result.partial
    assert label == "default/standin/b1_c16_r1"
    assert "the rocprofv3 profiler was killed while it flushed its capture (SIGKILL after the 1 s grace period" \
           in error and "shutdown.grace_s" in error
    manifest = rundir.read_manifest(arm_dir_of(path) / "b1_c16_r1")
    assert manifest["status"] == "complete" and "killed while it flushed" in manifest["trace_note"]
    assert server_record(arm_dir_of(path))["starts"][0]["killed"].startswith("SIGKILL after the 1 s grace")


def test_a_cut_stopped_half_way_is_done_again_from_the_capture_on_disk(tmp_path):
    """A SIGTERM while the runner cuts the capture leaves complete runs without their trace, and the
    capture on disk. That state, made here by undoing one run's cut, is finished by the next run."""
    prof = standin_program(tmp_path, "standin_rocprofv3.py")
    path = write_campaign(tmp_path, batches="[1, 2]", profiler=f"{{kind: rocprofv3, binary: {prof}}}")
    campaign = pc.load_campaign(path)
    first = pc.run_campaign(campaign, progress=False, write_page=False, contention_threshold=None)
    assert first.failed == ()
    run_dir = arm_dir_of(path) / "b2_c16_r1"
    cut = rundir.read_manifest(run_dir)
    assert cut["trace_path"] == "trace.parquet"
    (run_dir / "trace.parquet").unlink()  # as if the runner was stopped before it cut this one
    (run_dir / "profile.ipynb").unlink()
    manifest = {k: v for k, v in cut.items() if k not in ("trace_path", "trace_cut", "trace_made_by")}
    rundir.write_manifest(run_dir, manifest)
    again = pc.run_campaign(campaign, progress=False, write_page=False, contention_threshold=None)
    assert again.done == () and again.failed == () and len(again.skipped) == 2  # no server started
    redone = rundir.read_manifest(run_dir)
    assert redone["trace_path"] == "trace.parquet" and redone["trace_cut"] == cut["trace_cut"]
    assert (run_dir / "profile.ipynb").is_file()
    assert len(server_record(arm_dir_of(path))["starts"]) == 1


FULL_DISK = """
import resource, signal, sys
from pathlib import Path
from perflib import atomic
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit a write fails with EFBIG, as ENOSPC on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
target = Path(sys.argv[1])
try:
    atomic.write_atomic(target, "x" * 100_000)
except OSError as exc:
    print(exc.errno, exc.filename)
try:
    atomic.append_jsonl(target.with_name("requests.jsonl"), {"x": "y" * 100_000})
except OSError as exc:
    print(exc.errno, exc.filename)
"""


def test_a_full_disk_names_the_file_it_could_not_write(tmp_path):
    target = tmp_path / "run" / "manifest.json"
    done = subprocess.run([sys.executable, "-c", FULL_DISK, str(target)], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == [f"{errno.EFBIG} {target}", f"{errno.EFBIG} {target.parent / 'requests.jsonl'}"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["requests.jsonl"]  # no temp file left


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_a_write_to_a_full_device_names_it():
    with pytest.raises(OSError) as raised:
        atomic.append_jsonl("/dev/full", {"x": 1})
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == "/dev/full"
    assert "No space left on device: '/dev/full'" in str(raised.value)
    assert json.dumps({"x": 1})  # the record itself was fine
