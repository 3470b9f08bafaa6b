"""Verdicts: candidates (hypotheses) decided by named measurements over the derived tables.

- `measures`: the registry of measurements (`MEASUREMENTS`), each a function of the tables and a
  `Scope` that gives a number with its sentence, or why it was not measured, with flags that say
  where it applies; and what they share (the rows at a scope, why none were measured).
- `runmeasures`, `gapmeasures`, `classmeasures`: the measurements of runs.csv (client and counters),
  of the trace's host gaps and of its kernel classes; `samplepool`: a CPU profile's samples pooled over
  repeats, which the trace measurements read on a CPU backend.
- `scopes`: where a candidate is decided: every level (batch x context, per compared arm against its
  baseline, per backend) its measurement applies to.
- `evaluate`: a candidate at each of its scopes → confirmed, ruled out, inconclusive or not measured,
  with the number and the threshold; the regression gates; `check_campaign`.
- `compare`: a before/after change over the repeats, its 95% interval (Welch t) and the repeats that
  would decide it.
- `step_prefill`: interleaved prefill from the engine's own step phases (a traced level the client cannot
  time: a coalesced stream, staggered requests).
- `answer`: each candidate summarised across levels in one line, the levels the question names first.
- `decisions`: a campaign's candidates, gates and level checks decided once (`Decisions.of`), and its whole
  answer as one JSON-ready dictionary (`answer_dict`).
- `agreement`: two runs of one campaign held against each other: their verdicts and before/after changes
  paired, and beside each that differs the measured facts of both runs.
"""

from perflib.config.thresholds import Threshold, parse_threshold

# the measurements register themselves in this order, which docs/CATALOGUE.md lists
# isort: off
from perflib.verdicts import runmeasures  # noqa: F401 - registers step_ratio ... change_pct
from perflib.verdicts import gapmeasures  # noqa: F401 - registers gap_share ... gap_scaling
from perflib.verdicts import classmeasures  # noqa: F401 - registers class_share ... class_dispatches
from perflib.verdicts import step_prefill  # noqa: F401 - registers step_prefill_share
# isort: on
from perflib.verdicts.answer import Answer, answers
from perflib.verdicts.compare import Change, change_of, repeats_to_decide
from perflib.verdicts.decisions import Decisions, answer_dict
from perflib.verdicts.evaluate import (
    CONFIRMED,
    FAIL,
    INCONCLUSIVE,
    NOT_MEASURED,
    OUTCOMES,
    PASS,
    RULED_OUT,
    UNDECIDED,
    GateResult,
    Verdict,
    check_campaign,
    decide,
    evaluate,
    evaluate_candidate,
    evaluate_gate,
    verdict_table,
)
from perflib.verdicts.measures import MEASUREMENTS, Measured, Measurement, Scope, measurement
from perflib.verdicts.runmeasures import floor_ms
from perflib.verdicts.scopes import Context, profiler_hint, scopes

__all__ = [
    "CONFIRMED", "FAIL", "INCONCLUSIVE", "MEASUREMENTS", "NOT_MEASURED", "OUTCOMES", "PASS", "RULED_OUT", "UNDECIDED",
    "Answer", "Change", "Context", "Decisions", "GateResult", "Measured", "Measurement", "Scope", "Threshold", "Verdict",
    "answer_dict", "answers", "change_of", "check_campaign", "decide", "evaluate", "evaluate_candidate",
    "evaluate_gate", "floor_ms", "measurement", "parse_threshold", "profiler_hint", "repeats_to_decide", "scopes",
    "verdict_table",
]
