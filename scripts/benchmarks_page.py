"""docs/BENCHMARKS.md, written from the committed benchmark results: every table from its JSON.

    python scripts/benchmarks_page.py            # (re)write docs/BENCHMARKS.md
    python scripts/benchmarks_page.py --check    # exit 1 when the committed page is not what this writes

The prose (how each figure was measured, what it means) is docs/src/benchmarks.md; each
`<!-- table: NAME -->` line there is replaced by the table `TABLES[NAME]` renders from
`benchmarks/results-*.json`. Nothing else is read, so the output is the same bytes every time.
`tests/test_benchmarks_page.py` regenerates the page and compares it with the committed one, and ties
each printed figure to its JSON value independently of this script. `make docs` runs it.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
SOURCE = REPO / "docs" / "src" / "benchmarks.md"
PAGE = REPO / "docs" / "BENCHMARKS.md"
MARKER = re.compile(r"^<!-- table: ([a-z_0-9]+) -->$", re.M)
HEADER = ("<!-- Written by scripts/benchmarks_page.py from docs/src/benchmarks.md and benchmarks/results-*.json:\n"
          "     edit those, then run `make docs`. tests/test_benchmarks_page.py fails when this page is stale. -->\n\n")


@cache
def load(name: str) -> dict:
    """A committed results JSON under benchmarks/."""
    return json.loads((BENCHMARKS / name).read_text(encoding="utf-8"))


def one(rows: Sequence[dict], **match) -> dict:
    """The one row whose keys hold these values (an error naming the match otherwise)."""
    found = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    if len(found) != 1:
        raise ValueError(f"{len(found)} rows match {match}")
    return found[0]


def rounds(j: dict, client: str, key: str) -> list[float]:
    """A client's value of `key` per round, in round order."""
    return [r[key] for r in sorted((r for r in j["results"] if r["client"] == client), key=lambda r: r["round"])]


def ratios(j: dict, client: str) -> list[float]:
    """The client's server step over the raw reader's, round by round."""
    return [a / b for a, b in zip(rounds(j, client, "server_step_ms_counters"),
                                  rounds(j, "raw", "server_step_ms_counters"), strict=True)]


# --- numbers as printed ------------------------------------------------------------------------------

def num(value: float, decimals: int = 1) -> str:
    """A figure with `decimals` decimals and thousands separators (1,264; 0.086)."""
    return f"{value:,.{decimals}f}"


def nums(values: Sequence[float], decimals: int = 1, sep: str = ", ") -> str:
    return sep.join(num(v, decimals) for v in values)


def signed_pct(ratio: float) -> str:
    """A ratio's distance from 1 in %, signed, with a typographic minus (+2.1%, −1.7%)."""
    pct = 100 * (ratio - 1)
    return f"{'+' if pct >= 0 else '−'}{abs(pct):.1f}%"


def bold(text: str, on: bool = True) -> str:
    return f"**{text}**" if on else text


