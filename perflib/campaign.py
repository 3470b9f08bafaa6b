"""Campaigns: a YAML file that names the model, backends, matrix, arms, gate and candidates.

`load_campaign(path)` validates the file by hand (no schema library) so every error names the
file, the key path (`backends[1].profiler.kind`), its line, what was expected and what was found,
and suggests the nearest valid key for a typo. `expand()` turns a campaign into runs
(arm x backend x batch x context x repeat); `run_campaign()` executes `notebooks/collect.ipynb`
(and `profile.ipynb` where the backend has a profiler) once per run with papermill, starting each
(arm, backend) server once, skipping complete runs and carrying on past failed ones. The optional
GPU guard waits for an idle device and reruns runs that saw another GPU process (LOADGEN.md §7).
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perflib.errors import InputError, PerflibError
from perflib.rundir import write_json_atomic

PROFILER_KINDS = ("none", "rocprofv3", "kineto", "cupti", "nsys")
DIALECTS = ("auto", "llamacpp", "mlxcel", "vllm", "sglang")  # perflib.metrics dialects
START_KINDS = ("llama-server-local", "none")  # none: a trace-only backend (committed profiler captures, no server)
ARM_ROLES = ("compare", "traced")  # traced: the same configuration again under a profiler
WINDOWS = ("decode", "level", "steps")  # decode: all requests decoding (SERVERS.md §5.2); level: the manifest
# clocks around the whole level; steps: the span of the step markers
RUN_DIR_RE = re.compile(r"^b(\d+)_c(\d+)_r(\d+)$")
NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
GUARD_EXIT = 75  # every attempt contended, as the seed's rocm_gpu_guard.sh


# --------------------------------------------------------------------------------------------
# the model


@dataclass(frozen=True)
class ModelSpec:
    """The model under test; bytes feed the decode-step floor, `random` the local demo model."""

    name: str
    weight_bytes: int | None = None
    kv_bytes_per_token: int | None = None
    path: str | None = None
    random: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ProfilerSpec:
    """Which profiler wraps the backend and where its output lands (a path pattern, see `trace_path`)."""

    kind: str = "none"
    output: str | None = None
    window: str = "decode"


@dataclass(frozen=True)
class BackendSpec:
    """One server to measure: a URL to an existing server or a start spec perflib runs itself."""

    name: str
    url: str | None = None
    start: str | None = None
    dialect: str = "auto"
    profiler: ProfilerSpec = field(default_factory=ProfilerSpec)
    peak_bandwidth_gbs: float | None = None
    kernel_classes: str | None = None
    device: str | None = None
    threads: int | None = None
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)

    @property
    def trace_only(self) -> bool:
        """True for `start: none` with no URL: runs are committed profiler captures, no server."""
        return self.start == "none" and not self.url


@dataclass(frozen=True)
class ArmSpec:
    """One side of a before/after comparison: a server build, extra flags or an environment."""

    name: str
    binary: str | None = None
    url: str | None = None
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    description: str = ""
    role: str = "compare"
    of: str | None = None
    trace_note: str | None = None


@dataclass(frozen=True)
class ReferenceSpec:
    """Another campaign whose derived runs stand beside this one's in the cross-backend ratio table."""

    campaign: Path
    backend: str | None = None
    label: str = ""


@dataclass(frozen=True)
class EnvironmentFile:
    """A JSON file (capture record, trace manifest) whose scalar facts the page's environment lists."""

    file: str
    keys: tuple[str, ...] = ()
    label: str = ""


@dataclass(frozen=True)
class PageNote:
    """A sentence for the page's notes, with an optional link (a path relative to the campaign file)."""

    text: str
    link: str | None = None


@dataclass(frozen=True)
class GateSpec:
    """A regression gate: `measure` (a runs.csv column) of `arm` against `baseline` at one batch."""

    measure: str
    batch: int
    max_regression_pct: float
    context: int | None = None
    baseline: str | None = None
    arm: str | None = None


@dataclass(frozen=True)
class CandidateSpec:
    """A hypothesis: the measurement that decides it, where it applies, and its two thresholds."""

    id: str
    measure: str
    confirmed: str
    ruled_out: str
    question: str = ""
    label: str = ""
    classes: tuple[str, ...] = ()
    column: str | None = None
    batch: int | None = None
    context: int | None = None
    arm: str | None = None
    backend: str | None = None
    baseline: str | None = None
    fallback: tuple[CandidateSpec, ...] = ()


