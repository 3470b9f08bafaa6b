"""Issue 30 on the CPU: one small campaign of the real llama-server (two arms, `--threads 1` against
`--threads 2`, batch 1 and 2, two repeats) run once through `--cluster` with two workers on loopback pinned
to different CPUs, each arm on its own worker at once, and once in sequence without a cluster; then the page
of the parallel run says where its answer agrees with the sequential one's. Then a copy of the parallel run
with one arm's batch-1 counter step shifted (by as much as flips a verdict, from the run's own numbers) and
one repeat given the contention record of a CPU burner: the difference it makes stands on the page with that
record and the shifted counter check beside it. Contention is sampled in every run, and decides none (its
thresholds set out of reach), so what the machine's other users do is recorded, never a failure here."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from agreekit import (
    contended_record,
    copy_run,
    edit_manifest,
    scale_counter_step,
    section,
    table_rows,
    verdict_outcomes,
)
from clusterkit import distributed_or_skip, scheduler_process, stop, worker_process
from support import REPO

from perflib import checks, derive, devices, rundir
from perflib.campaign import load_campaign
from perflib.cli import main
from perflib.verdicts import compare

distributed_or_skip()
pytestmark = [pytest.mark.server, pytest.mark.slow]

RECORDED_NOT_DECIDING = ["--contention-threshold", "1", "--wait-threshold", "1000", "--psi-threshold", "1",
                         "--contention-wait", "0"]
"""Contention sampled and recorded in each manifest, but never over its thresholds: a busy machine is
recorded, not waited for (steal over 10% would still mark a run, kept at once with --contention-wait 0)."""
FOREIGN, PSI, WAIT = 0.57, 0.38, 0.81


def write_campaign(tmp_path: Path, binary: Path) -> Path:
    path = tmp_path / "agree.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: agree
        model: {{name: tiny random llama, random: {{n_layer: 2}}}}
        backends:
          - name: cpu
            dialect: llamacpp
            server: {{preset: llama-server, binary: {binary}}}
        arms:
          - {{name: t1, extra_args: [--threads, "1"]}}
          - {{name: t2, extra_args: [--threads, "2"]}}
        batches: [1, 2]
        contexts: [32]
        decode_tokens: 16
        repeats: 2
        candidates:
          - {{id: threads, label: two threads take a third off the step, measure: change_pct,
             column: decode_step_ms, confirmed: "<= -30", ruled_out: "> -10"}}
          - {{id: step-ratio, label: batched step far above single-stream, measure: step_ratio, batch: 2,
             confirmed: ">= 2", ruled_out: "< 1.5"}}
        data_dir: parallel
        reports_dir: reports
        """))
    return path


