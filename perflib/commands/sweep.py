"""`perflib sweep`: batch × context levels against a live (or perflib-started) server."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from perflib.cli import float_arg, int_arg
from perflib.commands.campaign import contention_flags
from perflib.commands.metrics import DIALECT_CHOICES

TABLE_FIGURES = (
    ("ok", "ok", "{:.0f}"),
    ("failed", "failed", "{:.0f}"),
    ("ttft_ms", "mean TTFT (ms)", "{:.1f}"),
    ("decode_tok_s", "decode (tok/s/req)", "{:.1f}"),
    ("aggregate_tok_s", "aggregate (tok/s)", "{:.1f}"),
    ("decode_step_ms", "step, counters (ms)", "{:.2f}"),
    ("steady_step_ms", "steady step, client (ms)", "{:.2f}"),
    ("occupancy", "occupancy (slots/step)", "{:.2f}"),
    ("prefill_chunks", "prefill chunks (count)", "{:.0f}"),
    ("own_step_share", "own-step share (%)", "{:.1f}"),
)
"""(summary key, header with unit, format) of each figure in the per-level table."""

FIGURE_MEANING = {
    "ok": "requests that completed without an error (count)",
    "failed": "requests that did not; each record says why (count)",
    "ttft_ms": "time to first token: first token-carrying SSE event - request sent, mean over requests (ms)",
    "decode_tok_s": "per request (completion tokens - 1) / (stream end - first token), mean (tok/s)",
    "aggregate_tok_s": "all completion tokens / (last stream end - first request sent) (tok/s)",
    "decode_step_ms": "from /metrics: 1000 x Δtokens_predicted_seconds / Δdecode tokens, the decode step "
                      "as one request sees it (ms); n/a without /metrics",
    "steady_step_ms": "from the client: median inter-token time while all N requests decode (ms)",
    "occupancy": "from /metrics: Δdecode tokens / Δdecode steps, rows advanced per step (slots)",
    "prefill_chunks": "from /metrics: Δ prefill chunks during the level; absent where the server has none (count)",
    "own_step_share": "median over requests of (n - 1) x steady step / decode window: the share of its "
                      "decode window that a request's own steps explain (%)",
}
"""What each figure of the table means, for `--help` (LOADGEN.md and SERVERS.md §5 define them)."""


def figures_help() -> str:
    """The `--help` epilog: one line per column of the per-level table, with its unit."""
    width = max(len(header) for _, header, _ in TABLE_FIGURES)
    lines = ["what it prints, one row per (batch, context): medians over repeats, (min-max) where they",
             "differ; 'runs complete' counts complete repeats and, in brackets, contended ones.",
             "--json: the same figures under their keys (ttft_ms, ...), null where not computed."]
    for key, header, _ in TABLE_FIGURES:
        lines += textwrap.wrap(FIGURE_MEANING[key], 96, initial_indent=f"  {header:<{width}}  ",
                               subsequent_indent=" " * (width + 4))
    return "\n".join(lines)

COUNTER_KEYS = frozenset({"decode_step_ms", "occupancy", "prefill_chunks"})


def _cell(row: Mapping[str, Any], key: str, fmt: str) -> str:
    if key in COUNTER_KEYS and row.get("counters") != "ok":
        return f"n/a ({row.get('counters') or 'no /metrics'})"  # no /metrics, or counters reset, NaN, impossible
    if key == "prefill_chunks" and row.get("prefill_chunks_absent") and row.get(key) is None:
        return "absent"
    value = row.get(key)
    if value is None:
        return "n/a"
    scale = 100.0 if key == "own_step_share" else 1.0
    lo, hi = row.get(f"{key}_min"), row.get(f"{key}_max")
    text = fmt.format(value * scale)
    if lo is not None and hi is not None and fmt.format(lo * scale) != fmt.format(hi * scale):
        text += f" ({fmt.format(lo * scale)}–{fmt.format(hi * scale)})"
    return text


def _complete(row: Mapping[str, Any]) -> str:
    text = f"{row['complete']}/{row['repeats']}"
    return text + f" ({row['contended']} contended)" if row.get("contended") else text


def format_level_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The per-level table: medians over repeats with (min–max), units in the headers."""
    from tabulate import tabulate  # late: 21 ms (measured) that --json and `perflib --help` skip

    headers = ["batch", "context (tokens)", "runs complete", *(f[1] for f in TABLE_FIGURES)]
    body = [[row["batch"], row["context"], _complete(row),
             *(_cell(row, key, fmt) for key, _, fmt in TABLE_FIGURES)] for row in rows]
    note = ("medians over repeats, (min–max) where they differ; mean TTFT = each run's mean over its requests; "
            "contended = other processes used more CPU than --contention-threshold, or the server's and client's "
            "threads waited on a run queue more than --wait-threshold, or some task waited for a CPU more than "
            "--psi-threshold of the time, during the level (its manifest says what); "
            "step, counters = Δtokens_predicted_seconds / "
            "Δdecode tokens from /metrics; steady step, client = median ITL while all requests decode; "
            "own-step share = median over requests of (n−1) × steady step / decode window")
    return tabulate(body, headers=headers, tablefmt="simple", disable_numparse=True) + "\n" + note


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 1,4, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers like 1,4, got {text!r}")
    return values


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="measure batch x context levels against a server, one run folder per level and repeat",
        description=(
            "Send N streaming requests at once per level (batch N, prompt of C tokens, D decode tokens), "
            "difference /metrics around each level, and print one row per level: medians over repeats "
            "with min-max. Run folders: OUT/b<batch>_c<context>_r<repeat>/ (docs/SCHEMA.md section 2); a "
            "complete one is never re-measured, an incomplete one is moved aside and re-measured."
        ),
        epilog=figures_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--base-url", help="URL of a running server, e.g. http://127.0.0.1:8080")
    where.add_argument("--start-server", action="store_true",
                       help="start the local llama-server (perflib.server) with --parallel max(batch) and a "
                            "--ctx-size that fits every slot; its log is OUT/server.log, each run folder "
                            "gets the slice of its level")
    parser.add_argument("--batch", type=_int_list, required=True, help="concurrent requests per level, e.g. 1,4")
    parser.add_argument("--context", type=_int_list, required=True,
                        help="prompt tokens per request, e.g. 1024,8192 (measured with the server's /tokenize)")
    parser.add_argument("--decode-tokens", type=int_arg(2), default=128, help="tokens decoded per request (default 128)")
    parser.add_argument("--repeats", type=int_arg(1), default=3, help="runs per level (default 3)")
    parser.add_argument("--out", required=True, help="output folder for the run folders")
    parser.add_argument("--endpoint", choices=("completions", "chat"), default="completions",
                        help="/v1/completions (default) or /v1/chat/completions")
    parser.add_argument("--dialect", choices=DIALECT_CHOICES, default="auto",
                        help="/metrics dialect for perflib.metrics (default auto: from the names present)")
    parser.add_argument("--model", help="GGUF for --start-server (default: the project's random-weight test model)")
    parser.add_argument("--threads", type=int_arg(1), help="llama-server --threads for --start-server")
    parser.add_argument("--request-timeout", "--timeout", dest="timeout", type=float_arg(0, above=True),
                        default=None, metavar="S",
                        help="seconds one request may take, from its send to its last byte (default 300 + 1 per "
                             "decode token); a request past it fails, naming it, and its level is incomplete")
    parser.add_argument("--idle-timeout", type=float_arg(0, above=True), default=60.0, metavar="S",
                        help="seconds without a byte from the server once a stream has begun (default 60): a "
                             "server that stalls mid-stream fails the request, naming it, instead of holding the "
                             "level; the wait for the first token (queue, prefill) is bounded by --request-timeout")
    parser.add_argument("--workers", type=int_arg(1), default=1,
                        help="processes to send each level's requests from (default 1); for servers that "
                             "stream faster than one client process reads; records still go to one file")
    parser.add_argument("--json", action="store_true", help="print one JSON object with the per-level rows")
    contention_flags(parser, "kept, and marked contended in its manifest and in this table")
    parser.set_defaults(func=run)


