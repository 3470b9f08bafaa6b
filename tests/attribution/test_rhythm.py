"""The dispatch rhythm finds the step, not the layer: synthetic decoders with many layers per step whose
truth comes from how they were built, and the project's real H200 traces against independent counts."""

from __future__ import annotations

import glob
import json

import numpy as np
import pandas as pd
import pytest
from support import REPO
from synthetic import dispatch_frame, trace_of

from perflib import attribution as attr
from perflib.attribution.codes import kernel_codes
from perflib.attribution.rhythm import steps_from_rhythm

LAYER = ("rms_norm_f32", "quantize_q8_1", "mul_mat_vec_q", "rope_norm", "quantize_q8_1", "mul_mat_vec_q",
         "k_set_rows", "k_set_rows", "flash_attn_ext_vec", "flash_attn_combine_results", "quantize_q8_1",
         "mul_mat_vec_q", "rms_norm_f32", "quantize_q8_1", "mul_mat_vec_q", "quantize_q8_1", "mul_mat_vec_q")
"""One layer of a llama.cpp decode graph; every name here recurs once or more per layer."""
TAIL = ("k_get_rows_float", "k_get_rows_float", "rms_norm_f32", "quantize_q8_1", "mul_mat_vec_q")
"""After the last layer: two row gathers, the final norm and the output projection (all named as in a
layer but the gather, which comes twice at once: no kernel name comes once a step)."""


def llamacpp_like(steps: int, layers: int, seed: int = 0, every_other: str | None = None,
                  inside_gap_ns: tuple[int, int] = (0, 0), launch_gap_ns: tuple[int, int] = (100, 2_000),
                  ) -> tuple[pd.DataFrame, dict]:
    """A decode run shaped like llama.cpp's CUDA graph replay: per step 9 input copies, a graph-launch
    gap, `layers` layers of `LAYER`, `TAIL`, one output copy, then the host's turn (0.6-0.9 ms).
    `every_other`: a kernel added at the end of every second step; `inside_gap_ns`: an idle range before
    each layer's attention (a host-bound engine). Returns the table and the truth (starts, per step)."""
    rng = np.random.default_rng(seed)
    kernels: list[tuple[str, int, int]] = []
    copies: list[tuple[str, int, int]] = []
    t, starts, per_step = 10**12, [], []

    def emit(rows: list, name: str, dur: int, gap: int) -> None:
        nonlocal t
        t += gap
        rows.append((name, t, t + dur))
        t += dur

    for step in range(steps):
        t += int(rng.integers(600_000, 900_000))  # the host's turn: sampling, the next batch
        starts.append(t)
        before = len(kernels) + len(copies)
        for i in range(9):
            emit(copies, "Memcpy HtoD", int(rng.integers(1_000, 2_000)), 0 if i == 0 else int(rng.integers(5_000, 20_000)))
        t += int(rng.integers(250_000, 3_000_000))  # the graph is updated and launched
        for _ in range(layers):
            for name in LAYER:
                gap = int(rng.integers(*inside_gap_ns)) if name.startswith("flash_attn_ext") and inside_gap_ns[1] else 0
                emit(kernels, name, int(rng.integers(2_000, 20_000)), gap + int(rng.integers(*launch_gap_ns)))
        for name in TAIL:
            emit(kernels, name, int(rng.integers(2_000, 20_000)), int(rng.integers(*launch_gap_ns)))
        if every_other and step % 2 == 1:
            emit(kernels, every_other, 5_000, 1_000)
        emit(copies, "Memcpy DtoH", 2_000, 5_000)
        per_step.append(len(kernels) + len(copies) - before)
    frame = pd.concat([dispatch_frame(kernels), dispatch_frame(copies, "memcpy")], ignore_index=True)
    frame = frame.sort_values("start_ns", kind="stable").reset_index(drop=True)
    return frame, {"starts": starts, "per_step": per_step}


def test_many_layers_per_step_gives_the_step_not_the_layer() -> None:
    """32 layers of a name set that recurs every layer, no kernel once a step: the old rule (the longest
    period of a kernel seen once per repeat) locked onto the layer; the step is 9 copies + 32 layers +
    tail + 1 copy, opened by the first input copy after the host's turn."""
    frame, truth = llamacpp_like(steps=40, layers=32)
    per_step = truth["per_step"][0]
    assert set(truth["per_step"]) == {per_step} == {9 + 32 * len(LAYER) + len(TAIL) + 1}
    s = attr.summarize(frame, classes="llamacpp-cuda")
    assert s.steps == 40
    assert s.step_method == f"dispatch rhythm, a guess (period {per_step} dispatches, opened by Memcpy HtoD)"
    assert s.step_table["start_ns"].tolist() == truth["starts"]
    assert (s.step_table["dispatches"] == per_step).all()
    # the layer is a period too, but it repeats inside a step: 32 x 40 would be the layer count
    codes, _ = kernel_codes(frame["kernel"])
    flash = np.flatnonzero(frame["kernel"].to_numpy() == "flash_attn_ext_vec")
    assert np.median(np.diff(flash)) == len(LAYER) and flash.size == 32 * 40


