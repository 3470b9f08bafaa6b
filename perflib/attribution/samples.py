"""A window of a sampling profile (`perf record -e cpu-clock`) split into compute, thread synchronisation
and host work, as sampled estimates.

A sample (`kind` `sample`, `perflib.traces.perf_script`) says which function a thread was running when
the timer fired; it is counted by the instant it was taken (its `end_ns`) inside the window. Each
function's class comes from the class table (`perflib/data/classes/llamacpp-cpu.yaml` for llama.cpp's
CPU backend), and the class gives its role:

- **sync**: class `sync`, threads waiting for each other (ggml's barrier, OpenMP's barrier spin, futex
  waits, `sched_yield`);
- **host**: class `host` or no class (`other`): everything that is not the model's arithmetic (the HTTP
  server, sampling, the tokenizer, the scheduler, the allocator);
- **compute**: every other class (GEMV, GEMM, attention, norms, ...), the device's work.

The decode threads are the threads with at least one compute sample in the window (the thread that
runs the decode and its worker threads; the HTTP threads never compute). The shares are of their
samples: compute share = compute samples / all their samples, the CPU's "busy"; sync + host share =
the rest, the CPU's "host gaps". Figures in ms scale those shares onto the window: busy ms = window
ms × compute share, a class's ms = window ms × its samples / the decode threads' samples. Every such
figure is a sampled estimate: `interval` gives a binomial (Wilson score) interval for a share, and
the summary keeps its sample count and rate, which the page prints beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perflib import classes as class_mod
from perflib.attribution.codes import kernel_codes
from perflib.attribution.steps import StepCount
from perflib.attribution.windows import TraceLike, Window, empty_window_error
from perflib.classes import ClassTable

SAMPLE = "sample"
SYNC, HOST = "sync", "host"
ROLES = ("compute", SYNC, HOST)
Z95 = 1.959963984540054
"""The normal quantile of a two-sided 95% interval."""
_NS_PER_MS = 1e6


def role_of(kernel_class: str) -> str:
    """`sync`, `host` or `compute` of a class (module docstring)."""
    if kernel_class == SYNC:
        return SYNC
    if kernel_class in (HOST, class_mod.OTHER):
        return HOST
    return "compute"


def interval(k: float, n: float, z: float = Z95) -> tuple[float, float] | None:
    """The Wilson score interval of a share k / n (95% by default); None where n is 0."""
    if not n or n <= 0:
        return None
    p = k / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    lo, hi = max(0.0, centre - half), min(1.0, centre + half)
    return 0.0 if k <= 0 else lo, 1.0 if k >= n else hi  # exact at the ends (no rounding residue)


def is_sampled(dispatches: pd.DataFrame) -> bool:
    """Whether a dispatch table holds samples (every row of kind `sample`), not intervals of work."""
    if not len(dispatches) or "kind" not in dispatches:
        return False
    kind = dispatches["kind"]
    if isinstance(kind.dtype, pd.CategoricalDtype):
        used = set(kind.cat.categories[np.unique(kind.cat.codes.to_numpy())].astype(str))
    else:
        used = set(kind.astype(str).unique())
    return used == {SAMPLE}


@dataclass(frozen=True)
class SampleSplit:
    """The samples of a window on its decode threads, by role, with the sampling rate."""

    samples: int
    compute: int
    sync: int
    host: int
    threads: int
    sample_hz: float | None
    event: str

    def share(self, role: str) -> float | None:
        return getattr(self, role) / self.samples if self.samples else None

    def label(self) -> str:
        """`sampled estimate, cpu-clock 999 Hz`."""
        return sampled_label(self.event, self.sample_hz)

    def describe(self) -> str:
        """`compute 51.1% (95% interval 48.6-53.6%), sync 44.1% (...), host 4.8% (...) of 1,564 samples on 2
        decode threads (sampled estimate, cpu-clock 999 Hz)`."""
        parts = [f"{role} {share_text(getattr(self, role), self.samples)}" for role in ROLES]
        return (f"{', '.join(parts)} of {self.samples:,} samples on {self.threads} decode thread"
                f"{'s' if self.threads != 1 else ''} ({self.label()})")


def sampled_label(event: str | None, sample_hz: float | None) -> str:
    """`sampled estimate, cpu-clock 999 Hz`: what every figure from samples is labelled with."""
    rate = f" {sample_hz:,.0f} Hz" if sample_hz else ""
    return f"sampled estimate, {event or 'samples'}{rate}"


def share_text(k: float, n: float) -> str:
    """`51.1% (95% interval 48.6-53.6%)` of k samples in n; `n/a` where n is 0."""
    bounds = interval(k, n)
    if bounds is None:
        return "n/a"
    return f"{100 * k / n:.1f}% (95% interval {100 * bounds[0]:.1f}-{100 * bounds[1]:.1f}%)"


def _in_window(dispatches: pd.DataFrame, window: Window) -> np.ndarray:
    """Rows whose sample was taken inside the window (`end_ns` in [start, end))."""
    taken = dispatches["end_ns"].to_numpy(dtype=np.int64)
    return np.flatnonzero((taken >= int(window.start_ns)) & (taken < int(window.end_ns)))


@dataclass(frozen=True)
class SampledWindow:
    """What a sampled window gives `perflib.attribution.summary` to make its `TraceSummary` of."""

    samples: int
    window_ms: float
    busy_ms: float
    steps: int | None
    step_method: str | None
    classes: pd.DataFrame
    kernels: pd.DataFrame
    class_table: str
    split: SampleSplit


def split_window(trace: TraceLike, dispatches: pd.DataFrame, window: Window, classes: ClassTable | str | None,
                 steps: int | str | StepCount | None) -> SampledWindow:
    """The samples of a window split by role on its decode threads, its compute functions and classes
    (module docstring)."""
    if window.end_ns <= window.start_ns:
        raise empty_window_error(window, dispatches, "end <= start")
    rows = _in_window(dispatches, window)
    if rows.size == 0:
        raise empty_window_error(window, dispatches, "no sample taken inside it")
    inside = dispatches.iloc[rows]
    codes, names = kernel_codes(inside["kernel"])
    counts = np.bincount(codes, minlength=len(names))
    table = class_mod.resolve_table(classes, names, counts.astype(np.float64))
    name_class = np.asarray(table.classify_names(names), dtype=object)
    name_role = np.asarray([role_of(c) for c in name_class], dtype=object)
    role = name_role[codes]
    tid = inside["correlation_id"].to_numpy(dtype=np.int64)  # a sample's thread (perflib.traces.perf_script)
    computing = np.unique(tid[role == "compute"])
    on_decode = np.isin(tid, computing) if computing.size else np.ones(rows.size, dtype=bool)
    n = int(on_decode.sum())
    by_role = {r: int(((role == r) & on_decode).sum()) for r in ROLES}
    meta = getattr(trace, "meta", None) or {}
    events = meta.get("events") or {}
    split = SampleSplit(n, by_role["compute"], by_role[SYNC], by_role[HOST], int(computing.size),
                        meta.get("sample_hz"), max(events, key=events.get) if events else "samples")
    window_ms = window.duration_ns / _NS_PER_MS
    per_step = _step_count(steps)
    kernels = _function_table(codes[on_decode], names, name_class, name_role, n, split.compute, window_ms, per_step)
    by_class = (kernels.groupby("kernel_class", sort=False).agg(time_ms=("time_ms", "sum"), count=("count", "sum"))
                .reset_index())
    by_class["ms_per_step"] = by_class["time_ms"] / per_step if per_step else np.nan
    by_class["share"] = by_class["count"] / split.compute if split.compute else np.nan
    by_class = by_class.sort_values(["time_ms", "kernel_class"], ascending=[False, True], kind="stable")
    return SampledWindow(n, window_ms, window_ms * split.compute / n if n else 0.0, per_step,
                         None if per_step is None else _step_method(steps), by_class.reset_index(drop=True), kernels,
                         table.name, split)


def _step_count(steps: int | str | StepCount | None) -> int | None:
    """A sampled window's steps: a count given outright or counted outside the trace (a profile marks none,
    and a sample rhythm is no step rhythm)."""
    if isinstance(steps, (int, np.integer)) and not isinstance(steps, bool):
        return int(steps) or None
    if isinstance(steps, StepCount) and steps.count > 0:
        return int(steps.count)
    return None


def _step_method(steps: int | str | StepCount | None) -> str:
    return steps.source if isinstance(steps, StepCount) else "given"


def _function_table(codes: np.ndarray, names: list[str], name_class: np.ndarray, name_role: np.ndarray, n: int,
                    compute: int, window_ms: float, per_step: int | None) -> pd.DataFrame:
    """The compute functions of the decode threads: samples, estimated ms (window ms × samples / n), ms
    per step and share of the compute samples, most sampled first. Sync and host samples are not the
    device's work: they are the split's, not rows here."""
    counts = np.bincount(codes, minlength=len(names)) if codes.size else np.zeros(len(names), dtype=np.int64)
    keep = (counts > 0) & (name_role == "compute")
    frame = pd.DataFrame({
        "kernel": np.asarray(names, dtype=object)[keep],
        "kernel_class": name_class[keep],
        "time_ms": window_ms * counts[keep] / n if n else np.zeros(int(keep.sum())),
        "count": counts[keep].astype(np.int64),
    })
    frame["ms_per_step"] = frame["time_ms"] / per_step if per_step else np.nan
    frame["share"] = frame["count"] / compute if compute else np.nan
    return frame.sort_values(["time_ms", "kernel"], ascending=[False, True], kind="stable").reset_index(drop=True)
