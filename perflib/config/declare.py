"""YAML keys declared once, as dataclass fields: the validator and the constructor are derived from them.

A campaign file's keys are the fields of frozen dataclasses (`perflib.config.model`). Their type
annotations say what a key holds, and `key(...)` metadata adds what a type cannot: the YAML type
where it differs from the field's (a path given as a string), a range check, a conversion with the
file's folder at hand, and whether one value may stand for a list of one. `build(cls, raw, ...)`
walks a parsed YAML document against those declarations and returns the dataclass, or raises an
`InputError` that names the file, the key path and its line, what was expected and what was found,
with the nearest valid key or choice for a typo.

Supported annotations: `str`, `int`, `float` (an int is accepted), `bool`, `X | None`,
`tuple[X, ...]` (a YAML list), `dict[str, str]` (a mapping whose values are kept as strings),
`dict[str, Any]` (any mapping) and nested dataclasses; `key(choices=...)` limits a string.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Union

from perflib.errors import InputError
from perflib.rundir import SAFE_NAME, name_problem


@dataclass(frozen=True)
class Context:
    """Where a document came from: its file, its line map, and the folder its paths are relative to."""

    file: Path
    lines: Lines

    @property
    def folder(self) -> Path:
        return self.file.parent

    def error(self, path: str, expected: str, found: str | None) -> InputError:
        return InputError(self.file, self.lines.where(path or "<top>"), expected, found)


def key(*, choices: tuple[str, ...] = (), check: Callable[[Any], str | None] | None = None, yaml: Any = None,
        resolve: Callable[[Any, Context], Any] | None = None, one_or_many: bool = False,
        read: bool = True) -> dict[str, Any]:
    """Field metadata of a YAML key.

    choices: the values a string may take (a typo gets the nearest one suggested).
    check: value -> None when good, else what was expected (e.g. "a positive integer").
    yaml: the type the YAML holds where it is not the field's type (the field's value is then
      `resolve(value, context)`); resolve: the conversion, also with no `yaml` given.
    one_or_many: a tuple field that also takes one item in place of a list of one.
    read: False for a field that is not a YAML key (set by the loader).
    """
    return {"choices": tuple(choices), "check": check, "yaml": yaml, "resolve": resolve, "one_or_many": one_or_many,
            "read": read}


def positive(value: Any) -> str | None:
    """A check: an integer of at least 1."""
    return None if value >= 1 else "a positive integer"


def non_negative(value: Any) -> str | None:
    """A check: a number (or integer) of at least 0; None passes (an optional key left null)."""
    return None if value is None or value >= 0 else "a number of at least 0"


def above_zero(value: Any) -> str | None:
    """A check: a number above 0 (a bandwidth, a size); None passes."""
    return None if value is None or value > 0 else "a number above 0"


def optional_positive(value: Any) -> str | None:
    """A check: an integer of at least 1, or null."""
    return None if value is None or value >= 1 else "a positive integer"


def safe_name(value: Any) -> str | None:
    """A check: a name that becomes a folder or file name (`perflib.rundir.SAFE_NAME`): no `..`, no `/`."""
    return None if name_problem(value) is None else SAFE_NAME


def non_empty_positive(values: Any) -> str | None:
    """A check: a non-empty list of integers of at least 1."""
    return None if values and all(v >= 1 for v in values) else "a non-empty list of positive integers"


# ------------------------------------------------------------------------------------------ the line map


class Lines:
    """Line numbers of key paths in a YAML document, from its composed nodes (1-based).

    Each node is walked once: an alias (`*name`) is not followed into the node it names, so a
    document of nested aliases (an "alias bomb") costs its size in the file, not its expanded size.
    The keys under an alias are found at the anchor's key path.
    """

    def __init__(self, text: str, node: Any = None):
        import yaml  # late: 16 ms (measured) that `perflib sweep` skips; it imports config, reads no file

        self.lines: dict[str, int] = {}
        if node is None:
            try:
                node = yaml.compose(text, Loader=yaml.SafeLoader)
            except (yaml.YAMLError, RecursionError):
                node = None
        if node is not None:
            self._walk(node)

    def _walk(self, root: Any) -> None:
        import yaml  # late: see __init__

        seen: set[int] = set()
        stack = [(root, "")]
        while stack:  # iterative: a deeply nested document cannot exhaust the Python stack here
            node, path = stack.pop()
            self.lines.setdefault(path, node.start_mark.line + 1)
            if id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, yaml.MappingNode):
                for key_node, value in reversed(node.value):
                    sub = f"{path}.{key_node.value}" if path else str(key_node.value)
                    self.lines[sub] = key_node.start_mark.line + 1
                    stack.append((value, sub))
            elif isinstance(node, yaml.SequenceNode):
                for i in range(len(node.value) - 1, -1, -1):
                    stack.append((node.value[i], f"{path}[{i}]"))

    def where(self, path: str) -> str:
        line = self.lines.get(path)
        return f"{path} (line {line})" if line else path


# ---------------------------------------------------------------------------------------------- types


_NAMES = {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a mapping",
          bool: "true/false"}


def found(value: Any) -> str:
    """How a found value is named in an error: its kind, and its text for a scalar."""
    kind = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "nothing (null)"}.get(type(value), type(value).__name__)
    return f"{kind} {repr(value)[:40]}" if not isinstance(value, dict | list) else kind


@dataclass(frozen=True)
class _Shape:
    """What one annotation accepts: the YAML types, and what a list's items or a mapping holds."""

    yaml_types: tuple[type, ...]
    item: Any = None  # the annotation of a tuple's items
    record: type | None = None  # a nested dataclass
    choices: tuple[str, ...] = ()
    strings: bool = False  # a mapping whose values are kept as str

    @property
    def expected(self) -> str:
        return " or ".join(_NAMES.get(t, t.__name__) for t in self.yaml_types)


