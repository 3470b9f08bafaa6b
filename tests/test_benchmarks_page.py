"""docs/BENCHMARKS.md: written from the committed results JSON, and each printed figure that JSON's value.

`scripts/benchmarks_page.py` writes the page from docs/src/benchmarks.md and `benchmarks/results-*.json`;
a test here writes it again and compares it with the committed page (stale: run `make docs`).

Independently of that script, `CELLS` ties each table cell to the JSON value of each number it prints (in
order), and `UNTIED` names the rows of those tables that no committed JSON holds, with the reason. A table
is found by a unique piece of its header line, a row by a unique piece of its line (or the n-th row holding
it), a column by its header. A number printed with d decimals must lie within half a unit of its d-th
decimal of the JSON's value. Every row of a covered table must be tied or untied, so a new row cannot slip
in unchecked.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

import pytest
from support import REPO

PAGE = REPO / "docs" / "BENCHMARKS.md"
BENCHMARKS = REPO / "benchmarks"
NUMBER = re.compile(r"(?<![\w.])[−-]?\d[\d,]*(?:\.\d+)?")
"""A number as printed (1,274; 0.59; −1.7), not the digits inside a name (H200, b10621)."""

Figure = Callable[[dict], float] | None
"""A function of the JSON giving one printed number, or None for a number that is a label (the 10M of "at 10M")."""


@dataclass(frozen=True)
class Cell:
    table: str
    """A piece of the table's header line, found in one header only."""
    row: str | tuple[str, int]
    """A piece of the row's line found in one row only, or (piece, n): the n-th row (from 1) holding it."""
    column: str
    """The column's header, exactly."""
    source: str
    """The JSON file under benchmarks/."""
    figures: tuple[Figure, ...]
    """One function of the JSON per number the cell prints, in order."""


@cache
def load(name: str) -> dict:
    return json.loads((BENCHMARKS / name).read_text())


def one(rows: Sequence[dict], **match) -> dict:
    found = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    assert len(found) == 1, f"{len(found)} rows match {match}"
    return found[0]


def rounds(j: dict, client: str, key: str) -> list[float]:
    """A client's value of `key` per round, in round order."""
    rows = sorted((r for r in j["results"] if r["client"] == client), key=lambda r: r["round"])
    return [r[key] for r in rows]


def ratios(j: dict, client: str) -> list[float]:
    """The client's server step over the raw reader's, round by round."""
    return [a / b for a, b in zip(rounds(j, client, "server_step_ms_counters"),
                                  rounds(j, "raw", "server_step_ms_counters"), strict=True)]


def each(values: Callable[[dict], Sequence[float]], n: int) -> tuple[Figure, ...]:
    """n figures: the i-th of a list the JSON gives."""
    return tuple((lambda j, i=i: values(j)[i]) for i in range(n))


def cells_client_first() -> list[Cell]:
    table, src = "| N | perflib (its SSE reader, uvloop) |", "results-client_overhead-2026-11-29.json"

    def at(n: int, client: str, key: str) -> Figure:
        return lambda j: one(j["results"], concurrency=n, client=client)[key]

    out = []
    for n in (1, 4, 16, 64):
        row = f"| {n} |"
        out += [Cell(table, row, "perflib (its SSE reader, uvloop)", src, (at(n, "perflib", "cpu_us_per_token"),)),
                Cell(table, row, "perflib over httpx", src, (at(n, "perflib-httpx", "cpu_us_per_token"),)),
                Cell(table, row, "minimal raw-socket reader", src, (at(n, "raw", "cpu_us_per_token"),)),
                Cell(table, row, "server step under each client (ms)", src,
                     tuple(at(n, c, "server_step_ms_counters") for c in ("perflib", "perflib-httpx", "raw")))]
    return out


