"""perflib.metrics against hostile input (issue 12): duplicate series are an error with the line, NaN
and Inf counters are reported as such and never become a number, label values are escaped when
shown, bad arguments and bad server answers are refused where they enter."""

from __future__ import annotations

import json
import os
import re

import pytest
from hostile import HostileServer
from support import DATA

from perflib import metrics
from perflib.cli import main
from perflib.errors import InputError, PerflibError

BEFORE = """# TYPE mlxcel_batch_decode_steps_total counter
mlxcel_batch_decode_steps_total 10
# TYPE mlxcel_batch_decode_tokens_total counter
mlxcel_batch_decode_tokens_total 40
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 1
"""
AFTER = BEFORE.replace(" 10\n", " 20\n").replace(" 40\n", " 80\n").replace(" 1\n", " 3\n")


def test_duplicate_series_is_an_error_with_its_line() -> None:
    doubled = AFTER.replace("mlxcel_batch_decode_steps_total 20\n",
                            "mlxcel_batch_decode_steps_total 20\nmlxcel_batch_decode_steps_total 20\n")
    with pytest.raises(InputError, match=r"after.txt:line 3: expected each series once.*"
                                         r"mlxcel_batch_decode_steps_total"):
        metrics.parse_exposition(doubled, "after.txt")
    # the same name with other labels is two series, not a duplicate
    labelled = 'x_total{path="a"} 1\nx_total{path="b"} 1\n'
    assert len(metrics.parse_exposition(labelled)) == 2


def test_duplicate_series_never_halves_the_occupancy() -> None:
    assert metrics.diff(BEFORE, AFTER).occupancy == pytest.approx(4.0)
    doubled = BEFORE.replace("mlxcel_batch_decode_steps_total 10\n",
                             "mlxcel_batch_decode_steps_total 10\nmlxcel_batch_decode_steps_total 10\n")
    with pytest.raises(InputError, match="line 3"):
        metrics.diff(doubled, AFTER)


@pytest.mark.parametrize("bad", ["+Inf", "NaN", "-Inf"])
def test_non_finite_counter_is_reported_and_its_figures_are_null_not_zero(bad: str) -> None:
    after = AFTER.replace("mlxcel_batch_decode_steps_total 20", f"mlxcel_batch_decode_steps_total {bad}")
    delta = metrics.diff(BEFORE, after)
    assert delta.decode_steps is None and delta.occupancy is None and delta.raw_step_ms is None
    assert any(bad.lstrip("+") in note and "mlxcel_batch_decode_steps_total" in note for note in delta.notes)
    assert delta.decode_tokens == 40 and delta.tokens_predicted_seconds == 2  # the other counters stand
    assert json.loads(json.dumps(delta.to_dict(), allow_nan=False))["decode_steps"] is None


def test_inf_in_both_snapshots_is_not_zero_and_not_a_reset() -> None:
    before = BEFORE.replace("_steps_total 10", "_steps_total +Inf")
    after = AFTER.replace("_steps_total 20", "_steps_total +Inf")
    delta = metrics.diff(before, after)
    assert not delta.reset and delta.occupancy is None and delta.decode_steps is None


def test_nan_created_stamp_is_not_a_reset() -> None:
    created = "# TYPE x counter\nx_total 1\nx_created NaN\n"
    delta = metrics.diff(BEFORE + created, AFTER + created.replace("x_total 1", "x_total 2"))
    assert not delta.reset


def test_label_values_are_escaped_when_shown() -> None:
    body = 'x_total{a="1\\",b=\\"2"} 1\nx_total{a="1",b="2"} 5\ny{a="line\\nbreak"} 1\n'
    samples = metrics.parse_exposition(body)
    keys = [s.key for s in samples]
    assert len(set(keys)) == 3  # unescaped, the first two would have been one key
    assert 'x_total{a="1\\",b=\\"2"}' in keys and 'y{a="line\\nbreak"}' in keys
    assert all("\n" not in k for k in keys)


@pytest.mark.parametrize("requests", [-100, -1, 2.5, True])
def test_negative_or_fractional_requests_are_refused(requests) -> None:
    with pytest.raises(PerflibError, match="requests: expected a non-negative integer"):
        metrics.diff(BEFORE, AFTER, requests=requests)


def test_non_finite_process_start_is_refused() -> None:
    with pytest.raises(PerflibError, match="process_start_before: expected a finite number"):
        metrics.diff(BEFORE, AFTER, process_start_before=float("nan"), process_start_after=1.0)


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    try:
        code = main(["metrics", "diff", *args])
    except SystemExit as exc:  # argparse refuses a bad option value with exit 2
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("option", "value", "expected"), [
    ("--requests", "-100", "a non-negative integer"),
    ("--process-start-before", "nan", "a finite number"),
    ("--process-start-after", "inf", "a finite number"),
])
def test_cli_refuses_bad_numbers(capsys, tmp_path, option, value, expected) -> None:
    (tmp_path / "b.txt").write_text(BEFORE)
    (tmp_path / "a.txt").write_text(AFTER)
    code, out, err = _cli(capsys, str(tmp_path / "b.txt"), str(tmp_path / "a.txt"), option, value)
    assert code == 2 and out == ""
    assert option in err and expected in err and "Traceback" not in err


def test_cli_refuses_a_fifo_a_directory_and_non_utf8_without_a_traceback(capsys, tmp_path) -> None:
    (tmp_path / "a.txt").write_text(AFTER)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "latin1.txt").write_bytes(b"# \xe9\n")
    for bad, found in ((tmp_path / "fifo", "a FIFO"), (tmp_path, "a directory"),
                       (tmp_path / "latin1.txt", "undecodable byte")):
        code, out, err = _cli(capsys, str(bad), str(tmp_path / "a.txt"))
        assert code == 2 and out == "" and found in err and str(bad) in err, err


def test_cli_duplicate_series_names_file_and_line(capsys, tmp_path) -> None:
    (tmp_path / "b.txt").write_text(BEFORE)
    (tmp_path / "a.txt").write_text(AFTER + "mlxcel_batch_decode_tokens_total 80\n")
    code, _, err = _cli(capsys, str(tmp_path / "b.txt"), str(tmp_path / "a.txt"))
    assert code == 2 and re.search(r"a\.txt:line 7: expected each series once", err), err


def test_scrape_of_a_garbage_body_is_an_error_naming_the_url_and_line() -> None:
    with HostileServer({"/metrics": (200, b"llamacpp:n_decode_total 3\nthis is { not metrics\n",
                                     {"content-type": "text/plain"})}) as url:
        with pytest.raises(InputError, match=rf"{url}/metrics:line 2: expected Prometheus exposition"):
            metrics.scrape(url)


@pytest.mark.parametrize("header", ["nan", "inf", "-inf", "soon"])
def test_scrape_ignores_a_non_finite_process_start_header(header: str) -> None:
    body = (DATA / "metrics" / "llamacpp_before.txt").read_bytes()
    with HostileServer({"/metrics": (200, body, {"Process-Start-Time-Unix": header})}) as url:
        assert metrics.scrape(url).process_start is None


def test_scrape_refuses_a_body_past_the_limit(monkeypatch) -> None:
    import sys

    scrape_module = sys.modules["perflib.metrics.scrape"]  # the package exports the function by that name

    monkeypatch.setattr(scrape_module, "MAX_BODY_BYTES", 1000)
    with HostileServer({"/metrics": (200, b"x_total 1\n" * 500)}) as url:
        with pytest.raises(PerflibError, match="at most 1000 bytes"):
            metrics.scrape(url)
