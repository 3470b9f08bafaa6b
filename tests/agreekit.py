"""The agreement tests' kit (tests/*/test_agreement*.py): a run's folders copied into another data folder and
edited there (a level's counter step shifted, a device or a contention record written into a manifest), and
an independent reading of two runs' `campaign report --json` answers to hold the page's Agreement against."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from perflib import rundir

STEP_COUNTER = "llamacpp:tokens_predicted_seconds_total"
"""The llama.cpp counter whose difference over a run is its decode time: decode_step_ms = 1000 x its delta
over the decode tokens (docs/reference/SERVERS.md §5), so scaling its delta scales the counter step."""


def copy_run(data: Path, into: Path, campaign: str) -> Path:
    """`data/raw/<campaign>/` copied into `into/raw/<campaign>/` (nothing derived)."""
    shutil.copytree(Path(data) / "raw" / campaign, Path(into) / "raw" / campaign)
    return Path(into)


def _counter(text: str) -> float:
    return float(re.search(rf"^{re.escape(STEP_COUNTER)} (\S+)$", text, re.M)[1])


def scale_counter_step(run_dir: Path, factor: float) -> None:
    """The run's counter step times `factor`: its decode-time counter's delta scaled in metrics_after.txt."""
    before = _counter((run_dir / "metrics_before.txt").read_text())
    after_file = run_dir / "metrics_after.txt"
    text = after_file.read_text()
    after = _counter(text)
    new = before + factor * (after - before)
    after_file.write_text(re.sub(rf"^{re.escape(STEP_COUNTER)} \S+$", f"{STEP_COUNTER} {new:.9f}", text, flags=re.M))


def edit_manifest(run_dir: Path, **fields: Any) -> None:
    """The run's manifest with `fields` set (a `device` or `contention` record)."""
    manifest = rundir.read_manifest(run_dir)
    manifest.update(fields)
    rundir.write_manifest(run_dir, manifest)


def cpu_device(host: str, cpus: str = "") -> dict[str, Any]:
    """A manifest `device` record of a CPU run (`perflib.devices.Device.as_dict`)."""
    return {"host": host, "vendor": None, "gpus": [], "pinned": None, "cpus": cpus}


def contended_record(foreign: float, psi: float, wait: float, steal: float, cpus: int = 2) -> dict[str, Any]:
    """A manifest `contention` record of a run other processes contended (`perflib.load.Contention.as_dict`)."""
    why = (f"contended: other processes used {100 * foreign:.0f}% of the {cpus} CPUs over 1.0 s (threshold 25%); "
           "heaviest others: burn (pid 4242) 1.2 CPU s")
    return {"available": True, "contended": True, "seconds": 1.0, "cpus": cpus, "foreign_cpu_share": foreign,
            "peak_foreign_cpu_share": foreign, "steal_share": steal, "load_max": 3.0,
            "top": [{"pid": 4242, "name": "burn", "cpu_s": 1.2}], "threshold": 0.25, "steal_threshold": 0.1,
            "wait_threshold": 0.5, "psi_threshold": 0.75,
            "signals": {"psi_source": "/proc/pressure/cpu", "psi_some_share": psi, "wait_per_cpu": wait,
                        "server_wait_s": 0.5, "server_cpu_s": 0.5, "client_wait_s": 0.1, "client_cpu_s": 0.1,
                        "server_wait_share": 0.5, "threads": 8, "note": ""},
            "why": why, "note": ""}


def verdict_outcomes(answer: dict[str, Any]) -> dict[tuple[Any, ...], str]:
    """(candidate, arm, baseline, backend, batch, context) -> outcome, from one run's `--json` answer."""
    return {(x["candidate"], x["arm"], x["baseline"], x["backend"], x["batch"], x["context"]): x["outcome"]
            for c in answer["candidates"] for x in c["levels"]}


def changes(answer: dict[str, Any]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """(baseline, arm, backend, batch, context, measure) -> its change row, from one run's `--json` answer."""
    return {(r["baseline"], r["arm"], r["backend"], r["batch"], r["context"], r["measure"]): r
            for r in answer["comparisons"]}


def within_both_ways(a: dict[str, Any], b: dict[str, Any]) -> bool | None:
    """The interval rule written out again, apart from perflib: each change inside the other's interval."""
    judged = []
    for x, y in ((a, b), (b, a)):
        if x["change_pct"] is None or y["change_pct"] is None:
            return None
        if y["ci_low_pct"] is not None:
            judged.append(y["ci_low_pct"] <= x["change_pct"] <= y["ci_high_pct"])
    return all(judged) if judged else None


def section(page: str, title: str) -> str:
    """One `## title` section of a page, up to the next."""
    return page.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def table_rows(text: str, first_header: str) -> list[list[str]]:
    """The cells of each row of the Markdown table whose header starts with `first_header`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows
