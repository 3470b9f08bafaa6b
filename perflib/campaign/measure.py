"""One run measured and one trace attributed, in the runner's process or from a notebook's cell.

`perflib campaign run` measures each run here (`measure_level` of its `perflib.load.LevelSpec`, the repeats
of a level sharing what is per level: `perflib.load.Repeats`) and attributes each traced run here
(`attribute`, into the per-run tables the page reads). The notebooks a run folder keeps call the same
functions: `collect.ipynb` calls `collect_run` of its one parameter, `level` (the `LevelSpec` as JSON),
and `profile.ipynb` calls `profile_run` of its one parameter, `run` (a `ProfileSpec` as JSON).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflib import derive, load, sweep
from perflib.campaign.validate import load_campaign
from perflib.config import Campaign, RunSpec
from perflib.errors import InputError, PerflibError
from perflib.load import LevelSpec
from perflib.safeinput import describe, json_parameter, value_problem
from perflib.sweep import LevelResult

if TYPE_CHECKING:
    import pandas as pd


def measure_level(level: LevelSpec, repeats: load.Repeats | None = None) -> tuple[LevelResult, str | None]:
    """Measure one run into its folder (`perflib.sweep.run_level`); the result, and the error where the
    run is not complete (a server that does not answer leaves an incomplete manifest naming the URL)."""
    result = sweep.run_level(level, repeats)
    if result.status == "complete":
        return result, None
    errors = "; ".join(result.errors) or "no error recorded"
    label = "/".join(x for x in (level.arm, level.backend, level.name) if x)
    return result, f"run {label} against {level.base_url} is incomplete: {errors}"


def collect_run(level: LevelSpec | Mapping[str, Any] | str, base_url: str | None = None,
                out_dir: str | Path | None = None) -> Path:
    """Measure one run into its folder, as `collect.ipynb` does; returns the run folder.

    `level`: a `perflib.load.LevelSpec`, or its JSON (object or text: the notebook's `level` parameter).
    `base_url` measures against another server than the level's (what perflib knew of the level's own
    server, its flags and log, is then left out) and `out_dir` into another folder: a notebook that a
    campaign wrote into a run folder measures the run again with both given, its own server long
    stopped and its own folder complete.

    An incomplete run (a server that does not answer, requests that failed) raises a `PerflibError`, so
    that papermill records the failure and the runner goes on; its manifest says what happened.
    """
    spec = LevelSpec.from_json(level)
    if base_url:
        spec = replace(spec, base_url=str(base_url), server=None)
    if out_dir is not None:
        spec = replace(spec, out_dir=Path(out_dir))
    result, error = measure_level(spec)
    if error:
        raise PerflibError(error)
    return result.run_dir


PROFILE_FIELDS: dict[str, str] = {"campaign_file": "str", "arm": "str", "backend": "str", "batch": "positive",
                                  "context": "positive", "repeat": "positive", "data_dir": "str?"}
"""Each `ProfileSpec` field's kind in JSON (`perflib.safeinput.VALUE_KINDS`)."""


@dataclass(frozen=True)
class ProfileSpec:
    """What one run's profile needs: the campaign file, the run and the data folder (None: the campaign's).
    `profile.ipynb`'s one parameter, `run`, is this as JSON (`ProfileSpec.from_json(spec.to_dict()) == spec`)."""

    campaign_file: str
    arm: str
    backend: str
    batch: int
    context: int
    repeat: int
    data_dir: str | None = None

    @classmethod
    def of(cls, campaign: Campaign, run: RunSpec, data: Path | None = None) -> ProfileSpec:
        return cls(str(campaign.path), run.arm, run.backend, run.batch, run.context, run.repeat,
                   str(data) if data is not None else None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: str | Mapping[str, Any] | ProfileSpec, where: str = "run") -> ProfileSpec:
        """A spec from its JSON text or object; an `InputError` names the field that is unknown, missing or
        not of its kind."""
        if isinstance(value, ProfileSpec):
            return value
        value = json_parameter(value, where, "run", [f.name for f in fields(cls)])
        for name, kind in PROFILE_FIELDS.items():
            if name not in value and not kind.endswith("?"):
                raise InputError(where, name, "a value (every field but data_dir is needed)", "none")
            expected = value_problem(value.get(name), kind)
            if expected:
                raise InputError(where, name, expected, describe(value.get(name)))
        return cls(**value)


def profile_run(run: ProfileSpec | Mapping[str, Any] | str) -> dict[str, pd.DataFrame]:
    """Attribute one run's trace, windowed to its level (`perflib.derive.run_tables`), as `profile.ipynb`
    does: its tables are kept in `data/derived/<campaign>/runs/<arm>/<backend>/<run>/`, where the page
    takes them from. `run`: a `ProfileSpec`, or its JSON (the notebook's `run` parameter)."""
    spec = ProfileSpec.from_json(run)
    campaign = load_campaign(spec.campaign_file)
    if spec.data_dir is not None:
        campaign = replace(campaign, data_dir=Path(spec.data_dir))
    return derive.run_tables(campaign, RunSpec(campaign.name, spec.arm, spec.backend, spec.batch, spec.context,
                                               spec.repeat, campaign.decode_tokens))


def attribute(campaign: Campaign, run: RunSpec, data: Path) -> tuple[dict[str, pd.DataFrame] | None, str | None]:
    """One run's trace attributed in this process (`perflib.derive.run_tables`): its tables, or the error
    (a trace that cannot be attributed is that run's loss, as a cell that raised under papermill)."""
    try:
        return derive.run_tables(replace(campaign, data_dir=data), run), None
    except Exception as exc:  # noqa: BLE001 - whatever the trace's reader raised is that run's failure
        return None, str(exc) if isinstance(exc, PerflibError) else f"{type(exc).__name__}: {exc}"
