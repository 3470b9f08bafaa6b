"""`perflib campaign`: validate a campaign file, run its matrix, rebuild its page."""

from __future__ import annotations

import argparse
import html
import json
import math
import re
import sys
from dataclasses import replace
from pathlib import Path

from perflib.cli import float_arg, safe_label
from perflib.errors import PerflibError

RUN_DESCRIPTION = """\
Measures every incomplete run of the campaign, one server per (arm, backend), then derives the
tables and writes the page. Each run is measured in this process and its collect.ipynb written
from its results (each traced run's trace attributed once, its profile.ipynb written too); with
--papermill the notebooks are executed with papermill instead. An (arm, backend) another runner
holds (its .claim.json) is skipped and said so; a server an earlier runner left running when it
died (kill -9) is stopped first and said so. On Linux a server also gets its stop signal when the
runner dies, kill -9 included."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "campaign",
        help="run a campaign (arm x backend x batch x context x repeat) and write its results page",
        description=(
            "A campaign file (campaigns/*.yaml) names the model, backends, batch sizes, contexts, repeats, arms, "
            "a regression gate and candidates. `run` measures each run and writes its collect.ipynb (with "
            "--papermill: executes notebooks/collect.ipynb per run with papermill; complete runs are skipped, "
            "failed runs keep their notebook), derives data/derived/<name>/ "
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

    run_p = sub.add_parser(
        "run", help="measure every incomplete run, then derive and write the page",
        description=RUN_DESCRIPTION, epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    common(run_p)
    run_p.add_argument("--guard", action="store_true",
                       help="GPU guard: wait for an idle GPU, watch it at 1 Hz, redo contended runs (up to 5 "
                            "attempts); a no-op with a message where there is no GPU")
    run_p.add_argument("--guard-idle-s", type=float_arg(0), default=90.0, help="idle time the guard waits for (default 90 s)")
    run_p.add_argument("--only", nargs="+", metavar="KEY=V[,V]",
                       help="restrict the matrix, e.g. --only arm=after batch=1,4 (keys: arm backend batch "
                            "context repeat)")
    notebook_flags(run_p)
    run_p.add_argument("--no-report", action="store_true", help="measure only; do not derive or write the page")
    run_p.add_argument("--cluster", metavar="ADDRESS",
                       help="a Dask scheduler (tcp://HOST:8786; tls:// with the DASK_DISTRIBUTED__COMM__TLS__* "
                            "settings): each (arm, backend) runs on a worker offering its backend (`perflib cluster "
                            "worker`), its run folders are copied here and checked, then the page is written "
                            "(docs/CLUSTER.md; needs perflib[cluster])")
    contention_flags(run_p, "redone once the CPUs are quiet (up to 3 attempts), then kept and marked contended; "
                            "the page leaves it out of medians")
    run_p.add_argument("--contention-wait", type=float_arg(0), default=WAIT_BUDGET_S, metavar="SECONDS",
                       help=f"seconds the whole campaign may wait for quiet CPUs before redoing contended runs "
                            f"(default {WAIT_BUDGET_S:g}); once spent, or with 0, contended runs are kept, "
                            "marked contended, at once")
    run_p.set_defaults(func=run)

    report_p = sub.add_parser("report", help="rebuild data/derived and the page from data/raw (no server)")
    common(report_p)
    report_flags(report_p)

    check_p = sub.add_parser("validate", help="check a campaign file; print its matrix size and the question its "
                             "page opens with (question:, else description:, else the playbook's)")
    check_p.add_argument("file")
    check_p.add_argument("--json", action="store_true")
    check_p.set_defaults(func=validate)


def report_flags(p: argparse.ArgumentParser) -> None:
    """The flags of `campaign report` beyond the common ones."""
    p.add_argument("--date", type=safe_label, help="page date (default: the UTC day the campaign's last run ended)")
    p.add_argument("--agree-with", metavar="DIR",
                   help="another run of the same campaign (its data folder, as --data): the page says where this "
                        "run's verdicts and before/after changes agree with that run's, and beside each that does "
                        "not, the devices, contention, spread and counter checks of both runs (the campaign file's "
                        "agree_with: does it for every report; docs/CAMPAIGNS.md)")
    p.add_argument("--agree-label", metavar="LABEL",
                   help="what the page calls the --agree-with run (default: its folder's name)")
    p.add_argument("--notebook-export", action="store_true",
                   help="also execute notebooks/report.ipynb and export it with "
                        "`jupyter nbconvert --to markdown --no-input`")
    p.set_defaults(func=report)


def notebook_flags(p: argparse.ArgumentParser) -> None:
    """`--papermill` and `--kernel` of `campaign run`."""
    p.add_argument("--papermill", action="store_true",
                   help="measure each run by executing notebooks/collect.ipynb with papermill in a Jupyter kernel "
                        "(one per arm and backend), and attribute each trace with profile.ipynb, as on a box where "
                        "notebooks run the work; the run folders get the same files. Default: measured in this "
                        "process, each run's notebooks written from its results (no kernel), ready to open and "
                        "execute again")
    p.add_argument("--kernel", help="Jupyter kernel for --papermill (default: one that runs this Python; "
                                    "register with `python -m ipykernel install --user --name perflib`)")


NOTHING_DONE_EXIT = 3
"""`campaign run`'s exit status where it measured nothing because another runner holds every (arm,
backend) left to measure."""

EXIT_CODES = f"""exit status:
  0    every run measured or already complete (an (arm, backend) another runner holds is listed)
  1    at least one run failed (each is listed with why; what it measured is kept)
  2    the campaign file or an argument is wrong (one `perflib: error:` line)
  {NOTHING_DONE_EXIT}    nothing done: every (arm, backend) left to measure is held by another runner
  75   only the GPU guard's contention kept runs from being measured (--guard)
  130  interrupted (Ctrl-C); 143: terminated (SIGTERM). The run in progress is kept incomplete"""


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
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share of the CPU like 0.25, got {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a share of the CPU above 0 and at most 1, got {text!r}")
    return value


def _load(args: argparse.Namespace):
    # late: the campaign and its config (pandas, 0.6 s) load when a command runs, not at `perflib --help`
    from perflib.campaign import load_campaign
    from perflib.config import replace_data_dir

    campaign = load_campaign(args.file)
    return replace_data_dir(campaign, Path(args.data) if getattr(args, "data", None) else None,
                            Path(args.reports) if getattr(args, "reports", None) else None)


def validate(args: argparse.Namespace) -> int:
    # late: the campaign and its config (pandas, 0.6 s) load when a command runs, not at `perflib --help`
    from perflib.campaign import load_campaign
    from perflib.config import opening_question

    campaign = load_campaign(args.file)
    runs = campaign.expand()
    question, source = opening_question(campaign)
    info = {"campaign": campaign.name, "runs": len(runs), "arms": [a.name for a in campaign.arms],
            "backends": [b.name for b in campaign.backends], "candidates": [c.id for c in campaign.candidates],
            "question": question or None, "question_from": source or None}
    if args.json:
        print(json.dumps(info))
    else:
        print(f"{args.file}: campaign {campaign.name}: {len(runs)} runs ({len(campaign.arms)} arms x "
              f"{len(campaign.backends)} backends x {len(campaign.batches)} batches x {len(campaign.contexts)} "
              f"contexts x {campaign.repeats} repeats), {len(campaign.candidates)} candidates")
        if question:
            print(f"the page opens with its {source}: {question}")
        else:
            print("the page opens with no question (give question: or description:)")
    return 0


def run(args: argparse.Namespace) -> int:
    # late: the campaign and its config (pandas, 0.6 s) load when a command runs, not at `perflib --help`
    from perflib.campaign import GUARD_EXIT, CampaignRun

    campaign = _load(args)
    result = CampaignRun(campaign, run_options(args)).run()
    on_disk = result.on_disk
    if args.json:
        print(json.dumps({"campaign": campaign.name, "done": list(result.done), "skipped": list(result.skipped),
                          "failed": [{"run": r, "error": e} for r, e in result.failed],
                          "partial": [{"run": r, "why": w} for r, w in result.partial],
                          "runs_complete": on_disk[0] if on_disk else None, "runs_total": on_disk[1] if on_disk else None,
                          "steps_guessed": list(result.steps_guessed),
                          "claimed": [{"group": g, "holder": h} for g, h in result.claimed],
                          "orphans_stopped": list(result.orphans), "nothing_done": result.nothing_done,
                          "contended": list(result.contended), "kept_contended": list(result.kept_contended),
                          "contention_wait_s": round(result.contention_wait_s, 1), "page": str(result.page) if result.page else None,
                          "answer": result.published.answer if result.published else None,
                          "agreement": result.published.agreement.to_dict()
                          if result.published and result.published.agreement else None}))
    else:
        print(f"campaign {campaign.name}: {len(result.done)} runs measured, {len(result.skipped)} skipped "
              f"(complete), {len(result.failed)} failed, {len(result.partial)} partial (complete, trace lost or "
              "cut short)" + (f", {len(result.claimed)} (arm, backend) held by another runner" if result.claimed else ""))
        if result.contention_summary:
            print(f"contention: {result.contention_summary}")
        for label, error in result.failed:
            print(f"  FAILED {label}: {error}", file=sys.stderr)
        for label, why in result.partial:
            print(f"  PARTIAL {label}: {why}", file=sys.stderr)
        if result.steps_guessed:
            print(f"  steps guessed from the dispatch rhythm in {len(result.steps_guessed)} traced runs: "
                  f"{', '.join(result.steps_guessed[:5])}{' ...' if len(result.steps_guessed) > 5 else ''}")
        if on_disk:
            print(f"on disk: {on_disk[0]} complete of {on_disk[1]} runs")
        if result.page:
            print(f"page: {result.page}")
    for group, who in result.claimed:
        print(f"perflib: {group} not measured here: another runner holds it ({who})", file=sys.stderr)
    if result.failed or result.partial:
        contended_only = not result.partial and all(e.startswith("contended on all") for _, e in result.failed)
        return GUARD_EXIT if contended_only else 1
    if result.nothing_done:
        print(f"perflib: nothing done: every (arm, backend) left to measure is held by another runner "
              f"(exit {NOTHING_DONE_EXIT})", file=sys.stderr)
        return NOTHING_DONE_EXIT
    return 0


def run_options(args: argparse.Namespace):  # noqa: ANN201 - RunOptions (imported lazily)
    """`campaign run`'s flags as the runner's one `perflib.campaign.RunOptions`."""
    # late: the campaign package (pandas, httpx) loads when a command runs, not at `perflib --help`
    from perflib.campaign import RunOptions
    from perflib.config import parse_only

    return RunOptions(only=parse_only(args.only), guard=args.guard, guard_idle_s=args.guard_idle_s,
                      contention_threshold=None if args.no_contention else args.contention_threshold,
                      wait_threshold=args.wait_threshold, psi_threshold=args.psi_threshold,
                      contention_wait_s=args.contention_wait, papermill=args.papermill, kernel_name=args.kernel,
                      progress=True, write_page=not args.no_report, cluster=args.cluster)


def report(args: argparse.Namespace) -> int:
    # late: the tables and the page (pandas, matplotlib, jinja2) load when it runs, not at `perflib --help`
    from perflib.campaign import export_notebook
    from perflib.publish import publish
    from perflib.report.agreement import first_screen
    from perflib.report.sections import loss_lines

    campaign = _load(args)
    if args.agree_with:
        from perflib.config import AgreeSpec  # late: the config (pandas) loads when a command runs
        campaign = replace(campaign, agree_with=AgreeSpec(Path(args.agree_with).resolve(), args.agree_label or ""))
    elif args.agree_label:
        raise PerflibError("--agree-label names the --agree-with run: give --agree-with DIR too")
    published = publish(campaign, date=args.date)
    exported = export_notebook(campaign) if args.notebook_export else None
    runs = published.runs
    if args.json:
        print(json.dumps({"campaign": campaign.name, "page": str(published.page), **runs.to_dict(),
                          "derived": str(campaign.derived_dir()), "notebook_export": str(exported) if exported else None,
                          "answer": published.answer,
                          "agreement": published.agreement.to_dict() if published.agreement else None}))
    else:
        print(f"derived: {campaign.derived_dir()}")
        for entry in published.answer["candidates"]:  # the page's first screen: each candidate across levels
            print(f"  {entry['label']}: {entry['answer']}")
        print(f"runs: {runs.complete} complete of {runs.total}, {len(runs.failed)} failed, "
              f"{len(runs.partial)} partial (trace lost or cut short)")
        for line in loss_lines(published.tables.runs):  # the page's first screen, word for word
            print(f"  {_plain(line[2:])}")
        if published.agreement:
            print(f"  {_plain(first_screen(published.agreement, link=False)[2:])}")
        print(f"page: {published.page}")
        if exported:
            print(f"notebook export: {exported}")
    return 0


def _plain(markdown: str) -> str:
    """A line of the page as terminal text: no bold, no backslash escapes, no HTML entities."""
    return html.unescape(re.sub(r"\\([\\_*\[\]|`#])", r"\1", markdown.replace("**", "")))