def cells_client_paired() -> list[Cell]:
    table, src = "| N = 64, 3 rounds |", "results-client_overhead.json"
    out = []
    for row, client in (("| perflib (uvloop", "perflib"), ("| floor (a timestamp", "floor")):
        paired = lambda j, c=client: one(j["paired"], client=c)  # noqa: E731
        out += [Cell(table, row, "CPU per token (median)", src, (lambda j, p=paired: p(j)["cpu_us_per_token_median"],)),
                Cell(table, row, "per round", src, each(lambda j, c=client: rounds(j, c, "cpu_us_per_token"), 3)),
                Cell(table, row, "server step (counters), per round", src,
                     each(lambda j, c=client: rounds(j, c, "server_step_ms_counters"), 3)),
                Cell(table, row, "step / step under raw, per round", src,
                     (*each(lambda j, p=paired: p(j)["step_ratios"], 3),
                      lambda j, p=paired: 100 * (p(j)["step_ratio_median"] - 1)))]
    row = "| minimal raw-socket reader"
    out += [Cell(table, row, "CPU per token (median)", src,
                 (lambda j: statistics.median(rounds(j, "raw", "cpu_us_per_token")),)),
            Cell(table, row, "per round", src, each(lambda j: rounds(j, "raw", "cpu_us_per_token"), 3)),
            Cell(table, row, "server step (counters), per round", src,
                 each(lambda j: rounds(j, "raw", "server_step_ms_counters"), 3)),
            Cell(table, row, "step / step under raw, per round", src, (lambda j: 1.0,))]
    return out


def cells_client_epoll() -> list[Cell]:
    table, src = "| N = 64, 2 rounds |", "results-client_overhead-epoll.json"
    out = []
    for row, client in (("| perflib (uvloop)", "perflib"), ("| floor (uvloop)", "floor"), ("| floor-epoll", "floor-epoll")):
        out.append(Cell(table, row, "CPU per token, per round", src,
                        each(lambda j, c=client: rounds(j, c, "cpu_us_per_token"), 2)))
        steps = 1 if client == "floor-epoll" else 2  # floor-epoll's second round: n/a (its requests cut at the end)
        out.append(Cell(table, row, "server step (counters), per round", src,
                        each(lambda j, c=client: rounds(j, c, "server_step_ms_counters"), steps)))
    return out


def cells_client_h200() -> list[Cell]:
    table = "| run | clients (loop) |"
    first, loops = "results-client_overhead-h200.json", "results-client_overhead-h200-loops.json"
    ratio_col, cpu_col = "server step / under the raw reader, per paired round", "CPU per token, median"
    out = [Cell(table, "| 256-token requests", ratio_col, first, each(lambda j: ratios(j, "perflib"), 3)),
           Cell(table, "| 256-token requests", cpu_col, first,
                (lambda j: statistics.median(rounds(j, "perflib", "cpu_us_per_token")),)),
           Cell(table, ("| | floor (uvloop) |", 1), ratio_col, first, each(lambda j: ratios(j, "floor"), 3)),
           Cell(table, ("| | floor (uvloop) |", 1), cpu_col, first,
                (lambda j: statistics.median(rounds(j, "floor", "cpu_us_per_token")),)),
           Cell(table, ("| | raw (stdlib asyncio) |", 1), cpu_col, first,
                (lambda j: statistics.median(rounds(j, "raw", "cpu_us_per_token")),))]
    for row, client in (("| 64-token requests", "perflib"), (("| | floor (uvloop) |", 2), "floor"),
                        ("| | floor-asyncio |", "floor-asyncio"), ("| | raw-uvloop |", "raw-uvloop")):
        out += [Cell(table, row, ratio_col, loops, each(lambda j, c=client: one(j["paired"], client=c)["step_ratios"], 3)),
                Cell(table, row, cpu_col, loops,
                     (lambda j, c=client: one(j["paired"], client=c)["cpu_us_per_token_median"],))]
    return out


