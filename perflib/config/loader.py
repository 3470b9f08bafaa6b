"""Reading a campaign file: YAML, the declared keys, then what ties the keys together.

`read_campaign(path)` checks everything the file alone can decide: every key against its
declaration (`perflib.config.model`), each backend's server, unique names, arms that name other arms,
the playbook and the candidates' ids and thresholds. What needs the rest of perflib (the names of
the measurements, the runs.csv columns a gate may name) is checked on top of this by
`perflib.campaign.load_campaign`, which is what commands and notebooks call.
"""

from __future__ import annotations

import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

from perflib.config.declare import Context, Lines, build
from perflib.config.model import MAX_RUNS, Campaign, CandidateSpec, Playbook, Source
from perflib.errors import InputError, PerflibError
from perflib.safeinput import read_text
from perflib.server.presets import PLACEHOLDERS, PRESETS, placeholder_problems, placeholders_in

PLAYBOOKS = Path(__file__).resolve().parents[1] / "data" / "playbooks"

MAX_CAMPAIGN_BYTES = 1024 * 1024
"""The largest campaign (or playbook) file read; the committed ones are a few kB."""

MAX_YAML_NODES = 100_000
"""The most YAML nodes a campaign file may hold once its aliases are expanded (an alias bomb of
nine nested aliases holds 9**9 = 387 million): counted on the composed nodes, never expanded."""


def expanded_size(root: Any, limit: int) -> int:
    """How many nodes the YAML node graph `root` holds with every alias expanded, counted without
    expanding it (each node's size computed once), stopping at `limit + 1`. A ValueError for an
    alias that contains itself."""
    import yaml  # late: 16 ms (measured) that `perflib sweep` skips; it imports config, reads no file

    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            sizes[key] = 1
            continue
        if children_done:
            open_nodes.discard(key)
            sizes[key] = min(limit + 1, 1 + sum(sizes[id(c)] for c in children))
            continue
        if key in open_nodes:
            raise ValueError("an alias that contains itself")
        open_nodes.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in open_nodes:
                raise ValueError("an alias that contains itself")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _parse_yaml(path: Path) -> tuple[Any, Lines]:
    """The document and its line map; the file read as `perflib.safeinput.read_text` reads (a FIFO or
    device refused, at most `MAX_CAMPAIGN_BYTES`), composed once, its expanded size bounded before
    anything is built from it."""
    import yaml  # late: see expanded_size

    text = read_text(path, "a campaign YAML file", max_bytes=MAX_CAMPAIGN_BYTES) or ""
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # its reader already refuses control characters
        node = loader.get_single_node()
        if node is not None:
            size = expanded_size(node, MAX_YAML_NODES)
            if size > MAX_YAML_NODES:
                raise InputError(path, None, f"a YAML document of at most {MAX_YAML_NODES} values once its "
                                 "aliases are expanded", f"more than {MAX_YAML_NODES} (nested aliases)")
        doc = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        raise InputError(path, where, "valid YAML", str(getattr(exc, "problem", exc))) from exc
    except ValueError as exc:  # expanded_size: a recursive alias
        raise InputError(path, None, "YAML whose aliases do not contain themselves", str(exc)) from None
    except RecursionError:
        raise InputError(path, None, "YAML nested a few hundred levels deep at most", "deeper nesting") from None
    finally:
        if loader is not None:
            loader.dispose()
    lines = Lines(text, node)
    where = _with_nul(doc)
    if where is not None:  # a "\0" escape: an argument, environment value or path would end there
        raise InputError(path, lines.where(where[0]), "text without a NUL byte (no key holds one: an argument, "
                         "an environment value or a path ends at it)", repr(where[1]))
    return doc, lines


def _with_nul(doc: Any) -> tuple[str, str] | None:
    """(key path, text) of the first key or string value of the document that holds a NUL byte."""
    stack: list[tuple[Any, str]] = [(doc, "")]
    while stack:
        value, at = stack.pop()
        if isinstance(value, str) and "\0" in value:
            return at or "<top>", value
        if isinstance(value, dict):
            for k, v in value.items():
                sub = f"{at}.{k}" if at else str(k)
                if isinstance(k, str) and "\0" in k:
                    return at or "<top>", k
                stack.append((v, sub))
        elif isinstance(value, list):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(value))
    return None


def playbook_path(name: str) -> Path:
    """A built-in playbook (package data under perflib/data/playbooks/)."""
    path = PLAYBOOKS / f"{name}.yaml"
    if not path.is_file():
        have = sorted(p.stem for p in PLAYBOOKS.glob("*.yaml"))
        raise PerflibError(f"no built-in playbook {name!r} (have {', '.join(have) or 'none'})")
    return path