def _run(path: Path, *args: str, timeout: float = 900) -> dict:
    proc = subprocess.run([sys.executable, "-m", "perflib", "campaign", "run", str(path), "--json",
                           *RECORDED_NOT_DECIDING, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _report(capsys, path: Path, *args: str) -> dict:
    assert main(["campaign", "report", str(path), "--json", *args]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _wait_for_workers(address: str, n: int) -> None:
    from distributed import Client  # late: the optional extra (distributed_or_skip first)

    with Client(address, timeout=60, set_as_default=False) as client:
        client.wait_for_workers(n, timeout=120)


def _device(data: Path, arm: str) -> set[str]:
    return {devices.describe_record(rundir.read_manifest(p)["device"])
            for p in (data / "raw" / "agree" / arm / "cpu").glob("b*_c*_r*")}


def test_the_parallel_run_through_the_cluster_agrees_with_the_sequential_one_or_says_where_not(
        tmp_path, llama_server_binary, tiny_model, capsys):
    cpus = devices.cpu_set()
    if not cpus or len(cpus) < 2:
        pytest.skip(f"two CPUs are needed to pin two workers apart; this process may use {cpus}")
    path = write_campaign(tmp_path, llama_server_binary)
    parallel, sequential = tmp_path / "parallel", tmp_path / "sequential"
    with scheduler_process(tmp_path) as (address, _):
        workers = [worker_process(address, "--backend", "cpu", "--cpus", str(cpu), "--name", f"cpu{cpu}")
                   for cpu in cpus[:2]]
        try:
            _wait_for_workers(address, 2)
            done = _run(path, "--cluster", address, "--data", str(parallel), "--no-report")
        finally:
            for worker in workers:
                stop(worker)
    assert len(done["done"]) == 8 and done["failed"] == [], done
    assert len(_run(path, "--data", str(sequential), "--no-report")["done"]) == 8
    # each worker pinned its arm to its own CPU; in sequence both arms had the whole machine
    ran = {arm: _device(parallel, arm) for arm in ("t1", "t2")}
    assert all(len(d) == 1 for d in ran.values()) and ran["t1"] != ran["t2"], ran
    assert {d.rsplit("CPUs ", 1)[-1] for d in ran["t1"] | ran["t2"]} == {str(c) for c in cpus[:2]}
    assert _device(sequential, "t1") == _device(sequential, "t2")
    manifest = rundir.read_manifest(parallel / "raw" / "agree" / "t1" / "cpu" / "b1_c32_r1")
    assert manifest["contention"]["available"] and manifest["contention"]["foreign_cpu_share"] is not None

    alone = {name: _report(capsys, path, "--data", str(tmp_path / name), "--reports", str(tmp_path / f"r-{name}"))
             for name in ("parallel", "sequential")}
    ours, theirs = (verdict_outcomes(alone[n]["answer"]) for n in ("parallel", "sequential"))
    doc = _report(capsys, path, "--agree-with", str(sequential))
    agreement = doc["agreement"]
    rows = {(r["candidate"], r["arm"], r["baseline"], r["backend"], r["batch"], r["context"]): r
            for r in agreement["verdicts"]}
    assert rows.keys() == ours.keys() == theirs.keys() and len(rows) > 0
    for key, row in rows.items():  # per candidate and level, each run's outcome as it reports it alone
        assert (row["this"]["outcome"], row["other"]["outcome"], row["agree"]) == (ours[key], theirs[key],
                                                                                   ours[key] == theirs[key])
    page = Path(doc["page"]).read_text()
    same = sum(ours[k] == theirs[k] for k in ours)
    assert f"- **Agreement with sequential.** {same} of {len(ours)} verdicts agree" in page
    grid = table_rows(section(page, "Agreement"), "candidate")
    assert sorted(r[-1] for r in grid) == sorted("yes" if ours[k] == theirs[k] else "**no**" for k in ours)
    for difference in agreement["differences"]:  # a real one, where it arises: both runs' devices beside it
        assert any(line.startswith("parallel: ") for line in difference["pairing"])
        assert {f["run"] for f in difference["facts"]} == {"parallel", "sequential"}

    # a copy of the parallel run, one repeat contended and t2's batch-1 counter step shifted to flip a verdict
    edited = copy_run(parallel, tmp_path / "edited", "agree")
    t2 = edited / "raw" / "agree" / "t2" / "cpu"
    edit_manifest(t2 / "b1_c32_r1", contention=contended_record(FOREIGN, PSI, WAIT, 0.0))
    for run in (edited / "raw" / "agree" / "t1" / "cpu" / "b1_c32_r1", edited / "raw" / "agree" / "t1" / "cpu" /
                "b1_c32_r2", t2 / "b1_c32_r2"):  # the other repeats kept in, as on a quiet machine: a loaded one
        record = rundir.read_manifest(run)["contention"]  # may have marked them contended for real
        if record.get("contended"):
            edit_manifest(run, contention={**record, "contended": False})
    spec = load_campaign(path)
    runs = derive.build(spec, edited).runs
    before, after = (compare.level_values(runs, "decode_step_ms", arm, "cpu", 1, 32) for arm in ("t1", "t2"))
    assert len(after) == 1  # r1 left out as contended
    key = ("threads", "t2", "t1", "cpu", 1, 32)
    target = -60.0 if ours[key] == "ruled out" else 50.0  # the other side of the thresholds from parallel's
    factor = (1 + target / 100) * (sum(before) / len(before)) / after[0]
    for repeat in (1, 2):
        scale_counter_step(t2 / f"b1_c32_r{repeat}", factor)
    doc = _report(capsys, path, "--agree-with", str(edited))
    (row,) = [r for r in doc["agreement"]["verdicts"] if (r["candidate"], r["batch"]) == ("threads", 1)]
    assert row["this"]["outcome"] == ours[key] and row["other"]["value"] == pytest.approx(target, abs=1e-6)
    assert not row["agree"]
    page = Path(doc["page"]).read_text()
    blocks = section(page, "Agreement").split("### Where they differ", 1)[1].split("\n**")[1:]
    (block,) = [b for b in blocks if "two threads take a third off the step, arm t2 against t1, backend cpu, batch 1"
                in b.splitlines()[0]]
    assert f"edited: t2 b1 c32 r1: contended: other processes used {100 * FOREIGN:.0f}% of the 2 CPUs" in block
    (t1_device,), (t2_device,) = ran["t1"], ran["t2"]
    assert (f"- Devices: parallel: t1 on {t1_device}; t2 on {t2_device}; not paired on one device; edited: t1 on "
            f"{t1_device}; t2 on {t2_device}; not paired on one device.") in block
    head = next(line for line in block.splitlines() if line.startswith("| run |"))
    columns = [c.strip() for c in head.strip().strip("|").split(" | ")]
    facts = {(r[0], r[1], r[2]): dict(zip(columns, r, strict=True)) for r in table_rows(block, "run")}
    shifted = facts[("edited", "t2", "b1 c32")]
    assert shifted["repeats used"] == "1 of 2 (r1 contended)"
    assert f"r1 {100 * FOREIGN:.0f}%" in shifted["others' CPU share"] and f"r1 {WAIT:.2f}" in shifted[
        "run-queue wait (s per CPU s)"]
    assert "r2 n/s" not in shifted["others' CPU share"]  # r2's own record, measured while it ran
    measured = rundir.read_manifest(t2 / "b1_c32_r2")["contention"]["foreign_cpu_share"]
    assert f"r2 {100 * measured:.0f}%" in shifted["others' CPU share"]
    for name, data in (("parallel", parallel), ("edited", edited)):  # the counter check, as each run's runs.csv has it
        at = checks.usable(derive.build(spec, data).runs)
        at = at[(at["arm"] == "t2") & (at["batch"] == 1)]
        ratio = at["decode_step_ms"].median() / at["steady_step_ms"].median()
        # no client step where the stream came coalesced (a loaded machine): n/a, the column left out where no
        # row has one
        shown = facts[(name, "t2", "b1 c32")].get("counter / client step", "n/a")
        assert shown == (f"{ratio:.2f}x" if math.isfinite(ratio) else "n/a"), facts
