"""What a profiled server start lost: its exit, the loss lines its profiler printed, the records it dropped.

A profiler that runs out of buffer memory or is killed before it flushes loses records without failing
the run: CUPTI prints `CUPTI_ERROR_OUT_OF_MEMORY` and the server exits 1, the CUDA sample prints
`Dropped N activity records`, rocprofv3 warns of full buffers and lost records, nsys of lost events. This
module scans for the lines each profiler kind's registry entry lists (`PATTERNS`,
`perflib.server.profilers.KINDS`), scans a start's text files for them cheaply (at most
`MAX_SCAN_BYTES` from each end of each file), reads the record counts a capture may write beside itself
(`capture/N/cupti-stats.json`, perflib's CUPTI library), and says it all in one line (`describe`).

A start's losses are recorded in `server.json` (`perflib.campaign.servers`); the page shows them
(`perflib.derive`, `perflib.report`). A count that was not reported is None, never 0.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from perflib.server.profilers import KINDS, LossPattern

MAX_SCAN_BYTES = 4 * 1024 * 1024
"""Bytes read from the head and from the tail of each file scanned (a lifetime capture may be GBs)."""

STATS_FILE = "cupti-stats.json"
"""Record counts a capture may write beside itself: `{"dropped_records": int, "records": int}`."""


PATTERNS: dict[str, tuple[LossPattern, ...]] = {name: kind.losses for name, kind in KINDS.items() if kind.losses}
"""The loss lines of each profiler kind: a view of the registry (`perflib.server.profilers.KINDS`)."""


def _excerpt(path: Path, offset: int, limit: int) -> tuple[str, bool]:
    """The text of `path` from byte `offset`: whole where it is at most 2 × `limit` bytes, else its first
    and last `limit` bytes (True: the middle was not read)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            handle.seek(min(max(offset, 0), size))
            rest = size - handle.tell()
            if rest <= 2 * limit:
                return handle.read().decode("utf-8", "replace"), False
            head = handle.read(limit)
            handle.seek(size - limit)
            return (head + b"\n" + handle.read()).decode("utf-8", "replace"), True
    except OSError:
        return "", False


def scan(path: Path, kind: str, offset: int = 0, limit: int = MAX_SCAN_BYTES) -> list[dict[str, Any]]:
    """The loss lines of profiler `kind` in one file (from byte `offset`): one entry per pattern that
    matched, `{"what", "match", "line", "file", "count", "records"}`: the text that matched, the first
    matching line (300 characters at most), how many lines matched, and the records they say were lost
    (None where they give no number). A file read in part says so in `partial`."""
    patterns = KINDS[kind].losses if kind in KINDS else ()
    if not patterns or not path.is_file():
        return []
    text, partial = _excerpt(path, offset, limit)
    out = []
    for pattern in patterns:
        regex = re.compile(pattern.regex)
        count, records, first, matched = 0, None, None, None
        for line in text.splitlines():
            match = regex.search(line)
            if match is None:
                continue
            count += 1
            if first is None:
                first, matched = line.strip()[:300], match.group(0)
            if match.groups() and match.group(1) and match.group(1).isdigit():
                records = (records or 0) + int(match.group(1))
        if count and not any(e["line"] == first for e in out):  # a line two patterns match is said once
            out.append({"what": pattern.what, "match": matched, "line": first, "file": path.name, "count": count,
                        "records": records, **({"partial": True} if partial else {})})
    return out


def read_stats(capture_dir: Path | None) -> dict[str, Any] | None:
    """`{"dropped_records", "records", "file"}` from the capture's `cupti-stats.json`; None where the
    capture wrote none (not reported, which is not 0) or it cannot be read as such."""
    if capture_dir is None:
        return None
    path = Path(capture_dir) / STATS_FILE
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None

    def count(key: str) -> int | None:
        value = doc.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None

    errors = doc.get("errors")
    out: dict[str, Any] = {"dropped_records": count("dropped_records"), "records": count("records"),
                           "file": STATS_FILE}
    if isinstance(errors, list) and errors:  # perflib's library: CUPTI calls that failed while tracing
        out["errors"] = [str(e)[:200] for e in errors[:8]]
    if doc.get("complete") is False:  # the stats of a capture whose exit flush never ran
        out["complete"] = False
    if isinstance(doc.get("write_failures"), int) and doc["write_failures"] > 0:
        out["write_failures"] = doc["write_failures"]
    return out


def exit_loss(start: dict[str, Any]) -> str | None:
    """How a profiled start ended, where that may have lost records: it died while serving, it exited
    with a non-zero code, or it had to be killed after its grace period (a profiler flushes at exit).
    None for a clean stop (exit 0, or the stop signal perflib sent), or where nothing was recorded."""
    ended, code = str(start.get("ended") or ""), start.get("exit_code")
    if not ended and code is None:
        return None
    if ended == "died":
        return f"server died while serving (exit code {code})"
    if ended == "did not start":
        return None
    if not isinstance(code, int) or code in (0, -2, -15, 130, 143):  # SIGINT/SIGTERM: the stop perflib sent
        return None
    if code == -9:
        return "server killed (SIGKILL) after its grace period: the profiler may not have flushed"
    return f"server exited with code {code} when {ended}" if ended.startswith("stopped") else \
        f"server exited with code {code}" + (f" ({ended})" if ended else "")


def describe(start: dict[str, Any]) -> str:
    """One line of what a profiled start lost ('' where nothing): its exit, its loss lines, and the
    dropped-record count its capture reported."""
    parts = []
    ended = exit_loss(start)
    if ended:
        parts.append(ended)
    for loss in start.get("losses") or []:
        if not isinstance(loss, dict):
            continue
        times = f" ×{loss['count']}" if isinstance(loss.get("count"), int) and loss["count"] > 1 else ""
        lost = f" ({loss['records']:,} records)" if isinstance(loss.get("records"), int) else ""
        partial = " (read in part)" if loss.get("partial") else ""
        said = loss.get("match") or loss.get("line") or loss.get("what")
        parts.append(f"{said}{times} in {loss.get('file')}{lost}{partial}")
    stats = start.get("profiler_stats")
    if isinstance(stats, dict) and isinstance(stats.get("dropped_records"), int) and stats["dropped_records"] > 0:
        of = f" of {stats['records'] + stats['dropped_records']:,}" if isinstance(stats.get("records"), int) else ""
        parts.append(f"{stats['dropped_records']:,}{of} records dropped ({stats.get('file', STATS_FILE)})")
    if isinstance(stats, dict):
        where = stats.get("file", STATS_FILE)
        if stats.get("errors"):
            parts.append(f"CUPTI errors while tracing: {', '.join(stats['errors'])} ({where})")
        if stats.get("complete") is False:
            parts.append(f"the capture was never finished: no final flush at exit, its last records lost ({where})")
        if stats.get("write_failures"):
            parts.append(f"{stats['write_failures']:,} failed writes of records ({where})")
    return "; ".join(parts)


def dropped(start: dict[str, Any]) -> int | None:
    """Records a start is known to have lost somewhere in its capture: the dropped count of its capture's
    stats, or the sum of the counts its loss lines give; None where none was reported."""
    stats = start.get("profiler_stats")
    if isinstance(stats, dict) and isinstance(stats.get("dropped_records"), int):
        return stats["dropped_records"]
    counts = [loss["records"] for loss in start.get("losses") or []
              if isinstance(loss, dict) and isinstance(loss.get("records"), int)]
    return sum(counts) if counts else None