def playbook_question(name: str | None) -> str:
    """A built-in playbook's generic question (its `description`), '' without a playbook or a description.
    The playbook is read and checked as its candidates are (`read_playbook`): one that is missing or
    malformed is an error naming it, not a page that silently opens with nothing."""
    if not name:
        return ""
    path = playbook_path(name)
    doc, lines = _parse_yaml(path)
    return build(Playbook, doc if doc is not None else {}, Context(path, lines)).description or ""


def opening_question(campaign: Campaign) -> tuple[str, str]:
    """What a campaign's page opens with, and where it comes from (`question`, `description`, `playbook
    NAME`, or '' for nothing): its `question:`, else its `description` (shown as written), else its
    playbook's generic question."""
    if campaign.question:
        return campaign.question, "question"
    if campaign.description:
        return campaign.description, "description"
    question = playbook_question(campaign.playbook)
    return question, (f"playbook {campaign.playbook}" if question else "")


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
            if spec.binary is not None:
                _check_placeholders([spec.binary], path, lines, f"backends[{i}].server.binary", placeholders=False)
        for name in ("extra_args", "env"):
            _check_placeholders(getattr(backend, name), path, lines, f"backends[{i}].{name}")
        _check_placeholders(backend.profiler.args, path, lines, f"backends[{i}].profiler.args", placeholders=False)
    names = [b.name for b in campaign.backends]
    if len(set(names)) != len(names):
        raise InputError(path, lines.where("backends"), "unique backend names", repr(names))
    arm_names = [a.name for a in campaign.arms]
    if len(set(arm_names)) != len(arm_names):
        raise InputError(path, lines.where("arms"), "unique arm names", repr(arm_names))
    compared = [a.name for a in campaign.arms if a.role == "compare"]
    for i, arm in enumerate(campaign.arms):
        _check_of(arm, i, compared, campaign, path, lines)
        if arm.baseline is not None and (arm.baseline not in compared or arm.baseline == arm.name):
            raise InputError(path, lines.where(f"arms[{i}].baseline"),
                             f"the name of another compared arm ({', '.join(n for n in compared if n != arm.name)})",
                             repr(arm.baseline))
        for name in ("extra_args", "env"):
            _check_placeholders(getattr(arm, name), path, lines, f"arms[{i}].{name}")
        if arm.profiler is not None:
            _check_placeholders(arm.profiler.args, path, lines, f"arms[{i}].profiler.args", placeholders=False)


def _check_baselines(campaign: Campaign, path: Path, lines: Lines) -> None:
    """The campaign's `baseline:` names a compared arm, and no chain of arms' `baseline:` comes back to
    where it started (each arm would then be the other's baseline)."""
    compared = [a.name for a in campaign.compared_arms]
    if campaign.baseline is not None and campaign.baseline not in compared:
        raise InputError(path, lines.where("baseline"), f"the name of a compared arm ({', '.join(compared)})",
                         repr(campaign.baseline))
    for i, arm in enumerate(campaign.arms):
        seen = [arm.name]
        base = campaign.baseline_of(arm.name)
        while base is not None and base not in seen:
            seen.append(base)
            base = campaign.baseline_of(base)
        if base is not None:
            raise InputError(path, lines.where(f"arms[{i}].baseline"), "baselines that do not come back round to "
                             "the arm they start from", " -> ".join([*seen, base]))


def _check_of(arm: Any, i: int, compared: list[str], campaign: Campaign, path: Path, lines: Lines) -> None:
    """`of` is on a traced arm and names a compared arm: the configuration it runs again
    (`Campaign.arm_config`); a traced arm of a traced arm, of itself or of a missing arm has none."""
    if arm.of is None:
        return
    where = lines.where(f"arms[{i}].of")
    if arm.role != "traced":
        raise InputError(path, where, "'of' only on an arm with 'role: traced' (the same configuration as the "
                         "arm it names, again under a profiler)", f"of: {arm.of} on an arm with role: {arm.role}")
    others = [n for n in compared if n != arm.name]
    expected = f"the name of a compared arm ({', '.join(others) or 'none'})"
    if arm.of not in {a.name for a in campaign.arms}:
        raise InputError(path, where, expected, f"{arm.of!r}, which is no arm of this campaign")
    if arm.of == arm.name:
        raise InputError(path, where, expected, f"{arm.of!r}, this arm itself")
    if arm.of not in compared:
        raise InputError(path, where, expected, f"{arm.of!r}, a traced arm (a traced arm repeats a compared "
                         "arm's configuration, not another traced arm's)")


