"""Safe input: a file that is not a regular file or not UTF-8 is refused with a located error, without
blocking; a JSON Lines file torn by a crash keeps its whole lines; values are checked by kind."""

from __future__ import annotations

import pytest

from perflib import atomic, safeinput
from perflib.errors import InputError


def test_device_and_directory_where_a_file_is_meant_are_refused(tmp_path):
    with pytest.raises(InputError, match="found a character device"):
        safeinput.read_text("/dev/zero", "exposition text")
    with pytest.raises(InputError, match="found a directory"):
        safeinput.read_text(tmp_path, "exposition text")
    (tmp_path / "latin1.txt").write_bytes(b"ok\n\xe9t\xe9\n")
    with pytest.raises(InputError, match=r"latin1.txt:line 2: expected UTF-8 text"):
        safeinput.read_text(tmp_path / "latin1.txt", "exposition text")


def test_jsonl_append_and_torn_last_line(tmp_path):
    path = tmp_path / "requests.jsonl"
    atomic.append_jsonl(path, {"a": 1})
    atomic.append_jsonl(path, {"a": 2})
    with open(path, "a") as handle:
        handle.write('{"a": 3, "b"')  # a crash in the middle of a line
    assert safeinput.read_jsonl(path) == [{"a": 1}, {"a": 2}]
    path.write_text('{"a": 1}\nnot json\n{"a": 3}\n')
    with pytest.raises(InputError, match=r"requests.jsonl:2:1: expected one JSON object per line"):
        safeinput.read_jsonl(path)


@pytest.mark.parametrize(("value", "kind", "ok"), [
    (3, "count", True), (-1, "count", False), (True, "count", False), (2 ** 63, "int", False),
    (None, "number?", True), (None, "number", False), (float("nan"), "number", False), (1e16, "number", False),
    (["a"], "list[str]", True), ([1, "a"], "list[int]", False),
])
def test_value_kinds(value, kind, ok):
    assert (safeinput.value_problem(value, kind) is None) == ok


def test_check_fields_names_the_field_and_what_was_found(tmp_path):
    with pytest.raises(InputError, match=r"f.json:line 3, field batch: expected a positive integer, found a string 'x'"):
        safeinput.check_fields({"batch": "x", "other": []}, {"batch": "positive", "absent": "str"}, tmp_path / "f.json",
                               "line 3, field ")
