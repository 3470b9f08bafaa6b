"""`perflib campaign run --cluster` on a local Dask cluster on loopback: three Nanny workers as three
hosts, each with its own data folder (the runner copies each group and checks it), two backends of the
real CPU llama-server at different thread counts and one stand-in; a worker killed mid-run; a worker
of another perflib version; a backend no worker offers; a lost scheduler."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from clusterkit import (
    distributed_or_skip,
    local_cluster,
    runner,
    scheduler_process,
    stop,
    worker_pids,
    worker_process,
)
from faultkit import STANDIN, alive, server_record, wait_for
from support import REPO

from perflib import campaign as pc
from perflib import open_campaign, rundir
from perflib.campaign import cluster, transfer
from perflib.errors import PerflibError
from perflib.version import __version__

distributed_or_skip()
pytestmark = pytest.mark.slow  # a local cluster takes seconds to start


def standin_backend(name: str = "standin", *flags: str) -> str:
    command = json.dumps([sys.executable, str(STANDIN), "--port", "{port}", *flags])
    return textwrap.dedent(f"""\
        - name: {name}
          dialect: llamacpp
          server: {{command: {command}, health: /health, ready_timeout_s: 20, shutdown: {{signal: SIGTERM, grace_s: 2}}}}
        """)


def llama_backend(name: str, threads: int, binary: Path) -> str:
    return textwrap.dedent(f"""\
        - name: {name}
          dialect: llamacpp
          server: {{preset: llama-server, binary: {binary}}}
          extra_args: [--threads, "{threads}"]
        """)


def write_campaign(tmp_path: Path, backends: str, batches: str = "[1, 2]", decode: int = 16,
                   name: str = "fleet") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nmodel: {{name: tiny random llama, random: {{n_layer: 2}}}}\nbackends:\n"
                    + textwrap.indent(backends, "  ")
                    + f"batches: {batches}\ncontexts: [32]\ndecode_tokens: {decode}\ndata_dir: data\n"
                      "reports_dir: reports\n")
    return path


def group_of(folder: Path, backend: str, name: str = "fleet", arm: str = "default") -> Path:
    return folder / transfer.group_path(name, arm, backend)


@pytest.mark.server
@pytest.mark.slow
def test_one_campaign_over_three_hosts_gathers_checked_folders_and_fills_the_cross_backend_ratio(
        tmp_path, llama_server_binary, tiny_model):
    backends = (llama_backend("cpu-t1", 1, llama_server_binary) + llama_backend("cpu-t2", 2, llama_server_binary)
                + standin_backend())
    path = write_campaign(tmp_path, backends)
    hosts = {"h-a": {"backends": ["cpu-t1"]}, "h-b": {"backends": ["cpu-t2"]}, "h-c": {"backends": ["standin"]}}
    data, reports = tmp_path / "runner-data", tmp_path / "reports"
    with local_cluster(hosts, tmp_path) as (address, folders):
        workers = worker_pids(address)
        proc = runner(path, address, "--data", str(data), "--reports", str(reports))
        out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    report = json.loads(out)
    assert len(report["done"]) == 6 and report["failed"] == [], report
    for host, backend in (("h-a", "cpu-t1"), ("h-b", "cpu-t2"), ("h-c", "standin")):
        there, here = group_of(folders[host], backend), group_of(data, backend)
        assert transfer.listing(folders[host], there.relative_to(folders[host]).as_posix()) == \
            transfer.listing(data, here.relative_to(data).as_posix())  # every file arrived whole
        assert sorted(p.name for p in folders[host].glob("raw/fleet/default/*")) == [backend]  # its group only
        for run in ("b1_c32_r1", "b2_c32_r1"):
            manifest = rundir.read_manifest(here / run)
            assert manifest["status"] == "complete" and manifest["host"] == host
            assert manifest["device"]["host"] == host and manifest["device"]["gpus"] == []
        (start,) = server_record(here)["starts"]
        assert start["runner"]["pid"] not in workers.values()  # the server's runner is the worker's child
        assert start["host"] == host and not alive(start["pid"])
    flags = rundir.read_manifest(group_of(data, "cpu-t2") / "b1_c32_r1")["server"]["flags"]
    assert flags[flags.index("--threads") + 1] == "2"
    page = Path(report["page"]).read_text()
    section = page.split("## Cross-backend reference ratio", 1)[1].split("\n## ", 1)[0]
    assert "The backends ran on different hosts: cpu-t1 on h-a, cpu-t2 on h-b, standin on h-c." in section
    rows = [line for line in section.splitlines() if line.startswith("| cpu-t")]
    assert len(rows) == 2 and all(re.search(r"\| \d+\.\d\dx \|", line) for line in rows), rows  # a ratio each
    assert "| cpu-t1 |" in rows[0] and "h-a: no GPU" in rows[0] and "h-b: no GPU" in rows[1]


def test_a_worker_killed_mid_run_stops_its_server_and_its_group_is_measured_again(tmp_path):
    pidfile = tmp_path / "server.pid"
    path = write_campaign(tmp_path, standin_backend("standin", "--token-interval", "0.05", "--pidfile", str(pidfile)),
                          batches="[1, 2, 3]", decode=40)
    data = tmp_path / "runner-data"
    with local_cluster({"h-a": {"backends": ["standin"]}}, tmp_path) as (address, folders):
        proc = runner(path, address, "--data", str(data), "--no-report")
        try:
            there = group_of(folders["h-a"], "standin")
            wait_for(lambda: (there / "b1_c32_r1" / "warmup.jsonl").exists(), timeout=120, what="the first run")
            server = int(pidfile.read_text())
            os.kill(worker_pids(address)["h-a"], signal.SIGKILL)
            wait_for(lambda: not alive(server), timeout=30, what="the killed worker's server to stop")
            out, err = proc.communicate(timeout=300)
        finally:
            stop(proc)
    assert proc.returncode == 0, err
    report = json.loads(out)
    assert sorted(report["done"]) == [f"default/standin/b{b}_c32_r1" for b in (1, 2, 3)], report
    aside = rundir.read_manifest(there / "b1_c32_r1.incomplete-1")  # the interrupted run, kept incomplete there
    assert aside["status"] == "incomplete"
    log = (there / "cluster.log").read_text()
    assert log.count("=== ") == 2 and "perflib: terminated (SIGTERM)" in log  # the worker's death reached it
    starts = server_record(group_of(data, "standin"))["starts"]
    assert len(starts) == 2 and starts[0]["pid"] == server and not alive(starts[1]["pid"])
    for batch in (1, 2, 3):
        assert rundir.is_complete(group_of(data, "standin") / f"b{batch}_c32_r1")


def test_a_backend_no_worker_offers_is_named_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(cluster, "CONNECT_S", 1.0)
    path = write_campaign(tmp_path, standin_backend("standin") + standin_backend("rocm"))
    with local_cluster({"h-a": {"backends": ["standin"]}}, tmp_path) as (address, _):
        with pytest.raises(PerflibError) as caught:
            open_campaign(path).run(cluster=address, progress=False, contention_threshold=None)
    text = str(caught.value)
    assert "no worker offers backend rocm (resource backend-rocm" in text and "h-a: backend-standin" in text
    assert not (tmp_path / "h-a" / "raw").exists()  # nothing was sent


@pytest.mark.parametrize("older", ["version", "no cluster support"])
def test_a_worker_of_another_perflib_is_refused_naming_it(tmp_path, older):
    """A worker whose perflib is another version (both versions named), or one from before the cluster
    (it cannot answer at all), is refused before anything is sent."""
    other = tmp_path / "other-perflib"
    shutil.copytree(REPO / "perflib", other / "perflib", ignore=shutil.ignore_patterns("__pycache__"))
    if older == "version":
        (other / "perflib" / "version.py").write_text('"""An older perflib."""\n\n__version__ = "0.0.1"\n')
    else:
        (other / "perflib" / "campaign" / "worker.py").unlink()
    path = write_campaign(tmp_path, standin_backend())
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != REPO]
    pythonpath = os.pathsep.join([str(other), *kept])  # the older copy first, this checkout not at all
    with scheduler_process(tmp_path) as (address, _):
        worker = worker_process(address, "--backend", "standin", "--gpu", "none", "--name", "old",
                                env={"PYTHONPATH": pythonpath}, cwd=tmp_path) if older == "version" else \
            subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--host", "127.0.0.1",
                              "--nthreads", "1", "--resources", "backend-standin=1", "--name", "old",
                              "--no-dashboard"], cwd=tmp_path, env={**os.environ, "PYTHONPATH": pythonpath},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # plain `dask worker`
        try:
            with pytest.raises(PerflibError) as caught:
                pc.run_campaign(pc.load_campaign(path), cluster=address, progress=False, contention_threshold=None)
        finally:
            stop(worker)
    text = str(caught.value)
    if older == "version":
        assert "worker old (tcp://127.0.0.1:" in text and ") runs perflib 0.0.1" in text, text
        assert f"this runner perflib {__version__}" in text and __version__ != "0.0.1"
    else:
        assert "could not answer (ModuleNotFoundError" in text and f"install perflib {__version__}" in text, text
    assert not (tmp_path / "data" / "raw").exists()  # nothing was sent


def test_a_lost_scheduler_ends_the_runner_with_one_error_line_and_keeps_what_was_measured(tmp_path):
    path = write_campaign(tmp_path, standin_backend("standin", "--token-interval", "0.05"),
                          batches="[1, 2, 3]", decode=40)
    data, there = tmp_path / "runner-data", group_of(tmp_path / "w", "standin")
    with scheduler_process(tmp_path) as (address, scheduler):
        worker = worker_process(address, "--backend", "standin", "--gpu", "none", "--data", str(tmp_path / "w"))
        try:
            proc = runner(path, address, "--data", str(data), "--no-report")
            wait_for(lambda: rundir.is_complete(there / "b1_c32_r1"), timeout=120, what="a first complete run")
            scheduler.kill()
            out, err = proc.communicate(timeout=120)
            wait_for(lambda: rundir.is_complete(there / "b3_c32_r1"), timeout=120, what="the worker to finish")
        finally:
            stop(worker)
    assert proc.returncode == 2, err
    errors = [line for line in err.splitlines() if line.startswith("perflib: error:")]
    assert len(errors) == 1 and "lost the scheduler" in errors[0], err
    assert "Traceback" not in err
    assert all(rundir.is_complete(there / f"b{b}_c32_r1") for b in (1, 2, 3))  # measured there, not lost


def test_a_copy_that_does_not_match_its_listing_is_not_used_and_the_run_is_measured_again(tmp_path, monkeypatch):
    """The first copy of one run's records arrives with a byte changed (a bad link): that folder is not
    used, the worker moves its copy aside and measures the run again, and the second copy is taken."""
    path = write_campaign(tmp_path, standin_backend(), batches="[1, 2]")
    data = tmp_path / "runner-data"
    spoiled: list[str] = []
    reader = cluster._Session._reader

    def spoiling_reader(self, outcome):
        read = reader(self, outcome)

        def spoil(name: str, offset: int, size: int) -> bytes:
            block = read(name, offset, size)
            if name.endswith("b1_c32_r1/requests.jsonl") and not spoiled:
                spoiled.append(name)
                return bytes([block[0] ^ 1]) + block[1:]
            return block
        return spoil

    monkeypatch.setattr(cluster._Session, "_reader", spoiling_reader)
    with local_cluster({"h-a": {"backends": ["standin"]}}, tmp_path) as (address, folders):
        result = pc.run_campaign(pc.load_campaign(path), data_dir=data, cluster=address, progress=False,
                                 write_page=False, contention_threshold=None)
    there, here = group_of(folders["h-a"], "standin"), group_of(data, "standin")
    assert spoiled and result.failed == ()
    assert sorted(result.done) == ["default/standin/b1_c32_r1", "default/standin/b1_c32_r1",
                                   "default/standin/b2_c32_r1"]  # b1 measured twice
    moved = rundir.read_manifest(there / "b1_c32_r1.copy-mismatch-1")
    assert moved["status"] == "complete"  # the worker's first measurement, kept aside there
    assert (here / "b1_c32_r1" / "requests.jsonl").read_bytes() == (there / "b1_c32_r1" / "requests.jsonl").read_bytes()
    assert rundir.read_manifest(here / "b1_c32_r1")["clocks"] == rundir.read_manifest(there / "b1_c32_r1")["clocks"]