def _check_placeholders(values: Any, path: Path, lines: Lines, where: str, placeholders: bool = True) -> None:
    """What becomes a command's argument or an environment variable can be one: no NUL byte (a C string
    ends there), an environment name that is not empty and holds no `=`; and every `{name}` is a known
    placeholder with no format spec, conversion or attribute (`{port:99999999999}` would pad to
    gigabytes). Found at load time with the line, not as a ValueError from `subprocess` later."""
    is_env = isinstance(values, dict)
    parts = list(values.values()) if is_env else list(values)
    for name in values if is_env else ():
        if not name or "=" in name or "\0" in name:
            raise InputError(path, lines.where(f"{where}.{name}" if name else where),
                             "an environment variable name: not empty, without '=' or a NUL byte", repr(name))
    for part in parts:
        if "\0" in part:
            raise InputError(path, lines.where(where), "text without a NUL byte (an argument or an environment "
                             "value ends at one)", repr(part))
    if not placeholders:
        return
    for part in parts:
        try:
            placeholders_in([part])
        except ValueError as exc:  # a lone brace
            what = "an environment value" if is_env else "text"
            raise InputError(path, lines.where(where), f"{what} whose braces are placeholders like {{arm_dir}}: "
                             "a literal { is written {{ and a literal } is written }}", f"{part!r} ({exc})") from None
    odd = sorted({b for part in parts for b in placeholder_problems(part)})
    unknown = sorted(placeholders_in(parts) - set(PLACEHOLDERS))
    if odd:
        raise InputError(path, lines.where(where), "placeholders that are bare names like {port} (no format spec, "
                         "conversion or attribute; a literal brace is written {{ or }})", ", ".join(odd))
    if unknown:
        raise InputError(path, lines.where(where), f"placeholders among {', '.join(sorted(PLACEHOLDERS))}",
                         f"unknown {', '.join('{' + u + '}' for u in unknown)}")


def _check_matrix(campaign: Campaign, path: Path, lines: Lines) -> None:
    """The run matrix counted (never expanded) against `MAX_RUNS`."""
    if campaign.run_count > MAX_RUNS:
        raise InputError(path, lines.where("repeats" if "repeats" in lines.lines else "batches"),
                         f"a run matrix of at most {MAX_RUNS} runs",
                         f"{campaign.run_count} runs ({campaign.matrix_text()})")


def _check_files(campaign: Campaign, path: Path, lines: Lines) -> None:
    """What a campaign names beside it is there: each `compare_with` campaign file and each backend's
    `kernel_classes` (a built-in table, or a YAML file), read only later, when a page is written."""
    from perflib.classes import builtin_backends  # late: numpy (40 ms) that `import perflib.config` skips

    def regular(file: Path) -> str | None:
        try:
            mode = file.stat().st_mode
        except OSError as exc:
            return exc.strerror or "no such file"
        return None if stat.S_ISREG(mode) else "not a regular file"

    for i, ref in enumerate(campaign.compare_with):
        problem = regular(ref.campaign)
        if problem:
            raise InputError(path, lines.where(f"compare_with[{i}].campaign"), "a campaign file that exists",
                             f"{ref.campaign}: {problem}")
    tables = builtin_backends()
    for i, backend in enumerate(campaign.backends):
        if backend.kernel_classes is None:
            continue
        file = campaign.class_file(backend)
        if file is None and backend.kernel_classes not in tables:
            raise InputError(path, lines.where(f"backends[{i}].kernel_classes"),
                             f"a built-in class table ({', '.join(tables)}) or a .yaml file",
                             repr(backend.kernel_classes))
        problem = regular(file) if file is not None else None
        if problem:
            raise InputError(path, lines.where(f"backends[{i}].kernel_classes"), "a class table file that exists",
                             f"{file}: {problem}")


def _check_gates(campaign: Campaign, path: Path, lines: Lines) -> None:
    """A gate names arms of the campaign and a batch (and context) of its matrix."""
    arms = [a.name for a in campaign.arms]
    for i, gate in enumerate(campaign.gates):
        where = f"gate[{i}]" if len(campaign.gates) > 1 or f"gate[{i}]" in lines.lines else "gate"
        for name in ("arm", "baseline"):
            value = getattr(gate, name)
            if value is not None and value not in arms:
                raise InputError(path, lines.where(f"{where}.{name}"), f"the name of an arm ({', '.join(arms)})",
                                 repr(value))
        if gate.batch not in campaign.batches:
            raise InputError(path, lines.where(f"{where}.batch"),
                             f"a batch of the matrix ({', '.join(map(str, campaign.batches))})", repr(gate.batch))
        if gate.context is not None and gate.context not in campaign.contexts:
            raise InputError(path, lines.where(f"{where}.context"),
                             f"a context of the matrix ({', '.join(map(str, campaign.contexts))})", repr(gate.context))


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
    _check_baselines(campaign, path, lines)
    _check_matrix(campaign, path, lines)
    _check_files(campaign, path, lines)
    _check_gates(campaign, path, lines)
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