def cells_client_lockstep() -> list[Cell]:
    table, src = "| lockstep, N = 64, 6 rounds |", "results-client_overhead-h200-lockstep.json"
    out = []
    for row, client in (("| perflib (uvloop)", "perflib"), ("| floor (uvloop)", "floor"), ("| raw (stdlib", "raw")):
        steps = lambda j, c=client: rounds(j, c, "server_step_ms_counters")  # noqa: E731
        out += [Cell(table, row, "server step per round (ms)", src, each(steps, 6)),
                Cell(table, row, "mean", src, (lambda j, s=steps: statistics.mean(s(j)),))]
        if client == "raw":
            out += [Cell(table, row, "step / under raw, per round", src, (lambda j: 1.0,)),
                    Cell(table, row, "CPU per token, median", src,
                         (lambda j: statistics.median(rounds(j, "raw", "cpu_us_per_token")),))]
        else:
            out += [Cell(table, row, "step / under raw, per round", src,
                         each(lambda j, c=client: one(j["paired"], client=c)["step_ratios"], 6)),
                    Cell(table, row, "CPU per token, median", src,
                         (lambda j, c=client: one(j["paired"], client=c)["cpu_us_per_token_median"],))]
    return out


def cells_client_ceiling() -> list[Cell]:
    table, src = "| workers | tokens/s | client CPU per token |", "results-client_ceiling-h200.json"
    out = []
    for workers, row in ((1, "| 1 (one process) |"), (2, "| 2 (`perflib.load.workers`) |"), (4, "| 4 |"), (8, "| 8 |")):
        at = lambda j, w=workers: one(j["ceiling"], workers=w)  # noqa: E731
        out += [Cell(table, row, "tokens/s", src, (lambda j, a=at: a(j)["tokens_per_s"],)),
                Cell(table, row, "client CPU per token", src, (lambda j, a=at: a(j)["cpu_us_per_token"],))]
    return out


def overhead_run(at: str | None) -> Callable[[dict], dict]:
    """The campaign_overhead JSON's run: its top level, or the one under `at` (`papermill`)."""
    return lambda j: j[at] if at else j


def cells_campaign_overhead() -> list[Cell]:
    table = "| | wall | levels | overhead | before the first level |"
    out = []
    for row, src, at in (("| demo, one kernel per group (2026-12-01) |", "results-campaign_overhead.json", None),
                         ("| demo with `decode_tokens: 512` (levels 8×", "results-campaign_overhead-decode512.json", None),
                         ("| demo, in the runner's process (issue 23", "results-campaign_overhead-in-process.json", None),
                         ("| the same run's `--papermill`", "results-campaign_overhead-in-process.json", "papermill"),
                         ("| demo with `decode_tokens: 512`, in the runner's process",
                          "results-campaign_overhead-in-process-decode512.json", None),
                         ("| the whole demo (two arms, the page) before", "results-campaign_overhead-issue31.json",
                          "baseline"),
                         ("| the whole demo after issue 31", "results-campaign_overhead-issue31.json", None)):
        run = overhead_run(at)
        out += [Cell(table, row, "wall", src, (lambda j, r=run: r(j)["wall_s"],)),
                Cell(table, row, "levels", src, (lambda j, r=run: r(j)["levels_s"],
                                                 lambda j, r=run: 100 * r(j)["levels_s"] / r(j)["wall_s"])),
                Cell(table, row, "overhead", src, (lambda j, r=run: 100 * r(j)["overhead_share"],)),
                Cell(table, row, "before the first level", src, (lambda j, r=run: r(j)["before_first_level_s"],)),
                Cell(table, row, "between levels (median a run)", src,
                     (lambda j, r=run: r(j)["between_levels_s"], lambda j, r=run: r(j)["between_levels_median_s"])),
                Cell(table, row, "after the last", src, (lambda j, r=run: r(j)["after_last_level_s"],))]
    row, src = "| the previous change", "results-campaign_overhead-previous.json"
    out += [Cell(table, row, "wall", src, (lambda j: j["wall_s"],)),
            Cell(table, row, "levels", src, (lambda j: 100 * j["levels_s"] / j["wall_s"],)),
            Cell(table, row, "overhead", src, (lambda j: 100 * j["overhead_share"],))]
    return out


