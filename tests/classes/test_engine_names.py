"""Serving engines' kernels classed as the field names them (issue 27, item 5).

Every name below is copied from a real trace or profile (a PyTorch profiler, nsys or rocprof table of
vLLM, SGLang, TRT-LLM, FlashInfer or aiter kernels, as published; the comment says which), or from the
public fixtures, which the second half reads whole: no kernel of theirs that names a collective, a norm,
attention or a MoE GEMM may land in another class.
"""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np
import pytest
from support import fixture, fixture_paths

from perflib import attribution, classes
from perflib.traces import read_trace

PYTORCH = ("pytorch-cuda", "pytorch-rocm")

COMMUNICATION = [
    # SGLang custom all-reduce (PyTorch profiler, 37.6% of kernel time in the GB300 capture)
    "void (anonymous namespace)::all_reduce_two_shot_kernel<__nv_bfloat16, 4u, true>(host::distributed::AllReduceData "
    "const*, (anonymous namespace)::AllReduceParams, device::distributed::PullController)",
    # vLLM and SGLang custom all-reduce
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, "
    "__nv_bfloat16*, int, int)",
    "void sglang::cross_device_reduce_1stage<__nv_bfloat16, 8>(sglang::RankData*, sglang::RankSignals, sglang::Signal*, "
    "__nv_bfloat16*, int, int)",
    # FlashInfer / TRT-LLM all-reduce fused with the residual RMSNorm: communication, not norm
    "void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<(flashinfer::trtllm_allreduce_"
    "fusion::AllReduceFusionPattern)1, __nv_bfloat16, 8, false, false>(flashinfer::trtllm_allreduce_fusion::"
    "AllReduceFusionParams<__nv_bfloat16>)",
    "twoshotAllreduceKernel",
    # NCCL (older and newer device-kernel names) and RCCL on ROCm (the MI350 fixture)
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
    "ncclKernel_AllReduce_RING_LL_Sum_half(ncclDevComm*, unsigned long, ncclWork*)",
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)",
]

ATTENTION = [
    # FlashAttention-3 inside CUTLASS's generic launcher (vLLM on H100, PyTorch profiler): not a GEMM
    "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, "
    "cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<128>, cute::C<192> >, 128, "
    "cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false, false, true, false, false, false, true, true, false, "
    "false, false>, flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128>, cute::C<128>, cute::C<192> >, "
    "cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::bfloat16_t, cutlass::arch::Sm90, 256, true, false, "
    "false, false>, flash::VarlenDynamicPersistentTileScheduler<128, 256, 128, false, true, true> > > >"
    "(flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<int> >::Params)",
    # the same as nsys prints it, cut short in its table
    "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMa…",
    "flash::prepare_varlen_num_blocks_kernel(int, int, int, int const*, int const*, int const*, int const*, int const*, "
    "int const*, int, int, int, int, int, cutlass::FastDivmod, cutlass::FastDivmod, int*, int*, bool)",
    # FlashAttention-2 as PyTorch ships it (the H100 fixture)
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
    "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true, "
    "false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
    # FlashInfer (nsys)
    "void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, (unsigned int)2, (unsigned "
    "int)1, (unsigned int)8, (unsigned int)16, (unsigned int)2, (unsigned int)4, flashinfer::DefaultAttention<(bool)0, "
    "(bool)0, (bool)0, (bool)0>, Params>(T9)",
    "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)1, (unsigned "
    "int)128, (unsigned int)2, (unsigned int)2, (unsigned int)8, (unsigned int)8, (unsigned int)4, (unsigned int)1, "
    "(flashinfer::PosEncodingMode)0>, Params>(T2)",
    # paged attention on ROCm (the SGLang MI300X fixture) and TRT-LLM-gen fmha on B200
    "void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16, __hip_bfloat16, (vllm::Fp8KVCacheDataType)0, 1, 128, "
    "256, false, 4, 1, ck_tile::ComposedAttention<0u, false> >(__hip_bfloat16 const*, __hip_bfloat16 const*)",
    "fmhaSm100fKernel_QkvBfloat16OBfloat16H64PagedKvCausalP64VarSeqQ128Kv128PersistentContext",
    "fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel::Params)",
    # vLLM V1's Triton unified attention and the merge of its segments (the vLLM MI300X fixture)
    "kernel_unified_attention_3d",
    "reduce_segments",
]

