"""`perflib cluster worker`: a Dask worker for one GPU (or none) that serves the backends named."""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import sys

from perflib.cli import safe_label
from perflib.errors import PerflibError

WORKER_DESCRIPTION = """\
Starts a Dask distributed worker (`dask worker SCHEDULER --nthreads 1 --resources backend-<name>=1 ...`)
that `perflib campaign run FILE --cluster SCHEDULER` sends the groups of those backends to, one at a
time. --gpu pins one GPU for everything the worker starts (CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES,
HIP_VISIBLE_DEVICES, with CUDA_DEVICE_ORDER=PCI_BUS_ID so that CUDA's index is nvidia-smi's); start one
worker per GPU of a node, and one with --gpu none for a CPU backend. The GPU guard and the contention
check then judge that GPU and --cpus alone. Without --data the worker writes into the runner's --data
path (a shared folder); with it, into its own folder, from which the runner copies each group and
checks it. Needs perflib[cluster]. See docs/CLUSTER.md."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("cluster", help="a Dask worker for `campaign run --cluster` (docs/CLUSTER.md)",
                                   description="One campaign across hosts and GPUs on Dask distributed.")
    sub = parser.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    worker = sub.add_parser("worker", help="start a worker for one GPU (or none) serving the backends named",
                            description=WORKER_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    worker.add_argument("scheduler", help="the scheduler's address, e.g. tcp://gpu-box:8786 (tls://... with TLS)")
    worker.add_argument("--backend", action="append", required=True, type=safe_label, metavar="NAME",
                        help="a backend of the campaign this worker serves (repeat for several): the resource "
                             "backend-NAME=1")
    worker.add_argument("--gpu", metavar="N",
                        help="the GPU to pin: an index as nvidia-smi/rocm-smi number them, or a UUID (several: "
                             "comma-separated), or `none` for a CPU worker; default: not pinned (every GPU visible)")
    worker.add_argument("--cpus", metavar="LIST", help="CPUs the worker and all it starts may use, e.g. 0-7")
    worker.add_argument("--name", help="the worker's name (default: HOST-gpuN, HOST-cpu or HOST)")
    worker.add_argument("--host", help="the address the worker listens on (127.0.0.1 for a one-machine cluster)")
    worker.add_argument("--data", help="this worker's own data folder (default: the runner's --data, shared)")
    worker.add_argument("--no-nanny", action="store_true",
                        help="no nanny process (by default one restarts the worker if it dies)")
    for flag, what in (("--tls-ca-file", "CA certificate"), ("--tls-cert", "certificate"), ("--tls-key", "private key")):
        worker.add_argument(flag, metavar="FILE", help=f"TLS {what}, passed to dask worker")
    worker.add_argument("--print", action="store_true", dest="print_only",
                        help="print the environment and command line, and start nothing")
    worker.set_defaults(func=start_worker)


NVML_OFF = "DASK_DISTRIBUTED__DIAGNOSTICS__NVML"
"""Dask's setting for its NVML diagnostics, turned off in a pinned worker (`worker_command`)."""


def worker_command(args: argparse.Namespace) -> tuple[dict[str, str], list[str]]:
    """(the environment added, the `dask worker` command line) for these arguments."""
    # late: the device and cluster modules load when the command runs, not at `perflib --help`
    from perflib import devices
    from perflib.campaign.cluster import resource
    from perflib.campaign.worker import DATA_VARIABLE

    env: dict[str, str] = {}
    gpu = args.gpu
    if gpu is not None:
        env.update(devices.pin_env(None if gpu.strip().lower() == "none" else gpu.strip()))
        # Dask's system monitor asks NVML for the first visible GPU's handle by index; with the pin hiding
        # every GPU (a CPU worker on a GPU box) that raises NVMLError_InvalidArgument and the worker dies at
        # its start (seen on the H200). perflib records the pinned device itself (perflib.devices).
        env[NVML_OFF] = "False"
    if args.data:
        env[DATA_VARIABLE] = os.path.abspath(args.data)
    suffix = "" if gpu is None else "-cpu" if gpu.strip().lower() == "none" else f"-gpu{gpu.strip()}"
    name = args.name or f"{devices.host_name()}{suffix}"
    argv = [sys.executable, "-m", "distributed.cli.dask_worker", args.scheduler, "--nthreads", "1", "--nworkers", "1",
            "--resources", " ".join(f"{resource(b)}=1" for b in args.backend), "--name", name,
            "--memory-limit", "0", "--no-dashboard"]
    if args.host:
        argv += ["--host", args.host]
    if args.no_nanny:
        argv.append("--no-nanny")
    for key, flag in (("tls_ca_file", "--tls-ca-file"), ("tls_cert", "--tls-cert"), ("tls_key", "--tls-key")):
        if getattr(args, key):
            argv += [flag, os.path.abspath(getattr(args, key))]
    return env, argv


def start_worker(args: argparse.Namespace) -> int:
    # late: the device and cluster modules load when the command runs, not at `perflib --help`
    from perflib import devices
    from perflib.campaign.cluster import open_warning

    env, argv = worker_command(args)
    cpus = None
    if args.cpus:
        try:
            cpus = devices.parse_cpus(args.cpus)
        except ValueError as exc:
            raise PerflibError(f"--cpus: {exc}") from None
    if args.print_only:
        if cpus:
            print(f"# CPUs {devices.cpu_text(cpus)}")
        print(" ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())), shlex.join(argv))
        return 0
    if importlib.util.find_spec("distributed") is None:
        raise PerflibError("`perflib cluster worker` needs Dask distributed, the extra perflib[cluster]: "
                           "pip install 'perflib[cluster]'")
    warning = open_warning(args.scheduler) if not (args.tls_cert or args.scheduler.startswith("tls://")) else ""
    if warning:
        print(f"perflib: {warning}", file=sys.stderr)
    if cpus:
        have = devices.cpu_set()
        if have is not None and not set(cpus) <= set(have):
            raise PerflibError(f"--cpus {args.cpus}: this process may use CPUs {devices.cpu_text(have)} only")
        os.sched_setaffinity(0, cpus)  # inherited by the worker and everything it starts
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, {**os.environ, **env})
    return 0  # not reached: the worker replaced this process
