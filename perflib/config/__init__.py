"""Campaign files: each key declared once, read and checked with errors that name the line.

- `model`: the declared keys, as frozen dataclasses (`Campaign`, `BackendSpec`, `ArmSpec`, ...), and
  the matrix (`RunSpec`, `Campaign.expand`).
- `declare`: the validator and constructor derived from those declarations.
- `loader`: `read_campaign(path)`, the playbooks, `--only` filters.
- `thresholds`: `>= 0.75`, `< 15%` as a candidate writes them.
- `question`: the levels a campaign's `question:` names (`~16K`, `batch 4`), and a context's label.
"""

from perflib.config.loader import (
    opening_question,
    parse_only,
    playbook_path,
    playbook_question,
    read_campaign,
    read_playbook,
    replace_data_dir,
)
from perflib.config.model import (
    ARM_ROLES,
    DIALECTS,
    MAX_RUNS,
    PROFILER_KINDS,
    SERVER_PRESETS,
    START_KINDS,
    WINDOWS,
    AgreeSpec,
    ArmSpec,
    BackendSpec,
    Campaign,
    CandidateSpec,
    EnvironmentFile,
    FallbackSpec,
    GateSpec,
    ModelSpec,
    PageNote,
    ProfilerSpec,
    ReferenceSpec,
    RunSpec,
    ServerSpec,
    ShutdownSpec,
)
from perflib.config.question import context_label, question_levels
from perflib.config.thresholds import Threshold, parse_threshold

__all__ = [
    "ARM_ROLES", "DIALECTS", "MAX_RUNS", "PROFILER_KINDS", "SERVER_PRESETS", "START_KINDS", "WINDOWS", "AgreeSpec", "ArmSpec", "BackendSpec", "Campaign",
    "CandidateSpec", "EnvironmentFile", "FallbackSpec", "GateSpec", "ModelSpec", "PageNote", "ProfilerSpec",
    "ReferenceSpec", "RunSpec", "ServerSpec", "ShutdownSpec", "Threshold", "context_label", "opening_question", "parse_only", "parse_threshold", "playbook_path", "playbook_question", "question_levels",
    "read_campaign", "read_playbook", "replace_data_dir",
]
