"""The notebooks a run folder keeps, written by the runner from the run's results, with no kernel.

`perflib campaign run` measures each run in its own process (`perflib.campaign.measure`) and
attributes each traced run there (`perflib.derive.run_tables`); each run folder still gets its
`collect.ipynb` (and a traced run its `profile.ipynb`) as a record a person can open and run again:
the packaged notebook, its parameters cell holding what the run was given (one JSON parameter each:
the level spec, `level`, and the profile spec, `run`), each code cell numbered and its output filled from the results as a
kernel shows them (a path's repr; a table as text/plain and text/html), a failed cell's error where the
run failed, and `metadata.perflib` saying that the runner wrote it. Executing it with papermill measures
or attributes the run again. A notebook is JSON (nbformat 4.5): nothing here imports nbformat.

The cells are found by their ids in the packaged notebooks (`COLLECT_CELLS`, `PROFILE_CELLS`);
tests/campaign/test_records.py checks that those cells still say what is filled in for them.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflib import atomic
from perflib.campaign.notebooks import NOTEBOOKS
from perflib.load import LevelSpec
from perflib.version import __version__

if TYPE_CHECKING:
    import pandas as pd

    from perflib.campaign.measure import ProfileSpec

WRITTEN_BY = "perflib campaign run: written from the run's results in the runner's process, no kernel executed it"
"""`metadata.perflib.written_by` of a notebook this module wrote."""

COLLECT_CELLS = {"collect": 'run_dir = campaign.collect_run(level, base_url, out_dir)\nrun_dir',
                 "summary": 'pd.Series(runs.summarize_run(run_dir)).to_frame("value")'}
"""The collect notebook's cells whose outputs are filled in, by id, and what each says."""

PROFILE_CELLS = {"profile": 'tables = campaign.profile_run(run)\ntables["trace_runs"].T',
                 "classes": 'tables["classes"]', "gaps": 'tables["gaps"]', "kernels": 'tables["kernels"].head(20)'}
"""The profile notebook's cells whose outputs are filled in, by id, and what each says."""


@functools.cache
def _template(name: str) -> str:
    return (NOTEBOOKS / name).read_text()


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _shown(value: Any, count: int) -> dict[str, Any]:
    """An `execute_result` as IPython's display makes it: `repr`, and HTML where the value has it."""
    data = {"text/plain": _lines(repr(value))}
    html = getattr(value, "_repr_html_", None)
    if callable(html):
        text = html()
        if text:
            data["text/html"] = _lines(text)
    return {"output_type": "execute_result", "execution_count": count, "data": data, "metadata": {}}


def _error(ename: str, evalue: str) -> dict[str, Any]:
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"]}


def _fill(name: str, parameters: str, outputs: Mapping[str, Sequence[dict[str, Any]]], failed_at: str | None,
          error: str | None, extra: Mapping[str, Any]) -> dict[str, Any]:
    """The packaged notebook `name` with its parameters cell set to `parameters`, its code cells numbered
    in order up to the one that failed (`failed_at`, whose output is the error), and `outputs` by cell id."""
    book = json.loads(_template(name))
    count = 0
    stopped = False
    for cell in book["cells"]:
        if cell["cell_type"] != "code":
            continue
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            cell["source"] = _lines(parameters)
        if stopped:  # not executed after the cell that failed, as papermill leaves them
            cell["execution_count"], cell["outputs"] = None, []
            continue
        count += 1
        cell["execution_count"] = count
        if cell.get("id") == failed_at:
            cell["outputs"] = [_error("PerflibError", error or "failed")]
            stopped = True
            continue
        cell["outputs"] = [{**out, "execution_count": count} if out.get("output_type") == "execute_result" else out
                           for out in outputs.get(cell.get("id", ""), [])]
    book["metadata"]["perflib"] = {"written_by": WRITTEN_BY, "perflib": __version__, "error": error, **extra}
    return book


def _write(path: Path, book: dict[str, Any]) -> Path:
    atomic.write_atomic(path, json.dumps(book, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    return path


def _json_parameter(name: str, what: str, values: Mapping[str, Any]) -> str:
    """`name = {...}  # what`: a JSON parameter as a Python literal, one field a line."""
    fields = "".join(f"    {key!r}: {value!r},\n" for key, value in values.items())
    return f"{name} = {{  # {what} as JSON\n" + fields + "}\n"


def write_collect(path: Path, level: LevelSpec, run_dir: Path, summary: Mapping[str, Any] | None,
                  error: str | None) -> Path:
    """`collect.ipynb` of a run measured in the runner's process: the level spec in its parameters cell,
    the run folder and the summary table shown, or (where `error`) the collect cell's error."""
    parameters = (_json_parameter("level", "a perflib.load.LevelSpec", level.to_dict()) +
                  "base_url = None  # None: the level's own server; a URL: measure against that server instead\n"
                  "out_dir = None  # None: the level's own folder; a folder: measure into it instead\n")
    outputs: dict[str, list[dict[str, Any]]] = {"collect": [_shown(run_dir, 0)]}
    if summary is not None and not error:
        import pandas as pd  # the runner has it already (the campaign's validation imports it)

        outputs["summary"] = [_shown(pd.Series(dict(summary)).to_frame("value"), 0)]
    return _write(path, _fill("collect.ipynb", parameters, outputs, "collect" if error else None, error,
                              {"level": level.to_dict()}))


def write_profile(path: Path, run: ProfileSpec, tables: Mapping[str, pd.DataFrame] | None,
                  error: str | None) -> Path:
    """`profile.ipynb` of a run attributed in the runner's process: the profile spec in its parameters
    cell, its tables shown, or the profile cell's error."""
    parameters = _json_parameter("run", "a perflib.campaign.measure.ProfileSpec", run.to_dict())
    outputs: dict[str, list[dict[str, Any]]] = {}
    if tables is not None and not error:
        outputs = {"profile": [_shown(tables["trace_runs"].T, 0)], "classes": [_shown(tables["classes"], 0)],
                   "gaps": [_shown(tables["gaps"], 0)], "kernels": [_shown(tables["kernels"].head(20), 0)]}
    return _write(path, _fill("profile.ipynb", parameters, outputs, "profile" if error else None, error,
                              {"run": run.to_dict()}))


def failed(path: Path) -> bool | None:
    """Whether a notebook in a run folder records a failure: papermill's `exception`, or the error of one
    this module wrote; None where the file is missing or unreadable."""
    try:
        meta = json.loads(path.read_text()).get("metadata", {})
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict):
        return None
    written = meta.get("perflib") if isinstance(meta.get("perflib"), dict) else {}
    executed = meta.get("papermill") if isinstance(meta.get("papermill"), dict) else {}
    return bool(written.get("error") or executed.get("exception"))
