"""`perflib trace summary` end to end, as a subprocess: JSON and table output, windows, errors, formats."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support import REPO, fixture


def perflib(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perflib", *args], cwd=REPO, capture_output=True, text=True, timeout=120)



def summary_json(*args: str) -> dict:
    done = perflib("trace", "summary", *args, "--json")
    assert done.returncode == 0, done.stderr
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, "--json prints exactly one object"
    return json.loads(lines[0])


def test_json_matches_the_library_on_a_real_csv() -> None:
    from perflib import attribution
    from perflib.traces import read_trace

    path = fixture("rocprofv3", "rocm7.0-docs", "kernel_trace.csv")
    out = summary_json(str(path))
    for key in ("dispatches", "window_ms", "busy_ms", "gap_ms", "busy_share", "gap_buckets", "classes", "kernels",
                "steps", "step_method", "busy_ms_per_step", "gap_ms_per_step", "largest_gaps"):
        assert key in out, key
    trace = read_trace(path)
    d = trace.dispatches
    assert out["dispatches"] == len(d)
    assert out["window_ms"] == pytest.approx((d["end_ns"].max() - d["start_ns"].min()) / 1e6)
    lib = attribution.summarize(trace).to_dict()
    assert out["busy_ms"] == lib["busy_ms"] and out["gap_ms"] == lib["gap_ms"]
    assert [b["bucket"] for b in out["gap_buckets"]] == ["<10us", "10-50us", "50-200us", "0.2-1ms", "1-5ms", ">=5ms"]
    assert sum(b["gap_ms"] for b in out["gap_buckets"]) == pytest.approx(out["gap_ms"])
    assert out["source"] == "rocprofv3-csv"


def test_table_output_has_units() -> None:
    path = fixture("rocprofv3", "rocm7.0-docs", "kernel_trace.csv")
    done = perflib("trace", "summary", str(path), "--top", "3")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "window" in text and " ms" in text and "busy share" in text and "%" in text
    assert "host gaps by size" in text and "<10us" in text and ">=5ms" in text
    assert "kernel classes" in text and "top kernels (3 of" in text


def test_window_in_ms_relative_to_first_event() -> None:
    path = fixture("rocprofv3", "rocm7.0-docs", "kernel_trace.csv")
    whole = summary_json(str(path))
    start = whole["window"]["start_ns"]
    part = summary_json(str(path), "--window", "0.03ms:0.1ms")
    assert part["window"]["start_ns"] == start + 30_000 and part["window"]["end_ns"] == start + 100_000
    assert part["window_ms"] == pytest.approx(0.07)
    assert part["dispatches"] < whole["dispatches"]
    ns = summary_json(str(path), "--window", f"{start + 30_000}:{start + 100_000}")
    assert ns["busy_ms"] == part["busy_ms"]


def test_marker_window_on_kineto() -> None:
    from perflib.traces import read_trace

    path = fixture("kineto", "a100_event_sync_trace.json.gz")
    marker = read_trace(path).markers.query("name == 'ProfilerStep#100'").iloc[0]
    out = summary_json(str(path), "--marker", "ProfilerStep#100")
    assert out["window"]["start_ns"] == int(marker["start_ns"]) and out["window"]["end_ns"] == int(marker["end_ns"])
    assert out["steps"] == 1 and out["step_method"] == "ProfilerStep# markers (host ranges, on the kernels they launched)"


def test_empty_window_and_missing_marker_exit_2_with_one_line() -> None:
    path = fixture("rocprofv3", "rocm7.0-docs", "kernel_trace.csv")
    done = perflib("trace", "summary", str(path), "--window", "1:5")
    assert done.returncode == 2
    assert done.stderr.startswith("perflib: error: empty window '1:5'") and "dispatches span" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    done = perflib("trace", "summary", str(path), "--marker", "decode")
    assert done.returncode == 2 and "marker 'decode' not found" in done.stderr
    done = perflib("trace", "summary", str(path), "--window", "soon:later")
    assert done.returncode == 2 and "--window" in done.stderr


def test_directory_steps_and_classes_options(tmp_path: Path) -> None:
    directory = fixture("rocprofv3", "rocm7.0-docs")
    out = summary_json(str(directory), "--steps", "127")
    assert out["steps"] == 127 and out["step_method"] == "given"
    assert out["busy_ms_per_step"] == pytest.approx(out["busy_ms"] / 127)
    user = tmp_path / "classes.yaml"
    user.write_text("classes:\n  - {class: add_sub, pattern: '^(addition|subtract)_kernel'}\n")
    out = summary_json(str(directory), "--classes", str(user), "--backend", "mlx-rocm")
    assert out["class_table"] == "user:classes.yaml+mlx-rocm"
    by_kernel = {k["kernel"]: k["kernel_class"] for k in out["kernels"]}
    assert {c for k, c in by_kernel.items() if k.startswith(("void addition", "subtract"))} == {"add_sub"}


def test_same_busy_and_window_from_rocprof_json_and_22_column_csv(tmp_path: Path) -> None:
    from perflib.traces import writers
    rng = np.random.default_rng(5)
    n = 400
    starts = np.cumsum(rng.integers(2_000, 60_000, n)).astype(np.int64) + 10**12
    frame = pd.DataFrame(
        {
            "kernel": rng.choice(["void qmv_wide_kernel<__half>(int)", "rms_norm_kernel<__half>(int)", "Cijk_Alik_MT64"], n),
            "start_ns": starts,
            "end_ns": starts + rng.integers(1_000, 80_000, n),  # some overlap the next one
            "device": np.int64(0),
            "queue": np.int64(1),
            "stream": np.int64(0),
            "correlation_id": np.arange(1, n + 1, dtype=np.int64),
            "kind": pd.Categorical(["kernel"] * n, categories=["kernel", "memcpy", "memset"]),
            "source": "synthetic",
        }
    )
    csv = writers.write_kernel_trace_csv(frame, tmp_path / "run_kernel_trace.csv", version="D")
    assert len(csv.read_text().splitlines()[0].split(",")) == 22
    js = writers.write_rocprof_json(frame, tmp_path / "run_results.json")
    a, b = summary_json(str(csv)), summary_json(str(js))
    for key in ("dispatches", "window_ms", "busy_ms", "gap_ms", "busy_share", "window"):
        assert a[key] == b[key], key
    exact = frame["end_ns"].max() - frame["start_ns"].min()
    assert a["window_ms"] == pytest.approx(exact / 1e6)


def test_cli_start_up_stays_light() -> None:
    """Building the parser (what `perflib --help` does) must not import pandas or numpy."""
    code = "import sys; from perflib.cli import build_parser; build_parser(); print(sorted({'pandas', 'numpy', 'pyarrow'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    helped = perflib("trace", "summary", "--help")
    assert helped.returncode == 0 and "--window" in helped.stdout and "--marker" in helped.stdout


def test_manifest_window_from_level_clocks(tmp_path: Path) -> None:
    """A run folder's manifest clocks: the rocprofv3 CSV does not say its clock; boottime holds the
    dispatches here (monotonic is 2 s behind, as after a suspend), so boottime is chosen."""
    path = fixture("rocprofv3", "rocm7.0-docs", "kernel_trace.csv")
    whole = summary_json(str(path))
    lo, hi = whole["window"]["start_ns"] - 5_000, whole["window"]["end_ns"] + 5_000
    lag = 2_000_000_000
    clocks = {
        "start": {"monotonic_ns": lo - lag, "boottime_ns": lo, "realtime_ns": lo + 10**18},
        "end": {"monotonic_ns": hi - lag, "boottime_ns": hi, "realtime_ns": hi + 10**18},
    }
    run = tmp_path / "b4_c1024_r1"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"schema": 1, "batch": 4, "context": 1024, "repeat": 1, "clocks": clocks}))
    out = summary_json(str(path), "--manifest", str(run))
    assert out["window"] == {"start_ns": lo, "end_ns": hi, "label": "level b4_c1024_r1 (boottime clock)"}
    assert out["dispatches"] == whole["dispatches"] and out["busy_ms"] == whole["busy_ms"]
    assert out["gap_ms"] == pytest.approx(whole["gap_ms"] + 0.010)  # 5 us either side


def test_trace_cut_help_documents_replace() -> None:
    done = perflib("trace", "cut", "--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "--replace" in text and "fewer dispatches" in text and "kept as it was" in text
