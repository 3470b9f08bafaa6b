"""Run folders: names, atomic manifests, folders moved aside, the server start that served a run."""

from __future__ import annotations

import pytest

from perflib import rundir
from perflib.errors import InputError


def test_manifest_atomic_write_and_is_complete(tmp_path):
    run = tmp_path / rundir.run_name(4, 1024, 2)
    assert run.name == "b4_c1024_r2"
    assert not rundir.is_complete(run)
    rundir.write_manifest(run, {"status": "incomplete", "errors": ["x"]})
    assert not rundir.is_complete(run)
    rundir.write_manifest(run, {"status": "complete", "errors": []})
    assert rundir.is_complete(run) and rundir.read_manifest(run)["schema"] == rundir.SCHEMA_VERSION
    assert [p.name for p in run.iterdir()] == ["manifest.json"]  # no temp file left behind
    (run / "manifest.json").write_text("{\"status\": \"comp")  # a torn manifest is not complete
    assert not rundir.is_complete(run)
    with pytest.raises(InputError, match="manifest.json:1:"):
        rundir.read_manifest(run)


def test_move_aside_numbers_folders(tmp_path):
    run = tmp_path / "b1_c8_r1"
    run.mkdir()
    first = rundir.move_aside(run)
    run.mkdir()
    second = rundir.move_aside(run)
    assert (first.name, second.name) == ("b1_c8_r1.incomplete-1", "b1_c8_r1.incomplete-2")
    assert not run.exists()


def test_the_server_start_that_served_a_run_is_the_last_one_naming_it(tmp_path):
    import json

    arm_dir = tmp_path / "raw" / "c" / "traced" / "cuda"
    run = arm_dir / rundir.run_name(8, 1024, 2)
    run.mkdir(parents=True)
    assert rundir.server_start_of(run) is None  # no server.json: a server perflib did not start
    label = "traced/cuda/b8_c1024_r2"
    starts = [{"segment": 1, "runs": [label], "ended": "died"}, {"segment": 2, "runs": ["traced/cuda/b1_c1024_r1"]},
              {"segment": 3, "runs": [label, "traced/cuda/b8_c1024_r3"], "exit_code": 1}]
    (arm_dir / rundir.SERVER_RECORD).write_text(json.dumps({"starts": starts}))
    assert rundir.server_start_of(run)["segment"] == 3  # measured again on the start after the one that died
    assert rundir.server_start_of(arm_dir / rundir.run_name(4, 1024, 1)) is None
    (arm_dir / rundir.SERVER_RECORD).write_text("{half")
    assert rundir.server_start_of(run) is None
