"""A sweep never blocks on one bad folder (issue 12): a level whose folder is complete but whose
summary fails is reported, the other levels are measured, a rerun does not crash on it, and
`sweep --json` is strict JSON.

The levels are measured against `hostile.HostileServer`, a real HTTP server on a real socket that
streams well-formed answers here; the bad folder is a committed sample run, damaged on purpose.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest
from hostile import HostileServer, stream, token
from support import DATA

from perflib import load, rundir
from perflib.cli import main as cli_main

SAMPLE = DATA / "campaign-sample" / "raw" / "sample" / "after" / "cpu" / "b2_c128_r1"
scrapes = itertools.count()


def _completions(path: str, body: bytes):
    n = json.loads(body)["max_tokens"]
    final = {"choices": [{"text": "", "finish_reason": "length"}], "usage": {"completion_tokens": n}}
    return stream(*(token(f"t{i}") for i in range(n)), final)


def _metrics(path: str, body: bytes):
    k = next(scrapes)
    text = (f"llamacpp:tokens_predicted_total {10 * k}\nllamacpp:tokens_predicted_seconds_total {0.1 * k}\n"
            f"llamacpp:n_decode_total {5 * k}\nllamacpp:prompt_tokens_total {8 * k}\n")
    return 200, text.encode(), {"content-type": "text/plain"}


ROUTES = {"/v1/completions": _completions, "/metrics": _metrics}


def _timings_as_a_list(run: Path) -> None:
    recs = [json.loads(line) for line in (run / rundir.REQUESTS).read_text().splitlines()]
    recs[0]["timings"] = [1, 2]
    (run / rundir.REQUESTS).write_text("".join(json.dumps(r) + "\n" for r in recs))


def _garbage_metrics(run: Path) -> None:
    (run / rundir.METRICS_AFTER).write_text("garbage {\n")


def _unknown_dialect(run: Path) -> None:
    manifest = json.loads((run / rundir.MANIFEST).read_text())
    manifest["metrics"]["dialect"] = "klingon"
    (run / rundir.MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize("damage", [_timings_as_a_list, _garbage_metrics, _unknown_dialect],
                         ids=["timings as a list", "garbage /metrics", "unknown dialect"])
def test_a_complete_folder_whose_summary_fails_is_reported_and_the_rest_measured(damage, tmp_path, capsys):
    out = tmp_path / "out"
    bad = out / SAMPLE.name
    shutil.copytree(SAMPLE, bad)
    damage(bad)
    before = {p.name: p.read_bytes() for p in bad.iterdir() if p.is_file()}
    argv = ["sweep", "--batch", "2", "--context", "128,8", "--decode-tokens", "4", "--repeats", "1",
            "--out", str(out), "--no-contention", "--timeout", "20", "--json"]
    with HostileServer(ROUTES) as url:
        code = cli_main(["sweep", "--base-url", url, *argv[1:]])
        first = capsys.readouterr()
        again = cli_main(["sweep", "--base-url", url, *argv[1:]])  # the rerun: nothing to measure, no crash
        second = capsys.readouterr()
    for result, captured in ((code, first), (again, second)):
        assert result == 1, captured.err
        assert "Traceback" not in captured.err and "unreadable" in captured.err and SAMPLE.name in captured.err
        doc = json.loads(captured.out, parse_constant=lambda name: pytest.fail(f"{name} in sweep --json"))
        assert [u["run_dir"] for u in doc["unreadable"]] == [str(bad)] and doc["incomplete"] == []
        good = rundir.read_manifest(out / "b2_c8_r1")
        assert good["status"] == "complete", good["errors"]
        assert {(lvl["context"], lvl["complete"]) for lvl in doc["levels"]} == {(8, 1), (128, 0)}
    assert {p.name: p.read_bytes() for p in bad.iterdir() if p.is_file()} == before  # kept as it was


def test_sweep_json_prints_null_for_a_non_finite_figure():
    from perflib.commands.sweep import finite

    text = json.dumps(finite({"a": float("nan"), "b": [float("inf"), 1.5], "c": (float("-inf"),)}), allow_nan=False)
    assert json.loads(text) == {"a": None, "b": [None, 1.5], "c": [None]}


def test_a_matrix_past_the_limit_is_refused_with_its_count(tmp_path):
    from perflib import sweep
    from perflib.errors import PerflibError

    with pytest.raises(PerflibError, match="found 2000000 .*1000000 repeats"):
        sweep.sweep(load.LevelSpec("http://127.0.0.1:9", 1, 8, 4, 1, out_dir=tmp_path / "out"), [1, 2], [8],
                    1_000_000, progress=False)
    assert not (tmp_path / "out").exists()
