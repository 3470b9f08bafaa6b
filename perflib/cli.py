"""`perflib` command line: one sub-command module per concern, imported lazily for a fast start."""

from __future__ import annotations

import argparse
import importlib
import sys

from perflib.errors import PerflibError
from perflib.version import __version__

# Each module in perflib.commands has `register(subparsers)` that adds its parser and sets
# `func(args) -> int`. Command modules import only argparse at the top, so `perflib --help`
# and `perflib trace summary` start without loading pandas or httpx twice.
COMMANDS = ("server", "sweep", "metrics", "trace", "campaign")


def build_parser() -> argparse.ArgumentParser:
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
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"perflib.commands.{name}")
        except ModuleNotFoundError as exc:  # a command whose module is not there yet
            if exc.name != f"perflib.commands.{name}":
                raise
            continue
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except PerflibError as exc:
        print(f"perflib: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `perflib ... | head` closed the pipe: not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("perflib: interrupted; records already written are kept", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
