"""Hostile run folders (issue 12): every bad value is an `InputError` naming the file, the line or
field, what was expected and what was found; names that would escape their folder are refused; a
FIFO or a device where a file is meant is refused without blocking."""

from __future__ import annotations

import json
import os

import pytest

from perflib import rundir
from perflib.errors import InputError, PerflibError


def _manifest(tmp_path, **fields) -> rundir.Path:
    run = tmp_path / "b1_c8_r1"
    run.mkdir()
    (run / rundir.MANIFEST).write_text(json.dumps({"schema": 1, "batch": 1, "context": 8, "repeat": 1,
                                                  "status": "complete", "errors": [], **fields}))
    return run


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("batch", "x", "a positive integer"),
    ("batch", None, "a positive integer"),
    ("repeat", 0, "a positive integer"),
    ("errors", "oops", "a list of strings"),
    ("errors", [1], "a list of strings"),
    ("status", ["complete"], "a string"),
    ("metrics", [], "a JSON object or null"),
    ("server", "llama", "a JSON object or null"),
    ("trace_path", 3, "a string or null"),
])
def test_manifest_field_of_the_wrong_type_names_the_field(tmp_path, field, value, expected):
    run = _manifest(tmp_path, **{field: value})
    with pytest.raises(InputError, match=rf"manifest.json:field {field}: expected {expected}, found"):
        rundir.read_manifest(run)
    assert not rundir.is_complete(run)  # a folder that cannot be read is never taken as complete


def test_manifest_metrics_dialect_and_process_start_are_checked(tmp_path):
    run = _manifest(tmp_path, metrics={"dialect": 7})
    with pytest.raises(InputError, match="field metrics.dialect: expected a string or null"):
        rundir.read_manifest(run)
    (run / rundir.MANIFEST).write_text('{"batch": 1, "metrics": {"process_start_before": NaN}}')
    with pytest.raises(InputError, match="field metrics.process_start_before: expected a finite number"):
        rundir.read_manifest(run)


def test_committed_manifests_still_read():
    from support import REPO

    paths = sorted((REPO / "data" / "raw").rglob(rundir.MANIFEST))
    paths += sorted((REPO / "tests" / "data").rglob(rundir.MANIFEST))
    assert len(paths) > 100
    for path in paths:
        rundir.read_manifest(path)


def _record(**fields) -> dict:
    rec = {"request_id": "r-0", "batch": 1, "context": 8, "repeat": 1, "prompt_tokens": 8,
           "prompt_tokens_method": "tokenize", "max_tokens": 4, "start_ns": 100, "first_token_ns": 200,
           "last_token_ns": 500, "end_ns": 600, "start_unix_ns": 1, "ttft_ms": 0.0001, "e2e_ms": 0.0004,
           "itl_ms": [0.0001] * 3, "chunk_ns": [200, 300, 400, 500], "completion_tokens": 4,
           "decode_tok_s": 1e7, "status": 200, "ok": True, "error": None,
           "timings": {"predicted_n": 4, "predicted_ms": 0.3}, "attempt": 1}
    rec.update(fields)
    return rec


def _requests(tmp_path, *records: dict, raw: str = ""):
    path = tmp_path / rundir.REQUESTS
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + raw)
    return path


