"""`summarize_run` on a hostile run folder (issue 12): a perflib error naming the file, the line or
field and the expectation, never a traceback and never a silent number; a good folder's row is
unchanged."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from support import DATA

from perflib import rundir, runs
from perflib.errors import InputError

SAMPLE = DATA / "campaign-sample" / "raw" / "sample" / "after" / "cpu" / "b2_c128_r1"


def _folder(tmp_path: Path, mutate: Callable[[Path], None]) -> Path:
    run = tmp_path / SAMPLE.name
    shutil.copytree(SAMPLE, run)
    mutate(run)
    return run


def _edit_records(run: Path, **fields) -> None:
    recs = [json.loads(line) for line in (run / rundir.REQUESTS).read_text().splitlines()]
    recs[-1].update(fields)
    (run / rundir.REQUESTS).write_text("".join(json.dumps(r) + "\n" for r in recs))


def _edit_manifest(run: Path, **fields) -> None:
    manifest = json.loads((run / rundir.MANIFEST).read_text())
    for key, value in fields.items():
        if "." in key:
            outer, inner = key.split(".")
            manifest[outer][inner] = value
        else:
            manifest[key] = value
    (run / rundir.MANIFEST).write_text(json.dumps(manifest))


CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "timings sent as a list": (lambda r: _edit_records(r, timings=[1, 2]),
                               r"requests.jsonl:line 2, field timings: expected a JSON object or null, found a list"),
    "ttft as text": (lambda r: _edit_records(r, ttft_ms="fast"), r"requests.jsonl:line 2, field ttft_ms"),
    "garbage /metrics body": (lambda r: (r / rundir.METRICS_AFTER).write_text("this is { not metrics\n"),
                              r"metrics_after.txt:line 1: expected Prometheus exposition text"),
    "unknown dialect kept in the manifest": (lambda r: _edit_manifest(r, **{"metrics.dialect": "bogus"}),
                                             r"manifest.json:field metrics.dialect: expected auto or one of"),
    "batch as text": (lambda r: _edit_manifest(r, batch="x"), r"manifest.json:field batch: expected a positive"),
    "gauges as a list": (lambda r: (r / rundir.GAUGES).write_text('{"t_ns": 1, "gauges": [1]}\n'),
                         r"gauges.jsonl:line 1, field gauges"),
    "metrics file not UTF-8": (lambda r: (r / rundir.METRICS_BEFORE).write_bytes(b"# \xff\n"),
                               r"metrics_before.txt:line 1: expected UTF-8 text"),
    "duplicate series": (lambda r: (r / rundir.METRICS_AFTER).write_text(
        (r / rundir.METRICS_AFTER).read_text() + "llamacpp:n_decode_total 1\n"),
        r"metrics_after.txt:line \d+: expected each series once"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_folder_is_an_input_error_naming_the_place(tmp_path, case):
    mutate, message = CASES[case]
    run = _folder(tmp_path, mutate)
    with pytest.raises(InputError, match=message):
        runs.summarize_run(run)


def test_good_folder_row_is_unchanged_by_the_checks(tmp_path):
    row = runs.summarize_run(SAMPLE)
    assert row["status"] == "complete" and row["ok"] == 2 and row["metrics_available"]
    assert row["decode_step_ms"] is not None and row["timings_step_ms"] is not None


def test_metrics_of_an_unknown_server_leave_the_counters_unavailable_with_why(tmp_path):
    def other_server(run: Path) -> None:
        for name in (rundir.METRICS_BEFORE, rundir.METRICS_AFTER):
            (run / name).write_text("# TYPE other_total counter\nother_total 3\n")
        _edit_manifest(run, **{"metrics.dialect": "auto"})

    run = _folder(tmp_path, other_server)
    row = runs.summarize_run(run)
    assert row["metrics_available"] is False and row["decode_step_ms"] is None
    assert row["ttft_ms"] == runs.summarize_run(SAMPLE)["ttft_ms"]  # the client figures are kept
    assert any("cannot tell the server" in e for e in row["errors"])
