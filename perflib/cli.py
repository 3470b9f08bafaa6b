"""`perflib` command line: one sub-command module per concern, imported lazily for a fast start."""

from __future__ import annotations

import argparse
import gc
import importlib
import math
import os
import sys
from collections.abc import Callable, Sequence

from perflib.errors import PerflibError, Terminated
from perflib.version import __version__

# Each module in perflib.commands has `register(subparsers)` that adds its parser and sets
# `func(args) -> int`. Command modules import at the top only the standard library, `perflib.cli`,
# `perflib.errors` and (`metrics`, whose help lists the figures) the light `perflib.metrics`; a command's
# subsystem loads when it runs, so `perflib --help` and `perflib trace summary` start without pandas or httpx.
COMMANDS = ("server", "sweep", "metrics", "trace", "campaign", "cluster")


def _number(text: str, kind: type, low: float | None, low_open: bool, high: float | None, expected: str) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, found {text!r}") from None
    if (not math.isfinite(value) or (low is not None and (value <= low if low_open else value < low))
            or (high is not None and value > high)):
        raise argparse.ArgumentTypeError(f"expected {expected}, found {text!r}")
    return value


def int_arg(low: int = 0, high: int | None = None) -> Callable[[str], int]:
    """An argparse `type`: an integer in [low, high], refused with what was expected."""
    expected = ("a positive integer" if low == 1 else "a non-negative integer" if low == 0 else
                f"an integer of at least {low}") + (f" of at most {high}" if high is not None else "")
    return lambda text: int(_number(text, int, low, False, high, expected))


def float_arg(low: float | None = None, *, above: bool = False, high: float | None = None) -> Callable[[str], float]:
    """An argparse `type`: a finite number, at least (or, with `above`, more than) `low`, at most `high`."""
    expected = "a finite number" + (f" {'above' if above else 'of at least'} {low:g}" if low is not None else "")
    expected += f" of at most {high:g}" if high is not None else ""
    return lambda text: _number(text, float, low, above, high, expected)


def safe_label(text: str) -> str:
    """An argparse `type` for a name that becomes part of a file name (a page's `--date`): the run
    folder's own rule (`perflib.rundir.SAFE_NAME`), so `../../x` never reaches a path."""
    from perflib.rundir import SAFE_NAME, name_problem  # late: `--help` skips its 35 ms (-X importtime)

    problem = name_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"expected {SAFE_NAME}, found {problem}")
    return text


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The `perflib` parser. Where `argv` starts with a command, only that command is registered: the
    others' modules (and what their help texts import, `perflib.metrics` for one) are not loaded, so
    `perflib trace summary` forks its parse 0.08 s sooner. Top-level options (`--help`, `--version`)
    exit where they are read, so what follows a command is always that command's."""
    names = (argv[0],) if argv and argv[0] in COMMANDS else COMMANDS
    parser = argparse.ArgumentParser(
        prog="perflib",
        description=(
            "Investigate batched decode of LLM inference servers: difference /metrics around load "
            "levels, sweep batch x context against a live server, attribute profiler traces to "
            "GPU kernels and host gaps, and render a results page with a verdict per candidate."
        ),
    )
    parser.add_argument("--version", action="version", version=f"perflib {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in names:
        importlib.import_module(f"perflib.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; a perflib error, an OS error on a path the user gave, or text that is not
    UTF-8 is one line on stderr and exit 2, never a traceback."""
    return _run(argv)[0]


def entry() -> None:
    """The `perflib` program: `main`, then exit. A command that sets `exit_at_once` (it writes no file
    and leaves no child or thread running: `trace summary`) runs without the cyclic GC, and where it
    succeeded ends with `os._exit` once stdout and stderr are flushed: its imports make hundreds of
    thousands of objects and no garbage (refcounting frees what it drops), and the interpreter's teardown
    takes 0.15 s once pandas is loaded; nothing it printed is lost."""
    code, at_once = _run(None, process=True)
    if at_once:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BrokenPipeError:  # the reader left (`| head`): not an error, as in `main`
            pass
        os._exit(code)
    sys.exit(code)


def _run(argv: list[str] | None, process: bool = False) -> tuple[int, bool]:
    """`main`'s exit status, and whether the command may exit at once (`entry`, the `process`)."""
    parser = build_parser(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    at_once = bool(getattr(args, "exit_at_once", False))
    if process and at_once:
        gc.disable()
    code = _call(args)
    return code, code == 0 and at_once


def _call(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args) or 0)
    except PerflibError as exc:
        print(f"perflib: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `perflib ... | head` closed the pipe: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a path the user gave: a folder, no permission, a full disk
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"perflib: error: {where}{exc.strerror or exc} ({type(exc).__name__})", file=sys.stderr)
        return 2
    except UnicodeDecodeError as exc:
        print(f"perflib: error: expected UTF-8 text, found an undecodable byte at {exc.start} ({exc.reason})",
              file=sys.stderr)
        return 2
    except Terminated:
        print("perflib: terminated (SIGTERM); records already written are kept", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("perflib: interrupted; records already written are kept", file=sys.stderr)
        return 130

