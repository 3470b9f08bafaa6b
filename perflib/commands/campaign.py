"""`perflib campaign`: validate a campaign file, run its matrix with papermill, rebuild its page."""

from __future__ import annotations

import argparse

from perflib.cli import float_arg, safe_label


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "campaign",
        help="run a campaign (arm x backend x batch x context x repeat) and write its results page",
        description=(
            "A campaign file (campaigns/*.yaml) names the model, backends, batch sizes, contexts, repeats, arms, "
            "a regression gate and candidates. `run` executes notebooks/collect.ipynb per run with papermill "
            "(complete runs are skipped, failed runs keep their executed notebook), derives data/derived/<name>/ "
            "and writes reports/<name>-<date>.md (reports/<name>-<time>.md for a data folder named by its UTC "
            "time, as `make demo`'s; never over the page of another data folder); `report` rebuilds both from "
            "data/raw without a server."
        ),
    )
    sub = parser.add_subparsers(dest="campaign_command", required=True, metavar="ACTION")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("file", help="campaign YAML file, e.g. campaigns/demo.yaml")
        p.add_argument("--data", help="data folder holding raw/ and derived/ (default: the campaign's data_dir)")
        p.add_argument("--reports", help="folder for the results page (default: the campaign's reports_dir)")
        p.add_argument("--json", action="store_true", help="print one JSON object instead of text")

    run_p = sub.add_parser("run", help="measure every incomplete run, then derive and write the page")
    common(run_p)
    run_p.add_argument("--guard", action="store_true",
                       help="GPU guard: wait for an idle GPU, watch it at 1 Hz, redo contended runs (up to 5 "
                            "attempts); a no-op with a message where there is no GPU")
    run_p.add_argument("--guard-idle-s", type=float_arg(0), default=90.0, help="idle time the guard waits for (default 90 s)")
    run_p.add_argument("--only", nargs="+", metavar="KEY=V[,V]",
                       help="restrict the matrix, e.g. --only arm=after batch=1,4 (keys: arm backend batch "
                            "context repeat)")
    run_p.add_argument("--kernel", help="Jupyter kernel for papermill (default: one that runs this Python; "
                                        "register with `python -m ipykernel install --user --name perflib`)")
    run_p.add_argument("--no-report", action="store_true", help="measure only; do not derive or write the page")
    contention_flags(run_p, "redone once the CPUs are quiet (up to 3 attempts), then kept and marked contended; "
                            "the page leaves it out of medians")
    run_p.add_argument("--contention-wait", type=float_arg(0), default=WAIT_BUDGET_S, metavar="SECONDS",
                       help=f"seconds the whole campaign may wait for quiet CPUs before redoing contended runs "
                            f"(default {WAIT_BUDGET_S:g}); once spent, or with 0, contended runs are kept, "
                            "marked contended, at once")
    run_p.set_defaults(func=run)

    report_p = sub.add_parser("report", help="rebuild data/derived and the page from data/raw (no server)")
    common(report_p)
    report_p.add_argument("--date", type=safe_label, help="page date (default: the UTC day the campaign's last run ended)")
    report_p.add_argument("--notebook-export", action="store_true",
                          help="also execute notebooks/report.ipynb and export it with "
                               "`jupyter nbconvert --to markdown --no-input`")
    report_p.set_defaults(func=report)

    check_p = sub.add_parser("validate", help="check a campaign file and print its matrix size")
    check_p.add_argument("file")
    check_p.add_argument("--json", action="store_true")
    check_p.set_defaults(func=validate)


CPU_THRESHOLD = 0.25
"""`perflib.load.CPU_THRESHOLD`, written here so that `--help` does not import the load client (a test
keeps the two equal)."""
WAIT_THRESHOLD = 0.5
"""`perflib.load.WAIT_THRESHOLD`, as CPU_THRESHOLD."""
PSI_THRESHOLD = 0.75
"""`perflib.load.PSI_THRESHOLD`, as CPU_THRESHOLD."""
WAIT_BUDGET_S = 180.0
"""`perflib.campaign.contention.WAIT_BUDGET_S`, as CPU_THRESHOLD."""


