"""What fills the host gaps at one scope: the derived `host_gaps` rows of its runs (`perflib.derive`),
as medians over the repeats whose capture held host API calls, and the sentences that state them.

The measurements `launch_share`, `sync_share`, `other_api_share` and `host_compute_share`
(`perflib.verdicts.measures`) and the host-gap candidate's evidence read them from here. A part's
share is of the step (the window: part ms / window ms, the same for a whole window and per step);
the sentence also gives its share of the host gap. Where the engine names its steps' phases, the split
is over the decode steps' periods alone (the `decode_*` columns), as the decode-only gap share is: a
decode-step figure never averages prefill steps in (DESIGN.md); a capture with no decode step has no
decode split (`no_decode`). Where no repeat's capture held API calls, the split is not measured and `note`
says why (the capture's format, a cut made before perflib kept them). On a CPU backend the rows' split is
from its operators or samples (`Split.basis`), with no API records needed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from perflib.attribution import HOST_GAP_API_RECORDS as API_RECORDS
from perflib.attribution import HOST_GAP_LABELS as LABELS
from perflib.attribution import HOST_GAP_NO_LAUNCH as NO_LAUNCH
from perflib.attribution import HOST_GAP_PARTS as PARTS
from perflib.attribution import share_text
from perflib.verdicts.measures import number


def _median(values: pd.Series) -> float | None:
    values = pd.to_numeric(values, errors="coerce").dropna()
    return float(values.median()) if len(values) else None


@dataclass(frozen=True)
class Split:
    """The split at a scope: medians over the repeats that measured it (`measured` of `runs`)."""

    runs: int
    measured: int
    window_ms: float | None = None
    gap_ms: float | None = None
    steps: float | None = None
    ms: dict[str, float | None] = field(default_factory=dict)
    """Each part's ms over the window."""
    step_share: dict[str, float | None] = field(default_factory=dict)
    """Each part's share of the step (of the window)."""
    gap_share: dict[str, float | None] = field(default_factory=dict)
    """Each part's share of the host gap."""
    note: str = ""
    """Why no repeat measured it ('' where some did)."""
    decode: bool = False
    """Over the decode steps alone (the engine names its steps' phases)."""
    no_decode: bool = False
    """The engine names its steps' phases and none is a decode step: there is no decode split."""
    basis: str = API_RECORDS
    """What the split was measured from (`perflib.attribution.HostGaps.basis`): host API records, or on a CPU
    backend its operators or samples."""

    def per_step(self, ms: float | None) -> float | None:
        return None if ms is None or not self.steps else ms / self.steps

    def sentence(self, part: str) -> str:
        """'launch 2.10 of 19.50 ms per step (10.8% of the step, 12.9% of its 16.30 ms host gap),
        median of 3' (over the window where there is no step count; 'per decode step' over the decode
        steps alone)."""
        where = ("per decode step" if self.decode else "per step") if self.steps else "in the window"
        scale = (lambda ms: self.per_step(ms)) if self.steps else (lambda ms: ms)
        step_ms, gap_ms = scale(self.window_ms), scale(self.gap_ms)
        share, of_gap = self.step_share.get(part), self.gap_share.get(part)
        gap = f", {100 * of_gap:.1f}% of its {gap_ms:.2f} ms host gap" if of_gap is not None and gap_ms else ""
        return (f"{LABELS[part]} {scale(self.ms[part]):.2f} of {step_ms:.2f} ms {where} "
                f"({100 * share:.1f}% of the step{gap}), median of {self.measured}")

    def filled_by(self) -> str:
        """' = sync and copy wait 9.0 + launch 2.1 + other API 1.2 + host compute 4.0 ms' (per
        step where there is a step count), or '' where not measured."""
        if not self.measured:
            return ""
        scale = (lambda ms: self.per_step(ms)) if self.steps else (lambda ms: ms)
        return " = " + " + ".join(f"{LABELS[p]} {scale(self.ms[p]):.1f}" for p in PARTS) + " ms"


DECODE_FIGURES = {"window_ms": "decode_window_ms", "gap_ms": "decode_gap_ms", "steps": "decode_steps",
                  **{f"{p}_ms": f"decode_{p}_ms" for p in PARTS}}
"""A `host_gaps` row's figures and the columns of the decode steps' periods that replace them where the
engine names its steps' phases (`perflib.attribution.hostgaps.DECODE_ROW_COLUMNS`)."""


def _decode_rows(rows: pd.DataFrame) -> tuple[pd.DataFrame, bool, bool]:
    """(the rows with their decode figures in place of the window's, over the decode steps; whether the
    steps have phases; whether some row has a decode step). Rows whose steps have no phase are as given."""
    steps = pd.to_numeric(rows["decode_steps"], errors="coerce") if "decode_steps" in rows.columns else None
    if steps is None or steps.isna().all():
        return rows, False, True
    mine = rows[steps > 0]
    if not len(mine):
        return mine, True, False
    return mine.assign(**{k: mine[c] for k, c in DECODE_FIGURES.items() if c in mine.columns}), True, True