NORM = [
    # vLLM's fused residual RMSNorm, whose return type is a template expression: PyTorch profiler and nsys forms
    "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
    "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, c10::BFloat16*, c10::BFloat16 const*, "
    "float, int, int)",
    "std::enable_if<T2>(int)0&&vllm::_typeConvert<T1>::exists, void>::type vllm::fused_add_rms_norm_kern…",
    "void vllm::rms_norm_kernel<c10::BFloat16, (int)8, (int)2, (bool)1>(T1 *, const T1 *, long, long, long, long, "
    "long, const T1 *, long, float, int, int)",
    "void vllm::rms_norm_kernel<c10::BFloat16, 8, 2, true>(c10::BFloat16*, c10::BFloat16 const*, long, long, long, "
    "long, long, c10::BFloat16 const*, long, float, int, int) [clone .kd]",
    # composable_kernel's generic entry point running an RMSNorm (the vLLM MI300X fixture, mangled)
    "_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePassINS_27Rmsnorm2dFwdPipelineProblemIDF16b"
    "DF16bfDF16bDF16bDF16bffNS_19Generic2dBlockShapeINS_8sequenceIJLi1ELi3072EEEENS5_IJLi1ELi128EEEENS5_IJLi1ELi8",
    "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb1ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib",
    # torch.compile's RMSNorm: a reduction whose fused ops end in rsqrt, not a copy for its `_to_copy`
    "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0",
    "triton_red_fused__to_copy_add_copy__fused_add_rms_norm_moe_forward_shared_3",
]

MOE_GEMM = [
    "fused_moe_kernel",
    "fused_moe_kernel_gptq_awq",
    # TRT-LLM-gen batched GEMMs of FlashInfer's TRT-LLM MoE (SGLang on B200)
    "bmm_E4m3_E4m3E4m3_Fp32_t128x8x128u2_s6_et64x8_m64x8x32_cga1x1x1_16dp256b_TN_transOut_schedS_bN_dsFp8_sm100f",
    "bmm_E4m3_E4m3E4m3_Fp32_t128x64x128u2_s6_et64x64_m64x64x32_c1x1x1_rM_TN_transOut_noShfl_dsFp8_schPd4x2x2x3_bN_tma_"
    "tmaSf_rgTma_clmp_lbW4_dynB_sm100f",
    # triton_kernels' matmul_ogs of gpt-oss's MXFP4 experts (the vLLM MI300X fixture)
    "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1",
    "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu",
]

MOE_ROUTING = [
    "void topkGatingSoftmax<__nv_bfloat16, 8, 128, 4, 16>(__nv_bfloat16 const*, bool const*, float*, int, int*, int*, "
    "int, int, int)",
    "void moe_align_block_size_kernel<int>",
    "_Z27moe_align_block_size_kernelIiEvPKT_PiS3_S3_iimS3_bii",
    "_combined_routing_compute",
    "_sum_bitmatrix_rows",
    "_finalize_matmul_scatter_bf16",
]

TRITON = [
    ("triton_poi_fused__to_copy_1", "copy"),            # only a cast: a copy
    ("triton_poi_fused_add_cos_sin_0", "elementwise"),
    ("triton_poi_fused_constant_pad_nd_moe_forward_0", "elementwise"),
    ("triton_poi_fused_0", "elementwise"),
    ("triton_per_fused__softmax_3", "softmax"),
    ("triton_tem_fused_bmm_7", "gemm"),
    ("triton_tem_fused__to_copy_addmm_gelu_t_view_9", "gemm"),
    ("triton_tem_fused__to_copy_convolution_repeat_unsqueeze_view_2", "conv"),
]


def _cases(names: list[str], kernel_class: str) -> list[tuple[str, str, str]]:
    return [(table, name, kernel_class) for table in PYTORCH for name in names]


@pytest.mark.parametrize(
    ("table", "kernel", "kernel_class"),
    _cases(COMMUNICATION, "communication") + _cases(ATTENTION, "attention") + _cases(NORM, "norm")
    + _cases(MOE_GEMM, "moe_gemm") + _cases(MOE_ROUTING, "moe_routing")
    + [(t, name, c) for t in PYTORCH for name, c in TRITON],
)
def test_engine_kernels_take_their_class(table: str, kernel: str, kernel_class: str) -> None:
    assert classes.load_builtin(table).classify(kernel) == kernel_class


