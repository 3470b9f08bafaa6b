"""Parse a large Kineto trace in a forked child (a large rocprofv3 CSV in a thread) while the parent
imports pandas and numpy.

`perflib trace summary` on a 30 MB Kineto trace spends most of its time importing pandas, numpy and
perflib's attribution before it can use the parsed trace. The streamed read of `kineto_stream` needs
numpy but not pandas up to its tables (`kineto_stream.read_tables`: the events parsed in chunks,
selected and reduced to numpy columns), so on a machine with two or more cores a forked child does
that in parallel and hands the tables back through a pipe, pickled; the parent makes the lean Trace
of them (`kineto_stream.trace_of_tables`), the very Trace `read_trace(path, ReadMode.LEAN)` gives. Anything
unexpected in the child (a bad file included) makes `trace()` return None, and the caller reads the
file the normal way, which raises the usual error that names the file and the field.

This module imports nothing heavy, and the child imports the reader itself: it must be imported and
started before pandas is, and the sooner the child starts the better. numpy is imported just before
the fork, for both processes.
"""

from __future__ import annotations

import gc
import os
import pickle
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflib.errors import InputError, PerflibError
from perflib.traces.formats import detect_format

if TYPE_CHECKING:
    from perflib.traces.trace import Trace

MIN_BYTES = 4 << 20
"""Below this much JSON the parse is shorter than a fork is worth."""
MAX_BYTES = 64 << 20
"""Above this much JSON the parse dwarfs the imports it overlaps, and its tables would be held twice
(the child's, then the parent's copy, with the pickle between) for little time saved."""