def cells_campaign_overhead_issue31() -> list[Cell]:
    table, src = "| demo, 36 runs, page included |", "results-campaign_overhead-issue31.json"
    out = []
    for row, at in (("| before issue 31", "baseline"), ("| after issue 31", None)):
        run = overhead_run(at)
        out += [Cell(table, row, "wall", src, (lambda j, r=run: r(j)["wall_s"],)),
                Cell(table, row, "levels", src, (lambda j, r=run: r(j)["levels_s"],)),
                Cell(table, row, "overhead (median round)", src, (lambda j, r=run: 100 * r(j)["overhead_share"],
                                                                  lambda j, r=run: r(j)["overhead_s"])),
                Cell(table, row, "each round", src, tuple(
                    (lambda j, r=run, i=i: 100 * r(j)["overhead_shares"][i]) for i in range(3))),
                Cell(table, row, "before the first level", src, (lambda j, r=run: r(j)["before_first_level_s"],)),
                Cell(table, row, "between runs of a server (median)", src,
                     (lambda j, r=run: r(j)["between_runs_s"], lambda j, r=run: r(j)["between_levels_median_s"])),
                Cell(table, row, "between the two servers", src, (lambda j, r=run: r(j)["between_groups_s"],)),
                Cell(table, row, "servers' starts", src, (lambda j, r=run: r(j)["server_starts_s"],)),
                Cell(table, row, "servers' stops", src, (lambda j, r=run: r(j)["server_stops_s"],)),
                Cell(table, row, "cut and attribution", src, (lambda j, r=run: r(j)["attribution_s"],)),
                Cell(table, row, "page", src, (lambda j, r=run: r(j)["page_s"],))]
    return out


def cells_trace_csv() -> list[Cell]:
    table, src = "| dispatches | CSV | `perflib trace summary --json` | bare", "results-trace_summary-csv.json"
    out = []
    for i, row in enumerate(("| 1,000,000 |", "| 3,000,000 |", "| 10,000,000 |")):
        at = lambda j, i=i: j["csv"][i]  # noqa: E731
        out += [Cell(table, row, "dispatches", src, (lambda j, a=at: a(j)["rows"],)),
                Cell(table, row, "CSV", src, (lambda j, a=at: a(j)["mib"],))]
        for column, key in (("`perflib trace summary --json`", "summary"), ("bare `pyarrow.csv.read_csv`", "bare_read"),
                            ("in-memory path (the summary before)", "in_memory")):
            out.append(Cell(table, row, column, src, (lambda j, a=at, k=key: a(j)[k]["wall_s"],
                                                      lambda j, a=at, k=key: a(j)[k]["max_rss_mib"])))
        out.append(Cell(table, row, "summary / bare", src, (lambda j, a=at: a(j)["ratio_summary_over_bare"],)))
    return out


def cells_trace_goals() -> list[Cell]:
    """The CSV rows of the trace summary's goal table, from the CSV run."""
    table, src = "| goal (issue 14) | measured |", "results-trace_summary-csv.json"
    csv = lambda j, i: j["csv"][i]  # noqa: E731
    return [
        Cell(table, "| rocprofv3 CSV at 10M: peak RSS", "measured", src,
             (lambda j: csv(j, 2)["summary"]["max_rss_mib"] / 1024, lambda j: csv(j, 2)["in_memory"]["max_rss_mib"] / 1024)),
        Cell(table, "| time no more than before", "measured", src,
             (None, lambda j: csv(j, 2)["summary"]["wall_s"], lambda j: csv(j, 2)["in_memory"]["wall_s"],
              *(lambda j, i=i: csv(j, i)["summary"]["wall_s"] / csv(j, i)["rows"] * 1e6 for i in range(3)),
              None, None, None)),
        Cell(table, "| summary at most 1.5× the bare CSV read", "measured", src,
             tuple(x for i in range(3) for x in (lambda j, i=i: csv(j, i)["ratio_summary_over_bare"], None))),
    ]


