"""`perflib trace summary` of CPU backends, as a subprocess: a vLLM CPU worker trace (the model's CPU
operators) and a perf profile of llama-server (samples, each share a sampled estimate)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from support import DATA, REPO

from perflib import attribution
from perflib.traces import ReadMode, read_trace


def perflib(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perflib", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_a_vllm_cpu_trace_is_summarised_on_its_cpu_operators() -> None:
    path = DATA / "traces" / "vllm_cpu_rank0.pt.trace.json.gz"
    done = perflib("trace", "summary", str(path))
    assert done.returncode == 0, done.stderr
    assert "CPU busy (model operators)" in done.stdout and "host time" in done.stdout
    assert "steps from vLLM execute_... annotations" in done.stdout and "operator classes" in done.stdout
    out = json.loads(perflib("trace", "summary", str(path), "--json").stdout)
    assert out["work"] == "CPU operators" and out["steps"] > 0
    summary = attribution.summarize(read_trace(path, ReadMode.LEAN))
    assert out["busy_ms"] == summary.busy_ms and out["dispatches"] == summary.dispatches


def test_a_perf_profile_is_summarised_as_sampled_estimates() -> None:
    path = DATA / "traces" / "perf_llama_server_b4.perf-script.txt.gz"
    done = perflib("trace", "summary", str(path), "--backend", "llamacpp-cpu")
    assert done.returncode == 0, done.stderr
    summary = attribution.summarize(read_trace(path, ReadMode.LEAN), classes="llamacpp-cpu")
    s = summary.sampling
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("samples  "))
    assert f"of {s.samples:,} samples on {s.threads} decode threads (sampled estimate, cpu-clock 999 Hz)" in line
    assert re.search(rf"compute {100 * s.compute / s.samples:.1f}% \(95% interval [\d.]+-[\d.]+%\)", line)
    assert "(sampled estimate, cpu-clock 999 Hz)" in done.stdout.splitlines()[2]
    out = json.loads(perflib("trace", "summary", str(path), "--backend", "llamacpp-cpu", "--json").stdout)
    assert (out["samples"], out["compute_samples"], out["sync_samples"], out["host_samples"]) == (
        s.samples, s.compute, s.sync, s.host)