def finite(obj: Any) -> Any:
    """`obj` with every NaN or infinite float replaced by None, so that `json.dumps(allow_nan=False)`
    prints strict JSON (a bare `NaN` or `Infinity` is not JSON, and `jq` refuses it)."""
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, Mapping):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def run(args: argparse.Namespace) -> int:
    from perflib import load, sweep  # late: 0.2 s (httpx, numpy) that `perflib --help` skips

    level = load.LevelSpec(  # batch, context and repeat come from the matrix, each level its own
        args.base_url or "", batch=1, context=1, decode_tokens=args.decode_tokens, repeat=1, out_dir=args.out,
        endpoint=args.endpoint, dialect=args.dialect, timeout=args.timeout, idle_timeout=args.idle_timeout,
        workers=args.workers, contention_threshold=None if args.no_contention else args.contention_threshold,
        wait_threshold=args.wait_threshold, psi_threshold=args.psi_threshold)
    result = sweep.sweep(level, args.batch, args.context, args.repeats, start_server=args.start_server,
                         model=args.model, threads=args.threads, progress=True)
    incomplete = [str(r.run_dir) for r in result.results if r.status == "incomplete"]
    unreadable = [(str(r.run_dir), r.errors[-1]) for r in result.results if r.status == sweep.UNREADABLE]
    if args.json:
        print(json.dumps(finite({"out": str(result.out_dir), "levels": result.levels, "runs": result.runs,
                                 "incomplete": incomplete,
                                 "unreadable": [{"run_dir": p, "error": e} for p, e in unreadable]}),
                         default=str, allow_nan=False))
    else:
        print(format_level_table(result.levels))
        print(f"run folders: {result.out_dir}")
    for path in incomplete:
        print(f"incomplete: {path}", file=sys.stderr)
    for _path, error in unreadable:
        print(f"unreadable (kept, not summarized): {error}", file=sys.stderr)
    return 1 if incomplete or unreadable else 0