def cells_trace_goals_other() -> list[Cell]:
    """The other rows of that goal table, from the first trace_summary run and its companions."""
    table, src = "| goal (issue 14) | measured |", "results-trace_summary.json"
    hta = lambda j: j["hta"]  # noqa: E731
    real = lambda j: j["kineto"][0]  # noqa: E731  (our H200 trace, 29.7 MB of JSON)
    cut, cut_kineto = (lambda: load("results-trace_summary-cut.json")["cut"],
                       lambda: load("results-trace_summary-cut-kineto.json")["cut"])
    return [
        Cell(table, "| at least 30× faster than HTA", "measured", src,
             (*(x for n in ("1000000", "3000000", "10000000")
                for x in (lambda j, n=n: hta(j)["speedup_vs_scaled_hta_on_csv"][n], None)),
              lambda j: hta(j)["rows"], lambda j: hta(j)["speedup_same_file"], lambda j: hta(j)["rows"])),
        Cell(table, "| at least 10× faster than HTA's load", "measured", src,
             (lambda j: real(j)["hta_over_summary"], None,
              lambda j: load("results-trace_summary-kineto-real.json")["kineto"][0]["hta_over_summary"])),
        Cell(table, "| Kineto and rocpd at 10M within 2 GiB", "measured", src,
             (lambda j: j["kineto"][2]["summary"]["max_rss_mib"] / 1024,
              lambda j: j["rocpd"]["summary"]["max_rss_mib"] / 1024)),
        Cell(table, "| cuts bounded too", "measured", src,
             (None, lambda j: cut()[2]["cut"]["max_rss_mib"] / 1024, None,
              lambda j: cut()[1]["in_memory"]["max_rss_mib"] / 1024,
              lambda j: cut_kineto()[1]["cut"]["max_rss_mib"] / 1024, None,
              lambda j: cut_kineto()[0]["in_memory"]["max_rss_mib"] / 1024)),
        Cell(table, "| Kineto summary no slower than bare", "measured", src,
             (lambda j: real(j)["ratio_summary_over_bare"], None, lambda j: j["kineto"][1]["ratio_summary_over_bare"],
              None)),
    ]


def cells_trace_what() -> list[Cell]:
    table, src = "| what | wall s | peak RSS |", "results-trace_summary.json"

    def measured(what: str, within: str) -> Callable[[dict], dict]:
        return lambda j: one([m for m in j["measurements"] if within in m["input"]], what=what)

    rows = [("| HTA 0.5.0 temporal breakdown, the first 100,000", measured("HTA temporal breakdown", "100,000")),
            ("| `perflib trace summary --json`, the same Kineto file", measured("perflib trace summary --json", "100,000")),
            ("| `perflib trace summary --json`, our H200 Kineto trace",
             measured("perflib trace summary --json", "llama1b_decode")),
            (("| bare `gzip` + `json.loads` of the same", 1), measured("gzip + json.loads (bare)", "llama1b_decode")),
            ("| HTA 0.5.0 load + temporal breakdown of the same trace",
             measured("HTA load + temporal breakdown (failed: see notes)", "llama1b_decode")),
            ("| `perflib trace summary --json`, generated Kineto JSON, 1,000,000",
             measured("perflib trace summary --json", "kineto1000000.")),
            (("| bare `gzip` + `json.loads` of the same", 2), measured("gzip + json.loads (bare)", "kineto1000000.")),
            ("| `perflib trace summary --json`, generated Kineto JSON, 10,000,000",
             measured("perflib trace summary --json", "kineto10000000.")),
            ("| `perflib trace summary --json`, rocpd SQLite", measured("perflib trace summary --json", "rocpd")),
            ("| `perflib trace summary --json`, CUPTI activity text", measured("perflib trace summary --json", "CUPTI")),
            ("| in-memory path of the same file (the line-by-line",
             measured("in-memory path (read_cupti_text_by_line + summarize)", "CUPTI")),
            ("| bare gunzip of the same file", measured("zlib gunzip (bare)", "CUPTI"))]
    out = []
    for row, m in rows:
        out += [Cell(table, row, "wall s", src, (lambda j, m=m: m(j)["wall_s"],)),
                Cell(table, row, "peak RSS", src, (lambda j, m=m: m(j)["max_rss_mib"],))]
    return out