@pytest.mark.parametrize("table", [t for t in classes.builtin_backends() if not t.endswith("-cpu")])
@pytest.mark.parametrize("kernel", COMMUNICATION)
def test_collectives_are_communication_in_every_table(table: str, kernel: str) -> None:
    """`_common` goes first everywhere: a collective never falls into a table's `reduce` or `gemm`."""
    assert classes.load_builtin(table).classify(kernel) == "communication"


@pytest.mark.parametrize(
    ("kernel", "function"),
    [
        (NORM[0], "fused_add_rms_norm_kernel"),
        (NORM[1], "fused_add_rms_norm_kern…"),
        (ATTENTION[0], "FlashAttnFwdSm90"),
        (ATTENTION[1], "FlashAttnFwdSm90"),
        (NORM[4], "Rmsnorm2dFwd"),
        ("_ZN7cutlass13device_kernelIN5flash20enable_sm90_or_laterINS1_16FlashAttnFwdSm90IvEEEEEEvNT_6ParamsE",
         "FlashAttnFwdSm90"),
        ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_tn_align1>(cutlass_80_simt_sgemm_128x32_8x5_tn_align1::"
         "Params)", "cutlass_80_simt_sgemm_128x32_8x5_tn_align1"),
        # not entry points: their own name
        (COMMUNICATION[0], "all_reduce_two_shot_kernel"),
        ("void (anonymous namespace)::store_kvcache<2048l, 4, false, long>((anonymous namespace)::StoreKVCacheParams)",
         "store_kvcache"),
        ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),
    ],
)
def test_function_name(kernel: str, function: str) -> None:
    assert classes.function_name(kernel) == function


def test_the_templated_return_type_is_not_the_name() -> None:
    """`base_name` drops a return type that is a template expression with comparisons inside it."""
    assert classes.base_name(NORM[0]) == "fused_add_rms_norm_kernel"
    assert classes.base_name(NORM[3]) == "rms_norm_kernel"  # rocprof's ` [clone .kd]` after the parameters
    assert classes.base_name(ATTENTION[0]) == "device_kernel"  # the identifier itself stays the launcher's


def test_the_playbook_counts_moe_gemms_as_a_gemm_route() -> None:
    """The MoE GEMMs left `gemm`: the playbook's GEMM-route candidate must still count them."""
    import yaml  # a hard dependency of perflib: imported plainly, only here

    playbook = yaml.safe_load((classes.TABLES_DIR.parent / "playbooks" / "batched-decode.yaml").read_text())
    route = next(c for c in playbook["candidates"] if c["id"] == "gemm-dequant-route")
    assert "moe_gemm" in route["classes"] and "gemm" in route["classes"]
    assert {"moe_gemm", "moe_routing", "communication", "norm"} <= classes.builtin_class_names()
    assert "triton" not in classes.builtin_class_names()  # Triton kernels are classed by what they compute


# --- every kernel of the public fixtures ------------------------------------------------------------------

FIXTURE_TRACES = (fixture_paths("external/kineto/*.json.gz") + fixture_paths("kineto/*.json.gz")
                  + fixture_paths("rocprofv3/json-mi350/*.json.gz") + fixture_paths("rocprofv3/*/*kernel_trace*.csv")
                  + fixture_paths("external/nsys/*.sqlite") + fixture_paths("external/rocprof-legacy/*_results.csv"))

# what a name says, independent of the tables' own patterns, and the tables that must agree: collectives
# and norms in every table; attention and MoE GEMMs in the PyTorch ones (llama.cpp and MLX kernels are
# their own, and `auto` picks a PyTorch table for an engine's trace)
ALL = tuple(t for t in classes.builtin_backends() if not t.endswith("-cpu"))
"""The GPU kernel tables; the `-cpu` tables name CPU functions and operators (perf samples, torch's CPU ops)."""
SAYS = [
    (re.compile(r"(?i)all_?reduce|cross_device_reduce|nccl|rccl|all_?gather|reduce_?scatter"), {"communication"}, ALL),
    (re.compile(r"(?i)rms_?norm|layer_?norm"), {"norm", "rms_norm"}, ALL),
    (re.compile(r"(?i)flash_?attn|flash_fwd|FlashAttn|paged_attention|fmha|unified_attention|KVCacheKernel"),
     {"attention"}, PYTORCH),
    (re.compile(r"(?i)fused_moe|^_matmul_ogs"), {"moe_gemm"}, PYTORCH),
]
COPY_OPS = {"to", "copy", "clone", "cat", "slice", "select", "index", "view", "reshape", "permute", "transpose", "t",
            "unsafe", "repeat", "unsqueeze", "squeeze", "expand", "as", "strided", "unbind", "split", "stack",
            "constant", "pad", "nd", "gather", "embedding", "convert", "element", "type"}


