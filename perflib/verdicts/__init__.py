"""Verdicts: candidates (hypotheses) decided by named measurements over the derived tables.

- `measures`: the registered measurements (`MEASUREMENTS`), each a function of the tables and a
  `Scope` that gives a number with its sentence, or why it was not measured.
- `evaluate`: a candidate at each scope it applies to → confirmed, ruled out, inconclusive or not
  measured, with the number and the threshold; the regression gates; `check_campaign`.
"""

from perflib.config.thresholds import Threshold, parse_threshold
from perflib.verdicts.evaluate import (
    CONFIRMED,
    INCONCLUSIVE,
    NOT_MEASURED,
    OUTCOMES,
    RULED_OUT,
    Context,
    GateResult,
    Verdict,
    check_campaign,
    decide,
    evaluate,
    evaluate_candidate,
    evaluate_gate,
    scopes,
    verdict_table,
)
from perflib.verdicts.measures import MEASUREMENTS, Measured, Measurement, Scope, floor_ms, measurement

__all__ = [
    "CONFIRMED", "INCONCLUSIVE", "MEASUREMENTS", "NOT_MEASURED", "OUTCOMES", "RULED_OUT", "Context", "GateResult",
    "Measured", "Measurement", "Scope", "Threshold", "Verdict", "check_campaign", "decide", "evaluate",
    "evaluate_candidate", "evaluate_gate", "floor_ms", "measurement", "parse_threshold", "scopes",
    "verdict_table",
]