def split_of(rows: pd.DataFrame | None) -> Split | None:
    """The split of the `host_gaps` rows of one scope (already selected), or None where there are none:
    over the decode steps alone where the engine names its steps' phases."""
    if rows is None or not len(rows):
        return None
    rows, decode, any_decode = _decode_rows(rows)
    if not any_decode:
        return Split(0, 0, note="no decode step in the traces", decode=True, no_decode=True)
    ms = {p: pd.to_numeric(rows.get(f"{p}_ms"), errors="coerce") for p in PARTS} if all(
        f"{p}_ms" in rows.columns for p in PARTS) else None
    done = rows[ms["launch"].notna()] if ms is not None else rows.iloc[0:0]
    if not len(done):
        notes = [str(n) for n in rows.get("note", pd.Series(dtype=object)).tolist() if isinstance(n, str) and n]
        return Split(len(rows), 0, note=notes[0] if notes else "no host gaps split in the derived tables",
                     decode=decode)
    bases = [str(b) for b in done.get("basis", pd.Series(dtype=object)) if isinstance(b, str) and b]
    window = pd.to_numeric(done["window_ms"], errors="coerce")
    gap = pd.to_numeric(done["gap_ms"], errors="coerce")
    part_ms = {p: pd.to_numeric(done[f"{p}_ms"], errors="coerce") for p in PARTS}
    return Split(
        runs=len(rows), measured=len(done), window_ms=_median(window), gap_ms=_median(gap),
        steps=number(_median(done["steps"])) if "steps" in done.columns else None,
        ms={p: _median(v) for p, v in part_ms.items()},
        step_share={p: _median(v / window.where(window > 0)) for p, v in part_ms.items()},
        gap_share={p: _median(v / gap.where(gap > 0)) for p, v in part_ms.items()},
        decode=decode, basis=bases[0] if bases else API_RECORDS,
    )


CPU_PARTS = {
    "sync": "no device to wait for on a CPU backend: the CPU runs the model's operators itself",
    "launch": NO_LAUNCH,
    "other_api": "no device API on a CPU backend: the CPU runs the model's operators itself",
    "host_compute": "the time between the model's CPU operators (scheduling, input preparation, sampling, output "
                    "processing)",
}
"""What each part is on a CPU backend (`perflib.attribution.hostgaps`): launch, other API and (for its
operators) sync are 0, measured, for this reason; host compute is the time between the operators."""
SAMPLED_PARTS = {
    "sync": ("sync", "sync", "the decode threads waiting for each other: barrier spinning, futex waits"),
    "host_compute": ("host compute", "host", "the decode threads' samples in neither the model's arithmetic nor "
                                             "sync: sampling, scheduling, the HTTP server"),
}
"""A part measured from perf samples: its label, its role's samples (`perflib.attribution.samples`) and
what they are."""


def cpu_ops_sentence(split: Split, part: str, guess: str = "") -> str:
    """A part of a CPU operator trace's split: its sentence, then what it is there and what it was measured
    from ('launch 0.00 of 17.28 ms per decode step (0.0% of the step, ...), median of 3: no kernel launches on
    a CPU backend: ... (measured from the model's CPU operators in the trace, no device API)')."""
    return (f"{split.sentence(part)}{guess}: {CPU_PARTS[part]} (measured from the model's CPU operators in the "
            "trace, no device API)")


def sampled_part(part: str, pooled: dict[str, Any], of_samples: str, step_ms: float | None) -> tuple[float, str]:
    """(share, sentence) of a part of a sampled window, from the decode threads' samples pooled over repeats
    (`pooled`: `samples`, `sync`, `host`; `of_samples`: 'of 4,331 samples on the decode threads ... (sampled
    estimate, ...)'): sync and host compute their role's samples over all, a sampled estimate with its 95%
    interval and, where `step_ms` is known, about how many ms per step; launch and other API 0, measured
    (`CPU_PARTS`)."""
    n = pooled["samples"]
    if part not in SAMPLED_PARTS:
        repeats = f" over {pooled['repeats']} repeats" if pooled.get("repeats", 1) > 1 else ""
        return 0.0, (f"{LABELS[part]} 0.0% of the step, measured from perf samples ({n:,.0f} on the decode "
                     f"threads{repeats}, {pooled['label']}): {CPU_PARTS[part]}")
    name, role, what = SAMPLED_PARTS[part]
    k = pooled[role]
    per_step = f"; about {k / n * step_ms:.1f} of {step_ms:.1f} ms per step" if step_ms else ""
    return k / n, f"{name} ({what}) {share_text(k, n)} {of_samples}{per_step}"