def _names(path) -> list[str]:
    d = read_trace(path).dispatches
    return sorted(set(d.loc[d["kind"].astype(str) == "kernel", "kernel"].astype(str)))


@pytest.mark.parametrize("path", FIXTURE_TRACES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_fixture_kernel_leaves_the_class_its_name_says(path) -> None:
    names = _names(path)
    checked = 0
    for table_name in ALL:
        table = classes.load_builtin(table_name)
        for name in names:
            got = table.classify(name)
            function = classes.function_name(name)
            for says, allowed, tables in SAYS:
                if says.search(function):
                    checked += 1
                    assert table_name not in tables or got in allowed, (table_name, name, got)
                    break
            if name.startswith("triton_") and got == "copy":  # a Triton kernel is a copy only when purely one
                ops = re.sub(r"^triton_[a-z]+_fused_|_\d+$", "", name).split("_")
                assert set(filter(None, ops)) <= COPY_OPS, name
            assert got != "triton", name
    assert checked or not any(s.search(classes.function_name(n)) for s, _, _ in SAYS for n in names)


def _share(path, kernel_class: str) -> tuple[float, float]:
    """(the attribution's share of `kernel_class` in kernel time, the share of the kernels a name test picks)."""
    trace = read_trace(path)
    summary = attribution.summarize(trace)
    by = dict(zip(summary.classes["kernel_class"], summary.classes["share"], strict=True))
    return float(by.get(kernel_class, 0.0)), summary.class_table


def test_class_shares_on_the_fixtures_say_communication_norm_and_moe_where_they_are() -> None:
    """The class table's shares equal the time of the kernels whose names say so, computed apart from it."""
    expect = {
        ("rocprofv3", "json-mi350", "908_results.json.gz"): ("communication", r"(?i)nccl"),
        ("external", "kineto", "tracelens_vllm_decode_full_graph_execution_mi300x.json.gz"): ("moe_gemm", r"^_matmul_ogs"),
        ("external", "kineto", "tracelens_sglang_Qwen3-8B_decode_mi300x.json.gz"): ("norm", r"rmsnorm"),
    }
    for parts, (kernel_class, pattern) in expect.items():
        path = fixture(*parts)
        d = read_trace(path).dispatches
        dur = (d["end_ns"] - d["start_ns"]).astype(np.float64)
        total: dict[bool, float] = defaultdict(float)
        for name, t in zip(d["kernel"].astype(str), dur, strict=True):
            total[bool(re.search(pattern, name))] += t
        assert total[True] > 0, parts
        share, table = _share(path, kernel_class)
        assert share == pytest.approx(total[True] / (total[True] + total[False]), rel=1e-9), (parts, table)


def test_a_tensor_parallel_step_puts_its_all_reduce_in_communication() -> None:
    """A stand-in TP decode layer built from the issue's real names (SGLang's two-shot all-reduce, vLLM's
    fused RMSNorm, FA3, a dense GEMM): `summarize` with `auto` gives communication the all-reduce's share
    of kernel time, which `reduce` used to take."""
    import synthetic  # tests/synthetic.py: only this test builds a trace

    layer = [(COMMUNICATION[0], 376), (NORM[0], 40), (ATTENTION[0], 200),
             ("nvjet_sm90_tst_256x8_64x6_2x1_v_bz_TNT", 300), (COMMUNICATION[1], 84)]
    rows, t = [], 0
    for _ in range(3):
        for name, dur in layer:
            rows.append((name, t, t + dur))
            t += dur + 10
    summary = attribution.summarize(synthetic.dispatch_frame(rows))
    share = dict(zip(summary.classes["kernel_class"], summary.classes["share"], strict=True))
    total = sum(d for _, d in layer)
    assert share["communication"] == pytest.approx((376 + 84) / total)
    assert share["norm"] == pytest.approx(40 / total)
    assert share["attention"] == pytest.approx(200 / total)
    assert share["gemm"] == pytest.approx(300 / total)
    assert "reduce" not in share and classes.OTHER not in share
