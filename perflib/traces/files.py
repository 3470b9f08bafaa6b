"""Raw input of trace files: bytes and heads (gunzipped where gzip), blocks read ahead in a thread,
and parsed JSON.

No pandas or numpy here: format detection and the forked Kineto parse of `perflib.traces.prefetch`
use these before the heavy imports are done.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from perflib.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"


def said(exc: BaseException, with_type: bool = False) -> str:
    """What a library's exception says, on one line and at most 300 characters, for an `InputError`'s
    `found` (the command line prints errors as one line; pyarrow's messages can run to a schema)."""
    text = f"{type(exc).__name__}: {exc}" if with_type else str(exc)
    return " ".join(text.split())[:300]


def is_gzip_name(path: Path) -> bool:
    return path.name.lower().endswith(".gz")


def base_name(path: Path) -> str:
    """File name without a trailing `.gz`, lower-cased (format detection works on this)."""
    name = path.name.lower()
    return name[:-3] if name.endswith(".gz") else name


def read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped where it is gzip; a bad or cut gzip is an `InputError`."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(path, None, "a readable file", said(exc)) from exc
    if raw[:2] == GZIP_MAGIC:
        try:
            return gzip.decompress(raw)
        except EOFError as exc:
            raise InputError(
                path, f"byte {len(raw)}", "a complete gzip stream", "the stream ends early (file cut?)"
            ) from exc
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise InputError(path, None, "valid gzip data", said(exc)) from exc
    if is_gzip_name(path):
        raise InputError(path, "byte 0", "gzip data (magic bytes 1f 8b) for a .gz file", repr(raw[:8]))
    return raw


def read_head(path: Path, size: int = 65536) -> bytes:
    """The first `size` bytes of the (decompressed) file, for format detection."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(size)
    except OSError as exc:
        raise InputError(path, None, "a readable file", said(exc)) from exc
    if head[:2] == GZIP_MAGIC:
        try:
            with gzip.open(path, "rb") as fh:
                return fh.read(size)
        except EOFError:
            return read_bytes(path)[:size]  # raises the cut-stream error unless it is complete
        except (gzip.BadGzipFile, zlib.error) as exc:
            raise InputError(path, None, "valid gzip data", said(exc)) from exc
    if is_gzip_name(path):
        raise InputError(path, "byte 0", "gzip data (magic bytes 1f 8b) for a .gz file", repr(head[:8]))
    return head


def gunzip_blocks(fh: BinaryIO, block: int) -> Iterator[bytes]:
    """The file's bytes, gunzipped where it starts with the gzip magic (every member, as `gzip` reads
    them), in pieces of about `block` bytes: few, large zlib calls, each of which runs without the GIL."""
    head = fh.read(2)
    if head != GZIP_MAGIC:
        yield head
        while piece := fh.read(block):
            yield piece
        return
    data = head
    inflate, fresh = zlib.decompressobj(wbits=31), True
    pending: list[bytes] = []
    size = 0
    while True:
        if not data:
            data = fh.read(max(block // 8, 1))
            if not data:
                break
        if fresh and not data.strip(b"\0"):  # zero padding after the last member
            data = b""
            continue
        out = inflate.decompress(data, block)
        fresh = False
        data = inflate.unconsumed_tail
        if inflate.eof:  # a member ends; what follows may be the next one
            data = inflate.unused_data
            inflate, fresh = zlib.decompressobj(wbits=31), True
        if out:
            pending.append(out)
            size += len(out)
        if size >= block:
            yield b"".join(pending)
            pending, size = [], 0
    if not fresh:
        raise EOFError("the gzip stream ends before its end marker (file cut?)")
    if pending:
        yield b"".join(pending)


class ReadAhead:
    """A file's (gunzipped) blocks of about `block` bytes, read ahead by a thread: zlib and file reads
    release the GIL, so on two cores the decompression overlaps the parse. At most `ahead` blocks wait
    in memory. `read` gives b"" at the end and raises what reading raised (see `stream_error`)."""

    def __init__(self, fh: BinaryIO, block: int, ahead: int = 2) -> None:
        import queue  # late: queue and threading at the top cost `perflib.traces` 2.4 ms (measured), before
        import threading  # the summary's prefetch can fork; numpy imports both after the fork anyway

        self.queue: queue.Queue = queue.Queue(maxsize=ahead)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(fh, block), daemon=True, name="perflib-gunzip")
        self.thread.start()

    def _run(self, fh: BinaryIO, block: int) -> None:
        import queue  # late: see __init__

        blocks = gunzip_blocks(fh, block)
        while not self.stop.is_set():
            try:
                piece: bytes | BaseException = next(blocks, b"")
            except (OSError, EOFError, zlib.error) as exc:
                piece = exc
            while not self.stop.is_set():
                try:
                    self.queue.put(piece, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if not piece or isinstance(piece, BaseException):
                return

    def read(self) -> bytes:
        piece = self.queue.get()
        if isinstance(piece, BaseException):
            raise piece
        return piece

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


@contextlib.contextmanager
def read_ahead(path: Path, block: int) -> Iterator[ReadAhead]:
    """The file's (gunzipped) blocks of about `block` bytes, read ahead by a thread (`ReadAhead`) and
    stopped at exit; a file that cannot be opened, or a `.gz` name that holds no gzip, is an `InputError`."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below, after the read-ahead thread stops
    except OSError as exc:
        raise InputError(path, None, "a readable file", said(exc)) from exc
    with fh:
        head = fh.read(8)
        if is_gzip_name(path) and head[:2] != GZIP_MAGIC:
            raise InputError(path, "byte 0", "gzip data (magic bytes 1f 8b) for a .gz file", repr(head))
        fh.seek(0)
        blocks = ReadAhead(fh, block)
        try:
            yield blocks
        finally:
            blocks.close()


