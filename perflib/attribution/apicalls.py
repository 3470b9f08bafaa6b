"""Which host API call is which: a synchronising call or copy wait, a launch, or any other call.

What fills a host gap (`perflib.attribution.hostgaps`, DESIGN.md) is told from the host API calls in
flight: a *sync and copy wait* where a synchronising call (stream, device, event or context
synchronize; a synchronous memcpy; an HSA signal wait) or a device-to-host copy is in flight; else a
*launch* (kernel, cooperative, module or graph launch); else *other API*. The rules are one table,
`RULES`, over the CUDA runtime and driver, HIP and HSA names as CUPTI, Kineto, Nsight Systems and
rocprofv3 print them; each rule carries names copied from real traces (and where perflib holds no trace
with one, the name as the vendor's own API table spells it), and the tests check every example of every
rule, so a new rule is tested without a new test.

Names are matched without the version and per-thread-stream suffixes that CUPTI and Nsight Systems add
(`cudaLaunchKernel_v7000`, `cudaGraphLaunch_ptsz_v10000`, `cuMemcpyDtoH_v2`, HIP's `_spt`): see
`base_name`. The first rule that matches wins, and the synchronising rules come first, so a name is
never both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

import numpy as np

SYNC, LAUNCH, OTHER = "sync", "launch", "other"
CATEGORIES = (SYNC, LAUNCH, OTHER)
"""The categories of a call, in the order a host gap is charged to them: where calls of several are in
flight at once, the first one wins (a launch inside a synchronising call is the wait)."""


@dataclass(frozen=True)
class ApiRule:
    """One rule: the calls of one family that fall in `category`."""

    category: str
    what: str
    """The family, in words (`CUDA runtime synchronize`)."""
    pattern: str
    """A regex matched in full against the name without its suffixes (`base_name`)."""
    examples: tuple[tuple[str, str], ...]
    """(the name as a trace or the vendor printed it, where it was copied from): `fixtures:<path>` under
    the shared fixtures, `repo:<path>` in this repository, or `api:<where>` for a vendor's API table."""


# Where the examples come from.
_A100_SYNC = "fixtures:kineto/a100_event_sync_trace.json.gz"
_A100_ADD = "fixtures:kineto/a100_simple_add_trace.json.gz"
_A100_TRITON = "fixtures:kineto/a100_triton_example.json.gz"
_MI250 = "fixtures:kineto/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
_SGLANG = "fixtures:external/kineto/tracelens_sglang_Qwen3-8B_decode_mi300x.json.gz"
_VLLM = "fixtures:external/kineto/tracelens_vllm_decode_full_graph_execution_mi300x.json.gz"
_H100 = "fixtures:external/kineto/tracelens_h100_Qwen1.5-0.5B-Chat__1016005.json.gz"
_NSYS = "fixtures:external/nsys/pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
_HIP_CSV = "fixtures:rocprofv3/rocm7.0-docs/hip_runtime_trace.csv"
_HIP_STATS = "fixtures:rocprofv3/rocm7.0-docs/hip_api_stats.csv"
_CUPTI = "repo:data/raw/h200-pytorch/cupti_decode_window_excerpt.txt.gz"
_TORCH_H200 = "repo:data/raw/h200-pytorch/llama1b_decode_b1_c1024.json.gz"
_CUPTI_CBID = "api:cupti_runtime_cbid.h / cupti_driver_cbid.h (the names cuptiGetCallbackName gives perflib's library)"
_HSA = "api:hsa.h / hsa_ext_amd.h (the Function rocprofv3 prints in hsa_api_trace.csv)"
_HIP_API = "api:hip_runtime_api.h (the Function rocprofv3 prints in hip_api_trace.csv)"

