"""`perflib metrics diff BEFORE AFTER`: counter deltas and derived step figures of one load level."""

from __future__ import annotations

import argparse
import json

from perflib.cli import float_arg, int_arg
from perflib.errors import InputError
from perflib.metrics import DIALECTS, FIGURE_HELP, FIGURES, diff, parse_exposition
from perflib.safeinput import read_text

DIALECT_CHOICES = ("auto", *DIALECTS)
"""`--dialect`: auto-detected, or one entry of the dialect registry (`perflib.metrics.dialects`)."""


def _figure_lines() -> str:
    """The `--help` epilog: one line per figure with its unit (perflib.metrics imports nothing heavy)."""
    width = max(len(name) for name in FIGURE_HELP)
    lines = ["figures (n/a = cannot be computed; never printed as 0):"]
    lines += [f"  {name:<{width}}  {unit:<9}  {text}" for name, (unit, text) in FIGURE_HELP.items()]
    lines += ["A restart between the scrapes (a changed Process-Start-Time-Unix header or process_start_time_seconds,",
              "a different model_name) or a counter that went backwards is a RESET: no figures.",
              "Per-server formulas: SERVERS.md section 5; the notes printed with the table say which one applies."]
    return "\n".join(lines)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `metrics` with its `diff` sub-command."""
    parser = subparsers.add_parser(
        "metrics",
        help="difference /metrics snapshots taken around a load level",
        description="Server-side counters of a load level: deltas, occupancy and decode step time.",
    )
    sub = parser.add_subparsers(dest="metrics_command", required=True, metavar="SUBCOMMAND")
    diff = sub.add_parser(
        "diff",
        help="counter deltas and derived figures between two /metrics exposition files",
        description="Difference two /metrics snapshots (exposition text files) of one server, taken right "
                    "before a level and after its last request finished.",
        epilog=_figure_lines(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    diff.add_argument("before", metavar="BEFORE", help="exposition text scraped right before the level")
    diff.add_argument("after", metavar="AFTER", help="exposition text scraped after every request finished")
    diff.add_argument("--dialect", choices=DIALECT_CHOICES, default="auto",
                      help="server metric names (default: detect from the names present)")
    diff.add_argument("--requests", type=int_arg(0), default=None, metavar="N",
                      help="requests completed in the level (llama.cpp needs it for decode_step_ms)")
    diff.add_argument("--process-start-before", type=float_arg(), default=None, metavar="UNIX_S",
                      help="Process-Start-Time-Unix header of the before scrape (a change means a restart)")
    diff.add_argument("--process-start-after", type=float_arg(), default=None, metavar="UNIX_S",
                      help="Process-Start-Time-Unix header of the after scrape")
    diff.add_argument("--json", action="store_true", help="print one JSON object (null where undefined)")
    diff.set_defaults(func=run_diff)


def _read(path: str) -> str:
    """The exposition text of a file the user named: a regular UTF-8 file, else an `InputError`."""
    return read_text(path, "/metrics exposition text") or ""


def _fmt(name: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    if name in ("decode_steps", "decode_tokens", "mixed_steps", "prefill_chunks"):
        return f"{value:+.0f}" if float(value).is_integer() else f"{value:+.3f}"
    if name == "tokens_predicted_seconds":
        return f"{value:+.3f}"
    return f"{value:.2f}"


def format_table(delta: object, before: str = "", after: str = "") -> str:
    """The readable form of a `MetricsDelta`: one figure a line with its unit, absent names, notes."""
    d = delta.to_dict()  # type: ignore[attr-defined]
    lines = [f"dialect: {d['dialect']}" + (f"   before: {before}   after: {after}" if before else "")]
    if d["restarted"]:
        lines.extend(f"RESET: {evidence}: no figures" for evidence in d["restarted"])
    elif d["reset"]:
        lines.append("RESET: counters were reset between the snapshots (server restarted?): no figures")
    width = max(len(n) for n in FIGURES)
    lines.append(f"{'figure':<{width}}  {'value':>12}  unit")
    for name in FIGURES:
        unit = FIGURE_HELP[name][0]
        lines.append(f"{name:<{width}}  {_fmt(name, d[name]):>12}  {unit}")
    if d["requests"] is not None:
        lines.append(f"{'requests (given)':<{width}}  {d['requests']:>12}  requests")
    lines.append("absent: " + (", ".join(d["absent"]) if d["absent"] else "none"))
    if d["notes"]:
        lines.append("notes:")
        lines.extend(f"  - {note}" for note in d["notes"])
    return "\n".join(lines)


def run_diff(args: argparse.Namespace) -> int:
    # Parse here so that a bad line is reported against the file it is in.
    before = parse_exposition(_read(args.before), args.before)
    after = parse_exposition(_read(args.after), args.after)
    if not after:
        raise InputError(args.after, None, "at least one metric sample", "none (empty or comments only)")
    delta = diff(before, after, dialect=args.dialect, requests=args.requests,
                 process_start_before=args.process_start_before, process_start_after=args.process_start_after)
    if args.json:
        print(json.dumps(delta.to_dict(), allow_nan=False))
    else:
        print(format_table(delta, args.before, args.after))
    return 0