def table(header: Sequence[str], align: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub table: `align` holds "l" (---) or "r" (---:) per column; a cell may be empty."""
    def line(cells: Sequence[str]) -> str:
        return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"

    return "\n".join([line(header), line(["---:" if a == "r" else "---" for a in align]), *map(line, rows)])


# --- the tables ----------------------------------------------------------------------------------------

def first_run() -> str:
    runs = {r["load"]: r for r in load("results-first_run.json")["runs"]}

    def step(name: str, unit: float, suffix: str, decimals: int) -> list[str]:
        return [f"{num(runs[k]['steps'][name]['wall_s'] / unit, decimals)} {suffix}" for k in ("quiet", "loaded")]

    return table(["first run on the 2-core machine", "quiet", "loaded"], "lrr", [
        ["`make install`: a new venv, `pip install -e '.[dev,notebooks]'`, the kernel", *step("install", 1, "s", 0)],
        ["`perflib server build`: the sdist from pip, cmake, compile with 2 jobs", *step("build", 60, "min", 1)],
        ["`perflib server model`: the random-weight test model", *step("model", 1, "s", 0)],
        ["load average (1 min) when the column started",
         *(num(runs[k]["loadavg_1min_at_start"], 2) for k in ("quiet", "loaded"))]])


def demo_run() -> str:
    runs = {r["load"]: r for r in load("results-demo_run.json")["runs"]}

    def said(load_: str) -> str:
        """The runner's last line, cut to its contention figures."""
        summary = runs[load_]["steps"]["demo"]["summary"]
        waited = re.search(r"waited (\d+) s in all for quiet CPUs", summary)
        kept = re.search(r"(\d+) runs kept marked contended", summary)
        measured = re.search(r"(\d+) runs measured", summary)
        if measured and "contention:" not in summary:  # the runner prints no contention line when it saw none
            return f"waited 0 s for quiet CPUs; 0 of {measured[1]} runs kept marked contended"
        if not (waited and kept and measured):
            raise ValueError(f"results-demo_run.json: {load_} summary has no contention figures: {summary!r}")
        return f"waited {waited[1]} s for quiet CPUs; {kept[1]} of {measured[1]} runs kept marked contended"

    loads = ("quiet", "loaded")
    return table(["`make demo` after the first run", "quiet", "loaded"], "lrr", [
        ["`make install` in a fresh clone (llama-server reused)",
         *(f"{num(runs[k]['steps']['install']['wall_s'], 0)} s" for k in loads)],
        ["`make demo`", *(f"{num(runs[k]['steps']['demo']['wall_s'], 0)} s" for k in loads)],
        ["the runner's last line", *map(said, loads)],
        ["load average (1 min) when the column started", *(num(runs[k]["loadavg_1min_at_start"], 2) for k in loads)]])


def client_first() -> str:
    j = load("results-client_overhead-2026-11-29.json")

    def at(n: int, client: str, key: str) -> float:
        return one(j["results"], concurrency=n, client=client)[key]

    rows = []
    for n in (1, 4, 16, 64):
        own = num(at(n, "perflib", "cpu_us_per_token"))
        rows.append([str(n), f"{own} µs/token" if n == 1 else bold(own, n == 64),
                     num(at(n, "perflib-httpx", "cpu_us_per_token")), num(at(n, "raw", "cpu_us_per_token")),
                     nums([at(n, c, "server_step_ms_counters") for c in ("perflib", "perflib-httpx", "raw")], 2, " / ")])
    return table(["N", "perflib (its SSE reader, uvloop)", "perflib over httpx", "minimal raw-socket reader",
                  "server step under each client (ms)"], "rrrrl", rows)


def client_paired() -> str:
    j = load("results-client_overhead.json")
    rows = []
    for label, client in (("perflib (uvloop, `perflib.load.frames`)", "perflib"),
                          ("floor (a timestamp and an append per read)", "floor")):
        paired = one(j["paired"], client=client)
        rows.append([label, bold(f"{num(paired['cpu_us_per_token_median'])} µs", client == "perflib"),
                     nums(rounds(j, client, "cpu_us_per_token")),
                     nums(rounds(j, client, "server_step_ms_counters")) + " ms",
                     f"{nums(paired['step_ratios'], 3)} (median {signed_pct(paired['step_ratio_median'])})"])
    raw = rounds(j, "raw", "cpu_us_per_token")
    rows.append(["minimal raw-socket reader (stdlib asyncio)", f"{num(statistics.median(raw))} µs", nums(raw),
                 nums(rounds(j, "raw", "server_step_ms_counters")) + " ms", "1"])
    return table(["N = 64, 3 rounds", "CPU per token (median)", "per round", "server step (counters), per round",
                  "step / step under raw, per round"], "lrlll", rows)


def client_epoll() -> str:
    j = load("results-client_overhead-epoll.json")
    step = lambda c: rounds(j, c, "server_step_ms_counters")  # noqa: E731
    cpu = lambda c: nums(rounds(j, c, "cpu_us_per_token")) + " µs"  # noqa: E731
    return table(["N = 64, 2 rounds", "CPU per token, per round", "server step (counters), per round"], "lll", [
        ["perflib (uvloop)", cpu("perflib"), nums(step("perflib")) + " ms"],
        ["floor (uvloop)", cpu("floor"), nums(step("floor")) + " ms"],
        # its second round's step is not a figure: its in-flight requests are cut at the window's end
        ["floor-epoll, at most one wake-up per 20 ms", bold(cpu("floor-epoll")),
         f"{num(step('floor-epoll')[0])} ms, n/a (its in-flight requests are cut at the end)"]])


def client_h200() -> str:
    first, loops = load("results-client_overhead-h200.json"), load("results-client_overhead-h200-loops.json")
    med = lambda j, c: f"{num(statistics.median(rounds(j, c, 'cpu_us_per_token')))} µs"  # noqa: E731
    paired = lambda c: one(loops["paired"], client=c)  # noqa: E731
    rows = [["256-token requests, 3 rounds (cut from 8 by the call's time limit)", "perflib (uvloop)",
             nums(ratios(first, "perflib"), 3), med(first, "perflib")],
            ["", "floor (uvloop)", nums(ratios(first, "floor"), 3), med(first, "floor")],
            ["", "raw (stdlib asyncio)", "1", med(first, "raw")]]
    for label, client in (("64-token requests, 3 rounds, each reader on both loops", "perflib"), ("", "floor"),
                          ("", "floor-asyncio"), ("", "raw-uvloop")):
        name = {"perflib": "perflib (uvloop)", "floor": "floor (uvloop)"}.get(client, client)
        rows.append([label, name, nums(paired(client)["step_ratios"], 3),
                     f"{num(paired(client)['cpu_us_per_token_median'])} µs"])
    return table(["run", "clients (loop)", "server step / under the raw reader, per paired round",
                  "CPU per token, median"], "llll", rows)


def client_lockstep() -> str:
    j = load("results-client_overhead-h200-lockstep.json")
    rows = []
    for label, client in (("perflib (uvloop)", "perflib"), ("floor (uvloop)", "floor"), ("raw (stdlib asyncio)", "raw")):
        steps = rounds(j, client, "server_step_ms_counters")
        if client == "raw":
            ratio, cpu = "1", statistics.median(rounds(j, "raw", "cpu_us_per_token"))
        else:
            paired = one(j["paired"], client=client)
            ratio, cpu = nums(paired["step_ratios"], 3), paired["cpu_us_per_token_median"]
        rows.append([label, nums(steps), num(statistics.mean(steps)), ratio, f"{num(cpu)} µs"])
    return table(["lockstep, N = 64, 6 rounds", "server step per round (ms)", "mean", "step / under raw, per round",
                  "CPU per token, median"], "llrlr", rows)


def client_ceiling() -> str:
    j = load("results-client_ceiling-h200.json")
    rows = []
    for workers, label in ((1, "1 (one process)"), (2, "2 (`perflib.load.workers`)"), (4, "4"), (8, "8")):
        at = one(j["ceiling"], workers=workers)
        rows.append([label, bold(num(at["tokens_per_s"], 0), workers == 8), f"{num(at['cpu_us_per_token'])} µs"])
    return table(["workers", "tokens/s", "client CPU per token"], "rrr", rows)


OVERHEAD_RUNS: tuple[tuple[str, str, str | None, tuple[int, int]], ...] = (
    ("demo, one kernel per group (2026-12-01)", "results-campaign_overhead.json", None, (0, 2)),
    ("demo with `decode_tokens: 512` (levels 8× as long), under load", "results-campaign_overhead-decode512.json",
     None, (1, 2)),
    ("demo, in the runner's process (issue 23, 2026-12-03)", "results-campaign_overhead-in-process.json", None, (1, 3)),
    ("the same run's `--papermill` (each collect.ipynb in a kernel)", "results-campaign_overhead-in-process.json",
     "papermill", (1, 3)),
    ("demo with `decode_tokens: 512`, in the runner's process", "results-campaign_overhead-in-process-decode512.json",
     None, (1, 3)),
    ("the whole demo (two arms, the page) before issue 31, 2026-12-04", "results-campaign_overhead-issue31.json",
     "baseline", (1, 3)),
    ("the whole demo after issue 31, in the same rounds", "results-campaign_overhead-issue31.json", None, (1, 3)),
)
"""Rows of the campaign overhead table: (label, JSON, the run under this key or the top level, decimals of
(the overhead in %, the median between levels in s))."""


def campaign_overhead() -> str:
    prev = load("results-campaign_overhead-previous.json")
    rows = [  # issue 14's own measurement, quoted from the issue: no JSON was kept
        ["issue 14's demo measurement (a fresh kernel per run)", "54 s", "23%", "77%", "", "2.3 s a run in all", ""],
        ["the previous change (one kernel per group)", f"{num(prev['wall_s'])} s",
         f"{num(100 * prev['levels_s'] / prev['wall_s'], 0)}%", f"{num(100 * prev['overhead_share'], 0)}%", "", "", ""]]
    for label, name, key, (pct, median) in OVERHEAD_RUNS:
        run = load(name)[key] if key else load(name)
        rows.append([label, f"{num(run['wall_s'])} s",
                     f"{num(run['levels_s'])} s ({num(100 * run['levels_s'] / run['wall_s'], 0)}%)",
                     bold(f"{num(100 * run['overhead_share'], pct)}%"), f"{num(run['before_first_level_s'])} s",
                     f"{num(run['between_levels_s'])} s ({num(run['between_levels_median_s'], median)} s)",
                     f"{num(run['after_last_level_s'])} s"])
    return table(["", "wall", "levels", "overhead", "before the first level", "between levels (median a run)",
                  "after the last"], "lrrrrrr", rows)


OVERHEAD_ISSUE31 = "results-campaign_overhead-issue31.json"
"""The whole demo (two arms, the page) before and after issue 31, rounds alternating (`--baseline`)."""


def campaign_overhead_issue31() -> str:
    j = load(OVERHEAD_ISSUE31)
    rows = []
    for label, run in (("before issue 31 (the baseline checkout)", j["baseline"]), ("after issue 31", j)):
        rows.append([label, f"{num(run['wall_s'])} s", f"{num(run['levels_s'])} s",
                     bold(f"{num(100 * run['overhead_share'])}%") + f" ({num(run['overhead_s'])} s)",
                     nums([100 * x for x in run["overhead_shares"]], 1) + "%",
                     f"{num(run['before_first_level_s'], 2)} s",
                     f"{num(run['between_runs_s'], 2)} s ({num(run['between_levels_median_s'], 3)} s)",
                     f"{num(run['between_groups_s'], 2)} s", f"{num(run['server_starts_s'], 2)} s",
                     f"{num(run['server_stops_s'], 2)} s", f"{num(run['attribution_s'], 2)} s",
                     f"{num(run['page_s'], 2)} s"])
    return table(["demo, 36 runs, page included", "wall", "levels", "overhead (median round)", "each round",
                  "before the first level", "between runs of a server (median)", "between the two servers",
                  "servers' starts", "servers' stops", "cut and attribution", "page"], "lrrrrrrrrrrr", rows)


def mib(m: dict) -> str:
    """A measurement's wall time and peak RSS: "1.15 s, 529 MiB"."""
    return f"{num(m['wall_s'], 2)} s, {num(m['max_rss_mib'], 0)} MiB"


def trace_csv() -> str:
    rows = []
    for i, at in enumerate(load("results-trace_summary-csv.json")["csv"]):
        rows.append([num(at["rows"], 0), f"{num(at['mib'], 0)} MiB", bold(mib(at["summary"]), i == 2),
                     mib(at["bare_read"]), mib(at["in_memory"]),
                     bold(f"{num(at['ratio_summary_over_bare'], 2)}×", i == 0)])
    return table(["dispatches", "CSV", "`perflib trace summary --json`", "bare `pyarrow.csv.read_csv`",
                  "in-memory path (the summary before)", "summary / bare"], "rrrrrr", rows)


TRACE_WHAT: tuple[tuple[str, str, str], ...] = (
    ("HTA 0.5.0 temporal breakdown, the first 100,000 dispatches as Kineto JSON", "HTA temporal breakdown", "100,000"),
    ("`perflib trace summary --json`, the same Kineto file", "perflib trace summary --json", "100,000"),
    ("`perflib trace summary --json`, our H200 Kineto trace (29.7 MB JSON, 2.1 MiB gz)", "perflib trace summary --json",
     "llama1b_decode"),
    ("bare `gzip` + `json.loads` of the same trace", "gzip + json.loads (bare)", "llama1b_decode"),
    ("HTA 0.5.0 load + temporal breakdown of the same trace, until it fails (below)",
     "HTA load + temporal breakdown (failed: see notes)", "llama1b_decode"),
    ("`perflib trace summary --json`, generated Kineto JSON, 1,000,000 events (28.8 MiB gz)",
     "perflib trace summary --json", "kineto1000000."),
    ("bare `gzip` + `json.loads` of the same file", "gzip + json.loads (bare)", "kineto1000000."),
    ("`perflib trace summary --json`, generated Kineto JSON, 10,000,000 events (287 MiB gz)",
     "perflib trace summary --json", "kineto10000000."),
    ("`perflib trace summary --json`, rocpd SQLite, 10,000,000 dispatches (1,275 MiB)", "perflib trace summary --json",
     "rocpd"),
    ("`perflib trace summary --json`, CUPTI activity text, 1,000,000 kernels and their launches (57 MiB gz)",
     "perflib trace summary --json", "CUPTI"),
    ("in-memory path of the same file (the line-by-line reader + `summarize`, what ran before)",
     "in-memory path (read_cupti_text_by_line + summarize)", "CUPTI"),
    ("bare gunzip of the same file", "zlib gunzip (bare)", "CUPTI"),
)
"""Rows of the trace summary's "what" table: (label, the measurement's `what`, a piece of its `input`)."""


def trace_what() -> str:
    measured = load("results-trace_summary.json")["measurements"]
    rows = []
    for label, what, within in TRACE_WHAT:
        m = one([m for m in measured if within in m["input"]], what=what)
        rows.append([label, bold(num(m["wall_s"], 2), "our H200" in label), f"{num(m['max_rss_mib'], 0)} MiB"])
    return table(["what", "wall s", "peak RSS"], "lrr", rows)


def trace_goals() -> str:
    csv = load("results-trace_summary-csv.json")["csv"]
    first = load("results-trace_summary.json")
    hta, real = first["hta"], first["kineto"][0]  # kineto[0]: our H200 trace, 29.7 MB of JSON
    cut, cut_kineto = load("results-trace_summary-cut.json")["cut"], load("results-trace_summary-cut-kineto.json")["cut"]
    second = load("results-trace_summary-kineto-real.json")["kineto"][0]
    gib = lambda mib_: f"{num(mib_ / 1024, 2)} GiB"  # noqa: E731
    sizes = ("1M", "3M", "10M")
    per_million = " / ".join(num(c["summary"]["wall_s"] / c["rows"] * 1e6, 2) for c in csv)
    speedups = ", ".join(f"{num(hta['speedup_vs_scaled_hta_on_csv'][n], 1)}× at {s}"
                         for n, s in zip(("1000000", "3000000", "10000000"), sizes, strict=True))
    rows = [
        ["rocprofv3 CSV at 10M: peak RSS at most 2 GiB",
         f"{gib(csv[2]['summary']['max_rss_mib'])} (in-memory path: {num(csv[2]['in_memory']['max_rss_mib'] / 1024, 1)} GiB)",
         "met"],
        ["time no more than before, about linear",
         f"10M in {num(csv[2]['summary']['wall_s'], 2)} s (before: {num(csv[2]['in_memory']['wall_s'], 2)} s in this run); "
         f"{per_million} s per million at 1M / 3M / 10M", "met"],
        ["summary at most 1.5× the bare CSV read",
         ", ".join(f"{num(c['ratio_summary_over_bare'], 2)}× at {s}" for c, s in zip(csv, sizes, strict=True)), "met"],
        ["at least 30× faster than HTA",
         f"{speedups}, HTA's {num(hta['rows'], 0)}-dispatch time scaled linearly (against the first run's CSV times); "
         f"{num(hta['speedup_same_file'], 1)}× on the same {num(hta['rows'], 0)}-event file, where start-up weighs most",
         "met (scaled)"],
        ["at least 10× faster than HTA's load + temporal breakdown on a real ~30 MB Kineto trace",
         f"{num(real['hta_over_summary'], 1)}× on our 29.7 MB H200 trace (HTA's time until it fails); "
         f"{num(second['hta_over_summary'], 1)}× in a second run",
         "**not met**: the streamed parse alone takes HTA's time / 10 (below)"],
        ["Kineto and rocpd at 10M within 2 GiB",
         f"Kineto {gib(first['kineto'][2]['summary']['max_rss_mib'])}, rocpd {gib(first['rocpd']['summary']['max_rss_mib'])}",
         "met"],
        ["cuts bounded too (`trace cut`, the campaign's capture cut), every format",
         f"at 10M, cut into six windows: rocprofv3 CSV {gib(cut[2]['cut']['max_rss_mib'])} (in-memory path at 3M: "
         f"{gib(cut[1]['in_memory']['max_rss_mib'])}), Kineto {gib(cut_kineto[1]['cut']['max_rss_mib'])} (in-memory at "
         f"1M: {gib(cut_kineto[0]['in_memory']['max_rss_mib'])}); every format's lean read with ids equals its full "
         "read (below)", "met"],
        ["Kineto summary no slower than bare `gzip` + `json.loads`",
         f"{num(real['ratio_summary_over_bare'], 2)}× on our 29.7 MB H200 trace, "
         f"{num(first['kineto'][1]['ratio_summary_over_bare'], 2)}× on the generated 1M-event file", "met"],
    ]
    return table(["goal (issue 14)", "measured", ""], "lrl", rows)


def trace_cut_csv() -> str:
    rows = []
    for i, at in enumerate(load("results-trace_summary-cut.json")["cut"]):
        before = (mib(at["in_memory"]) if i < 2
                  else "not run (about 5.8 GiB by the summary's in-memory path above)")  # an estimate, not measured
        rows.append([num(at["rows"], 0), f"{num(at['mib'], 0)} MiB", bold(mib(at["cut"]), i == 2), before])
    return table(["dispatches", "CSV", "`perflib trace cut --json`",
                  "in-memory path (`read_trace` + `cut_into_runs`, before)"], "rrrr", rows)


def trace_cut_kineto() -> str:
    rows = []
    for i, at in enumerate(load("results-trace_summary-cut-kineto.json")["cut"]):
        before = (mib(at["in_memory"]) if i == 0
                  else "not run (about 23 GiB at 2.3 GiB a million: more than the machine has)")
        rows.append([num(at["rows"], 0), f"{num(at['mib'], 0)} MiB gz", bold(mib(at["cut"]), i == 1), before])
    return table(["events", "file", "`perflib trace cut --json`", "in-memory path (before)"], "rrrr", rows)


TABLES: dict[str, Callable[[], str]] = {f.__name__: f for f in (
    first_run, demo_run, client_first, client_paired, client_epoll, client_h200, client_lockstep, client_ceiling,
    campaign_overhead, campaign_overhead_issue31, trace_csv, trace_what, trace_goals, trace_cut_csv, trace_cut_kineto)}
"""Each table the prose places with `<!-- table: NAME -->`, by name."""


def render(source: str) -> str:
    """The page: the prose with each table marker replaced by its table (an unknown or unused name is an error)."""
    used = MARKER.findall(source)
    unknown, unused = sorted(set(used) - set(TABLES)), sorted(set(TABLES) - set(used))
    if unknown or unused:
        raise ValueError(f"{SOURCE.relative_to(REPO)}: unknown table markers {unknown}, tables never placed {unused}")
    return HEADER + MARKER.sub(lambda m: TABLES[m.group(1)](), source)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed page differs from its sources")
    args = parser.parse_args(argv)
    text = render(SOURCE.read_text(encoding="utf-8"))
    if args.check:
        stale = not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != text
        if stale:
            print(f"{PAGE.relative_to(REPO)} is stale: run `make docs`", file=sys.stderr)
        return int(stale)
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
