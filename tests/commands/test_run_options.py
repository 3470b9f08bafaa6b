"""`campaign run`'s flags are the runner's one `RunOptions`, and a cluster worker's child runner, given
`RunOptions.worker_flags()`, runs with the same options as the runner that sent it."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from perflib.campaign import RunOptions
from perflib.cli import build_parser
from perflib.commands.campaign import run_options

CARRIED = ("guard", "guard_idle_s", "contention_threshold", "wait_threshold", "psi_threshold", "contention_wait_s",
           "papermill", "kernel_name")
"""What a worker's child is given; the rest is the runner's own (its matrix part, its page, its progress)."""


def parsed(*flags: str) -> RunOptions:
    argv = ["campaign", "run", "c.yaml", *flags]
    return run_options(build_parser(argv).parse_args(argv))


def test_the_flags_make_the_options_and_the_defaults_agree():
    assert parsed() == replace(RunOptions(), only={})  # the command line's defaults are RunOptions' own
    options = parsed("--only", "arm=after", "batch=1,4", "--guard", "--guard-idle-s", "5", "--no-report",
                     "--no-contention", "--wait-threshold", "0.2", "--contention-wait", "0", "--papermill",
                     "--kernel", "k", "--cluster", "tcp://h:8786")
    assert options.only == {"arm": {"after"}, "batch": {"1", "4"}} and options.guard and options.guard_idle_s == 5
    assert not options.write_page and options.contention_threshold is None and options.wait_threshold == 0.2
    assert options.contention_wait_s == 0 and options.papermill and options.kernel_name == "k"
    assert options.cluster == "tcp://h:8786"


@pytest.mark.parametrize("options", [
    RunOptions(),
    RunOptions(guard=True, guard_idle_s=12.5, contention_threshold=None, psi_threshold=0.5, contention_wait_s=3),
    RunOptions(contention_threshold=0.4, wait_threshold=0.125, papermill=True, kernel_name="perflib"),
])
def test_a_workers_child_runs_with_the_runners_options(options):
    child = parsed(*options.worker_flags())
    assert {f: getattr(child, f) for f in CARRIED} == {f: getattr(options, f) for f in CARRIED}
    assert {f.name for f in fields(RunOptions)} - set(CARRIED) == {
        "only", "max_attempts", "notebooks", "progress", "write_page", "cluster"}  # a new option is placed here
