"""The registry of trace formats: one `TraceFormat` entry per format, the only place that knows which
bytes are which format and which function reads (and writes) it. `read_trace` and `detect_format` go
through it; nothing outside `perflib.traces` names a reader module.

A new format is one module and one entry: a reader `(path: Path, mode: ReadMode) -> Trace` giving the
canonical tables (docs/SCHEMA.md §1) in every mode, optionally a writer `(dispatches, path) -> Path`
(so that `tests/traces/test_registry.py` round-trips it), and its `TraceFormat` in `FORMATS` at its
place in the detection order.

Light on purpose (no pandas or numpy): a reader or writer module is imported on its first use, so
detection and the Kineto prefetch run before the heavy imports, and a read loads only its own reader.
"""

from __future__ import annotations

import importlib
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflib.errors import InputError
from perflib.traces.detect import Probe, probe
from perflib.traces.trace import ReadMode, Trace

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class TraceFormat:
    """One trace format: how to tell it, read it and (where perflib can) write it."""

    name: str
    """The format id `detect_format` answers (`rocprofv3-csv`, `kineto`, ...)."""
    what: str
    """What it is, in words (the error for a file of no known format lists them)."""
    detect: Callable[[Probe], bool]
    """Whether a probed file is of this format, from its bytes (and, for CSV, its name). Tried in the
    order of `FORMATS`; the first that says yes wins."""
    reader: str
    """`module:function` of the reader `(path: Path, mode: ReadMode) -> Trace`."""
    writer: str | None = None
    """`module:function` of a writer `(dispatches: DataFrame, path) -> Path`, where perflib has one."""
    suffix: str = ""
    """How the profiler ends the name of such a file (what a written one is called to be detected)."""
    kind: str | None = None
    """The one dispatch kind every row of this format has (`sample`: a sampling profiler's), None where
    each row says its own (a written table's kinds read back as written)."""

    def read(self, path: str | Path, mode: ReadMode = ReadMode.FULL) -> Trace:
        """The file (or directory) read in `mode` by this format's reader."""
        return _load(self.reader)(Path(path), mode)

    def write(self, dispatches: pd.DataFrame, path: str | Path) -> Path:
        """A canonical dispatch table written in this format (tests, benchmarks)."""
        if self.writer is None:
            raise ValueError(f"perflib writes no {self.name} files")
        return _load(self.writer)(dispatches, Path(path))


def _load(ref: str) -> Callable[..., Any]:
    """The function a `module:function` reference names, its module imported now: the registry imports
    no reader at its own import (module docstring)."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


ROCPROF_TOOL = b'"rocprofiler-sdk-tool"'
NSYS_TABLES = ("StringIds", "CUPTI_ACTIVITY_KIND_KERNEL", "TARGET_INFO_SESSION_START_TIME", "NVTX_EVENTS")
LEGACY_ROCPROF_TABLES = ("KERN", "A")
"""Legacy rocprof's kernel table (`perflib.traces.rocprof_legacy_db`): `KERN`, `A` before 2021."""
REPORTS_NOT_READ = {
    (".nsys-rep", ".qdrep"): ("an Nsight Systems SQLite export, made from this report by "
                              "`nsys export --type sqlite --output {out} {path}`",
                              "an Nsight Systems report ({suffix}), which perflib does not read"),
}
"""Binary reports of a profiler whose own tool converts them into a format perflib reads: name suffixes
(the report's magic is not documented, so only the name tells), what is expected instead (with the
command that makes it) and what was found. `.qdrep` is the name
Nsight Systems gave its reports before 2021.4; `nsys export` takes both."""
_CUPTI_RECORD = re.compile(
    rb"^(CONCURRENT_KERNEL|KERNEL|RUNTIME|DRIVER|MEMCPY|MEMSET)\b.*\[\s*\d+\s*,\s*\d+\s*\]", re.M
)
_PERF_SAMPLE = re.compile(rb"^[^\n#\t][^\n]*?\s(?:-?\d+/)?-?\d+\s+(?:\[\d+\]\s+)?\d+\.\d{1,9}:\s+(?:\d+\s+)?\S+?:(?:\s|$)",
                          re.M)
"""A `perf script` sample line (`COMM PID/TID [CPU] SECONDS.FRACTION: PERIOD EVENT:`), `perf_script.SAMPLE_LINE`."""
PERF_DATA_MAGIC = b"PERFILE2"
_T = "perflib.traces."
_W = "perflib.traces.writers."

