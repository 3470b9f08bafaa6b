"""Engine step phases (prefill, mixed, decode, empty) read from the step ranges' names, and the figures of
a step split per phase (DESIGN.md: "Engine steps have phases"; a decode-step figure never averages
prefill steps in).

A phase is what the engine says, never a guess:

- SGLang (`ModelRunner.forward`'s span): `step[EXTEND bs=8 toks=4096]` and `step[SPLIT_PREFILL ...]` are
  prefill, `step[DECODE bs=16]` decode, `step[MIXED ...]` mixed, `step[IDLE ...]` empty; its other
  forward modes (speculative `TARGET_VERIFY`, `DRAFT_EXTEND`, ...) have no phase here.
- vLLM (the model runner's `record_function`): `execute_context_<n>(...)_generation_<m>(...)` and the
  earlier `execute_<r>_context_<n>(...)_generation_<m>(...)`, anything inside the parentheses: n > 0
  context (prefill) requests and m = 0 is prefill, n > 0 and m > 0 mixed, n = 0 and m > 0 decode, both
  0 empty (nothing scheduled).
- Anything else (`execute_model`, vLLM 0.8's `gpu_model_runner.py(N): execute_model` Python frames,
  `ProfilerStep#N`, a named range, the dispatch rhythm, a count): no phase (`UNKNOWN`, '').

Per phase, each step's time is its *period*: from the end of the step before it to its own end, so the
host gap before a step (the host preparing it) is charged to it, as FORMATS.md §5.3 charges an idle
stretch to the dispatch that ends it, and the periods of all steps tile the steps' time with nothing
counted twice. The first step's period starts at its own start. Where the steps are the ranges a named
pattern matched (`--steps REGEX`, `profiler.step_marker`), steps it did not match may lie between them,
so each step's time is its own span only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pandas as pd

PREFILL, MIXED, DECODE, EMPTY, UNKNOWN = "prefill", "mixed", "decode", "empty", ""
PHASES = (PREFILL, MIXED, DECODE, EMPTY)
"""The phases in the order they are listed; a step of no phase is listed last as `unknown`."""

_SGLANG = re.compile(r"^step\[([A-Z_]+)")
_SGLANG_MODES = {"EXTEND": PREFILL, "SPLIT_PREFILL": PREFILL, "MIXED": MIXED, "DECODE": DECODE, "IDLE": EMPTY}
_VLLM = re.compile(r"^execute_(?:\d+_)?context_(\d+)\(.*\)_generation_(\d+)\(.*\)$", re.DOTALL)

PHASE_COLUMNS = ["phase", "steps", "window_ms", "busy_ms", "gap_ms", "span_ms", "dispatches", "step_ms",
                 "busy_ms_per_step", "gap_ms_per_step", "span_ms_per_step", "dispatches_per_step"]
"""Per phase: steps (count); the summed period (`window_ms`), GPU busy, host gap (period − busy), span
(each step's own start to end) in ms and dispatches starting in the periods; then each per step."""

_NS_PER_MS = 1e6


def phase_of(name: str) -> str:
    """The phase an engine step range's name gives (see the module), '' where it gives none."""
    name = str(name)
    found = _SGLANG.match(name)
    if found:
        return _SGLANG_MODES.get(found.group(1), UNKNOWN)
    found = _VLLM.match(name)
    if found:
        context, generation = int(found.group(1)), int(found.group(2))
        if context:
            return MIXED if generation else PREFILL
        return DECODE if generation else EMPTY
    return UNKNOWN


def phases_of(names: Sequence[str]) -> np.ndarray:
    """`phase_of` of each name (an object array of str), each distinct name parsed once."""
    seen: dict[str, str] = {}
    out = []
    for name in map(str, names):
        if name not in seen:
            seen[name] = phase_of(name)
        out.append(seen[name])
    return np.array(out, dtype=object)


def label(phase: str) -> str:
    return phase or "unknown"


def periods(starts: np.ndarray, ends: np.ndarray, spans_only: bool) -> np.ndarray:
    """Where each step's time begins: the end of the step before it (the first: its own start), or its
    own start where `spans_only` (the steps a named pattern matched)."""
    starts = np.asarray(starts, dtype=np.int64)
    if spans_only or starts.size == 0:
        return starts.copy()
    lead = np.concatenate((starts[:1], np.asarray(ends, dtype=np.int64)[:-1]))
    return np.minimum(lead, starts)


def phase_table(phases: np.ndarray, lo: np.ndarray, starts: np.ndarray, ends: np.ndarray, busy_ns: np.ndarray,
                dispatches: np.ndarray) -> pd.DataFrame:
    """One row per phase present (`PHASE_COLUMNS`): the steps' periods `[lo, end)`, their busy ns and the
    dispatches starting in them, summed and per step. Empty where no step has a phase."""
    phases = np.asarray(phases, dtype=object)
    if phases.size == 0 or not any(p for p in phases):
        return pd.DataFrame(columns=PHASE_COLUMNS)
    rows = []
    for phase in (*PHASES, UNKNOWN):
        mine = phases == phase
        n = int(mine.sum())
        if not n:
            continue
        window = float((ends[mine] - lo[mine]).sum()) / _NS_PER_MS
        busy = float(busy_ns[mine].sum()) / _NS_PER_MS
        span = float((ends[mine] - starts[mine]).sum()) / _NS_PER_MS
        count = int(dispatches[mine].sum())
        rows.append({"phase": label(phase), "steps": n, "window_ms": window, "busy_ms": busy,
                     "gap_ms": window - busy, "span_ms": span, "dispatches": count, "step_ms": window / n,
                     "busy_ms_per_step": busy / n, "gap_ms_per_step": (window - busy) / n,
                     "span_ms_per_step": span / n, "dispatches_per_step": count / n})
    return pd.DataFrame(rows, columns=PHASE_COLUMNS)


def steps_by_phase(table: pd.DataFrame) -> str:
    """'8 prefill steps, 8 decode steps' from a phase table, in its order."""
    return ", ".join(f"{int(r.steps)} {r.phase} step{'s' if int(r.steps) != 1 else ''}"
                     for r in table.itertuples(index=False))


def no_decode_note(table: pd.DataFrame) -> str:
    """'no decode step in this capture: 8 prefill steps' where the steps have phases and none is a
    decode step; '' otherwise."""
    if table is None or not len(table) or (table["phase"] == DECODE).any():
        return ""
    return f"no decode step in this capture: {steps_by_phase(table)}"


DECODE_COLUMNS = ["decode_steps", "prefill_steps", "decode_window_ms", "decode_busy_ms", "decode_gap_ms",
                  "decode_busy_ms_per_step", "decode_gap_ms_per_step", "phase_note"]
"""`trace_runs` columns of the decode phase (docs/SCHEMA.md §4), all None where the steps have no phase:
decode and prefill steps (prefill and mixed: steps that carried prefill rows), the decode steps'
summed period, busy and gap, those per decode step, and `no_decode_note`."""


def decode_columns(table: pd.DataFrame) -> dict[str, object]:
    """The `DECODE_COLUMNS` of one run from its phase table."""
    out: dict[str, object] = dict.fromkeys(DECODE_COLUMNS)
    if table is None or not len(table):
        return out
    by = table.set_index("phase")
    steps = by["steps"]
    out["decode_steps"] = int(steps.get(DECODE, 0))
    out["prefill_steps"] = int(steps.get(PREFILL, 0) + steps.get(MIXED, 0))
    out["phase_note"] = no_decode_note(table)
    if DECODE in by.index:
        row = by.loc[DECODE]
        out.update(decode_window_ms=float(row["window_ms"]), decode_busy_ms=float(row["busy_ms"]),
                   decode_gap_ms=float(row["gap_ms"]), decode_busy_ms_per_step=float(row["busy_ms_per_step"]),
                   decode_gap_ms_per_step=float(row["gap_ms_per_step"]))
    return out
