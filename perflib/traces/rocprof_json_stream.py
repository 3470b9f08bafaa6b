"""rocprofv3 JSON (`<prefix>_results.json[.gz]`, FORMATS.md §1.6) read as a stream into a lean Trace.

`rocprof_json.read_json` parses the whole file at once: Python objects for every record, several GiB
for a few million dispatches. Here the file is walked with `json_stream`: the top-level object and each
process object key by key; the arrays of the buffers that the tables read (`rocprof_json.BUFFER_FIELDS`:
kernel_dispatch, memory_copy, hip_api, hsa_api, rccl_api, marker_api) in chunks of about `PARSE` bytes
of whole records, each chunk reduced to int64 columns (`rocprof_json.Records`, with every check of the
whole read) and dropped before the next; the keys the tables need besides (metadata, agents,
kernel_symbols, strings) whole; every other key and buffer skipped, a chunk at a time. Names are
resolved at the end (`rocprof_json.process_tables`), so the keys may come in any order. What stays is
about 32 bytes a dispatch (kernel id, start, end, correlation id) and the API and marker columns: memory
grows with the records, not with the file.

The tables are `read_json`'s, the dispatches as a lean table (`schema.LEAN_DISPATCH_COLUMNS`; kernels
and copies both, kind codes), API calls and markers as `read_json` gives them, meta with `lean: True`.
Faults in the records are raised once the file is read, in the order the whole read finds them, with
the same labels (`rocprofiler-sdk-tool[0].buffer_records.kernel_dispatch[i]`, i counted over the whole
buffer); a fault in the JSON itself (a cut file, garbage) is named by its byte.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perflib.errors import InputError
from perflib.traces import files, json_stream, rocprof_json
from perflib.traces.json_stream import Text
from perflib.traces.rocprof_json import TOOL, Records
from perflib.traces.trace import ReadMode, Trace

BLOCK = 16 << 20
"""Bytes of JSON read at a time (gunzipped ahead by a thread)."""
PARSE = json_stream.PARSE
"""Bytes of records parsed at a time."""
MARKS = (b"},{", b"}, {", *json_stream.CUT_MARKS)
"""Where a record may end: rocprofv3 writes compact JSON, and its records hold no strings and no
arrays, so a `},{` ends one record and starts the next (every cut is still checked by its parse)."""
WHOLE = ("metadata", "agents", "kernel_symbols", "strings")
"""The keys of a process object read whole: what `rocprof_json.process_tables` reads besides the records."""
_NO_BUFFERS = object()
"""A process without `buffer_records` (or not an object): the fault `rocprof_json.NOT_A_PROCESS`."""


@dataclass
class _Process:
    """What the stream keeps of one process object."""

    where: str
    records: dict[str, Records]
    keys: dict[str, Any] = field(default_factory=dict)
    buffers: Any = _NO_BUFFERS


def read(path: Path, mode: ReadMode = ReadMode.FULL) -> Trace:
    """A rocprofv3 JSON file in `mode`: FULL parses it whole (`rocprof_json.read_json`), a lean mode
    streams it (`read_json_lean`)."""
    if mode.lean:
        return read_json_lean(path, mode.ids)
    return rocprof_json.read_json(path)


def read_json_lean(path: Path, ids: bool = False) -> Trace:
    """A rocprofv3 JSON file (`.json` / `.json.gz`) -> Trace with a lean dispatch table, read as a stream
    (`ids`: with device, queue and stream)."""
    path = Path(path)
    try:
        with files.gc_paused(), files.read_ahead(path, BLOCK) as blocks:  # the GC: acyclic objects, dropped
            procs = _read(Text(blocks, path), path, not ids)
    except RecursionError as exc:
        raise InputError(path, None, "JSON nested to a sensible depth", "deeper than the parser's limit") from exc
    except UnicodeDecodeError as exc:
        raise InputError(path, None, "UTF-8 JSON text", files.said(exc)) from exc
    except ValueError as exc:  # the standard parser's: an integer of more digits than it converts (4300)
        raise InputError(path, None, "JSON numbers of a sensible length", files.said(exc)) from exc
    tables = []
    for p in procs:
        if p.buffers is _NO_BUFFERS:
            raise InputError(path, p.where, rocprof_json.NOT_A_PROCESS)
        tables.append(rocprof_json.process_tables(p.keys, p.buffers, p.records, path, p.where))
    return rocprof_json.trace_of(tables, path, ReadMode.LEAN_IDS if ids else ReadMode.LEAN)


def _read(text: Text, path: Path, lean: bool) -> list[_Process]:
    """The processes of the file, walked key by key (a repeated key: its last value counts, as in the
    whole read); `lean`: the records keep only the fields of a lean table (`rocprof_json.new_records`)."""
    text.skip_ws()
    if not text.startswith(b"{"):
        json_stream.skip(text, "the top level", PARSE, MARKS)
        _end(text)
        raise InputError(path, "top level", rocprof_json.NOT_ROCPROF_JSON)
    text.consume(1)
    procs = None
    for key in json_stream.members(text, "',' or '}' between top-level keys"):
        if key == TOOL and text.startswith(b"["):
            text.consume(1)
            procs = [_process(text, path, f"{TOOL}[{i}]", lean) for i in json_stream.elements(text)]
        else:
            procs = None if key == TOOL else procs
            json_stream.skip(text, str(key), PARSE, MARKS)
    _end(text)
    if procs is None:
        raise InputError(path, "top level", rocprof_json.NOT_ROCPROF_JSON)
    return procs


def _end(text: Text) -> None:
    """Nothing but whitespace after the top-level value, as a whole-file parse requires."""
    text.skip_ws()
    if text.left():
        raise InputError(text.path, f"byte {text.offset}", "complete JSON",
                         f"more text after the top-level value: {text.head(20).decode('utf-8', 'replace')!r}")


def _process(text: Text, path: Path, where: str, lean: bool) -> _Process:
    """One element of the process list: its buffers' records streamed, the keys in `WHOLE` read whole,
    the others skipped."""
    proc = _Process(where, rocprof_json.buffer_records(path, where, lean))
    if not text.startswith(b"{"):
        json_stream.skip(text, where, PARSE, MARKS)
        return proc
    text.consume(1)
    for key in json_stream.members(text):
        if key == "buffer_records":
            proc.buffers, proc.records = _buffers(text, path, where, lean)
        elif key in WHOLE:
            proc.keys[key] = _whole(text, f"{where}.{key}")
        else:
            json_stream.skip(text, f"{where}.{key}", PARSE, MARKS)
    return proc


def _buffers(text: Text, path: Path, where: str, lean: bool) -> tuple[Any, dict[str, Records]]:
    """The value of `buffer_records` as `process_tables` checks it (an object: {}), and its records."""
    records = rocprof_json.buffer_records(path, where, lean)
    if not text.startswith(b"{"):
        # null: no records; anything else: the fault that process_tables names
        return _whole(text, f"{where}.buffer_records"), records
    text.consume(1)
    for name in json_stream.members(text):
        if name in records:
            records[name] = rec = rocprof_json.new_records(name, path, where, lean)
            _stream(text, rec)
        else:
            json_stream.skip(text, f"{where}.buffer_records.{name}", PARSE, MARKS)
    return {}, records


def _stream(text: Text, rec: Records) -> None:
    """One buffer's records into `rec`, chunk by chunk (a value that is not an array: whole, as the
    whole read takes it)."""
    if not text.startswith(b"["):
        rec.add(_whole(text, rec.where) or [])
        return
    text.consume(1)
    for chunk in json_stream.chunks(text, rec.where, PARSE, MARKS):
        rec.add(chunk)
        del chunk  # before the next chunk is parsed


def _whole(text: Text, where: str) -> Any:
    """One value read whole, parsed as the whole read parses the file (orjson; the standard parser
    where orjson refuses, e.g. NaN), so that odd numbers read the same; an array (kernel_symbols can
    hold tens of MB) chunk by chunk."""
    if not text.startswith(b"["):
        return json_stream.loads(text.raw(), exact=False)
    text.consume(1)
    return [element for chunk in json_stream.chunks(text, where, PARSE, MARKS) for element in chunk]