RULES: tuple[ApiRule, ...] = (
    ApiRule(SYNC, "CUDA runtime synchronize", r"cuda(Stream|Device|Event|Thread)Synchronize",
            (("cudaStreamSynchronize", _A100_SYNC), ("cudaDeviceSynchronize", _A100_SYNC),
             ("cudaEventSynchronize", _A100_SYNC), ("cudaDeviceSynchronize_v3020", _CUPTI),
             ("cudaStreamSynchronize_v3020", _CUPTI_CBID))),
    ApiRule(SYNC, "CUDA driver synchronize", r"cu(Stream|Ctx|Event)Synchronize",
            (("cuStreamSynchronize", _CUPTI_CBID), ("cuCtxSynchronize", _CUPTI_CBID),
             ("cuEventSynchronize", _CUPTI_CBID))),
    ApiRule(SYNC, "device-to-host copy", r"\w*(DtoH|DeviceToHost)\w*",
            (("cuMemcpyDtoHAsync_v2", _CUPTI_CBID), ("hipMemcpyDtoHAsync", _HIP_API),
             ("cuMemcpyDtoH_v2", _CUPTI_CBID), ("hipMemcpyDtoH", _HIP_API))),
    ApiRule(SYNC, "CUDA synchronous copy", r"cu(da)?Memcpy(?!\w*Async)\w*",
            (("cudaMemcpy", _NSYS), ("cudaMemcpy_v3020", _NSYS), ("cudaMemcpyToSymbol_v3020", _CUPTI_CBID),
             ("cuMemcpyHtoD_v2", _CUPTI_CBID))),
    ApiRule(SYNC, "HIP synchronize", r"hip(Stream|Device|Event)Synchronize",
            (("hipDeviceSynchronize", _MI250), ("hipEventSynchronize", _VLLM), ("hipStreamSynchronize", _HIP_STATS))),
    ApiRule(SYNC, "HIP synchronous copy", r"hipMemcpy(?!\w*Async)\w*",
            (("hipMemcpy", _HIP_CSV), ("hipMemcpyWithStream", _MI250), ("hipMemcpyWithStream", _SGLANG))),
    ApiRule(SYNC, "HSA signal wait", r"hsa_(amd_)?signal_wait\w*",
            (("hsa_signal_wait_scacquire", _HSA), ("hsa_signal_wait_relaxed", _HSA), ("hsa_amd_signal_wait_any", _HSA))),
    ApiRule(LAUNCH, "CUDA runtime kernel launch",
            r"cudaLaunch(Kernel|KernelExC|CooperativeKernel|CooperativeKernelMultiDevice)?",
            (("cudaLaunchKernel", _A100_ADD), ("cudaLaunchKernel_v7000", _CUPTI), ("cudaLaunchKernel_v7000", _NSYS),
             ("cudaLaunchKernelExC", _H100), ("cudaLaunchKernelExC_v11060", _CUPTI),
             ("cudaLaunchCooperativeKernel_ptsz_v9000", _CUPTI_CBID))),
    ApiRule(LAUNCH, "CUDA driver kernel launch",
            r"cuLaunch(Kernel|KernelEx|CooperativeKernel|CooperativeKernelMultiDevice|Grid|GridAsync)?",
            (("cuLaunchKernel", _A100_TRITON), ("cuLaunchKernel", _CUPTI), ("cuLaunchKernelEx", _CUPTI),
             ("cuLaunchKernelEx", _TORCH_H200))),
    ApiRule(LAUNCH, "CUDA graph launch", r"cu(da)?GraphLaunch",
            (("cudaGraphLaunch_v10000", _CUPTI_CBID), ("cudaGraphLaunch_ptsz_v10000", _CUPTI_CBID),
             ("cuGraphLaunch", _CUPTI_CBID))),
    ApiRule(LAUNCH, "HIP kernel launch",
            r"hip(Ext|Hcc)?(Module)?Launch(Kernel|KernelExC|CooperativeKernel|CooperativeKernelMultiDevice|ByPtr"
            r"|MultiKernelMultiDevice)",
            (("hipLaunchKernel", _MI250), ("hipLaunchKernel", _HIP_CSV), ("hipModuleLaunchKernel", _SGLANG),
             ("hipExtModuleLaunchKernel", _MI250), ("hipExtModuleLaunchKernel", _VLLM))),
    ApiRule(LAUNCH, "HIP graph launch", r"hipGraphLaunch", (("hipGraphLaunch", _SGLANG), ("hipGraphLaunch", _VLLM))),
)
"""Every rule, the synchronising ones first; a name no rule matches is `OTHER`."""

OTHER_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("cudaMemcpyAsync", _A100_SYNC), ("cudaMemsetAsync", _A100_ADD), ("cudaStreamWaitEvent", _A100_ADD),
    ("cudaEventQuery", _A100_SYNC), ("cudaGetDevice_v3020", _CUPTI), ("cuKernelGetName", _CUPTI),
    ("cudaStreamIsCapturing_v10000", _CUPTI), ("hipMemcpyAsync", _SGLANG), ("hipStreamWaitEvent", _SGLANG),
    ("hipPointerGetAttribute", _SGLANG), ("cudaMalloc_v3020", _NSYS), ("cudaLaunchHostFunc_v10000", _CUPTI_CBID),
)
"""Calls no rule matches (copied from the same traces): enqueues, queries, setup. An async copy is a copy
wait only where its own copy runs device to host (`perflib.attribution.hostgaps` tells that from the
dispatch it launched)."""

_SUFFIX = re.compile(r"(?:_(?:v\d+|ptsz|ptds|spt))+$")
_COMPILED = tuple((rule, re.compile(rule.pattern)) for rule in RULES)
DTOH = re.compile(r"DtoH|Device[- ]?to[- ]?Host|DEVICE_TO_HOST|Device -> (?:Host|Pageable|Pinned)|AtoH|Array-to-Host",
                  re.IGNORECASE)
"""A device-to-host copy dispatch, as each format names it: CUPTI and Kineto `Memcpy DtoH (Device -> Pageable)`,
Nsight Systems `Memcpy Device-to-Host`, rocprofv3 `MEMORY_COPY_DEVICE_TO_HOST`."""


def base_name(name: str) -> str:
    """The call's name without the suffixes CUPTI, Nsight Systems and HIP add (`_v7000`, `_ptsz`, `_spt`)."""
    return _SUFFIX.sub("", str(name).strip())


@cache
def rule_of(name: str) -> ApiRule | None:
    """The first rule whose pattern matches the name (without its suffixes), or None."""
    base = base_name(name)
    return next((rule for rule, pattern in _COMPILED if pattern.fullmatch(base)), None)


def category(name: str) -> str:
    """`SYNC`, `LAUNCH` or `OTHER` for one call name."""
    rule = rule_of(name)
    return rule.category if rule is not None else OTHER


def category_codes(names: list[str]) -> np.ndarray:
    """int8 indices into `CATEGORIES` of each name (a list of distinct names: classify once, index many)."""
    return np.asarray([CATEGORIES.index(category(n)) for n in names], dtype=np.int8)


def is_device_to_host(copy_names: list[str]) -> np.ndarray:
    """For each copy dispatch name, whether it names a device-to-host copy (`DTOH`)."""
    return np.asarray([DTOH.search(str(n)) is not None for n in copy_names], dtype=bool)
