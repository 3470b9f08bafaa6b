"""perflib.classes: base names, shipped class tables, user overrides, and real kernel names."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from support import fixture

from perflib import classes
from perflib.errors import InputError, PerflibError

MLXCEL = "mlxcel-gfx1151"
TINYBLAS = ("(anonymous namespace)::tinyBLAS<8, float __vector(8), float __vector(8), unsigned short, unsigned short, "
            "float>::gemm_bloc<4, 2>")
"""llamafile's matrix-matrix kernel as perf named it in the CPU llama-server (the GEMM route)."""



@pytest.mark.parametrize(
    ("kernel", "base"),
    [
        ("void mlx::core::rocm::qmv_wide_kernel<__half, __half, 64, 4>(__half const*, unsigned char const*, int)", "qmv_wide_kernel"),
        ("binary_vv<Add, f16>", "binary_vv"),
        ("mlx::core::rocm::custom_kernel_mlxcel_fused_add_rms_norm_float16_t(__half const*)", "custom_kernel_mlxcel_fused_add_rms_norm_float16_t"),
        ("Cijk_Alik_Bljk_HHS_BH_Bias_HA_S_SAV_UserArgs_MT96x128x64_MI16x16x1", "Cijk_Alik_Bljk_HHS_BH_Bias_HA_S_SAV_UserArgs_MT96x128x64_MI16x16x1"),
        ("compiled Cf2ISigmoidADf2IBroadcastACEf2IBroadcast...", "compiled Cf2ISigmoidADf2IBroadcastACEf2IBroadcast..."),
        ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float> > >(at::native::ReduceOp<float>)", "reduce_kernel"),
        ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2> >(int)", "multi_tensor_apply_kernel"),
        ("_Z15addition_kernelIfEvPT_PKfS3_ii.kd", "addition_kernel"),
        # mangled, as CUPTI's text sample prints them (a real llama-server kernel on the H200)
        ("_Z13mul_mat_vec_qIL9ggml_type2ELi8ELb0ELb0ELb0EEvPKvS2_PKi31ggml_cuda_mm_fusion_args_devicePfj5uint3jjjS7_jjjS7_jjjj",
         "mul_mat_vec_q"),
        ("_ZN3mlx4core4rocm15qmv_wide_kernelI6__halfLi64EEEvPKS3_PKhi", "qmv_wide_kernel"),
        ("_ZN7cutlass7Kernel2I29cutlass_80_tensorop_s1688gemmEEvNT_6ParamsE", "Kernel2"),
        ("_ZNSt3__14sortEv", "sort"),
        ("_Z99truncated", "_Z99truncated"),
        ("subtract_kernel(float*, float const*, float const*, int, int)", "subtract_kernel"),
    ],
)
def test_base_name(kernel: str, base: str) -> None:
    assert classes.base_name(kernel) == base