def cells_trace_cut() -> list[Cell]:
    out = []
    table, src = "| `perflib trace cut --json` | in-memory path (`read_trace`", "results-trace_summary-cut.json"
    for i, row in enumerate(("| 1,000,000 |", "| 3,000,000 |", "| 10,000,000 |")):
        at = lambda j, i=i: j["cut"][i]  # noqa: E731
        out += [Cell(table, row, "dispatches", src, (lambda j, a=at: a(j)["rows"],)),
                Cell(table, row, "CSV", src, (lambda j, a=at: a(j)["mib"],)),
                Cell(table, row, "`perflib trace cut --json`", src,
                     (lambda j, a=at: a(j)["cut"]["wall_s"], lambda j, a=at: a(j)["cut"]["max_rss_mib"]))]
        if i < 2:
            out.append(Cell(table, row, "in-memory path (`read_trace` + `cut_into_runs`, before)", src,
                            (lambda j, a=at: a(j)["in_memory"]["wall_s"], lambda j, a=at: a(j)["in_memory"]["max_rss_mib"])))
    table, src = "| events | file | `perflib trace cut --json` |", "results-trace_summary-cut-kineto.json"
    for i, row in enumerate(("| 1,000,000 |", "| 10,000,000 |")):
        at = lambda j, i=i: j["cut"][i]  # noqa: E731
        out += [Cell(table, row, "events", src, (lambda j, a=at: a(j)["rows"],)),
                Cell(table, row, "file", src, (lambda j, a=at: a(j)["mib"],)),
                Cell(table, row, "`perflib trace cut --json`", src,
                     (lambda j, a=at: a(j)["cut"]["wall_s"], lambda j, a=at: a(j)["cut"]["max_rss_mib"]))]
        if i == 0:
            out.append(Cell(table, row, "in-memory path (before)", src,
                            (lambda j, a=at: a(j)["in_memory"]["wall_s"], lambda j, a=at: a(j)["in_memory"]["max_rss_mib"])))
    return out


FIRST_RUN = (("| `make install`", "install", 1), ("| `perflib server build`", "build", 60), ("| `perflib server model`", "model", 1))
"""Rows of the first-run table: (row, step, seconds per printed unit)."""


def cells_first_run() -> list[Cell]:
    table, src = "| first run on the 2-core machine |", "results-first_run.json"
    out = []
    for load in ("quiet", "loaded"):
        run = lambda j, ld=load: one(j["runs"], load=ld)  # noqa: E731
        for row, step, unit in FIRST_RUN:
            out.append(Cell(table, row, load, src, (lambda j, r=run, s=step, u=unit: r(j)["steps"][s]["wall_s"] / u,)))
        out.append(Cell(table, "| load average", load, src, (lambda j, r=run: r(j)["loadavg_1min_at_start"],)))
    return out


def cells_demo_run() -> list[Cell]:
    table, src = "| `make demo` after the first run |", "results-demo_run.json"

    def summary(ld: str, pattern: str) -> Figure:
        def figure(j: dict) -> float:
            said = one(j["runs"], load=ld)["steps"]["demo"]["summary"]
            if "contention:" not in said and "runs measured" not in pattern:
                return 0.0  # the runner prints no contention line where it waited for nothing and kept none
            return float(re.search(pattern, said)[1])
        return figure

    out = []
    for ld in ("quiet", "loaded"):
        run = lambda j, ld=ld: one(j["runs"], load=ld)  # noqa: E731
        out += [Cell(table, "| `make install`", ld, src, (lambda j, r=run: r(j)["steps"]["install"]["wall_s"],)),
                Cell(table, "| `make demo` |", ld, src, (lambda j, r=run: r(j)["steps"]["demo"]["wall_s"],)),
                Cell(table, "| the runner's last line", ld, src,
                     (summary(ld, r"waited (\d+) s in all"), summary(ld, r"(\d+) runs kept marked contended"),
                      summary(ld, r"(\d+) runs measured"))),
                Cell(table, "| load average", ld, src, (lambda j, r=run: r(j)["loadavg_1min_at_start"],))]
    return out


