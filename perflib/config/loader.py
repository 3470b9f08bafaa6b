"""Reading a campaign file: YAML, the declared keys, then what ties the keys together.

`read_campaign(path)` checks everything the file alone can decide: every key against its
declaration (`perflib.config.model`), each backend's server, unique names, arms that name other arms,
the playbook and the candidates' ids and thresholds. What needs the rest of perflib (the names of
the measurements, the runs.csv columns a gate may name) is checked on top of this by
`perflib.campaign.load_campaign`, which is what commands and notebooks call.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from perflib.config.declare import Context, Lines, build
from perflib.config.model import Campaign, CandidateSpec, Playbook, Source
from perflib.errors import InputError, PerflibError
from perflib.server.presets import PLACEHOLDERS, PRESETS, placeholders_in

PLAYBOOKS = Path(__file__).resolve().parents[1] / "data" / "playbooks"


def _parse_yaml(path: Path) -> tuple[Any, Lines]:
    import yaml

    if not path.is_file():
        raise InputError(path, None, "a campaign YAML file", "no such file")
    text = path.read_text()
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        raise InputError(path, where, "valid YAML", str(getattr(exc, "problem", exc))) from exc
    return doc, Lines(text)


def playbook_path(name: str) -> Path:
    """A built-in playbook (package data under perflib/data/playbooks/)."""
    path = PLAYBOOKS / f"{name}.yaml"
    if not path.is_file():
        have = sorted(p.stem for p in PLAYBOOKS.glob("*.yaml"))
        raise PerflibError(f"no built-in playbook {name!r} (have {', '.join(have) or 'none'})")
    return path


def read_playbook(name: str) -> tuple[tuple[CandidateSpec, Source], ...]:
    """The candidates of a built-in playbook, checked like a campaign's, each with where it is written."""
    path = playbook_path(name)
    doc, lines = _parse_yaml(path)
    playbook = build(Playbook, doc if doc is not None else {}, Context(path, lines))
    _check_candidate_ids(playbook.candidates, path, lines, "candidates")
    return tuple((c, Source(path, lines, f"candidates[{i}]")) for i, c in enumerate(playbook.candidates))


def _check_candidate_ids(cands: tuple[CandidateSpec, ...], path: Path, lines: Lines, where: str) -> None:
    seen: set[str] = set()
    for i, cand in enumerate(cands):
        if cand.id in seen:
            raise InputError(path, lines.where(f"{where}[{i}].id"), "a unique candidate id", repr(cand.id))
        seen.add(cand.id)


def _check_servers(campaign: Campaign, path: Path, lines: Lines) -> None:
    """Each backend has a server to reach, start or do without; names are unique; placeholders are known."""
    for i, backend in enumerate(campaign.backends):
        if not backend.url and not backend.start and backend.server is None:
            raise InputError(path, lines.where(f"backends[{i}]"),
                             "a 'url' (a running server), a 'server' (perflib starts it) or 'start: none' "
                             "(committed traces only)", "none of them")
        spec = backend.server
        if spec is not None:
            if backend.url:
                raise InputError(path, lines.where(f"backends[{i}].url"), "either 'url' or 'server', not both",
                                 "both")
            if spec.preset is None and not spec.command:
                raise InputError(path, lines.where(f"backends[{i}].server"),
                                 f"a 'preset' ({', '.join(PRESETS)}) or a 'command' template", "neither")
            for name in ("command", "args", "env"):
                _check_placeholders(getattr(spec, name), path, lines, f"backends[{i}].server.{name}")
        _check_placeholders(backend.extra_args, path, lines, f"backends[{i}].extra_args")
    names = [b.name for b in campaign.backends]
    if len(set(names)) != len(names):
        raise InputError(path, lines.where("backends"), "unique backend names", repr(names))
    arm_names = [a.name for a in campaign.arms]
    if len(set(arm_names)) != len(arm_names):
        raise InputError(path, lines.where("arms"), "unique arm names", repr(arm_names))
    for i, arm in enumerate(campaign.arms):
        if arm.of is not None and arm.of not in arm_names:
            raise InputError(path, lines.where(f"arms[{i}].of"), f"the name of another arm ({', '.join(arm_names)})",
                             repr(arm.of))
        compared = [a.name for a in campaign.arms if a.role == "compare"]
        if arm.against is not None and (arm.against not in compared or arm.against == arm.name):
            raise InputError(path, lines.where(f"arms[{i}].against"),
                             f"the name of another compared arm ({', '.join(n for n in compared if n != arm.name)})",
                             repr(arm.against))
        for name in ("extra_args", "env"):
            _check_placeholders(getattr(arm, name), path, lines, f"arms[{i}].{name}")