@pytest.mark.parametrize(
    ("backend", "kernel", "kernel_class"),
    [
        ("mlx-rocm", "void mlx::core::rocm::qmv_warp_shared_batched_kernel<__half>(__half const*)", "qmv"),
        ("mlx-rocm", "Cijk_Ailk_Bljk_HHS_BH_Bias_HA_S_SAV_UserArgs_MT64x96x32_MI16x16x1", "gemm"),
        ("mlx-rocm", "void mlx::core::rocm::affine_dequantize_packed_kernel<__half, 4>(unsigned char const*)", "dequantize"),
        ("mlx-rocm", "void mlx::core::rocm::kernel_sdpav_1pass<__half, false, 128>(mlx::core::rocm::AttnParams)", "sdpa"),
        ("mlx-rocm", "void mlx::core::rocm::gather_rows_kernel<__half, int>(__half const*)", "gather_scatter"),
        ("mlx-rocm", "void mlx::core::rocm::rms_norm_kernel<__half, 256, 4>(__half const*)", "rms_norm"),
        # the argument type AttnParams / the template argument Add must not decide the class
        ("mlx-rocm", "void mlx::core::rocm::copy_gg_byval<mlx::core::rocm::qmv_tag>(mlx::core::rocm::sdpa_args)", "copy"),
        ("mlx-rocm", "__amd_rocclr_fillBufferUnAligned", "memset"),
        ("mlx-rocm", "void mlx::core::rocm::arange_kernel<int>(int*, int, int, unsigned long)", "other"),
        ("pytorch-cuda", "void cutlass::Kernel2<cutlass_80_wmma_tensorop_f16_s161616gemm_f16_32x32_128x2_tn_align8>(Params)", "gemm"),
        ("pytorch-cuda", "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNT", "gemm"),
        ("pytorch-cuda", "void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128> >(Flash_fwd_params)", "attention"),
        ("pytorch-cuda", "fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel::Params)", "attention"),
        ("pytorch-cuda", "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::Half> >(int)", "elementwise"),
        ("pytorch-cuda", "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float> >(at::native::ReduceOp<float>)", "reduce"),
        ("pytorch-cuda", "Memcpy HtoD (Pageable -> Device)", "memcpy"),
        ("pytorch-cuda", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "communication"),
        ("llamacpp-cuda", "void mul_mat_vec_q<(ggml_type)12, 1>(void const*, void const*, float*)", "mul_mat_vec"),
        ("llamacpp-cuda", "void mul_mat_q<(ggml_type)12, 64, false>(char const*, int const*, float*)", "mul_mat_q"),
        ("llamacpp-cuda", "void flash_attn_ext_f16<128, 128, 4, 32, 64, 1, false, false>(char const*)", "attention"),
        ("llamacpp-cuda", "void k_bin_bcast<&op_add, float, float, float>(float const*)", "elementwise"),
        # mangled, as the CUPTI text sample printed them for llama-server on the H200
        ("llamacpp-cuda", "_Z9rope_normILb1ELb0EffEvPKT1_PT2_iiiiiiiiiiiPKifff14rope_corr_dimsfPKfPKlib", "rope"),
        ("llamacpp-cuda", "_Z12rms_norm_f32ILi1024ELb1ELb0ELb0EEvPKfPfilllfS1_lll5uint3S3_S3_S3_S1_lllS3_S3_S3_S3_f", "norm"),
        ("llamacpp-cuda", "_Z10k_set_rowsIfl6__halfEvPKT_PKT0_PT1_llllllllllllll5uint3S9_S9_S9_S9_", "copy"),
        ("llamacpp-cuda", "_Z13quantize_q8_1PKfPvlllllj5uint3", "quantize"),
        ("llamacpp-cuda", "_Z9mul_mat_qIL9ggml_type2ELi128ELb0EL9ggml_prec30EEvPKcPKiS5_S5_PfS6_PKf5uint3iiiiiS9_S9_iiiS9_S9_iiiS9_", "mul_mat_q"),
        ("llamacpp-cuda", "_Z13mul_mat_vec_qIL9ggml_type2ELi8ELb0ELb0ELb0EEvPKvS2_PKi31ggml_cuda_mm_fusion_args_devicePfj5uint3jjjS7_jjjS7_jjjj", "mul_mat_vec"),
        ("llamacpp-cuda", "_Z25flash_attn_mask_to_KV_maxILi2EEvPK7__half2Piill", "attention"),
        ("llamacpp-rocm", "Cijk_Ailk_Bljk_HHS_BH_MT64x64x64", "gemm"),
        ("llamacpp-rocm", "void mul_mat_vec_q<(ggml_type)2, 1>(void const*)", "mul_mat_vec"),
        # as perf named the CPU llama-server's functions (tests/data/traces/perf_llama_server_b4.perf-script.txt.gz)
        ("llamacpp-cpu", "ggml_vec_dot_f16", "gemv"),
        ("llamacpp-cpu", TINYBLAS, "gemm"),
        ("llamacpp-cpu", "ggml_compute_forward_flash_attn_ext", "attention"),
        ("llamacpp-cpu", "ggml_compute_forward_rms_norm_mul_fused", "norm"),
        ("llamacpp-cpu", "ggml_vec_swiglu_f32", "elementwise"),
        ("llamacpp-cpu", "[unknown] (libgomp.so.1.0.0)", "sync"),
        ("llamacpp-cpu", "common_sampler_sample", "other"),  # host work: sampling
        ("llamacpp-cpu", "__memmove_avx512_unaligned_erms", "other"),  # a libc copy is no device copy here
        # as the PyTorch profiler named vLLM's CPU operators (tests/data/traces/vllm_cpu_rank0.pt.trace.json.gz)
        ("pytorch-cpu", "_C::onednn_mm", "gemm"),
        ("pytorch-cpu", "vllm::unified_attention_with_output", "attention"),
        ("pytorch-cpu", "vllm::unified_kv_cache_update", "kv_cache"),
        ("pytorch-cpu", "## Call CompiledFxGraph None ##", "compiled"),
        ("pytorch-cpu", "aten::slice", "copy"),
    ],
)
def test_builtin_tables(backend: str, kernel: str, kernel_class: str) -> None:
    assert classes.load_builtin(backend).classify(kernel) == kernel_class


def test_every_builtin_table_loads_and_extends_common() -> None:
    backends = classes.builtin_backends()
    assert {"mlx-rocm", "pytorch-cuda", "llamacpp-cuda"} <= set(backends)
    for backend in backends:
        table = classes.load_builtin(backend)
        assert table.rules, backend
        named = {r.kernel_class for r in table.rules}
        if backend.endswith("-cpu"):  # a CPU's operators or functions: no device copy, fill or collective
            assert not {"memcpy", "memset", "communication"} & named, backend
        else:
            assert {"memcpy", "memset", "communication"} <= named, backend
    with pytest.raises(PerflibError, match="unknown class table 'tpu'"):
        classes.load_builtin("tpu")