class Prefetch:
    """A forked child parsing `path` (see the module docstring); `trace()` collects it once."""

    forked = True
    """A child process parses: the caller's own loading overlaps it (`warm`)."""

    def __init__(self, path: Path) -> None:
        # numpy before the fork: both processes need it, and the child then has it without importing
        # it again (0.1 s of CPU, which a busy 2-core machine feels). The child uses no BLAS, and
        # OpenBLAS stops and restarts its threads around a fork.
        import numpy  # noqa: F401

        self.path = path
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: parse, send, and leave without running the parent's exit handlers
            os.close(read_fd)
            gc.disable()  # the parse allocates millions of acyclic objects and the child exits right after
            status = 1
            try:
                payload = pickle.dumps(_tables(path), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(write_fd, "wb") as out:
                    out.write(payload)
                status = 0
            finally:
                os._exit(status)
        os.close(write_fd)
        self._pid, self._fd, self._done, self._value = pid, read_fd, False, None

    def result(self) -> Any:
        """The child's `kineto_stream.Tables`, or None where it failed (read the file normally then)."""
        if not self._done:
            with os.fdopen(self._fd, "rb") as pipe:
                payload = pipe.read()
            _, status = os.waitpid(self._pid, 0)
            self._done = True
            if os.waitstatus_to_exitcode(status) == 0 and payload:
                try:
                    self._value = pickle.loads(payload)
                except Exception:  # noqa: BLE001 - any fault: the caller reads the file itself
                    self._value = None
        return self._value

    @staticmethod
    def warm() -> None:
        """Load the reader `trace()` uses, while the child parses: work done where the caller would
        otherwise wait."""
        from perflib.traces import kineto_stream  # noqa: F401 - imported for trace(), early on purpose

    def trace(self) -> Trace | None:
        """The lean Trace of the child's tables, or None where the child failed or they make no Trace
        (a check fails): read the file normally then, which names the fault."""
        tables = self.result()
        if tables is None:
            return None
        from perflib.traces import kineto_stream  # late: numpy and the reader, never before the fork

        try:
            return kineto_stream.trace_of_tables(self.path, tables)
        except InputError:
            return None


def _tables(path: Path) -> Any:
    """What the child sends: the streamed read up to its tables, each column as one array."""
    from perflib.traces import kineto_stream  # in the child: the reader is never imported before the fork

    tables = kineto_stream.read_tables(path)
    tables.compact()
    return tables


def _json_bytes(path: Path) -> int:
    """The JSON's size: the file's, or for gzip the trailer's ISIZE (the size mod 2^32)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b" or size < 18:
            return size
        f.seek(-4, os.SEEK_END)
        return int.from_bytes(f.read(4), "little")


CSV_MIN_BYTES = 16 << 20
"""Below this much CSV the read is shorter than the imports a thread would overlap."""
LEAN_KERNEL_COLUMNS = ("kernel_name", "start_timestamp", "end_timestamp", "correlation_id")
"""What the lean read of a kernel_trace.csv parses (`rocprof_csv.read_kernel_trace_lean`)."""


class ArrowCSV:
    """A rocprofv3 `kernel_trace.csv`'s lean columns parsed by pyarrow in a thread while the caller
    imports pandas: pyarrow's reader runs without the GIL, pandas' import holds it, so on two cores
    they overlap. `result()` is (header, pyarrow table), or None on any fault (read it normally then)."""

    forked = False
    """A thread parses, without the GIL: nothing to overlap beyond the caller's pandas import."""

    def __init__(self, path: Path, header: list[str]) -> None:
        import threading  # late: 0.9 ms (measured) before a Kineto file's fork, which needs no thread

        self.path, self.header, self._value = path, header, None
        self._thread = threading.Thread(target=self._run, daemon=True, name="csv-prefetch")
        self._thread.start()

    def _run(self) -> None:
        try:
            # late: never at `import perflib.traces`, which comes before a Kineto file's fork
            import pyarrow as pa
            import pyarrow.csv as pacsv

            names = {h.strip().lower(): h for h in self.header}
            types = {names[c]: pa.int64() for c in LEAN_KERNEL_COLUMNS[1:] if c in names}
            types[names["kernel_name"]] = pa.dictionary(pa.int32(), pa.string())
            table = pacsv.read_csv(
                str(self.path), read_options=pacsv.ReadOptions(block_size=1 << 24),
                convert_options=pacsv.ConvertOptions(include_columns=list(types), column_types=types,
                                                     strings_can_be_null=False, quoted_strings_can_be_null=False))
            self._value = (self.header, table)
        except Exception:  # noqa: BLE001 - any fault: the caller reads the file itself, with the precise error
            self._value = None

    def result(self) -> tuple[list[str], Any] | None:
        self._thread.join()
        return self._value

    def trace(self) -> Trace | None:
        """The lean Trace of the parsed columns (`ReadMode.LEAN`'s, to the row), or None where the thread
        failed: read the file normally then, which names the fault. Columns it parsed but the reader's
        checks refuse raise the reader's own error."""
        parsed = self.result()
        if parsed is None:
            return None
        from perflib.traces import rocprof_csv, rocprof_dir  # pandas: imported by now, after the parse began

        header, table = parsed
        frame, meta = rocprof_csv.read_kernel_trace_lean(self.path, header, table)
        return rocprof_dir.trace_of_parts([{"dispatches": frame, "meta": {"table": rocprof_csv.KERNEL, **meta}}],
                                          self.path)


def start_csv(path: str | Path, min_bytes: int | None = None) -> ArrowCSV | None:
    """Start parsing a plain (not gzipped) rocprofv3 kernel_trace.csv of `min_bytes` or more in a thread,
    on two or more cores; None otherwise."""
    import csv  # late: 0.7 ms (measured) before a Kineto file's fork, which `start` makes first

    path = Path(path)
    min_bytes = CSV_MIN_BYTES if min_bytes is None else min_bytes
    try:
        if not path.is_file() or path.stat().st_size < min_bytes or (os.cpu_count() or 1) < 2:
            return None
        if detect_format(path) != "rocprofv3-csv":
            return None
        with open(path, "rb") as f:
            if f.read(2) == b"\x1f\x8b":
                return None
            f.seek(0)
            header = next(csv.reader([f.readline().decode("utf-8").rstrip("\r\n")]))
    except (OSError, PerflibError, UnicodeDecodeError, csv.Error, StopIteration):
        return None
    cols = {h.strip().lower() for h in header}
    if not {"kernel_name", "start_timestamp", "end_timestamp", "agent_id"} <= cols or "counter_name" in cols:
        return None
    return ArrowCSV(path, header)


Prefetched = Prefetch | ArrowCSV
"""A read under way (`start_prefetch`): its `trace()` is the lean Trace, or None (read it the normal way)."""


def start_prefetch(path: str | Path) -> Prefetched | None:
    """A large Kineto file parsed in a forked child (`start`), else a large kernel_trace.csv in a thread
    (`start_csv`), else None (read it the normal way). Call it before importing pandas; then `trace()`
    is the lean Trace or None."""
    return start(path) or start_csv(path)


def start(path: str | Path, min_bytes: int = MIN_BYTES, max_bytes: int = MAX_BYTES) -> Prefetch | None:
    """Start parsing `path` in a child where that pays: Kineto JSON of `min_bytes` to `max_bytes`
    (gunzipped), `os.fork` available and two or more cores. None otherwise (read it the normal way)."""
    path = Path(path)
    try:
        if not path.is_file() or detect_format(path) != "kineto" or not min_bytes <= _json_bytes(path) <= max_bytes:
            return None
    except (OSError, PerflibError):  # an unreadable or unknown file: the plain read names the fault
        return None
    if not hasattr(os, "fork") or (os.cpu_count() or 1) < 2:
        return None
    return Prefetch(path)
