"""CUPTI activity text, as printed on stdout by the CUDA sample `cupti_trace_injection` (GPU.md).

A record is one line `KIND [ START, END ] duration D, ...` plus tab-started continuation lines
(`deviceId 0, contextId 1, streamId 15, graphId 10, ...`). Fields after the name are read as
`key value` pairs in any order. Kernels (`KERNEL`, `CONCURRENT_KERNEL`), `MEMCPY` and `MEMSET`
are dispatches; `RUNTIME` / `DRIVER` go to the API table; `OVERHEAD` is counted in meta. Lines
that are not records (the server's own log on the same stdout) are skipped. Timestamps are Unix
ns, so `clock` is `realtime`. Mangled names are demangled with `cxxfilt` when it is installed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perflib.errors import InputError
from perflib.traces import files, schema
from perflib.traces.trace import Trace

SOURCE = "cupti-text"
DISPATCH_KINDS = {"KERNEL": "kernel", "CONCURRENT_KERNEL": "kernel", "MEMCPY": "memcpy", "MEMSET": "memset"}
API_KINDS = {"RUNTIME": "cuda_runtime", "DRIVER": "cuda_driver"}
KNOWN = (*DISPATCH_KINDS, *API_KINDS, "OVERHEAD")

_HEAD = re.compile(
    r'^(?P<kind>[A-Z_]+)(?:\s+(?P<extra>"[^"]*"|[A-Z_<>]+))?\s*\[\s*(?P<start>\d+)\s*,\s*(?P<end>\d+)\s*\]'
    r"\s*duration\s+(?P<dur>\d+)\s*,?\s*(?P<rest>.*)$"
)
_LOOKS_LIKE_RECORD = re.compile(r"^(" + "|".join(KNOWN) + r')\b\s*("[^"]*"\s*|[A-Z_]+\s*)?\[')
_PAIR = re.compile(r"([A-Za-z][A-Za-z_]*)\s+(-?\d+)\b")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _fits(digits: str) -> bool:
    """Whether a run of digits is an int64 (checked on its length first: a 5000-digit run is not)."""
    digits = digits.lstrip("0") or "0"
    return len(digits) <= 19 and int(digits) <= INT64_MAX


def _pairs(text: str) -> dict[str, int]:
    """`key value` pairs; a value beyond int64 (digits run together) is -1, unknown."""
    out = {}
    for key, raw in _PAIR.findall(text):
        value = int(raw) if len(raw) < 21 else INT64_MAX + 1
        out[key] = value if INT64_MIN <= value <= INT64_MAX else -1
    return out


_TAIL = re.compile(r"(?:\s*,\s*[A-Za-z][A-Za-z_]*\s+-?\d+)*\s*,?\s*")
"""What follows a record's quoted name: `, key value` pairs only (`, correlationId 7, cbid 17, ...`)."""


def _split_name(rest: str) -> tuple[str | None, str]:
    """A leading quoted name and what follows it.

    The sample prints names unescaped, so a name may hold `", `: the name ends at the last quote
    after which only `, key value` pairs follow (every kernel and API record goes on that way); where
    none does, at the first `",`.
    """
    rest = rest.strip()
    if not rest.startswith('"'):
        return None, rest
    last = rest.rfind('"')
    if last > 0 and _TAIL.fullmatch(rest, last + 1):
        return rest[1:last], rest[last + 1 :]
    end = rest.find('",', 1)
    if end < 0:
        end = rest.rfind('"')
    if end <= 0:
        return None, rest
    return rest[1:end], rest[end + 1 :]


def _demangler():
    try:
        import cxxfilt
    except ImportError:  # pragma: no cover - cxxfilt is a dependency
        return None
    cache: dict[str, str] = {}

    def demangle(name: str) -> str:
        if not name.startswith("_Z"):
            return name
        if name not in cache:
            try:
                cache[name] = cxxfilt.demangle(name)
            except Exception:  # cxxfilt.InvalidName and friends: keep what the profiler printed
                cache[name] = name
        return cache[name]

    return demangle


@dataclass
class _Parsed:
    """The records of a capture, and what was skipped on the way."""

    records: list[dict[str, Any]] = field(default_factory=list)
    overhead: int = 0
    malformed: list[int] = field(default_factory=list)