def test_kernel_stats_classes_rank_qmv_gemm_dequant_first() -> None:
    """rocprofv3 --stats of the batch-4 model-level run: by total time, GEMM, qmv and dequant lead."""
    from perflib.traces import read_stats

    stats = read_stats(fixture(MLXCEL, "s5", "trace_b4_p1024", "pbd_kernel_stats.csv"))
    table = classes.resolve_table(None, stats["name"].tolist(), stats["total_ns"].to_numpy())
    assert table.name == "mlx-rocm"  # auto: the table that leaves the least time unclassified
    by_class: dict[str, float] = defaultdict(float)
    for name, total in zip(stats["name"], stats["total_ns"], strict=True):
        by_class[table.classify(name)] += float(total)
    ranked = sorted(by_class, key=by_class.get, reverse=True)
    assert set(ranked[:3]) == {"qmv", "gemm", "dequantize"}
    assert by_class["other"] / sum(by_class.values()) < 0.001


def test_class_counts_match_mlxcel_analysis_labels() -> None:
    """s6/analysis.json lists every kernel (top_kernels: name, count) and the count per class (class_n):
    mapping the names with the mlx-rocm table must give the same count in every class, at every level."""
    levels = json.loads(fixture(MLXCEL, "s6", "analysis.json").read_text())
    table = classes.load_builtin("mlx-rocm")
    checked = 0
    for level in levels:
        names_total = sum(n for _, n in level["top_kernels"])
        assert names_total == sum(level["class_n"].values())  # the list is complete, so counts can match
        ours: dict[str, int] = defaultdict(int)
        for name, count in level["top_kernels"]:
            ours[table.classify(name)] += count
        assert dict(ours) == level["class_n"], (level["conc"], level["prompt_tokens"])
        checked += 1
    assert checked == 4


def test_user_file_overrides_and_extends(tmp_path: Path) -> None:
    user = tmp_path / "mine.yaml"
    user.write_text(
        "classes:\n"
        "  - {class: wide_qmv, pattern: '^qmv_wide'}\n"
        "  - {class: lm_head, pattern: 'Cijk_Alik.*MT96x128', scope: name}\n"
    )
    table = classes.load_class_file(user, base="mlx-rocm")
    assert table.name == "user:mine.yaml+mlx-rocm"
    assert table.classify("void mlx::core::rocm::qmv_wide_kernel<__half>(int)") == "wide_qmv"
    assert table.classify("void mlx::core::rocm::qmv_warp_shared_batched_kernel<__half>(int)") == "qmv"
    assert table.classify("Cijk_Alik_Bljk_HHS_MT96x128x64") == "lm_head"
    assert table.classify("Cijk_Alik_Bljk_HHS_MT64x160x64") == "gemm"
    # without a base the file waits for the auto-picked table
    loose = classes.load_class_file(user)
    assert not loose.standalone
    names = ["void mlx::core::rocm::qmv_wide_kernel<__half>(int)", "void mlx::core::rocm::rope_freqs<__half>(int)"]
    resolved = classes.resolve_table(loose, names)
    assert resolved.name == "user:mine.yaml+mlx-rocm"
    assert resolved.classify_names(names) == ["wide_qmv", "rope"]
    # `extends:` in the file names its base
    (tmp_path / "ext.yaml").write_text("extends: [llamacpp-cuda]\nclasses:\n  - {class: mmvq, pattern: '^mul_mat_vec_q'}\n")
    ext = classes.load_class_file(tmp_path / "ext.yaml")
    assert ext.classify("void mul_mat_vec_q<2, 1>(void const*)") == "mmvq"
    assert ext.classify("void mul_mat_vec_f<float>(float const*)") == "mul_mat_vec"


def test_bad_user_files_name_file_and_place(tmp_path: Path) -> None:
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("classes:\n  - {class: a, pattern: 'x'\n  - oops\n")
    with pytest.raises(InputError, match=r"bad\.yaml:\d+:\d+: expected valid YAML"):
        classes.load_class_file(bad_yaml)
    bad_regex = tmp_path / "regex.yaml"
    bad_regex.write_text("- {class: a, pattern: 'qmv('}\n")
    with pytest.raises(InputError, match=r"regex\.yaml:classes\[0\]\.pattern: expected a Python regular expression"):
        classes.load_class_file(bad_regex)
    missing = tmp_path / "missing.yaml"
    missing.write_text("- {class: a}\n")
    with pytest.raises(InputError, match=r"classes\[0\]: expected a mapping with `class` and `pattern`"):
        classes.load_class_file(missing)


@pytest.mark.parametrize("table", sorted(classes.TABLES_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_tables_read_the_same_with_libyaml(table: Path) -> None:
    """`load_builtin` parses with libyaml's loader where PyYAML has it: the same data as `safe_load`."""
    import yaml  # a hard dependency of perflib: imported plainly, so a broken install fails here

    if not hasattr(yaml, "CSafeLoader"):  # libyaml is an optional build of PyYAML, not a perflib dependency
        pytest.skip("PyYAML without libyaml")
    text = table.read_text()
    assert yaml.load(text, Loader=yaml.CSafeLoader) == yaml.safe_load(text)