CELLS: list[Cell] = [*cells_demo_run(), *cells_client_first(), *cells_client_paired(), *cells_client_epoll(), *cells_client_h200(),
                     *cells_client_lockstep(), *cells_client_ceiling(), *cells_campaign_overhead(),
                     *cells_campaign_overhead_issue31(), *cells_trace_csv(),
                     *cells_trace_goals(), *cells_trace_goals_other(),
                     *cells_trace_what(), *cells_trace_cut(), *cells_first_run()]

UNTIED: dict[tuple[str, str], str] = {
    ("| | wall | levels | overhead | before the first level |", "| issue 14's demo measurement"):
        "issue 14's own measurement, quoted from the issue; no JSON was kept",
    ("| dispatches | CSV | `perflib trace cut --json` | in-memory path (`read_trace`", "| 10,000,000 |"):
        "its in-memory cell is an estimate in words, not a measurement",
}
"""(table, row) -> why the row has figures (or cells) no JSON holds; rows listed here may be partly tied."""


# --- the page's tables ---------------------------------------------------------------------------------

def split_row(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def tables(text: str) -> dict[str, list[str]]:
    """Each Markdown table's header line -> its row lines (the separator left out)."""
    found: dict[str, list[str]] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"^\|[\s:|-]+\|$", lines[i + 1]):
            header, rows = lines[i], []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(lines[i])
                i += 1
            found[header] = rows
        else:
            i += 1
    return found


def find_table(all_tables: dict[str, list[str]], piece: str) -> tuple[str, list[str]]:
    headers = [h for h in all_tables if piece in h]
    assert len(headers) == 1, f"{len(headers)} BENCHMARKS.md table headers hold {piece!r}"
    return headers[0], all_tables[headers[0]]


def find_row(rows: list[str], key: str | tuple[str, int]) -> str:
    piece, nth = (key, None) if isinstance(key, str) else key
    holding = [r for r in rows if piece in r]
    if nth is None:
        assert len(holding) == 1, f"{len(holding)} rows hold {piece!r}"
        return holding[0]
    assert len(holding) >= nth, f"fewer than {nth} rows hold {piece!r}"
    return holding[nth - 1]


def numbers(cell: str) -> list[str]:
    """The numbers a cell prints, as printed (bold and code spans left out; − read as a minus)."""
    text = re.sub(r"`[^`]*`", "", cell).replace("**", "")
    return [n.replace(",", "").replace("−", "-") for n in NUMBER.findall(text)]


def as_printed(value: float, printed: str) -> bool:
    """Whether `printed` is `value` rounded to the decimals it shows (within half a unit of the last one)."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return abs(value - float(printed)) <= 0.5 * 10 ** -decimals + 1e-9


def check(cell: Cell, text: str) -> list[str]:
    """What differs between the page's cell and its JSON (empty: every figure as the JSON says)."""
    header, rows = find_table(tables(text), cell.table)
    columns = split_row(header)
    assert cell.column in columns, f"no column {cell.column!r} in {header}"
    line = find_row(rows, cell.row)
    printed = numbers(split_row(line)[columns.index(cell.column)])
    if len(printed) != len(cell.figures):
        return [f"{cell.row} / {cell.column}: prints {len(printed)} numbers {printed}, {len(cell.figures)} tied"]
    data = load(cell.source)
    return [f"{cell.row} / {cell.column}: page prints {p}, {cell.source} gives {f(data)!r}"
            for p, f in zip(printed, cell.figures, strict=True) if f is not None and not as_printed(float(f(data)), p)]


def _id(cell: Cell) -> str:
    row = cell.row if isinstance(cell.row, str) else f"{cell.row[0]}#{cell.row[1]}"
    return f"{cell.table.strip('| ')[:24]}/{row.strip('| ')[:28]}/{cell.column[:24]}"


@pytest.mark.parametrize("cell", CELLS, ids=[_id(c) for c in CELLS])
def test_each_figure_is_its_json_value_as_printed(cell):
    assert check(cell, PAGE.read_text(encoding="utf-8")) == []


