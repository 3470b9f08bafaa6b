"""`perflib sweep`: batch × context levels against a live (or perflib-started) server."""

from __future__ import annotations

import argparse


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
    parser.add_argument("--decode-tokens", type=int, default=128, help="tokens decoded per request (default 128)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per level (default 3)")
    parser.add_argument("--out", required=True, help="output folder for the run folders")
    parser.add_argument("--endpoint", choices=("completions", "chat"), default="completions",
                        help="/v1/completions (default) or /v1/chat/completions")
    parser.add_argument("--dialect", default="auto", help="/metrics dialect for perflib.metrics (default auto)")
    parser.add_argument("--model", help="GGUF for --start-server (default: the project's random-weight test model)")
    parser.add_argument("--threads", type=int, help="llama-server --threads for --start-server")
    parser.add_argument("--timeout", type=float, default=600.0, help="per-request read timeout in s (default 600)")
    parser.add_argument("--json", action="store_true", help="print one JSON object with the per-level rows")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    from perflib import sweep

    result = sweep.sweep(
        args.base_url, args.batch, args.context, args.decode_tokens, args.repeats, args.out,
        endpoint=args.endpoint, dialect=args.dialect, start_server=args.start_server, model=args.model,
        threads=args.threads, progress=True, timeout=args.timeout,
    )
    incomplete = [str(r.run_dir) for r in result.results if r.status != "complete"]
    if args.json:
        print(json.dumps({"out": str(result.out_dir), "levels": result.levels, "runs": result.runs,
                          "incomplete": incomplete}, default=str))
    else:
        print(sweep.format_level_table(result.levels))
        print(f"run folders: {result.out_dir}")
        for path in incomplete:
            print(f"incomplete: {path}", file=sys.stderr)
    return 1 if incomplete else 0
