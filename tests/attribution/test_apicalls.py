"""Which host API call is which (`perflib.attribution.apicalls`): every example of every rule is classed
by that rule, and every example said to come from a trace is in that trace, so a new rule with its
examples is tested without a new test."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from support import REPO, fixture

from perflib.attribution import apicalls
from perflib.traces import read_stats, read_trace

RULE_EXAMPLES = [(rule, name, source) for rule in apicalls.RULES for name, source in rule.examples]


def _path(source: str) -> Path | None:
    """The trace an example was copied from, or None for a name from a vendor's API table."""
    kind, _, where = source.partition(":")
    if kind == "fixtures":
        return fixture(*where.split("/"))
    if kind == "repo":
        return REPO / where
    assert kind == "api", f"unknown example source {source!r}"
    return None


@functools.cache
def _names(path: Path) -> tuple[frozenset[str], frozenset[str]]:
    """(API call names, dispatch names) of a trace, as its reader gives them (a rocprofv3 `*_stats.csv`:
    the calls it counted)."""
    if path.name.endswith("stats.csv"):
        return frozenset(read_stats(path)["name"].astype(str)), frozenset()
    trace = read_trace(path)
    return frozenset(trace.api["name"].astype(str)), frozenset(trace.dispatches["kernel"].astype(str))


@pytest.mark.parametrize(("rule", "name", "source"), RULE_EXAMPLES,
                         ids=[f"{r.what}:{n}" for r, n, _ in RULE_EXAMPLES])
def test_every_example_is_classed_by_its_rule(rule: apicalls.ApiRule, name: str, source: str) -> None:
    assert apicalls.rule_of(name) is rule
    assert apicalls.category(name) == rule.category


@pytest.mark.parametrize(("name", "source"), [(n, s) for _, n, s in RULE_EXAMPLES] + list(apicalls.OTHER_EXAMPLES))
def test_every_example_from_a_trace_is_in_that_trace(name: str, source: str) -> None:
    path = _path(source)
    if path is None:
        assert source.startswith("api:") and len(source) > len("api:")
        return
    assert name in _names(path)[0], f"{name} is not an API call of {source}"


@pytest.mark.parametrize(("name", "source"), apicalls.OTHER_EXAMPLES)
def test_enqueues_queries_and_setup_are_other_calls(name: str, source: str) -> None:
    assert apicalls.rule_of(name) is None and apicalls.category(name) == apicalls.OTHER


def test_every_rule_has_an_example_and_the_sync_rules_come_first() -> None:
    assert all(rule.examples for rule in apicalls.RULES)
    order = [apicalls.CATEGORIES.index(rule.category) for rule in apicalls.RULES]
    assert order == sorted(order) and {r.category for r in apicalls.RULES} == {apicalls.SYNC, apicalls.LAUNCH}


@pytest.mark.parametrize(("name", "base"), [
    ("cudaLaunchKernel_v7000", "cudaLaunchKernel"), ("cudaGraphLaunch_ptsz_v10000", "cudaGraphLaunch"),
    ("cuMemcpyDtoH_v2", "cuMemcpyDtoH"), ("hipLaunchKernel_spt", "hipLaunchKernel"),
    ("cudaGetDeviceProperties_v12000", "cudaGetDeviceProperties"), ("hipGetDevicePropertiesR0600",
                                                                     "hipGetDevicePropertiesR0600"),
    (" cudaStreamSynchronize ", "cudaStreamSynchronize"), ("cuLaunchKernel", "cuLaunchKernel"),
])
def test_version_and_per_thread_stream_suffixes_are_dropped(name: str, base: str) -> None:
    assert apicalls.base_name(name) == base


def test_async_copies_and_host_functions_are_not_waits_or_launches() -> None:
    """An async copy is a wait only through its own dispatch (`hostgaps`); a host function is no kernel."""
    for name in ("cudaMemcpyAsync_v3020", "cudaMemcpy2DAsync", "cuMemcpyHtoDAsync_v2", "hipMemcpyAsync",
                 "hipMemcpy2DAsync", "cudaLaunchHostFunc", "cuLaunchHostFunc", "hipLaunchHostFunc"):
        assert apicalls.category(name) == apicalls.OTHER, name


COPIES = [  # (a copy dispatch's name as the format writes it, where it was copied from, device to host)
    ("Memcpy DtoH (Device -> Pageable)", "fixtures:kineto/a100_event_sync_trace.json.gz", True),
    ("Memcpy DtoH (Device -> Host)", "fixtures:external/kineto/tracelens_sglang_Qwen3-8B_decode_mi300x.json.gz", True),
    ("Memcpy DtoH (Device -> Pinned)", "fixtures:external/kineto/tracelens_h100_Qwen1.5-0.5B-Chat__1016005.json.gz",
     True),
    ("Memcpy Device-to-Host", "fixtures:external/nsys/pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite", True),
    ("MEMORY_COPY_DEVICE_TO_HOST", "fixtures:rocprofv3/rocm7.0-docs/memory_copy_trace.csv", True),
    ("Memcpy Host-to-Device", "fixtures:external/nsys/pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite", False),
    ("Memcpy HtoD (Pageable -> Device)", "fixtures:kineto/a100_simple_add_trace.json.gz", False),
    ("Memcpy DtoD (Device -> Device)", "fixtures:external/kineto/tracelens_sglang_Qwen3-8B_decode_mi300x.json.gz",
     False),
    ("MEMORY_COPY_HOST_TO_DEVICE", "fixtures:rocprofv3/rocm7.0-docs/memory_copy_trace.csv", False),
    ("Memcpy DtoH", "repo:data/raw/cuda-h200-fa/fa-on-cupti/llamacpp-cuda/b32_c1024_r1/trace.parquet", True),
    ("Memcpy HtoD", "repo:data/raw/cuda-h200/after-cupti/llamacpp-cuda/b1_c1024_r1/trace.parquet", False),
]


@pytest.mark.parametrize(("name", "source", "to_host"), COPIES)
def test_a_device_to_host_copy_is_told_by_its_name_in_every_format(name: str, source: str, to_host: bool) -> None:
    assert name in _names(_path(source))[1], f"{name} is not a dispatch of {source}"
    assert bool(apicalls.is_device_to_host([name])[0]) is to_host
