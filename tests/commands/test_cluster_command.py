"""`perflib cluster worker`: the dask worker it starts, its pins and resources (`--print`), and its
refusals; `campaign run --cluster` says where a cluster answers nothing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from perflib.campaign import cluster
from perflib.campaign.cluster import open_warning
from perflib.cli import main


def printed(capsys, *args: str) -> str:
    assert main(["cluster", "worker", *args, "--print"]) == 0
    return capsys.readouterr().out


def test_a_gpu_worker_pins_its_gpu_and_offers_its_backends_one_at_a_time(capsys):
    out = printed(capsys, "tcp://127.0.0.1:8786", "--gpu", "3", "--backend", "cuda", "--backend", "cuda-fa",
                  "--cpus", "0-7", "--host", "127.0.0.1")
    assert "# CPUs 0-7" in out
    for pin in ("CUDA_VISIBLE_DEVICES=3", "ROCR_VISIBLE_DEVICES=3", "HIP_VISIBLE_DEVICES=3",
                "CUDA_DEVICE_ORDER=PCI_BUS_ID"):
        assert pin in out
    assert "distributed.cli.dask_worker tcp://127.0.0.1:8786 --nthreads 1 --nworkers 1" in out
    assert "--resources 'backend-cuda=1 backend-cuda-fa=1'" in out and "-gpu3 " in out and "--host 127.0.0.1" in out


def test_a_cpu_worker_sees_no_gpu_and_keeps_its_own_data_folder(capsys, tmp_path):
    out = printed(capsys, "tls://gpu-box:8786", "--gpu", "none", "--backend", "cpu", "--data", str(tmp_path),
                  "--name", "mac", "--tls-ca-file", "ca.pem", "--tls-cert", "w.pem", "--tls-key", "w.key")
    assert "CUDA_VISIBLE_DEVICES=-1" in out and f"PERFLIB_CLUSTER_DATA={tmp_path}" in out
    assert "--name mac" in out and "--tls-ca-file /" in out and "--tls-key /" in out and "--tls-cert /" in out


@pytest.mark.parametrize(("args", "said"), [(["--cpus", "7-3"], "--cpus: expected CPUs like 0-3,8"),
                                            (["--backend", "../x"], "expected a name")])
def test_bad_worker_arguments_are_refused(capsys, args, said):
    argv = ["cluster", "worker", "tcp://127.0.0.1:8786", *(["--backend", "cpu"] if "--backend" not in args else []),
            *args]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    assert code == 2 and said in capsys.readouterr().err


def test_cpus_this_machine_does_not_have_are_one_error_line(capsys):
    assert main(["cluster", "worker", "tcp://127.0.0.1:8786", "--backend", "cpu", "--cpus", "4096-4097"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("perflib: error: --cpus 4096-4097: this process may use CPUs ") and err.count("\n") == 1


@pytest.mark.parametrize(("address", "warned"), [("tcp://10.1.2.3:8786", True), ("gpu-box:8786", True),
                                                 ("tcp://127.0.0.1:8786", False), ("tcp://localhost:8786", False),
                                                 ("tls://10.1.2.3:8786", False), ("tcp://[::1]:8786", False)])
def test_a_scheduler_off_this_machine_without_tls_is_warned_of(address, warned):
    assert bool(open_warning(address)) is warned
    if warned:
        assert "without TLS" in open_warning(address) and "docs/CLUSTER.md" in open_warning(address)


def test_a_cluster_that_does_not_answer_is_one_error_line(capsys, tmp_path, monkeypatch):
    pytest.importorskip("distributed", reason="the cluster extra is not installed")
    monkeypatch.setattr(cluster, "CONNECT_S", 2.0)
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    campaign = tmp_path / "c.yaml"
    campaign.write_text("name: c\nmodel: {name: m}\nbackends: [{name: b, url: 'http://127.0.0.1:1'}]\n"
                        "batches: [1]\ncontexts: [16]\ndecode_tokens: 4\n")
    assert main(["campaign", "run", str(campaign), "--cluster", f"tcp://127.0.0.1:{port}",
                 "--data", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("perflib: error:")]
    assert len(lines) == 1 and f"--cluster tcp://127.0.0.1:{port}: no scheduler answered" in lines[0], err


def test_a_pinned_worker_turns_dasks_nvml_monitor_off(capsys):
    """With every GPU hidden, Dask's NVML monitor killed the CPU worker at its start on the H200
    (NVMLError_InvalidArgument): a pinned worker's environment turns it off, and Dask reads it so."""
    out = printed(capsys, "tcp://127.0.0.1:8786", "--gpu", "none", "--backend", "cpu")
    assert "DASK_DISTRIBUTED__DIAGNOSTICS__NVML=False" in out
    env = {**os.environ, "DASK_DISTRIBUTED__DIAGNOSTICS__NVML": "False"}
    pytest.importorskip("distributed")
    said = subprocess.run([sys.executable, "-c", "import dask, distributed; "
                           "print(dask.config.get('distributed.diagnostics.nvml'))"],
                          env=env, capture_output=True, text=True, timeout=120, check=True).stdout.strip()
    assert said == "False"
