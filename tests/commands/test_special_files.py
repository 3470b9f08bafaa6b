"""A FIFO or a device given where a file is expected is refused with one line, never read (a FIFO
would block the command forever, /dev/zero never end): `trace summary`, `trace cut`, `--classes`,
`metrics diff` (issue 12; campaign files: tests/config/test_hostile_campaign.py)."""

from __future__ import annotations

import os
import threading

import pytest

from perflib.cli import main as cli_main


def _run_with_deadline(argv: list[str], seconds: float = 10.0) -> int:
    """`perflib argv` in a thread: a command that blocks on a FIFO fails the test instead of hanging it."""
    result: list[int] = []
    worker = threading.Thread(target=lambda: result.append(cli_main(argv)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert result, f"perflib {' '.join(argv)} still running after {seconds} s (blocked on a FIFO?)"
    return result[0]


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "trace.json"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("argv", [
    ["trace", "summary", "{fifo}"],
    ["trace", "summary", "/dev/zero"],
    ["trace", "cut", "{fifo}", "{tmp}"],
    ["trace", "summary", "{trace}", "--classes", "{fifo}"],
    ["metrics", "diff", "{fifo}", "{fifo}"],
    ["metrics", "diff", "/dev/zero", "/dev/zero"],
])
def test_a_fifo_or_device_is_refused_not_read(argv, fifo, tmp_path, capsys):
    trace = tmp_path / "kineto.json"
    trace.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "pid": 0, '
                     '"tid": 7, "args": {"device": 0, "stream": 7, "correlation": 1}}]}')
    argv = [a.format(fifo=fifo, tmp=tmp_path, trace=trace) for a in argv]
    assert _run_with_deadline(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("perflib: error: ") and err.count("\n") == 1, err
    assert "in a regular file" in err or "(a regular file)" in err
    assert "FIFO" in err or "character device" in err