@dataclass(frozen=True)
class Campaign:
    """A validated campaign file; paths are resolved against the file's folder."""

    name: str
    path: Path
    model: ModelSpec
    backends: tuple[BackendSpec, ...]
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    decode_tokens: int
    repeats: int
    arms: tuple[ArmSpec, ...]
    gates: tuple[GateSpec, ...] = ()
    candidates: tuple[CandidateSpec, ...] = ()
    playbook: str | None = None
    see_also: tuple[str, ...] = ()
    data_dir: Path = Path("data")
    reports_dir: Path = Path("reports")
    description: str = ""
    other_backends: tuple[str, ...] = ("rocm", "metal")
    other_backends_note: str = ""
    compare_with: tuple[ReferenceSpec, ...] = ()
    environment_files: tuple[EnvironmentFile, ...] = ()
    notes: tuple[PageNote, ...] = ()

    @property
    def compared_arms(self) -> tuple[ArmSpec, ...]:
        """The arms of the before/after comparison (traced arms left out); the first is the baseline."""
        return tuple(a for a in self.arms if a.role == "compare") or self.arms

    def backend(self, name: str) -> BackendSpec:
        for spec in self.backends:
            if spec.name == name:
                return spec
        raise PerflibError(f"{self.path}: no backend named {name!r} (have {[b.name for b in self.backends]})")

    def class_file(self, backend: BackendSpec) -> Path | None:
        """The backend's own class table file (`kernel_classes: x.yaml`, relative to the campaign
        file), or None where it names a built-in table or none."""
        file = Path(backend.kernel_classes or "")
        if file.suffix not in (".yaml", ".yml"):
            return None
        return file if file.is_absolute() else self.path.parent / file

    def arm(self, name: str) -> ArmSpec:
        for spec in self.arms:
            if spec.name == name:
                return spec
        raise PerflibError(f"{self.path}: no arm named {name!r} (have {[a.name for a in self.arms]})")

    def resolve(self, text: str) -> Path:
        """A path from the campaign file: `{data_dir}` filled in, relative paths against the file's folder."""
        path = Path(text.format(data_dir=self.data_dir))
        return path if path.is_absolute() else (self.path.parent / path).resolve()

    def raw_dir(self, data_dir: Path | None = None) -> Path:
        return Path(data_dir or self.data_dir) / "raw" / self.name

    def derived_dir(self, data_dir: Path | None = None) -> Path:
        return Path(data_dir or self.data_dir) / "derived" / self.name


# --------------------------------------------------------------------------------------------
# validation: a tiny hand-written schema, each key (types, required, default, sub-schema/choices)


@dataclass(frozen=True)
class _Key:
    types: tuple[type, ...]
    required: bool = False
    choices: tuple[str, ...] = ()
    sub: dict[str, _Key] | None = None  # for a mapping, or the items of a list
    items: tuple[type, ...] = ()  # item types of a list of scalars


def _k(*types: type, required: bool = False, choices: Sequence[str] = (), sub: dict | None = None,
       items: Sequence[type] = ()) -> _Key:
    return _Key(tuple(types), required, tuple(choices), sub, tuple(items))


_NUM = (int, float)
_MODEL = {"name": _k(str, required=True), "weight_bytes": _k(int), "kv_bytes_per_token": _k(int),
          "path": _k(str), "random": _k(dict)}
_PROFILER = {"kind": _k(str, choices=PROFILER_KINDS), "output": _k(str), "window": _k(str, choices=WINDOWS)}
_BACKEND = {
    "name": _k(str, required=True), "url": _k(str), "start": _k(str, choices=START_KINDS),
    "dialect": _k(str, choices=DIALECTS), "profiler": _k(dict, sub=_PROFILER),
    "peak_bandwidth_gbs": _k(*_NUM), "kernel_classes": _k(str), "device": _k(str), "threads": _k(int),
    "extra_args": _k(list, items=(str,)), "env": _k(dict),
}
_ARM = {"name": _k(str, required=True), "binary": _k(str), "url": _k(str), "extra_args": _k(list, items=(str,)),
        "env": _k(dict), "description": _k(str), "role": _k(str, choices=ARM_ROLES), "of": _k(str),
        "trace_note": _k(str)}
_REFERENCE = {"campaign": _k(str, required=True), "backend": _k(str), "label": _k(str)}
_ENV_FILE = {"file": _k(str, required=True), "keys": _k(list, items=(str,)), "label": _k(str)}
_NOTE = {"text": _k(str, required=True), "link": _k(str)}
_GATE = {"measure": _k(str, required=True), "batch": _k(int, required=True),
         "max_regression_pct": _k(*_NUM, required=True), "context": _k(int), "baseline": _k(str), "arm": _k(str)}
_FALLBACK = {"measure": _k(str, required=True), "confirmed": _k(str), "ruled_out": _k(str),
             "classes": _k(list, str, items=(str,)), "column": _k(str), "batch": _k(int), "context": _k(int),
             "label": _k(str)}
_CANDIDATE = {
    "id": _k(str, required=True), "measure": _k(str, required=True), "confirmed": _k(str, required=True),
    "ruled_out": _k(str, required=True), "question": _k(str), "label": _k(str),
    "classes": _k(list, str, items=(str,)), "column": _k(str), "batch": _k(int), "context": _k(int),
    "arm": _k(str), "backend": _k(str), "baseline": _k(str), "fallback": _k(list, sub=_FALLBACK),
}
_TOP = {
    "name": _k(str, required=True), "description": _k(str), "model": _k(dict, required=True, sub=_MODEL),
    "backends": _k(list, required=True, sub=_BACKEND), "batches": _k(list, required=True, items=(int,)),
    "contexts": _k(list, required=True, items=(int,)), "decode_tokens": _k(int, required=True),
    "repeats": _k(int), "arms": _k(list, sub=_ARM), "gate": _k(dict, list, sub=_GATE),
    "candidates": _k(list, sub=_CANDIDATE), "playbook": _k(str), "see_also": _k(list, items=(str,)),
    "data_dir": _k(str), "reports_dir": _k(str), "other_backends": _k(list, items=(str,)),
    "other_backends_note": _k(str), "compare_with": _k(list, sub=_REFERENCE),
    "environment_files": _k(list, sub=_ENV_FILE), "notes": _k(list, sub=_NOTE),
}