def _check_placeholders(values: Any, path: Path, lines: Lines, where: str) -> None:
    """Every `{name}` in a command's parts (or an environment's values) is a known placeholder."""
    parts = list(values.values()) if isinstance(values, dict) else list(values)
    try:
        unknown = sorted(placeholders_in(parts) - set(PLACEHOLDERS))
    except ValueError as exc:  # a lone brace
        raise InputError(path, lines.where(where), "text whose braces are placeholders like {port} "
                         "(a literal brace is written {{ or }})", str(exc)) from None
    if unknown:
        raise InputError(path, lines.where(where), f"placeholders among {', '.join(sorted(PLACEHOLDERS))}",
                         f"unknown {', '.join('{' + u + '}' for u in unknown)}")


def _with_playbook(campaign: Campaign, path: Path, lines: Lines) -> Campaign:
    """The playbook's candidates first, then the campaign's own (one with the same id overrides)."""
    from_playbook: tuple[tuple[CandidateSpec, Source], ...] = ()
    if campaign.playbook:
        try:
            from_playbook = read_playbook(campaign.playbook)
        except PerflibError as exc:
            raise InputError(path, lines.where("playbook"), "a built-in playbook name", str(exc)) from exc
    _check_candidate_ids(campaign.candidates, path, lines, "candidates")
    own = tuple((c, Source(path, lines, f"candidates[{i}]")) for i, c in enumerate(campaign.candidates))
    own_ids = {c.id for c in campaign.candidates}
    merged = tuple(pair for pair in from_playbook if pair[0].id not in own_ids) + own
    return replace(campaign, candidates=tuple(c for c, _ in merged), candidate_sources=tuple(s for _, s in merged))


def read_campaign(path: str | Path) -> Campaign:
    """Read a campaign YAML file and check what the file alone decides; errors name the key path,
    its line and the expectation. Relative paths are resolved against the file's folder; `data_dir`
    and `reports_dir` default to `../data` and `../reports` for a file in a `campaigns/` folder."""
    path = Path(path)
    doc, lines = _parse_yaml(path)
    doc = doc if doc is not None else []
    campaign = build(Campaign, doc, Context(path, lines), path=Path(path).resolve(), lines=lines)
    _check_servers(campaign, path, lines)
    campaign = _with_playbook(campaign, path, lines)
    base = path.parent
    default = "../{}" if base.name == "campaigns" else "{}"
    for name in ("data_dir", "reports_dir"):
        if name not in doc:
            campaign = replace(campaign, **{name: (base / default.format(name.split("_")[0])).resolve()})
    return campaign


def replace_data_dir(campaign: Campaign, data_dir: Path | None, reports_dir: Path | None) -> Campaign:
    """The campaign with `--data`/`--reports` overrides applied."""
    return replace(campaign, data_dir=Path(data_dir).resolve() if data_dir else campaign.data_dir,
                   reports_dir=Path(reports_dir).resolve() if reports_dir else campaign.reports_dir)


def parse_only(items: list[str] | tuple[str, ...] | None) -> dict[str, set[str]]:
    """`--only arm=after batch=1,4` → {"arm": {"after"}, "batch": {"1", "4"}}."""
    filters: dict[str, set[str]] = {}
    keys = ("arm", "backend", "batch", "context", "repeat")
    for item in items or ():
        name, sep, values = item.partition("=")
        if not sep or name not in keys:
            raise PerflibError(f"--only {item!r}: expected KEY=V1,V2 with KEY one of {', '.join(keys)}")
        filters.setdefault(name, set()).update(v.strip() for v in values.split(",") if v.strip())
    return filters