def stream_error(path: Path, exc: BaseException) -> InputError:
    """What `ReadAhead.read` raised, as the `InputError` that `read_bytes` gives for the same fault."""
    if isinstance(exc, EOFError):
        return InputError(path, f"byte {path.stat().st_size}", "a complete gzip stream",
                          "the stream ends early (file cut?)")
    if isinstance(exc, zlib.error):
        return InputError(path, None, "valid gzip data", said(exc))
    return InputError(path, None, "a readable file", said(exc))


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic GC off while the block runs (as it was after): a parse allocates millions of small
    objects, none cyclic, and each collection would walk them all; pausing it saves a third of the
    parse time on large traces."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def load_json(path: Path, exact: bool = False) -> Any:
    """Parse (gunzipped) JSON; a cut or malformed file is an `InputError` with line and column.

    With `exact`, numbers with a fraction or exponent become `decimal.Decimal`, their digits kept as
    written (the stdlib parser's `parse_float`; orjson has no such hook); ints are ints either way.
    """
    raw = read_bytes(path)
    try:
        with gc_paused():
            if exact:
                from decimal import Decimal  # late: 1.2 ms before the prefetch forks (measured)

                return json.loads(raw, parse_float=Decimal)
            try:
                import orjson  # 2-3x faster than json on large traces; same values
            except ImportError:  # pragma: no cover - orjson is a dependency
                return json.loads(raw)
            try:
                return orjson.loads(raw)
            except orjson.JSONDecodeError:
                return json.loads(raw)  # the standard parser names the line and column of the fault
    except json.JSONDecodeError as exc:
        cut = exc.pos >= len(raw.rstrip()) - 1
        raise InputError(
            path,
            f"line {exc.lineno}, column {exc.colno}",
            "complete JSON",
            exc.msg + (" at the end of the data (file cut?)" if cut else ""),
        ) from exc
    except UnicodeDecodeError as exc:
        raise InputError(path, f"byte {exc.start}", "UTF-8 JSON text", said(exc)) from exc
    except ValueError as exc:  # an integer of more digits than Python converts (4300)
        raise InputError(path, None, "JSON numbers of a sensible length", said(exc)) from exc
    except RecursionError as exc:
        raise InputError(path, None, "JSON nested to a sensible depth", "deeper than the parser's limit") from exc