def test_every_row_of_a_covered_table_is_tied_or_said_why_not():
    text = PAGE.read_text(encoding="utf-8")
    all_tables = tables(text)
    for piece in sorted({c.table for c in CELLS}):
        header, rows = find_table(all_tables, piece)
        tied = {find_row(rows, c.row) for c in CELLS if c.table == piece}
        untied = {find_row(rows, row) for (table, row) in UNTIED if table == piece}
        missing = [r for r in rows if r not in tied | untied]
        assert not missing, f"rows of {header!r} tied to no JSON: {missing}"


def test_every_json_named_is_committed():
    for name in sorted({c.source for c in CELLS}):
        assert (BENCHMARKS / name).is_file(), name
        assert name.startswith("results-") and name.endswith(".json")


def test_a_changed_figure_is_caught():
    """The check can fail: one printed figure moved by one unit of its last decimal is reported."""
    text = PAGE.read_text(encoding="utf-8")
    cell = next(c for c in CELLS if c.source == "results-client_overhead.json" and c.column == "per round")
    header, rows = find_table(tables(text), cell.table)
    line = find_row(rows, cell.row)
    target = split_row(line)[split_row(header).index(cell.column)]
    first = NUMBER.search(target).group()
    decimals = len(first.split(".")[1]) if "." in first else 0
    moved = f"{float(first) + 10 ** -decimals:.{decimals}f}"
    changed = line.replace(target, target.replace(first, moved, 1), 1)
    assert check(cell, text) == []
    assert check(cell, text.replace(line, changed, 1)) != []


@pytest.mark.parametrize(("value", "printed", "ok"), [(1.2637, "1.26", True), (1.2651, "1.26", False),
                                                      (401.95, "402", True), (0.5892, "0.59", True),
                                                      (-1.68, "-1.7", True), (53.96, "54.0", True),
                                                      (53.96, "54.1", False)])
def test_as_printed(value, printed, ok):
    assert as_printed(value, printed) is ok


# --- the page as the script writes it --------------------------------------------------------------------

def _script():
    spec = importlib.util.spec_from_file_location("benchmarks_page", REPO / "scripts" / "benchmarks_page.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_page_is_what_the_script_writes():
    """Stale when the prose, a results JSON or the script changed without `make docs`."""
    page = _script()
    assert page.render(page.SOURCE.read_text(encoding="utf-8")) == PAGE.read_text(encoding="utf-8"), \
        "docs/BENCHMARKS.md is stale: run `make docs` (python scripts/benchmarks_page.py)"
    assert page.main(["--check"]) == 0


def test_a_changed_result_changes_the_page(monkeypatch):
    """The comparison can fail: one JSON figure moved gives a different page, in that figure's cell only."""
    page = _script()
    moved = copy.deepcopy(load("results-first_run.json"))
    quiet = one(moved["runs"], load="quiet")["steps"]["install"]
    quiet["wall_s"] += 10
    real = page.load
    monkeypatch.setattr(page, "load", lambda name: moved if name == "results-first_run.json" else real(name))
    text = page.render(page.SOURCE.read_text(encoding="utf-8"))
    changed = [(a, b) for a, b in zip(PAGE.read_text(encoding="utf-8").splitlines(), text.splitlines(), strict=True)
               if a != b]
    assert len(changed) == 1 and changed[0][0].startswith("| `make install`"), changed
    assert f"| {quiet['wall_s']:.0f} s |" in changed[0][1]


def test_every_table_is_placed_once_and_no_marker_is_unknown():
    page = _script()
    source = page.SOURCE.read_text(encoding="utf-8")
    assert sorted(page.MARKER.findall(source)) == sorted(page.TABLES)
    with pytest.raises(ValueError, match="unknown table markers \\['nosuch'\\]"):
        page.render(source + "\n<!-- table: nosuch -->\n")
    first = page.MARKER.search(source).group(0)
    with pytest.raises(ValueError, match="tables never placed"):
        page.render(source.replace(first, "", 1))