@pytest.mark.parametrize(("fields", "where", "expected"), [
    ({"timings": [1, 2]}, "field timings", "a JSON object or null"),
    ({"timings": {"predicted_ms": "slow"}}, "field timings.predicted_ms", "a finite number"),
    ({"ttft_ms": "fast"}, "field ttft_ms", "a finite number"),
    ({"chunk_ns": "abc"}, "field chunk_ns", "a list of integers"),
    ({"chunk_ns": [300, 200]}, "field chunk_ns", "times in order"),
    ({"itl_ms": [1, None]}, "field itl_ms", "a list of finite numbers"),
    ({"completion_tokens": -3}, "field completion_tokens", "a non-negative integer"),
    ({"completion_tokens": True}, "field completion_tokens", "a non-negative integer"),
    ({"ok": "yes"}, "field ok", "true or false"),
    ({"start_ns": 2 ** 70}, "field start_ns", "an integer"),
    ({"first_token_ns": 50}, "field first_token_ns", "start_ns <= first_token_ns <= last_token_ns"),
    ({"start_ns": None}, "field start_ns", "an integer"),
])
def test_request_record_of_the_wrong_type_names_line_and_field(tmp_path, fields, where, expected):
    path = _requests(tmp_path, _record(), _record(**fields))
    with pytest.raises(InputError, match=rf"requests.jsonl:line 2, {where}: expected {expected}"):
        rundir.read_requests(path)


def test_nan_and_infinity_in_a_record_are_refused(tmp_path):
    path = _requests(tmp_path, raw='{"request_id": "x", "ok": false, "ttft_ms": NaN}\n')
    with pytest.raises(InputError, match="line 1, field ttft_ms: expected a finite number"):
        rundir.read_requests(path)
    path = _requests(tmp_path, raw='{"request_id": "x", "ok": false, "decode_tok_s": Infinity}\n')
    with pytest.raises(InputError, match="line 1, field decode_tok_s"):
        rundir.read_requests(path)


def test_good_records_read_and_failed_ones_need_no_times(tmp_path):
    failed = {"request_id": "r-1", "ok": False, "error": "HTTP 500", "start_ns": 5, "first_token_ns": None,
              "last_token_ns": None, "itl_ms": [], "chunk_ns": []}
    path = _requests(tmp_path, _record(), failed, raw='{"request_id": "r-2", "ok"')  # torn last line dropped
    assert [r["request_id"] for r in rundir.read_requests(path)] == ["r-0", "r-1"]


def test_gauge_samples_are_checked(tmp_path):
    path = tmp_path / rundir.GAUGES
    path.write_text('{"t_ns": 1, "gauges": {"requests_processing": 1.0}}\n{"t_ns": 2, "gauges": ["x"]}\n')
    with pytest.raises(InputError, match="gauges.jsonl:line 2, field gauges: expected a JSON object"):
        rundir.read_gauges(path)
    path.write_text('{"t_ns": 1, "gauges": {"requests_processing": "many"}}\n')
    with pytest.raises(InputError, match="line 1, field gauges.requests_processing: expected a number"):
        rundir.read_gauges(path)


def test_fifo_where_a_manifest_is_meant_is_refused_without_blocking(tmp_path):
    run = tmp_path / "b1_c8_r1"
    run.mkdir()
    os.mkfifo(run / rundir.MANIFEST)  # nobody ever writes to it: reading would block for good
    with pytest.raises(InputError, match="manifest.json: expected .*a regular file.*, found a FIFO"):
        rundir.read_manifest(run)
    os.mkfifo(run / rundir.REQUESTS)
    with pytest.raises(InputError, match="found a FIFO"):
        rundir.read_requests(run / rundir.REQUESTS)


@pytest.mark.parametrize("name", ["..", ".", "../..", "a/b", "/abs", "", ".hidden", "-flag", "a\nb", "x" * 200])
def test_names_that_would_escape_their_folder_are_refused(tmp_path, name):
    assert rundir.name_problem(name) is not None
    with pytest.raises(PerflibError, match="campaign name"):
        rundir.campaign_root(tmp_path, name)
    with pytest.raises(PerflibError, match="arm name"):
        rundir.backend_dir(tmp_path, "ok", name, "cpu")
    with pytest.raises(PerflibError, match="backend name"):
        rundir.backend_dir(tmp_path, "ok", "after", name)


@pytest.mark.parametrize("name", ["cpu-reference", "cuda-h200", "after-kvu", "b1.x", "kv_unified", "2026-12-01"])
def test_ordinary_names_pass(name):
    assert rundir.name_problem(name) is None