def _strip_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _shape(annotation: Any, one_or_many: bool = False) -> _Shape:
    annotation = _strip_optional(annotation)
    origin = typing.get_origin(annotation)
    if annotation is float:
        return _Shape((int, float))
    if annotation in (int, str, bool):
        return _Shape((annotation,))
    if dataclasses.is_dataclass(annotation):
        return _Shape((dict,), record=annotation)
    if origin is tuple:
        item = typing.get_args(annotation)[0]
        inner = _shape(item)
        return _Shape((list, *inner.yaml_types) if one_or_many else (list,), item=item)
    if origin is dict:
        value_type = typing.get_args(annotation)[1]
        return _Shape((dict,), strings=value_type is str)
    raise TypeError(f"no YAML shape for annotation {annotation!r}")  # pragma: no cover - a declaration bug


MAX_NUMBER = 1e15
"""The largest magnitude of a number key (`perflib.safeinput.MAX_NUMBER`); `.nan` and `.inf` are refused."""
MAX_INT = 2 ** 63 - 1
"""Integer keys fit int64, as every table downstream holds them."""


def _is(value: Any, yaml_types: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in yaml_types
    return isinstance(value, yaml_types)


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def keys_of(cls: type) -> dict[str, dataclasses.Field]:
    """The YAML keys a dataclass declares (fields not marked `read=False`), in declaration order."""
    return {f.name: f for f in dataclasses.fields(cls) if f.metadata.get("read", True)}


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


# ---------------------------------------------------------------------------------------------- build


def build(cls: type, raw: Any, ctx: Context, key_path: str = "", **extra: Any) -> Any:
    """The dataclass `cls` from the mapping `raw`, every key checked against its declaration.

    `key_path` is where `raw` stands in the document (for errors); `extra` sets fields that are not
    YAML keys. Checks run in document order, then the required keys, as the YAML reads.
    """
    path = key_path
    if not isinstance(raw, dict):
        raise ctx.error(path, "a mapping", found(raw))
    declared = keys_of(cls)
    hints = _hints(cls)
    values: dict[str, Any] = dict(extra)
    for name, value in raw.items():
        sub = f"{path}.{name}" if path else str(name)
        if name not in declared:
            close = difflib.get_close_matches(str(name), list(declared), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ctx.error(sub, f"one of the keys {', '.join(sorted(declared))}", f"unknown key {name!r}{hint}")
        values[name] = _field_value(declared[name], hints[name], value, ctx, sub)
    for name, f in declared.items():
        if _required(f) and name not in raw:
            raise ctx.error(path, f"the required key {name!r}", "it missing")
    return cls(**values)


def _field_value(f: dataclasses.Field, annotation: Any, value: Any, ctx: Context, key_path: str) -> Any:
    meta = f.metadata
    shape = _shape(meta.get("yaml") or annotation, meta.get("one_or_many", False))
    if meta.get("choices"):
        shape = dataclasses.replace(shape, choices=meta["choices"])
    converted = _value(shape, value, ctx, key_path)
    check = meta.get("check")
    if check is not None:
        expected = check(converted)
        if expected:
            raise ctx.error(key_path, expected, repr(value))
    resolve = meta.get("resolve")
    return resolve(converted, ctx) if resolve is not None else converted


def _value(shape: _Shape, value: Any, ctx: Context, key_path: str) -> Any:
    if not _is(value, shape.yaml_types):
        raise ctx.error(key_path, shape.expected, found(value))
    if shape.choices and value not in shape.choices:
        close = difflib.get_close_matches(str(value), shape.choices, n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ctx.error(key_path, f"one of {', '.join(shape.choices)}", f"{value!r}{hint}")
    if shape.record is not None:
        return build(shape.record, value, ctx, key_path)
    if shape.item is not None:
        items = value if isinstance(value, list) else [value]
        inner = _shape(shape.item)
        return tuple(_value(inner, item, ctx, f"{key_path}[{i}]" if isinstance(value, list) else key_path)
                     for i, item in enumerate(items))
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()} if shape.strings else dict(value)
    if float in shape.yaml_types and not isinstance(value, bool):
        if not math.isfinite(value) or abs(value) > MAX_NUMBER:
            raise ctx.error(key_path, f"a finite number (magnitude at most {MAX_NUMBER:g})", found(value))
        return float(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        raise ctx.error(key_path, f"an integer of magnitude at most {MAX_INT}", found(value))
    return value


def resolve_path(value: str, ctx: Context) -> Path:
    """A `resolve`: a path relative to the campaign file's folder, made absolute."""
    path = Path(value)
    return (path if path.is_absolute() else ctx.folder / path).resolve()
