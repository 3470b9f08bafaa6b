"""What every writer shares: the ids perflib writes where a profiler would, and a complete table."""

from __future__ import annotations

import pandas as pd

GUID = "0000beef-0000-7000-8000-00000000cafe"
"""The run UUID written where rocprofv3 writes one (rocpd table suffixes, `Guid` CSV columns)."""
HOST_AGENT = 0
"""The host's agent id: the host end of every copy."""


def complete(df: pd.DataFrame) -> pd.DataFrame:
    """Fill columns a caller left out: kind `kernel`, ids -1 (unknown), as the readers do."""
    missing = {c: -1 for c in ("device", "queue", "stream", "correlation_id") if c not in df.columns}
    if "kind" not in df.columns:
        missing["kind"] = "kernel"
    return df.assign(**missing) if missing else df


def kernels(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["kind"] == "kernel"]


def copies(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["kind"] == "memcpy"]


def to_host(directions: pd.Series) -> list[bool]:
    """Whether each copy direction ends on the host (`..._TO_HOST`)."""
    return [str(d).upper().endswith("TO_HOST") for d in directions]
