"""Attribute a trace window to GPU work and host gaps: busy union, gap sizes, steps, kernels, classes.

- `windows`: a `Window` on the trace's clock, from ns, a marker, step markers or a run folder's
  level (its clocks) and decode window (SERVERS.md §5.2).
- `steps`: the step source order (what the trace marks, a count from outside it, the rhythm).
- `markers`: steps from the ranges a trace marks (engine annotations, `ProfilerStep#N`, named ones).
- `rhythm`: steps from the dispatch rhythm (the step's period, not the layer's).
- `level`: a run folder's window and step count, as the campaign page reads them.
- `phases`: each engine step's phase (prefill, mixed, decode, empty) from its range's name, and the
  figures per phase.
- `summary`: `summarize(trace, window, classes, steps)` → `TraceSummary` (GPU busy, host gaps by
  size, largest gaps, per-step figures, time by kernel and by kernel class, and inside the decode steps'
  periods where the engine names its steps' phases: `phase_kernel_time`).
- `samples`: a sampling profile's window (`perf` samples) split into compute, thread synchronisation
  and host work, as sampled estimates with binomial intervals.
- `codes`: kinds and kernel names of a dispatch table as integer codes.
- `hostgaps`: `host_gaps(trace, window, steps)` → `HostGaps`: what fills the host gaps (sync and copy
  wait, launch, other API, host compute), from the host API calls of the launching threads; on a CPU
  backend from its operators (all host compute) or its samples (sync and host shares).
- `apicalls`: which host API call is which (the rule table: CUDA runtime and driver, HIP, HSA).

The interval union they stand on is `perflib.intervals`.
"""

from perflib.attribution.hostgaps import API_RECORDS as HOST_GAP_API_RECORDS
from perflib.attribution.hostgaps import BASIS_TEXT as HOST_GAP_BASIS_TEXT
from perflib.attribution.hostgaps import DECODE_ROW_COLUMNS as HOST_GAP_DECODE_COLUMNS
from perflib.attribution.hostgaps import LABELS as HOST_GAP_LABELS
from perflib.attribution.hostgaps import NO_LAUNCH as HOST_GAP_NO_LAUNCH
from perflib.attribution.hostgaps import PARTS as HOST_GAP_PARTS
from perflib.attribution.hostgaps import ROW_COLUMNS as HOST_GAP_COLUMNS
from perflib.attribution.hostgaps import HostGaps, host_gaps
from perflib.attribution.level import LevelWindow, manifest_window, run_window
from perflib.attribution.markers import (
    ENGINE_FAMILIES,
    StepFamily,
    marked_steps,
    window_from_step_annotations,
)
from perflib.attribution.phases import DECODE_COLUMNS, PHASE_COLUMNS, PHASES, phase_of
from perflib.attribution.rhythm import MIN_STEPS
from perflib.attribution.samples import SampleSplit, interval, sampled_label, share_text
from perflib.attribution.steps import StepCount, StepSplit, find_steps
from perflib.attribution.summary import (
    DECODE_KERNEL_COLUMNS,
    GAP_BUCKETS,
    WORK_CPU_OPS,
    WORK_GPU,
    WORK_SAMPLES,
    WORK_WORDS,
    TraceSummary,
    busy_ns,
    gap_buckets,
    phase_kernel_time,
    summarize,
)
from perflib.attribution.windows import (
    DECODE_ONLY,
    DEFAULT_STEP_MARKER,
    Coverage,
    DecodeWindow,
    Window,
    coverage,
    decode_window_from_run,
    parse_window,
    trace_span,
    window_from_clocks,
    window_from_manifest,
    window_from_marker,
    window_from_range,
    window_from_step_markers,
)

__all__ = [
    "DECODE_COLUMNS", "DECODE_KERNEL_COLUMNS", "DECODE_ONLY", "PHASES", "PHASE_COLUMNS", "phase_kernel_time", "phase_of",
    "DEFAULT_STEP_MARKER", "ENGINE_FAMILIES", "GAP_BUCKETS", "MIN_STEPS", "WORK_CPU_OPS", "WORK_GPU", "WORK_SAMPLES",
    "WORK_WORDS", "Coverage", "DecodeWindow", "LevelWindow", "SampleSplit", "StepCount", "StepFamily", "StepSplit",
    "TraceSummary", "Window", "busy_ns", "coverage", "decode_window_from_run", "find_steps", "gap_buckets", "interval",
    "sampled_label", "share_text", "manifest_window", "marked_steps", "parse_window", "run_window", "summarize",
    "trace_span",
    "window_from_clocks", "window_from_manifest", "window_from_marker", "window_from_range",
    "window_from_step_annotations", "window_from_step_markers",
]
__all__ += ["HOST_GAP_API_RECORDS", "HOST_GAP_BASIS_TEXT", "HOST_GAP_COLUMNS", "HOST_GAP_DECODE_COLUMNS",
            "HOST_GAP_LABELS", "HOST_GAP_NO_LAUNCH", "HOST_GAP_PARTS", "HostGaps", "host_gaps"]  # (`hostgaps`)
