"""The notebooks the runner writes into a run folder from its results: valid notebooks, the packaged
notebook's cells with their outputs filled in as a kernel shows them, the parameters a person reruns
them with, the failure where there was one, and the packaged notebooks still saying what is filled in."""

from __future__ import annotations

import json

import nbformat
import pandas as pd
import pytest

from perflib import load
from perflib.campaign import records
from perflib.campaign.measure import ProfileSpec
from perflib.campaign.notebooks import NOTEBOOKS
from perflib.errors import InputError


def cells(path) -> dict[str, dict]:
    return {c["id"]: c for c in json.loads(path.read_text())["cells"]}


@pytest.mark.parametrize("name, filled", [("collect.ipynb", records.COLLECT_CELLS),
                                          ("profile.ipynb", records.PROFILE_CELLS)])
def test_the_packaged_notebooks_say_what_is_filled_in_for_them(name, filled):
    book = cells(NOTEBOOKS / name)
    for cell_id, source in filled.items():
        assert "".join(book[cell_id]["source"]) == source, cell_id
    assert "parameters" in book["parameters"]["metadata"]["tags"]


def level(tmp_path) -> load.LevelSpec:
    server = load.ServerInfo(("--metrics",), str(tmp_path / "server.log"), "v1", {"kind": "llama.cpp"}, 7)
    return load.LevelSpec("http://127.0.0.1:8080", 2, 64, 8, 1, out_dir=tmp_path, dialect="llamacpp",
                          campaign="c", arm="a", backend="b", server=server, timeout=12.5)


def test_a_collect_notebook_written_from_a_run(tmp_path):
    spec = level(tmp_path)
    summary = {"batch": 2, "context": 64, "status": "complete", "decode_tok_s": 812.25, "errors": []}
    path = records.write_collect(tmp_path / "collect.ipynb", spec, spec.run_dir, summary, None)
    nbformat.validate(nbformat.read(path, as_version=4))
    book = cells(path)
    namespace: dict = {}
    exec("".join(book["parameters"]["source"]), namespace)  # noqa: S102 - the written parameters: plain values
    assert load.LevelSpec.from_json(namespace["level"]) == spec  # what a rerun with papermill is given
    assert namespace["base_url"] is None and namespace["out_dir"] is None
    (shown,) = book["collect"]["outputs"]
    assert "".join(shown["data"]["text/plain"]) == repr(spec.run_dir)
    (table,) = book["summary"]["outputs"]
    frame = pd.Series(summary).to_frame("value")
    assert "".join(table["data"]["text/plain"]) == repr(frame)
    assert "".join(table["data"]["text/html"]) == frame._repr_html_()
    counts = [c["execution_count"] for c in book.values() if c["cell_type"] == "code"]
    assert counts == [1, 2, 3, 4] and table["execution_count"] == 4
    meta = json.loads(path.read_text())["metadata"]["perflib"]
    assert meta["written_by"] == records.WRITTEN_BY and meta["error"] is None and meta["level"] == spec.to_dict()
    assert records.failed(path) is False


def test_a_collect_notebook_of_a_failed_run_shows_the_error_and_stops_there(tmp_path):
    spec = level(tmp_path)
    path = records.write_collect(tmp_path / "collect.ipynb", spec, spec.run_dir, None, "run a/b/b2_c64_r1 is incomplete")
    nbformat.validate(nbformat.read(path, as_version=4))
    book = cells(path)
    (error,) = book["collect"]["outputs"]
    assert error["output_type"] == "error" and error["evalue"] == "run a/b/b2_c64_r1 is incomplete"
    assert book["summary"]["execution_count"] is None and book["summary"]["outputs"] == []
    assert records.failed(path) is True


def test_a_profile_notebook_written_from_a_run_and_from_a_failure(tmp_path):
    run = ProfileSpec(str(tmp_path / "c.yaml"), "a", "b", 2, 64, 1, str(tmp_path / "data"))
    tables = {"trace_runs": pd.DataFrame([{"dispatches": 10, "busy_ms": 1.5}]),
              "classes": pd.DataFrame([{"kernel_class": "gemm", "time_ms": 1.0}]),
              "gaps": pd.DataFrame([{"bucket": "<10us", "gap_ms": 0.1}]),
              "kernels": pd.DataFrame([{"kernel": f"k{i}", "time_ms": float(i)} for i in range(30)])}
    path = records.write_profile(tmp_path / "profile.ipynb", run, tables, None)
    nbformat.validate(nbformat.read(path, as_version=4))
    book = cells(path)
    namespace: dict = {}
    exec("".join(book["parameters"]["source"]), namespace)  # noqa: S102
    assert set(namespace) - {"__builtins__"} == {"run"}  # one parameter, as collect.ipynb's `level`
    assert ProfileSpec.from_json(namespace["run"]) == run  # what a rerun with papermill is given
    assert json.loads(path.read_text())["metadata"]["perflib"]["run"] == run.to_dict()
    assert "".join(book["profile"]["outputs"][0]["data"]["text/plain"]) == repr(tables["trace_runs"].T)
    assert "".join(book["kernels"]["outputs"][0]["data"]["text/html"]) == tables["kernels"].head(20)._repr_html_()
    assert records.failed(path) is False
    failed = records.write_profile(tmp_path / "failed.ipynb", run, None, "no trace")
    assert cells(failed)["profile"]["outputs"][0]["evalue"] == "no trace" and records.failed(failed) is True


def test_failed_reads_papermills_record_too(tmp_path):
    path = tmp_path / "executed.ipynb"
    assert records.failed(path) is None  # missing
    path.write_text(json.dumps({"metadata": {"papermill": {"exception": True}}, "cells": []}))
    assert records.failed(path) is True
    path.write_text(json.dumps({"metadata": {"papermill": {"exception": None}}, "cells": []}))
    assert records.failed(path) is False
    path.write_text("{not json")
    assert records.failed(path) is None


def test_a_profile_spec_goes_through_json_and_back_and_names_a_bad_field():
    spec = ProfileSpec("campaigns/demo.yaml", "perf", "cpu", 4, 2048, 3)
    assert ProfileSpec.from_json(json.dumps(spec.to_dict())) == spec
    assert ProfileSpec.from_json({**spec.to_dict(), "data_dir": "data"}).data_dir == "data"
    for bad, field in (({**spec.to_dict(), "batch": 0}, "batch"), ({**spec.to_dict(), "arms": "x"}, "arms"),
                       ({k: v for k, v in spec.to_dict().items() if k != "repeat"}, "repeat"),
                       ({**spec.to_dict(), "repeat": True}, "repeat")):
        with pytest.raises(InputError) as raised:
            ProfileSpec.from_json(bad)
        assert raised.value.where == field
    with pytest.raises(InputError):
        ProfileSpec.from_json("[1, 2]")