def _parse(path: Path, lines: list[str], cut_last: bool) -> _Parsed:
    """Record lines and their tab-started continuation lines; the server's own output is skipped, and
    a record line garbled by it is counted (never guessed at)."""
    out = _Parsed()
    current: dict[str, Any] | None = None
    for number, line in enumerate(lines, start=1):
        if line.startswith(("\t", "  ")):  # continuation (tab; some record kinds indent with spaces)
            if current is not None:
                current["pairs"].update(_pairs(line))
            continue
        current = None
        if not _LOOKS_LIKE_RECORD.match(line):
            continue
        m = _HEAD.match(line.rstrip("\r"))
        if m is not None and not (_fits(m["start"]) and _fits(m["end"])):
            m = None  # times beyond int64: digits of two numbers run together, garbled as below
        if m is None:
            last = number == len(lines) or (number == len(lines) - 1 and lines[-1] == "")
            if last and cut_last:
                raise InputError(path, f"line {number}", "a CUPTI record 'KIND [ START_NS, END_NS ] duration NS, ...'",
                                 repr(line[:120]) + " (the file ends mid-record: truncated?)")
            # The injection prints from its own thread into the server's stdout: another writer can
            # land inside a record line.
            out.malformed.append(number)
            continue
        kind = m["kind"]
        if kind == "OVERHEAD":
            out.overhead += 1
            continue
        if kind not in DISPATCH_KINDS and kind not in API_KINDS:
            continue
        name, rest = _split_name(m["rest"])
        extra = (m["extra"] or "").strip('"')
        current = {
            "kind": kind, "line": number, "start": int(m["start"]), "end": int(m["end"]),
            "name": name if name is not None else (f"Memcpy {extra}".strip() if kind == "MEMCPY" else kind.title()),
            "pairs": _pairs(rest),
        }
        out.records.append(current)
    return out


def read_cupti_text(path: Path) -> Trace:
    """A `cupti_trace_injection` stdout capture (`.txt`, `.log`, `.gz`) -> Trace."""
    path = Path(path)
    text = files.read_bytes(path).decode("utf-8", errors="replace")
    parsed = _parse(path, text.split("\n"), not text.endswith("\n"))
    records, malformed = parsed.records, parsed.malformed
    if malformed and len(malformed) > max(10, len(records) // 100):
        raise InputError(path, f"line {malformed[0]}", "CUPTI records, with at most 1% of record lines garbled "
                         "by interleaved output", f"{len(malformed)} garbled record lines of {len(records) + len(malformed)}")
    demangle = _demangler()
    gpu = [r for r in records if r["kind"] in DISPATCH_KINDS]
    host = [r for r in records if r["kind"] in API_KINDS]

    def col(recs: list[dict], key: str) -> np.ndarray:
        return np.asarray([r["pairs"].get(key, -1) for r in recs], dtype=np.int64)

    names = [r["name"] for r in gpu]
    if demangle is not None:
        names = [demangle(n) for n in names]
    dispatches = schema.dispatch_frame({
        "kernel": names,
        "start_ns": np.asarray([r["start"] for r in gpu], dtype=np.int64),
        "end_ns": np.asarray([r["end"] for r in gpu], dtype=np.int64),
        "device": col(gpu, "deviceId"), "stream": col(gpu, "streamId"), "correlation_id": col(gpu, "correlationId"),
        "kind": [DISPATCH_KINDS[r["kind"]] for r in gpu],
    }, SOURCE, path, lambda i: f"line {gpu[i]['line']}")
    api = schema.api_frame({
        "name": [r["name"] for r in host],
        "start_ns": np.asarray([r["start"] for r in host], dtype=np.int64),
        "end_ns": np.asarray([r["end"] for r in host], dtype=np.int64),
        "pid": col(host, "processId"), "tid": col(host, "threadId"), "correlation_id": col(host, "correlationId"),
        "domain": [API_KINDS[r["kind"]] for r in host],
    }, SOURCE, path, lambda i: f"line {host[i]['line']}")
    meta = {
        "malformed_record_lines": len(malformed),
        "malformed_record_line_numbers": malformed[:20],
        "demangled": demangle is not None,
        "overhead_records": parsed.overhead,
        "graph_launched": int(np.count_nonzero(col(gpu, "graphId") > 0)),
    }
    return Trace(dispatches, api, schema.empty_markers(SOURCE), "realtime", SOURCE, str(path), meta)