FORMATS: dict[str, TraceFormat] = {f.name: f for f in (
    TraceFormat("rocprofv3-dir", "a rocprofv3 output directory", lambda p: p.is_dir,
                _T + "rocprof_dir:read_directory"),
    TraceFormat("perflib-parquet", "a perflib trace .parquet", lambda p: p.parquet,
                _T + "parquet:read", _T + "parquet:write_dispatches", ".parquet"),
    TraceFormat("rocpd", "rocpd SQLite", lambda p: p.sqlite and any(n.startswith("rocpd_") for n in p.sqlite_tables),
                _T + "rocpd:read_rocpd", _W + "rocpd:write_rocpd", "_results.db"),
    TraceFormat("nsys-sqlite", "Nsight Systems SQLite",
                lambda p: p.sqlite and any(n in p.sqlite_tables for n in NSYS_TABLES),
                _T + "nsys:read_nsys", _W + "nsys:write_nsys_sqlite", ".sqlite"),
    TraceFormat("rocprof-legacy-db", "legacy rocprof results.db",
                lambda p: p.sqlite and any(n in p.sqlite_tables for n in LEGACY_ROCPROF_TABLES),
                _T + "rocprof_legacy_db:read_results_db", _W + "rocprof_legacy_db:write_results_db", ".db"),
    TraceFormat("rocprofv3-csv", "rocprofv3 CSV (or legacy rocprof results.csv)",
                lambda p: not p.binary and p.name.endswith(".csv"),
                _T + "rocprof_dir:read_csv_trace", _W + "rocprof_csv:write_kernel_trace_csv", "_kernel_trace.csv"),
    TraceFormat("rocprofv3-json", "rocprofv3 JSON",
                lambda p: p.head.lstrip().startswith(b"{") and ROCPROF_TOOL in p.head,
                _T + "rocprof_json_stream:read", _W + "rocprof_json:write_rocprof_json", "_results.json"),
    TraceFormat("kineto", "Kineto JSON", lambda p: p.head.lstrip().startswith(b"{"),
                _T + "kineto_stream:read", _W + "kineto:write_kineto_json", ".pt.trace.json"),
    TraceFormat("perf-script", "perf script text or a perf.data file",
                lambda p: p.magic.startswith(PERF_DATA_MAGIC) or (not p.binary and _PERF_SAMPLE.search(p.head) is not None),
                _T + "perf_script:read", _W + "perf_script:write_perf_script", ".perf-script.txt", kind="sample"),
    TraceFormat("cupti-text", "CUPTI activity text", lambda p: _CUPTI_RECORD.search(p.head) is not None,
                _T + "cupti_text:read_cupti_text", _W + "cupti_text:write_cupti_text", ".txt"),
)}
"""Every format perflib reads, in detection order (format id -> entry)."""


def detect_format(path: str | Path) -> str:
    """The format id of a file or directory (`rocprofv3-dir`, `rocprofv3-csv`, `kineto`, ...): the first
    entry of `FORMATS` whose test the file passes, else an `InputError` saying what was expected."""
    found = probe(path)
    for fmt in FORMATS.values():
        if fmt.detect(found):
            return fmt.name
    if found.sqlite:
        raise InputError(
            found.path,
            "sqlite_master",
            "a rocpd database (rocpd_metadata and the kernels/regions/memory_copies views), an Nsight "
            "Systems export (StringIds, CUPTI_ACTIVITY_KIND_KERNEL, ...) or a legacy rocprof results.db "
            "(KERN)",
            "tables " + (", ".join(sorted(found.sqlite_tables)[:12]) or "none"),
        )
    for suffixes, (expected, what) in REPORTS_NOT_READ.items():
        suffix = next((s for s in suffixes if found.name.endswith(s)), None)
        if suffix is not None:
            given = str(found.path)
            stem = given[: -len(suffix)] if given.lower().endswith(suffix) else str(Path(given).with_suffix(""))
            raise InputError(found.path, None, expected.format(out=shlex.quote(f"{stem}.sqlite"), path=shlex.quote(given)),
                             what.format(suffix=suffix))
    whats = [f.what for f in FORMATS.values()]
    raise InputError(found.path, "byte 0", "a known trace format: " + ", ".join(whats[:-1]) + " or " + whats[-1],
                     repr(found.head[:40]))


def read_trace(path: str | Path, mode: ReadMode = ReadMode.FULL) -> Trace:
    """Any supported profiler output (file or rocprofv3 output directory) as a `Trace`, read by the one
    reader that knows its format's quirks. `mode` (`ReadMode`): FULL, every table; LEAN, the dispatch
    columns a summary reads in memory bounded by the dispatches; LEAN_IDS, those and the id columns
    (what a cut writes). Every figure of `perflib.attribution` is the same to the ns in each mode."""
    if not isinstance(mode, ReadMode):
        raise TypeError(f"mode must be a ReadMode (FULL, LEAN, LEAN_IDS), not {mode!r}")
    return FORMATS[detect_format(path)].read(path, mode)


LEAN_META = ("lean",)
"""Meta keys a lean read adds about how it read, not about the file: `lean`."""


def file_meta(trace: Trace) -> dict:
    """The trace's meta without what a lean read adds (`LEAN_META`): what the full read gives."""
    if not trace.meta.get("lean"):
        return trace.meta
    return {k: v for k, v in trace.meta.items() if k not in LEAN_META}


def read_stats(path: str | Path) -> pd.DataFrame:
    """rocprofv3 `*_stats.csv` -> `name, calls, total_ns, average_ns, percentage, min_ns, max_ns, stddev`."""
    from perflib.traces import rocprof_csv  # pandas: only when asked (module docstring)

    return rocprof_csv.read_stats(Path(path))


def read_csv_table(path: str | Path) -> tuple[str, pd.DataFrame]:
    """Any rocprofv3 CSV (allocations, scratch, counters, agent info) as (kind, DataFrame)."""
    from perflib.traces import rocprof_csv  # pandas: only when asked (module docstring)

    return rocprof_csv.read_csv_table(Path(path))