def _type_name(types: Sequence[type]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a mapping",
             bool: "true/false"}
    return " or ".join(names.get(t, t.__name__) for t in types)


def _found(value: Any) -> str:
    kind = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "nothing (null)"}.get(type(value), type(value).__name__)
    text = repr(value)
    return f"{kind} {text[:40]}" if not isinstance(value, dict | list) else kind


def _is(value: Any, types: Sequence[type]) -> bool:
    if isinstance(value, bool):
        return bool in types
    return isinstance(value, tuple(types))


class _Lines:
    """Line numbers of key paths in a YAML document, from `yaml.compose` (1-based)."""

    def __init__(self, text: str):
        import yaml

        self.lines: dict[str, int] = {}
        try:
            node = yaml.compose(text)
        except yaml.YAMLError:
            node = None
        if node is not None:
            self._walk(node, "")

    def _walk(self, node: Any, path: str) -> None:
        import yaml

        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                sub = f"{path}.{key.value}" if path else str(key.value)
                self.lines[sub] = key.start_mark.line + 1
                self._walk(value, sub)
                self.lines[sub] = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._walk(item, f"{path}[{i}]")

    def where(self, path: str) -> str:
        line = self.lines.get(path)
        return f"{path} (line {line})" if line else path


def _check(value: Any, schema: dict[str, _Key], path: str, file: Path, lines: _Lines) -> None:
    """Walk a mapping against `schema`; raise InputError on the first unknown key or wrong type."""
    if not isinstance(value, dict):
        raise InputError(file, lines.where(path or "<top>"), "a mapping", _found(value))
    for key, sub_value in value.items():
        key_path = f"{path}.{key}" if path else str(key)
        if key not in schema:
            close = difflib.get_close_matches(str(key), list(schema), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InputError(file, lines.where(key_path),
                             f"one of the keys {', '.join(sorted(schema))}",
                             f"unknown key {key!r}{hint}")
        spec = schema[key]
        if not _is(sub_value, spec.types):
            raise InputError(file, lines.where(key_path), _type_name(spec.types), _found(sub_value))
        if spec.choices and sub_value not in spec.choices:
            close = difflib.get_close_matches(str(sub_value), spec.choices, n=1, cutoff=0.5)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InputError(file, lines.where(key_path), f"one of {', '.join(spec.choices)}",
                             f"{sub_value!r}{hint}")
        if isinstance(sub_value, dict) and spec.sub is not None:
            _check(sub_value, spec.sub, key_path, file, lines)
        if isinstance(sub_value, list):
            for i, item in enumerate(sub_value):
                item_path = f"{key_path}[{i}]"
                if spec.sub is not None:
                    _check(item, spec.sub, item_path, file, lines)
                elif spec.items and not _is(item, spec.items):
                    raise InputError(file, lines.where(item_path), _type_name(spec.items), _found(item))
    for key, spec in schema.items():
        if spec.required and key not in value:
            raise InputError(file, lines.where(path or "<top>"), f"the required key {key!r}", "it missing")


# --------------------------------------------------------------------------------------------
# loading


def playbook_path(name: str) -> Path:
    """A built-in playbook (package data under perflib/data/playbooks/)."""
    path = Path(__file__).resolve().parent / "data" / "playbooks" / f"{name}.yaml"
    if not path.is_file():
        have = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise PerflibError(f"no built-in playbook {name!r} (have {', '.join(have) or 'none'})")
    return path


def _candidate(raw: dict, base: dict | None = None) -> CandidateSpec:
    merged = {**(base or {}), **raw}
    classes = merged.get("classes", ())
    classes = (classes,) if isinstance(classes, str) else tuple(classes)
    fallback = tuple(_candidate({"id": merged["id"], "confirmed": merged.get("confirmed"),
                                 "ruled_out": merged.get("ruled_out"), **fb}) for fb in merged.get("fallback", ()))
    return CandidateSpec(
        id=merged["id"], measure=merged["measure"], confirmed=merged["confirmed"], ruled_out=merged["ruled_out"],
        question=merged.get("question", ""), label=merged.get("label", ""), classes=classes,
        column=merged.get("column"), batch=merged.get("batch"), context=merged.get("context"),
        arm=merged.get("arm"), backend=merged.get("backend"), baseline=merged.get("baseline"), fallback=fallback,
    )


def load_playbook(name: str) -> tuple[CandidateSpec, ...]:
    """The candidates of a built-in playbook, validated like a campaign's."""
    import yaml

    path = playbook_path(name)
    text = path.read_text()
    doc = yaml.safe_load(text) or {}
    lines = _Lines(text)
    _check(doc, {"name": _k(str), "description": _k(str), "candidates": _k(list, required=True, sub=_CANDIDATE)},
           "", path, lines)
    cands = tuple(_candidate(c) for c in doc["candidates"])
    _check_candidates(cands, path, lines, "candidates")
    return cands


def _check_candidates(cands: Sequence[CandidateSpec], path: Path, lines: _Lines, where: str) -> None:
    from perflib import verdicts

    seen: set[str] = set()
    for i, cand in enumerate(cands):
        for spec in (cand, *cand.fallback):
            if spec.measure not in verdicts.MEASUREMENTS:
                close = difflib.get_close_matches(spec.measure, list(verdicts.MEASUREMENTS), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise InputError(path, lines.where(f"{where}[{i}].measure"),
                                 f"a measurement, one of {', '.join(sorted(verdicts.MEASUREMENTS))}",
                                 f"{spec.measure!r}{hint}")
            for key in ("confirmed", "ruled_out"):
                try:
                    verdicts.parse_threshold(getattr(spec, key))
                except ValueError as exc:
                    raise InputError(path, lines.where(f"{where}[{i}].{key}"),
                                     "a threshold like '>= 0.75' or '< 15%'", repr(getattr(spec, key))) from exc
        if cand.id in seen:
            raise InputError(path, lines.where(f"{where}[{i}].id"), "a unique candidate id", repr(cand.id))
        seen.add(cand.id)


def load_campaign(path: str | Path) -> Campaign:
    """Read and validate a campaign YAML file; errors name the key path, line and expectation."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise InputError(path, None, "a campaign YAML file", "no such file")
    text = path.read_text()
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
        raise InputError(path, where, "valid YAML", str(getattr(exc, "problem", exc))) from exc
    lines = _Lines(text)
    _check(doc if doc is not None else [], _TOP, "", path, lines)
    for key in ("batches", "contexts"):
        if not doc[key] or any(v < 1 for v in doc[key]):
            raise InputError(path, lines.where(key), "a non-empty list of positive integers", repr(doc[key]))
    for key in ("decode_tokens", "repeats"):
        if key in doc and doc[key] < 1:
            raise InputError(path, lines.where(key), "a positive integer", repr(doc[key]))
    backends = []
    for i, raw in enumerate(doc["backends"]):
        if not raw.get("url") and not raw.get("start"):
            raise InputError(path, lines.where(f"backends[{i}]"), "a 'url' or a 'start' key", "neither")
        prof = raw.get("profiler", {})
        backends.append(BackendSpec(
            name=raw["name"], url=raw.get("url"), start=raw.get("start"), dialect=raw.get("dialect", "auto"),
            profiler=ProfilerSpec(kind=prof.get("kind", "none"), output=prof.get("output"),
                                  window=prof.get("window", "decode")),
            peak_bandwidth_gbs=float(raw["peak_bandwidth_gbs"]) if "peak_bandwidth_gbs" in raw else None,
            kernel_classes=raw.get("kernel_classes"), device=raw.get("device"), threads=raw.get("threads"),
            extra_args=tuple(raw.get("extra_args", ())), env={str(k): str(v) for k, v in raw.get("env", {}).items()},
        ))
    names = [b.name for b in backends]
    if len(set(names)) != len(names):
        raise InputError(path, lines.where("backends"), "unique backend names", repr(names))
    arms = tuple(ArmSpec(name=a["name"], binary=a.get("binary"), url=a.get("url"),
                         extra_args=tuple(a.get("extra_args", ())),
                         env={str(k): str(v) for k, v in a.get("env", {}).items()},
                         description=a.get("description", ""), role=a.get("role", "compare"), of=a.get("of"),
                         trace_note=a.get("trace_note")) for a in doc.get("arms", [])) or (ArmSpec("default"),)
    arm_names = [a.name for a in arms]
    for i, a in enumerate(arms):
        if a.of is not None and a.of not in arm_names:
            raise InputError(path, lines.where(f"arms[{i}].of"), f"the name of another arm ({', '.join(arm_names)})",
                             repr(a.of))
    gates_raw = doc.get("gate", [])
    gates_raw = [gates_raw] if isinstance(gates_raw, dict) else gates_raw
    for i, g in enumerate(gates_raw):
        if not isinstance(g, dict):
            raise InputError(path, lines.where(f"gate[{i}]"), "a mapping", _found(g))
        _check(g, _GATE, f"gate[{i}]", path, lines)
    gates = tuple(GateSpec(measure=g["measure"], batch=g["batch"], max_regression_pct=float(g["max_regression_pct"]),
                           context=g.get("context"), baseline=g.get("baseline"), arm=g.get("arm")) for g in gates_raw)
    cands: list[CandidateSpec] = []
    if doc.get("playbook"):
        try:
            cands.extend(load_playbook(doc["playbook"]))
        except PerflibError as exc:
            raise InputError(path, lines.where("playbook"), "a built-in playbook name", str(exc)) from exc
    own = tuple(_candidate(c) for c in doc.get("candidates", []))
    _check_candidates(own, path, lines, "candidates")
    own_ids = {c.id for c in own}
    cands = [c for c in cands if c.id not in own_ids] + list(own)  # a campaign's own candidate overrides
    model = doc["model"]
    base = path.parent
    default_data = "../data" if base.name == "campaigns" else "data"
    default_reports = "../reports" if base.name == "campaigns" else "reports"
    return Campaign(
        name=doc["name"], path=path.resolve(),
        model=ModelSpec(name=model["name"], weight_bytes=model.get("weight_bytes"),
                        kv_bytes_per_token=model.get("kv_bytes_per_token"), path=model.get("path"),
                        random=dict(model.get("random", {}))),
        backends=tuple(backends), batches=tuple(doc["batches"]), contexts=tuple(doc["contexts"]),
        decode_tokens=doc["decode_tokens"], repeats=doc.get("repeats", 1), arms=arms, gates=gates,
        candidates=tuple(cands), playbook=doc.get("playbook"), see_also=tuple(doc.get("see_also", ())),
        data_dir=(base / doc.get("data_dir", default_data)).resolve(),
        reports_dir=(base / doc.get("reports_dir", default_reports)).resolve(),
        description=doc.get("description", ""),
        other_backends=tuple(doc.get("other_backends", ("rocm", "metal"))),
        other_backends_note=doc.get("other_backends_note", ""),
        compare_with=tuple(ReferenceSpec(campaign=(base / r["campaign"]).resolve(), backend=r.get("backend"),
                                         label=r.get("label", "")) for r in doc.get("compare_with", [])),
        environment_files=tuple(EnvironmentFile(file=e["file"], keys=tuple(e.get("keys", ())),
                                                label=e.get("label", "")) for e in doc.get("environment_files", [])),
        notes=tuple(PageNote(text=n["text"], link=n.get("link")) for n in doc.get("notes", [])),
    )


# --------------------------------------------------------------------------------------------
# the matrix


@dataclass(frozen=True)
class RunSpec:
    """One run: (campaign, arm, backend, batch, context, repeat)."""

    campaign: str
    arm: str
    backend: str
    batch: int
    context: int
    repeat: int
    decode_tokens: int

    @property
    def folder(self) -> str:
        return f"b{self.batch}_c{self.context}_r{self.repeat}"

    @property
    def label(self) -> str:
        return f"{self.arm}/{self.backend}/{self.folder}"

    def run_dir(self, data_dir: Path) -> Path:
        return Path(data_dir) / "raw" / self.campaign / self.arm / self.backend / self.folder


def parse_only(items: Sequence[str] | None) -> dict[str, set[str]]:
    """`--only arm=after batch=1,4` → {"arm": {"after"}, "batch": {"1", "4"}}."""
    filters: dict[str, set[str]] = {}
    keys = ("arm", "backend", "batch", "context", "repeat")
    for item in items or ():
        key, sep, values = item.partition("=")
        if not sep or key not in keys:
            raise PerflibError(f"--only {item!r}: expected KEY=V1,V2 with KEY one of {', '.join(keys)}")
        filters.setdefault(key, set()).update(v.strip() for v in values.split(",") if v.strip())
    return filters


def expand(campaign: Campaign, only: dict[str, set[str]] | None = None) -> list[RunSpec]:
    """Every run of the campaign, in execution order (arm, backend, context, batch, repeat)."""
    runs = []
    for arm in campaign.arms:
        for backend in campaign.backends:
            for context in campaign.contexts:
                for batch in campaign.batches:
                    for repeat in range(1, campaign.repeats + 1):
                        run = RunSpec(campaign.name, arm.name, backend.name, batch, context, repeat,
                                      campaign.decode_tokens)
                        if only and any(str(getattr(run, k)) not in v for k, v in only.items()):
                            continue
                        runs.append(run)
    return runs


def read_manifest(run_dir: Path) -> dict | None:
    """The run's manifest, or None where it is missing or unreadable (an interrupted run)."""
    try:
        return json.loads((Path(run_dir) / "manifest.json").read_text())
    except (OSError, ValueError):
        return None


def is_complete(run_dir: Path) -> bool:
    manifest = read_manifest(run_dir)
    return bool(manifest) and manifest.get("status") == "complete"


def mark_incomplete(run_dir: Path, run: RunSpec, error: str) -> None:
    """Record a failure in the run's manifest without losing what the run wrote before it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(run_dir) or {
        "schema": 1, "campaign": run.campaign, "arm": run.arm, "backend": run.backend, "batch": run.batch,
        "context": run.context, "decode_tokens": run.decode_tokens, "repeat": run.repeat,
    }
    manifest["status"] = "incomplete"
    manifest["errors"] = [*manifest.get("errors", []), error]
    write_json_atomic(run_dir / "manifest.json", manifest)


def trace_path(campaign: Campaign, run: RunSpec, data_dir: Path) -> Path | None:
    """Where the profiler's output for `run` is: the manifest's `trace_path`, a `trace/` or
    `trace.json` in the run folder, or the backend's `profiler.output` pattern
    (`{campaign} {arm} {backend} {batch} {context} {repeat} {run_dir} {data_dir}` are filled in)."""
    run_dir = run.run_dir(data_dir)
    manifest = read_manifest(run_dir) or {}
    if manifest.get("trace_path"):
        path = Path(manifest["trace_path"])
        return path if path.is_absolute() else run_dir / path
    for name in ("trace", "trace.json", "trace.json.gz", "trace.parquet"):
        if (run_dir / name).exists():
            return run_dir / name
    spec = campaign.backend(run.backend).profiler
    if spec.kind != "none" and spec.output:
        text = spec.output.format(campaign=run.campaign, arm=run.arm, backend=run.backend, batch=run.batch,
                                  context=run.context, repeat=run.repeat, run_dir=run_dir, data_dir=Path(data_dir))
        path = Path(text)
        return path if path.is_absolute() else campaign.path.parent / path
    return None


# --------------------------------------------------------------------------------------------
# the thin wrapper collect.ipynb calls


@dataclass(frozen=True)
class StartedServer:
    """What the runner knows of a server it started, handed to `run_level` inside the notebook
    (the real `ServerHandle` lives in the runner process): flags, log and version."""

    flags: tuple[str, ...]
    log_path: str | None
    version: str | None = None

    def identity(self) -> dict[str, Any]:
        return {"version": self.version, "flags": list(self.flags)}


def collect_run(campaign_file: str | Path, arm: str, backend: str, batch: int, context: int, repeat: int,
                base_url: str, data_dir: str | Path | None = None, server_flags: Sequence[str] | None = None,
                server_log: str | None = None, server_version: str | None = None) -> Path:
    """Measure one run into its folder with `perflib.sweep.run_level`; returns the run folder.

    A server that does not answer leaves an incomplete manifest naming the URL and raises, so
    the runner records the failure and goes on.
    """
    from perflib import sweep

    campaign = load_campaign(campaign_file)
    data = Path(data_dir) if data_dir else campaign.data_dir
    run = RunSpec(campaign.name, arm, backend, batch, context, repeat, campaign.decode_tokens)
    spec = campaign.backend(backend)
    server = StartedServer(tuple(server_flags), server_log, server_version) if server_flags is not None else None
    result = sweep.run_level(base_url, batch, context, campaign.decode_tokens, repeat, run.run_dir(data).parent,
                             dialect=spec.dialect, server=server, campaign=campaign.name, arm=arm, backend=backend)
    if result.status != "complete":
        errors = "; ".join(result.errors) or "no error recorded"
        raise PerflibError(f"run {run.label} against {base_url} is incomplete: {errors}")
    return result.run_dir


# --------------------------------------------------------------------------------------------
# kernels for papermill


def find_kernel() -> str:
    """Name of a Jupyter kernel that runs this interpreter (`sys.executable`).

    jupyter_client runs a spec whose argv[0] is `python` with the current interpreter, so the
    venv's own `python3` spec qualifies; a `perflib` spec made by
    `python -m ipykernel install --user --name perflib` is preferred when it points here.
    """
    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager().get_all_specs()
    exe = Path(sys.executable)

    def maps_here(name: str) -> bool:
        argv = specs[name]["spec"].get("argv", [])
        if not argv:
            return False
        first = argv[0]
        if first in {"python", f"python{sys.version_info[0]}", f"python{sys.version_info[0]}.{sys.version_info[1]}"}:
            return True
        with contextlib.suppress(OSError):
            return Path(first) == exe or Path(first).resolve() == exe.resolve()
        return False

    for name in ("perflib", "python3", *sorted(specs)):
        if name in specs and maps_here(name):
            return name
    raise PerflibError(f"no Jupyter kernel runs {sys.executable}; register one with "
                       f"`{sys.executable} -m ipykernel install --user --name perflib`")


def execute_notebook(notebook: Path, output: Path, parameters: dict, kernel_name: str, cwd: Path) -> str | None:
    """Run a notebook with papermill into `output`; returns None, or the error text if a cell raised."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    output.parent.mkdir(parents=True, exist_ok=True)
    # the kernel runs in `cwd`: make sure it imports this perflib, whatever the install looks like
    root = str(Path(__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH", "")
    env = {"PYTHONPATH": root + (os.pathsep + path if path else "")} if root not in path.split(os.pathsep) else {}
    try:
        with _environment(env):
            papermill.execute_notebook(str(notebook), str(output), parameters=parameters, kernel_name=kernel_name,
                                       progress_bar=False, cwd=str(cwd),
                                       extra_arguments=["--IPKernelApp.log_level=ERROR"])  # no TCP warning per run
    except PapermillExecutionError as exc:
        return f"{output}: cell {exc.cell_index} raised {exc.ename}: {exc.evalue}"
    return None


# --------------------------------------------------------------------------------------------
# the GPU guard


def _gpu_pids() -> tuple[str, set[int]] | None:
    """('nvidia'|'rocm', pids holding the GPU) or None where no GPU tooling is present."""
    if shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode == 0:
            return "nvidia", {int(x) for x in out.stdout.split() if x.strip().isdigit()}
    kfd = Path("/sys/class/kfd/kfd/proc")
    if kfd.is_dir():
        return "rocm", {int(p.name) for p in kfd.iterdir() if p.name.isdigit()}
    return None


def _descendants(roots: set[int]) -> set[int]:
    """`roots` and every process below them, read from /proc (no psutil)."""
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            parent[int(stat.parent.name)] = int(text[text.rindex(")") + 2:].split()[1])
    found = set(roots)
    grew = True
    while grew:
        grew = False
        for pid, ppid in parent.items():
            if ppid in found and pid not in found:
                found.add(pid)
                grew = True
    return found


class GpuGuard:
    """Wait for an idle GPU, watch it at 1 Hz during a run, and say whether the run was contended.

    Processes of this runner (and its server) are not contention. With no GPU tooling the guard
    says so once and lets every run through.
    """

    def __init__(self, idle_s: float = 90.0, wait_timeout_s: float = 3600.0, log=print):
        self.idle_s = idle_s
        self.wait_timeout_s = wait_timeout_s
        self.log = log
        self.vendor = None
        probe = _gpu_pids()
        self.vendor = probe[0] if probe else None
        self.own_roots: set[int] = {os.getpid()}
        self._seen: set[int] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.vendor is None:
            self.log("perflib: GPU guard: no GPU found (no nvidia-smi, no /sys/class/kfd); the guard does nothing")

    def foreign(self) -> set[int]:
        probe = _gpu_pids()
        if probe is None:
            return set()
        return probe[1] - _descendants(self.own_roots)

    def wait_idle(self) -> None:
        if self.vendor is None:
            return
        deadline = time.monotonic() + self.wait_timeout_s
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < self.idle_s:
            if time.monotonic() > deadline:
                raise PerflibError(f"GPU guard: the {self.vendor} GPU was not idle for {self.idle_s:.0f} s "
                                   f"within {self.wait_timeout_s:.0f} s")
            if self.foreign():
                idle_since = time.monotonic()
            time.sleep(1.0)

    def _watch(self) -> None:
        while not self._stop.wait(1.0):
            self._seen |= self.foreign()

    @contextlib.contextmanager
    def watching(self) -> Iterator[set[int]]:
        """Monitor during the block; the yielded set holds the foreign pids seen."""
        self._seen = set()
        if self.vendor is None:
            yield self._seen
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        try:
            yield self._seen
        finally:
            self._stop.set()
            self._thread.join()
            self._seen |= self.foreign()


# --------------------------------------------------------------------------------------------
# the runner


@dataclass(frozen=True)
class CampaignResult:
    """What a campaign run did: runs measured, skipped as complete, failed (with why)."""

    done: tuple[str, ...]
    skipped: tuple[str, ...]
    failed: tuple[tuple[str, str], ...]
    contended: tuple[str, ...] = ()
    page: Path | None = None


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def serve(campaign: Campaign, arm: ArmSpec, backend: BackendSpec, log_path: Path) -> Iterator[tuple[str, Any]]:
    """The (arm, backend) server: (base_url, handle or None). Starts a local llama-server once."""
    if arm.url or backend.url:
        yield (arm.url or backend.url).rstrip("/"), None
        return
    from perflib import server

    binary = Path(arm.binary) if arm.binary else server.ensure_llama_server(progress=True)
    if campaign.model.path:
        model = Path(campaign.model.path)
        if not model.is_absolute():
            model = campaign.path.parent / model
    else:
        model = server.ensure_test_model(**campaign.model.random)
    parallel = max(campaign.batches)
    ctx = server.ctx_size_for(parallel, max(campaign.contexts), campaign.decode_tokens)
    with _environment({**backend.env, **arm.env}):
        handle = server.start_llama_server(model, parallel=parallel, ctx_size=ctx, log_path=log_path,
                                           threads=backend.threads, extra_args=[*backend.extra_args, *arm.extra_args],
                                           binary=binary)
    try:
        yield handle.base_url, handle
    finally:
        handle.stop()


def run_campaign(campaign: Campaign, data_dir: Path | None = None, reports_dir: Path | None = None,
                 guard: bool = False, only: dict[str, set[str]] | None = None, kernel_name: str | None = None,
                 progress: bool = True, write_page: bool = True, guard_idle_s: float = 90.0,
                 max_attempts: int = 5, notebooks: Path = NOTEBOOKS) -> CampaignResult:
    """Measure every incomplete run of the campaign, then derive the tables and write the page."""
    from tqdm import tqdm

    try:
        import jupyter_client  # noqa: F401
        import papermill  # noqa: F401
    except ImportError as exc:
        raise PerflibError(f"`perflib campaign run` needs the notebook extras ({exc.name} is missing): "
                           "pip install 'perflib[notebooks]'") from None
    data = Path(data_dir or campaign.data_dir)
    runs = [r for r in expand(campaign, only) if not campaign.backend(r.backend).trace_only]  # nothing to serve
    todo = [r for r in runs if not is_complete(r.run_dir(data))]
    skipped = [r.label for r in runs if r not in todo]
    kernel = kernel_name or find_kernel()
    failed: list[tuple[str, str]] = []
    for run in runs:  # complete runs whose trace was never attributed: profile them (no server needed)
        if run not in todo and campaign.backend(run.backend).profiler.kind != "none" and _needs_profile(run.run_dir(data)):
            error = _profile(campaign, run, data, kernel, notebooks)
            if error:
                failed.append((run.label, error))
    gpu = GpuGuard(idle_s=guard_idle_s, log=lambda m: print(m, file=sys.stderr)) if guard else None
    done: list[str] = []
    contended: list[str] = []
    bar = tqdm(total=len(todo), desc=f"campaign {campaign.name}", unit="run", file=sys.stderr, disable=not progress)
    groups: dict[tuple[str, str], list[RunSpec]] = {}
    for run in todo:
        groups.setdefault((run.arm, run.backend), []).append(run)
    for (arm_name, backend_name), group in groups.items():
        arm, backend = campaign.arm(arm_name), campaign.backend(backend_name)
        log_path = data / "raw" / campaign.name / arm_name / backend_name / "server.log"
        try:
            server_cm = serve(campaign, arm, backend, log_path)
            base_url, handle = server_cm.__enter__()
        except PerflibError as exc:
            for run in group:
                mark_incomplete(run.run_dir(data), run, f"server for {arm_name}/{backend_name} did not start: {exc}")
                failed.append((run.label, str(exc).splitlines()[0]))
                bar.update(1)
            continue
        server_params: dict[str, Any] = {}
        if handle is not None:
            server_params = {"server_flags": list(handle.flags), "server_log": str(handle.log_path),
                             "server_version": handle.identity().get("version")}
            if gpu is not None:
                gpu.own_roots.add(handle.process.pid)
        try:
            for run in group:
                bar.set_postfix_str(run.label)
                error = _one_run(campaign, run, data, {"base_url": base_url, **server_params}, kernel, notebooks,
                                 gpu, max_attempts, contended)
                if error:
                    failed.append((run.label, error))
                else:
                    done.append(run.label)
                bar.update(1)
        finally:
            server_cm.__exit__(None, None, None)
    bar.close()
    page = None
    if write_page:
        from perflib import report

        page = report.write_report(campaign, data_dir=data, reports_dir=reports_dir)
    return CampaignResult(tuple(done), tuple(skipped), tuple(failed), tuple(contended), page)


def _one_run(campaign: Campaign, run: RunSpec, data: Path, server_params: dict[str, Any], kernel: str,
             notebooks: Path, gpu: GpuGuard | None, max_attempts: int, contended: list[str]) -> str | None:
    """Measure one run (redoing contended attempts under the guard); returns the error or None.

    The executed notebook is written beside the run folder while it runs (run_level moves an
    incomplete folder aside and starts it afresh) and then moved into it as `collect.ipynb`.
    """
    run_dir = run.run_dir(data)
    params = {"campaign_file": str(campaign.path), "arm": run.arm, "backend": run.backend, "batch": run.batch,
              "context": run.context, "repeat": run.repeat, "data_dir": str(data), **server_params}
    scratch = run_dir.parent / f".{run_dir.name}.collect.ipynb"
    for attempt in range(1, max_attempts + 1):
        if gpu is not None:
            gpu.wait_idle()
        guard_cm = gpu.watching() if gpu is not None else contextlib.nullcontext(set())
        with guard_cm as seen:
            error = execute_notebook(notebooks / "collect.ipynb", scratch, params, kernel, cwd=run_dir.parent)
        run_dir.mkdir(parents=True, exist_ok=True)
        if scratch.exists():
            scratch.replace(run_dir / "collect.ipynb")
        if seen:
            contended.append(f"{run.label} attempt {attempt}: GPU pids {sorted(seen)}")
            if attempt < max_attempts:
                n = 1
                while run_dir.with_name(f"{run_dir.name}.contended-{n}").exists():
                    n += 1
                run_dir.rename(run_dir.with_name(f"{run_dir.name}.contended-{n}"))
                continue
            mark_incomplete(run_dir, run, f"GPU guard: all {max_attempts} attempts saw other GPU processes")
            return f"contended on all {max_attempts} attempts"
        if error:
            mark_incomplete(run_dir, run, error)
            return error
        break
    if campaign.backend(run.backend).profiler.kind != "none":
        return _profile(campaign, run, data, kernel, notebooks)
    return None


def _needs_profile(run_dir: Path) -> bool:
    """True where `profile.ipynb` is missing from the run folder or recorded an exception."""
    path = run_dir / "profile.ipynb"
    if not path.is_file():
        return True
    try:
        meta = json.loads(path.read_text()).get("metadata", {}).get("papermill", {})
    except (OSError, ValueError):
        return True
    return bool(meta.get("exception"))


def _profile(campaign: Campaign, run: RunSpec, data: Path, kernel: str, notebooks: Path = NOTEBOOKS) -> str | None:
    """Execute profile.ipynb for one run into its folder; returns the error or None."""
    run_dir = run.run_dir(data)
    return execute_notebook(notebooks / "profile.ipynb", run_dir / "profile.ipynb", {
        "campaign_file": str(campaign.path), "arm": run.arm, "backend": run.backend, "batch": run.batch,
        "context": run.context, "repeat": run.repeat, "data_dir": str(data)}, kernel, cwd=run_dir)


def replace_data_dir(campaign: Campaign, data_dir: Path | None, reports_dir: Path | None) -> Campaign:
    """The campaign with `--data`/`--reports` overrides applied."""
    return replace(campaign, data_dir=Path(data_dir).resolve() if data_dir else campaign.data_dir,
                   reports_dir=Path(reports_dir).resolve() if reports_dir else campaign.reports_dir)


def run_folders(campaign: Campaign, data_dir: Path | None = None) -> list[tuple[str, str, Path]]:
    """(arm, backend, folder) of every run folder on disk, sorted; attempt copies are left out."""
    root = campaign.raw_dir(data_dir)
    found = []
    if not root.is_dir():
        return found
    for arm_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for backend_dir in sorted(p for p in arm_dir.iterdir() if p.is_dir()):
            runs = [p for p in backend_dir.iterdir() if p.is_dir() and RUN_DIR_RE.match(p.name)]
            for run_dir in sorted(runs, key=lambda p: tuple(int(g) for g in RUN_DIR_RE.match(p.name).groups())):
                found.append((arm_dir.name, backend_dir.name, run_dir))
    return found


def trace_only_runs(campaign: Campaign, data_dir: Path | None = None) -> list[tuple[RunSpec, Path | None]]:
    """(run, its trace file or None where it is missing) for every run of the trace-only backends."""
    data = Path(data_dir or campaign.data_dir)
    out = []
    for run in expand(campaign):
        if campaign.backend(run.backend).trace_only:
            path = trace_path(campaign, run, data)
            out.append((run, path if path is not None and path.exists() else None))
    return out