def test_the_gap_split_alone_would_count_two_steps_per_step() -> None:
    """Each step holds two long idles (the host's turn, the graph launch): gaps alone double the count;
    the rhythm does not."""
    frame, truth = llamacpp_like(steps=20, layers=24, seed=3)
    s = attr.summarize(frame, classes="llamacpp-cuda")
    assert s.steps == 20
    start, end = frame["start_ns"].to_numpy(), frame["end_ns"].to_numpy()
    idle = np.maximum(start[1:] - np.maximum.accumulate(end)[:-1], 0)
    assert int((idle > 200_000).sum()) == 2 * 20 - 1  # both idles of every step, the first turn aside


@pytest.mark.parametrize("layers", [12, 24, 36])
def test_one_step_is_not_its_layers(layers: int) -> None:
    """A window holding one engine step (the public vLLM and SGLang traces): the layer repeats, but no
    repeat opens at the host's turn, so the rhythm gives no steps rather than the layer count."""
    frame, _ = llamacpp_like(steps=1, layers=layers)
    s = attr.summarize(frame, classes="llamacpp-cuda")
    assert s.steps is None and s.step_method is None


def test_a_kernel_every_other_step_does_not_double_the_step() -> None:
    """A name seen every second step has twice the step's period and opens at the host's turn too; the
    step is the shorter period it is a multiple of."""
    frame, truth = llamacpp_like(steps=30, layers=16, every_other="k_defrag_kv")
    s = attr.summarize(frame, classes="llamacpp-cuda")
    assert s.steps == 30
    assert s.step_table["start_ns"].tolist() == truth["starts"]


def test_host_bound_layers_with_an_idle_at_every_attention() -> None:
    """An eager engine: idle before every launch and a longer one before each layer's attention, still
    far shorter than the host's turn between steps: the step, not the layer."""
    frame, truth = llamacpp_like(steps=12, layers=16, inside_gap_ns=(60_000, 90_000), launch_gap_ns=(5_000, 30_000))
    s = attr.summarize(frame, classes="llamacpp-cuda")
    assert s.steps == 12
    assert s.step_table["start_ns"].tolist() == truth["starts"]


def _window_dispatches(trace, window: attr.Window) -> tuple:
    d = trace.dispatches
    d = d[(d["end_ns"] > window.start_ns) & (d["start_ns"] < window.end_ns)].sort_values("start_ns", kind="stable")
    codes, names = kernel_codes(d["kernel"])
    s = np.maximum(d["start_ns"].to_numpy(np.int64), window.start_ns)
    e = np.minimum(d["end_ns"].to_numpy(np.int64), window.end_ns)
    return codes, names, s, e


H200_RUNS = sorted(glob.glob(str(REPO / "data/raw/cuda-h200/after-cupti/llamacpp-cuda/b*_r1"))
                   + glob.glob(str(REPO / "data/raw/cuda-h200-batch/default-cupti/llamacpp-cuda/b*_c1024_r1")))


@pytest.mark.slow
@pytest.mark.parametrize("run_dir", H200_RUNS, ids=lambda p: "/".join(p.split("/")[-4::3]))
def test_rhythm_on_the_committed_cupti_decode_windows(run_dir: str) -> None:
    """The committed H200 CUPTI windows (llama.cpp, 16 or 32 layers): over the decode window the rhythm
    counts what the request records count (token chunks inside it; the window's last partial step adds
    one), not the layers (16 to 32 times more), where mixed prefill steps do not break the rhythm."""
    from perflib.traces import read_trace

    trace = read_trace(f"{run_dir}/trace.parquet")
    decode = attr.decode_window_from_run(trace, run_dir)
    codes, names, s, e = _window_dispatches(trace, decode.window)
    found = steps_from_rhythm(codes, names, s, e, decode.window.end_ns)
    assert found is not None and found.method.endswith("opened by Memcpy HtoD)")
    if run_dir.endswith("b8_c16384_r1"):  # other requests' ~16K prefill runs inside 21 of its steps
        assert 40 <= found.starts.size < decode.steps
        return
    assert decode.steps <= found.starts.size <= decode.steps + 1


@pytest.mark.slow
def test_rhythm_on_eager_pytorch_traces_equals_their_profiler_steps() -> None:
    """The h200-pytorch traces with their markers left out: the rhythm counts the ProfilerStep# ranges
    the capture recorded (12 or 20 per trace, 16 layers each)."""
    from perflib.traces import read_trace

    folder = REPO / "data" / "raw" / "h200-pytorch"
    if not (folder / "manifest.json").is_file():
        pytest.skip(f"{folder} holds no captured H200 traces")
    entries = [x for x in json.loads((folder / "manifest.json").read_text())["traces"] if x.get("status") == "ok"]
    for entry in entries:
        trace = read_trace(folder / entry["file"])
        bare = trace_of(trace.dispatches)
        s = attr.summarize(bare, classes="pytorch-cuda")
        assert s.steps == entry["decode_steps"], entry["file"]
        assert s.step_method.startswith("dispatch rhythm, a guess (period "), entry["file"]