def contention_flags(p: argparse.ArgumentParser, what: str) -> None:
    """`--contention-threshold`, `--wait-threshold`, `--psi-threshold` and `--no-contention`, shared by
    `campaign run` and `sweep`."""
    p.add_argument("--contention-threshold", type=_share, default=CPU_THRESHOLD, metavar="SHARE",
                   help=f"share of this machine's CPU capacity (0-1) that other processes may use while a level "
                        f"runs (default {CPU_THRESHOLD}: half a core on 2 cores); a level above it, above "
                        f"--wait-threshold or --psi-threshold, or with steal above 10%%, is {what}")
    p.add_argument("--wait-threshold", type=float_arg(0, above=True), default=WAIT_THRESHOLD, metavar="S",
                   help=f"seconds the server's and client's threads may wait on a CPU run queue per second they "
                        f"run, as the Linux kernel counts it (/proc/<pid>/schedstat; default {WAIT_THRESHOLD:g}); "
                        "catches the contention of runs too short for the CPU-share samples")
    p.add_argument("--psi-threshold", type=_share, default=PSI_THRESHOLD, metavar="SHARE",
                   help=f"share of a level's time (0-1) during which some task may wait for a CPU, as Linux's "
                        f"pressure stall information counts it (cgroup cpu.pressure, else /proc/pressure/cpu; "
                        f"default {PSI_THRESHOLD:g}; 1: never decides)")
    p.add_argument("--no-contention", action="store_true",
                   help="do not sample other processes (the manifest says so); for a machine you know is quiet")


def _share(text: str) -> float:
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share of the CPU like 0.25, got {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a share of the CPU above 0 and at most 1, got {text!r}")
    return value


def _load(args: argparse.Namespace):
    from pathlib import Path

    from perflib.campaign import load_campaign
    from perflib.config import replace_data_dir

    campaign = load_campaign(args.file)
    return replace_data_dir(campaign, Path(args.data) if getattr(args, "data", None) else None,
                            Path(args.reports) if getattr(args, "reports", None) else None)


def validate(args: argparse.Namespace) -> int:
    import json

    from perflib.campaign import load_campaign

    campaign = load_campaign(args.file)
    runs = campaign.expand()
    info = {"campaign": campaign.name, "runs": len(runs), "arms": [a.name for a in campaign.arms],
            "backends": [b.name for b in campaign.backends], "candidates": [c.id for c in campaign.candidates]}
    if args.json:
        print(json.dumps(info))
    else:
        print(f"{args.file}: campaign {campaign.name}: {len(runs)} runs ({len(campaign.arms)} arms x "
              f"{len(campaign.backends)} backends x {len(campaign.batches)} batches x {len(campaign.contexts)} "
              f"contexts x {campaign.repeats} repeats), {len(campaign.candidates)} candidates")
    return 0


def run(args: argparse.Namespace) -> int:
    import json
    import sys

    from perflib.campaign import GUARD_EXIT, run_campaign
    from perflib.config import parse_only

    campaign = _load(args)
    result = run_campaign(campaign, guard=args.guard, only=parse_only(args.only), kernel_name=args.kernel,
                          progress=True, write_page=not args.no_report, guard_idle_s=args.guard_idle_s,
                          contention_threshold=None if args.no_contention else args.contention_threshold,
                          wait_threshold=args.wait_threshold, psi_threshold=args.psi_threshold,
                          contention_wait_s=args.contention_wait)
    if args.json:
        print(json.dumps({"campaign": campaign.name, "done": list(result.done), "skipped": list(result.skipped),
                          "failed": [{"run": r, "error": e} for r, e in result.failed],
                          "contended": list(result.contended), "kept_contended": list(result.kept_contended),
                          "contention_wait_s": round(result.contention_wait_s, 1),
                          "page": str(result.page) if result.page else None}))
    else:
        print(f"campaign {campaign.name}: {len(result.done)} runs measured, {len(result.skipped)} skipped "
              f"(complete), {len(result.failed)} failed")
        if result.contention_summary:
            print(f"contention: {result.contention_summary}")
        for label, error in result.failed:
            print(f"  FAILED {label}: {error}", file=sys.stderr)
        if result.page:
            print(f"page: {result.page}")
    if result.failed:
        contended_only = all(e.startswith("contended on all") for _, e in result.failed)
        return GUARD_EXIT if contended_only else 1
    return 0


def report(args: argparse.Namespace) -> int:
    import json

    from perflib.campaign import export_notebook
    from perflib.report import write_report

    campaign = _load(args)
    page = write_report(campaign, date=args.date)
    exported = export_notebook(campaign) if args.notebook_export else None
    if args.json:
        print(json.dumps({"campaign": campaign.name, "page": str(page),
                          "derived": str(campaign.derived_dir()), "notebook_export": str(exported) if exported else None}))
    else:
        print(f"derived: {campaign.derived_dir()}")
        print(f"page: {page}")
        if exported:
            print(f"notebook export: {exported}")
    return 0
