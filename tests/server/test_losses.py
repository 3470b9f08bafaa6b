"""What a profiled server start lost: loss lines found in bounded scans, the capture's record counts
(absent is "not reported", never 0), the exit judged, and all of it said in one line."""

from __future__ import annotations

import json

import pytest

from perflib.server import losses

OOM = ("Error: /usr/local/cuda/extras/CUPTI/samples/cupti_trace_injection/cupti_trace_injection.cpp:90: "
       "Function cuptiGetLastError() failed with error(8): CUPTI_ERROR_OUT_OF_MEMORY.")


def test_cupti_lines_are_found_counted_and_their_dropped_records_summed(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("srv  load_model: ok\n" + OOM + "\nDropped 12 activity records\nslot release\n"
                   "Dropped 30 activity records\n" + OOM + "\n")
    found = {x["what"]: x for x in losses.scan(log, "cupti")}
    assert found["CUPTI error"]["match"] == "CUPTI_ERROR_OUT_OF_MEMORY" and found["CUPTI error"]["count"] == 2
    assert found["CUPTI error"]["line"] == OOM and found["CUPTI error"]["records"] is None
    assert (found["CUPTI dropped records"]["count"], found["CUPTI dropped records"]["records"]) == (2, 42)
    assert all(x["file"] == "server.log" and "partial" not in x for x in found.values())
    assert losses.scan(log, "none") == [] and losses.scan(tmp_path / "missing.log", "cupti") == []


def test_a_start_scans_only_its_own_part_of_an_appended_log(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(OOM + "\n")  # an earlier start's loss
    offset = log.stat().st_size
    with open(log, "a") as handle:
        handle.write("srv  all fine\n")
    assert losses.scan(log, "cupti", offset) == [] and len(losses.scan(log, "cupti")) == 1


def test_a_large_file_is_read_at_its_head_and_tail_only(tmp_path):
    capture = tmp_path / "cupti.txt"
    filler = "KERNEL [ 1, 2 ] gemm\n" * 2000  # ~42 kB
    capture.write_text(OOM + "\n" + filler + "Dropped 5 activity records\n" + filler + OOM + "\n")
    found = {x["what"]: x for x in losses.scan(capture, "cupti", limit=1000)}
    assert found["CUPTI error"]["count"] == 2 and found["CUPTI error"]["partial"] is True
    assert "CUPTI dropped records" not in found  # in the middle: not read, and the entry says the file was read in part


@pytest.mark.parametrize(("kind", "line", "what"), [
    ("rocprofv3", "W20261201 rocprofiler buffer is full, 1024 records were dropped", "rocprofv3 lost or dropped records"),
    ("rocprofv3", "rocprofv3: lost 77 records", "rocprofv3 lost records"),
    ("nsys", "Warning: 3 events were lost during collection", "nsys lost events"),
    ("torch", "libkineto: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES", "CUPTI error"),
])
def test_each_profilers_loss_lines(tmp_path, kind, line, what):
    log = tmp_path / "server.log"
    log.write_text(f"ok\n{line}\nok\n")
    assert what in {x["what"] for x in losses.scan(log, kind)}


def test_record_counts_not_written_are_not_reported_never_zero(tmp_path):
    assert losses.read_stats(tmp_path) is None and losses.read_stats(None) is None
    (tmp_path / losses.STATS_FILE).write_text("{not json")
    assert losses.read_stats(tmp_path) is None
    (tmp_path / losses.STATS_FILE).write_text(json.dumps({"dropped_records": 0, "records": 12345}))
    assert losses.read_stats(tmp_path) == {"dropped_records": 0, "records": 12345, "file": losses.STATS_FILE}
    (tmp_path / losses.STATS_FILE).write_text(json.dumps({"dropped_records": -1, "records": "many"}))
    assert losses.read_stats(tmp_path) == {"dropped_records": None, "records": None, "file": losses.STATS_FILE}


@pytest.mark.parametrize(("start", "said"), [
    ({"ended": "stopped at the end of the arm", "exit_code": 0}, None),
    ({"ended": "stopped at the end of the arm", "exit_code": -15}, None),
    ({"ended": "stopped at the end of the arm", "exit_code": 1},
     "server exited with code 1 when stopped at the end of the arm"),
    ({"ended": "stopped at the end of the arm", "exit_code": -9}, "SIGKILL"),
    ({"ended": "died", "exit_code": -6}, "server died while serving (exit code -6)"),
    ({}, None),
])
def test_the_exit_of_a_profiled_start(start, said):
    text = losses.exit_loss(start)
    assert text is None if said is None else said in text


def test_a_start_said_in_one_line_and_its_dropped_count():
    start = {"ended": "stopped at the end of the arm", "exit_code": 1,
             "losses": [{"what": "CUPTI error", "match": "CUPTI_ERROR_OUT_OF_MEMORY", "line": OOM, "file": "server.log",
                         "count": 2, "records": None}],
             "profiler_stats": {"dropped_records": 1500, "records": 998500, "file": "cupti-stats.json"}}
    assert losses.describe(start) == ("server exited with code 1 when stopped at the end of the arm; "
                                      "CUPTI_ERROR_OUT_OF_MEMORY ×2 in server.log; "
                                      "1,500 of 1,000,000 records dropped (cupti-stats.json)")
    assert losses.dropped(start) == 1500
    assert losses.dropped({"losses": start["losses"]}) is None  # no count given: not reported
    clean = {"ended": "stopped at the end of the arm", "exit_code": 0, "losses": [],
             "profiler_stats": {"dropped_records": 0, "records": 10, "file": "cupti-stats.json"}}
    assert losses.describe(clean) == "" and losses.dropped(clean) == 0


def test_the_library_s_own_errors_and_an_unfinished_capture_are_losses(tmp_path):
    (tmp_path / losses.STATS_FILE).write_text(json.dumps({
        "dropped_records": 0, "records": 10, "errors": ["cuptiActivityFlushAll: CUPTI_ERROR_UNKNOWN (2 times)"],
        "complete": False, "write_failures": 3}))
    stats = losses.read_stats(tmp_path)
    said = losses.describe({"ended": "stopped at the end of the arm", "exit_code": 0, "profiler_stats": stats})
    assert "CUPTI errors while tracing: cuptiActivityFlushAll: CUPTI_ERROR_UNKNOWN (2 times)" in said
    assert "never finished" in said and "3 failed writes" in said
    (tmp_path / losses.STATS_FILE).write_text(json.dumps({"dropped_records": 0, "records": 10, "errors": [],
                                                          "complete": True, "write_failures": 0}))
    clean = {"ended": "stopped at the end of the arm", "exit_code": 0, "profiler_stats": losses.read_stats(tmp_path)}
    assert losses.describe(clean) == ""
