"""docs/CATALOGUE.md, written from perflib's registries: what perflib reads, measures and decides with.

    python scripts/catalogue.py            # (re)write docs/CATALOGUE.md
    python scripts/catalogue.py --check    # exit 1 when the committed page is not what this writes

The prose is docs/src/catalogue.md; each `<!-- section: NAME -->` line there is replaced by the section
`SECTIONS[NAME]` renders from the registry itself: the trace formats (`perflib.traces.FORMATS`) and read
modes, the `/metrics` dialects, the profiler kinds, the server presets and command placeholders, the
measurements (`perflib.verdicts.MEASUREMENTS`), the candidates of each shipped playbook and the classes of
each shipped kernel-class table. A registry entry that is a dataclass is shown with every field it has,
so a field added to an entry (a flag on a measurement, say) shows up here at the next `make docs`.

Where a registry of entries does not exist yet (`perflib.metrics.DIALECTS` as a tuple of names,
`perflib.server.PROFILER_KINDS` absent), the section is written from where those are defined today
(the dialect's figure function and metric table; the profiler module's table); once the registry
exists, from it. `tests/test_catalogue.py` regenerates the page and compares it with the committed one.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import enum
import inspect
import re
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from the clone: its perflib, not another install's
    sys.path.insert(0, str(REPO))

import perflib.metrics as metrics  # noqa: E402
import perflib.server as server  # noqa: E402
from perflib.classes import TABLES_DIR, builtin_backends, load_builtin  # noqa: E402
from perflib.config import loader  # noqa: E402
from perflib.traces import FORMATS, ReadMode, TraceFormat  # noqa: E402
from perflib.verdicts import MEASUREMENTS  # noqa: E402

SOURCE = REPO / "docs" / "src" / "catalogue.md"
PAGE = REPO / "docs" / "CATALOGUE.md"
MARKER = re.compile(r"^<!-- section: ([a-z_0-9]+) -->$", re.M)
HEADER = ("<!-- Written by scripts/catalogue.py from perflib's registries and docs/src/catalogue.md: edit those,\n"
          "     then run `make docs`. tests/test_catalogue.py fails when this page is stale. -->\n\n")


# --- cells ---------------------------------------------------------------------------------------------

def esc(text: str) -> str:
    """Text safe in a table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def code(text: str) -> str:
    """A code span that holds any backtick in the text (a longer fence around it)."""
    text = esc(text)
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}" if text else ""


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def line(cells: Sequence[str]) -> str:
        return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"

    return "\n".join([line(header), line(["---"] * len(header)), *map(line, rows)])


def first_paragraph(doc: str | None) -> str:
    """A docstring's first paragraph, on one line."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def first_line(doc: str | None) -> str:
    """A docstring's first sentence line (its first non-empty line)."""
    return next((ln.strip() for ln in (doc or "").splitlines() if ln.strip()), "")


def attribute_docs(cls: type) -> dict[str, str]:
    """The docstrings written under a class's attributes (`x: int` then `\"\"\"...\"\"\"`), by name, its bases'
    included: what Python keeps nowhere at run time, read from each class's source where it has one."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):  # a built-in, or a class made at run time: no source
            continue
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, after in zip(body, body[1:], strict=False):
            target = (node.target if isinstance(node, ast.AnnAssign)
                      else node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
            if (isinstance(target, ast.Name) and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)):
                docs[target.id] = " ".join(after.value.value.split())
    return docs


def reference(value: Callable[..., Any]) -> str:
    """`module:function` of a function (the form the registries write)."""
    return f"{value.__module__}:{value.__qualname__}"


def show(value: Any) -> str:
    """One field's value in a cell: a name or number as code, words as text, tuples joined, None and False empty."""
    if value is None or value is False or value == () or value == "":
        return ""
    if value is True:
        return "yes"
    if isinstance(value, enum.Enum):
        return code(value.value)
    if dataclasses.is_dataclass(value):  # a nested entry: its first field names it
        return show(getattr(value, dataclasses.fields(value)[0].name))
    if isinstance(value, tuple | list | frozenset | set):
        if len(value) > 8 and all(dataclasses.is_dataclass(v) for v in value):
            return f"{len(value)} × `{type(next(iter(value))).__name__}`"
        return ", ".join(show(v) for v in value)
    if callable(value):
        return code(reference(value))
    if isinstance(value, str) and " " in value.strip():  # words, not a name
        return esc(value)
    return code(value) if isinstance(value, str | int | float) else esc(repr(value))


def field_table(entries: Sequence[Any], skip: Sequence[str] = (), render: Mapping[str, Callable[[Any], str]] = {},
                 ) -> str:
    """One row per dataclass entry, one column per field (those in `skip` left out), each field shown with
    `render[field]` or `show`."""
    fields = [f.name for f in dataclasses.fields(entries[0]) if f.name not in skip]
    rows = [[render.get(n, show)(getattr(e, n)) for n in fields] for e in entries]
    return table(fields, rows)


def field_legend(cls: type, skip: Sequence[str] = ()) -> str:
    """What each field of an entry means, from the docstrings under the class's attributes."""
    docs = attribute_docs(cls)
    items = [f"`{f.name}`: {docs[f.name]}" for f in dataclasses.fields(cls) if f.name in docs and f.name not in skip]
    return "\n".join(f"- {item}" for item in items)


# --- trace formats -------------------------------------------------------------------------------------

def detect_sources() -> dict[str, str]:
    """Each format's `detect` as written in `FORMATS` (a lambda's body), by format id."""
    module = inspect.getmodule(TraceFormat)
    text = inspect.getsource(module)
    found: dict[str, str] = {}
    for node in ast.walk(ast.parse(text)):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "TraceFormat" and len(node.args) >= 3
                and isinstance(node.args[0], ast.Constant)):
            detect = node.args[2]
            body = detect.body if isinstance(detect, ast.Lambda) else detect
            found[node.args[0].value] = " ".join((ast.get_source_segment(text, body) or ast.unparse(body)).split())
    return found


def section_formats() -> str:
    detects = detect_sources()
    modes = ", ".join(m.value for m in ReadMode)

    def detected(fmt: TraceFormat) -> str:
        if fmt.name in detects:
            return code(detects[fmt.name])
        return code(reference(fmt.detect)) + (f": {esc(first_line(fmt.detect.__doc__))}" if fmt.detect.__doc__ else "")

    has_modes = any(f.name == "modes" for f in dataclasses.fields(TraceFormat))
    rows = [[str(i), code(f.name), esc(f.what), detected(f), code(f.reader), code(f.writer or ""), code(f.suffix),
             show(f.modes) if has_modes else modes]  # type: ignore[attr-defined]
            for i, f in enumerate(FORMATS.values(), 1)]
    extra = [f for f in dataclasses.fields(TraceFormat)
             if f.name not in ("name", "what", "detect", "reader", "writer", "suffix", "modes")]
    for f in extra:  # a field added to the registry shows up as a column
        for row, fmt in zip(rows, FORMATS.values(), strict=True):
            row.append(show(getattr(fmt, f.name)))
    header = ["order", "id", "what", "detected by (`p`: the probed file)", "reader", "writer", "suffix", "read modes",
              *(f.name for f in extra)]
    legend = field_legend(TraceFormat)
    return f"{table(header, rows)}\n\n{legend}"


def section_read_modes() -> str:
    docs = attribute_docs(ReadMode)
    return table(["mode", "`ReadMode`", "what a read keeps"],
                 [[code(m.value), code(m.name), esc(docs.get(m.name, ""))] for m in ReadMode])


# --- dialects, profilers, presets --------------------------------------------------------------------------

def registry_entries(registry: Any) -> list[Any] | None:
    """The entries of a registry of dataclasses (a mapping of them), or None for a plain tuple of names."""
    if isinstance(registry, Mapping) and registry and all(dataclasses.is_dataclass(v) for v in registry.values()):
        return list(registry.values())
    return None


def section_dialects() -> str:
    entries = registry_entries(metrics.DIALECTS)
    if entries is not None:
        return field_table(entries)
    # Today: DIALECTS is a tuple of names; each dialect's figures are one function (DERIVE) over its
    # metric table (NAME_TABLES). Late: only while DIALECTS is no registry of entries.
    from perflib.metrics.figures import DERIVE

    rows = []
    for name in metrics.DIALECTS:
        names = metrics.NAME_TABLES[name]
        families = sorted({n.split(":")[0] + ":" if ":" in n else n.split("_")[0] + "_" for m in names for n in m.names})
        rows.append([code(name), esc(first_line(DERIVE[name].__doc__)), str(len(names)),
                     ", ".join(code(f + "*") for f in families)])
    return table(["dialect", "its figures (`perflib.metrics.figures`)", "canonical metrics read", "metric families"],
                 rows)


def dialect_metrics() -> str:
    """Each dialect's canonical metrics and the server names that carry them (first found wins)."""
    if not hasattr(metrics, "NAME_TABLES"):
        return ""
    parts = []
    for name, specs in metrics.NAME_TABLES.items():
        rows = [[code(s.canonical), s.kind, ", ".join(code(n) for n in s.names), show(s.by_label), show(s.sampled)]
                for s in specs]
        parts.append(f"<details><summary>{name}: {len(specs)} canonical metrics</summary>\n\n"
                     f"{table(['canonical', 'kind', 'server names (first found wins)', 'by label', 'sampled'], rows)}"
                     "\n\n</details>")
    return "\n\n".join(parts)


PROFILER_DOC_ROW = re.compile(r"^\| `([a-z0-9]+)` \| (.*?) \| (.*?) \|$", re.M)


def section_profilers() -> str:
    registry = getattr(server, "PROFILER_KINDS", None)
    entries = registry_entries(registry)
    if entries is not None:
        return field_table(entries)
    # Today: the kinds a campaign may name are a tuple in perflib.config.model, the profilers perflib
    # runs are LIVE_KINDS, and how each captures is the table in perflib.server.profilers' docstring.
    # Late: only while perflib.server has no registry of kinds.
    from perflib.config.model import PROFILER_KINDS
    from perflib.server import profilers

    described = {m.group(1): (m.group(2), m.group(3)) for m in PROFILER_DOC_ROW.finditer(profilers.__doc__ or "")}
    rows = []
    for kind in PROFILER_KINDS:
        how, capture = described.get(kind, ("committed Kineto files named by `profiler.output` (no live capture)", ""))
        rows.append([code(kind), "yes" if kind in profilers.LIVE_KINDS else "", how, capture])
    return table(["`profiler.kind`", "run by perflib", "how the capture is made", "the capture, once the server has "
                  "stopped"], rows)


def section_presets() -> str:
    presets = list(server.PRESETS.values())
    render = {"command": lambda parts: code(" ".join(parts)), "version": lambda parts: code(" ".join(parts)),
              "threads_flag": lambda parts: code(" ".join(parts))}
    return field_table(presets, render=render)


def section_placeholders() -> str:
    return table(["placeholder", "stands for"], [[code("{" + k + "}"), esc(v)] for k, v in server.PLACEHOLDERS.items()])


def section_build_backends() -> str:
    return ", ".join(code(b) for b in server.BACKENDS)


# --- measurements, playbooks, classes ---------------------------------------------------------------------

def section_measurements() -> str:
    """Every measurement with its unit and meaning; each boolean field (flag) of `Measurement` is a column."""
    entries = list(MEASUREMENTS.values())
    fields = [f for f in dataclasses.fields(entries[0]) if f.name not in ("name", "func", "unit", "doc")]
    flags = [f.name for f in fields if all(isinstance(getattr(e, f.name), bool) for e in entries)]
    others = [f.name for f in fields if f.name not in flags]
    reads = "trace" if "trace" in flags else None
    rows = []
    for m in entries:
        row = [code(m.name), code(m.unit)]
        if reads:
            row.append("kernel traces" if m.trace else "client and counters (runs.csv)")
        row += [("yes" if getattr(m, f) else "") for f in flags if f != reads]
        row += [show(getattr(m, f)) for f in others]
        row.append(esc(m.doc))
        rows.append(row)
    header = ["measurement", "unit", *(["reads"] if reads else []), *(f for f in flags if f != reads), *others,
              "what it measures"]
    docs = attribute_docs(type(entries[0]))
    legend = "\n".join(f"- `{f}`: {docs[f]}" for f in (*flags, *others) if f in docs)
    return table(header, rows) + (f"\n\n{legend}" if legend else "")


def section_playbooks() -> str:
    parts = []
    for path in sorted(loader.PLAYBOOKS.glob("*.yaml")):
        cands = [c for c, _ in loader.read_playbook(path.stem)]
        rows = [[code(c.id), esc(c.label), code(c.measure), ", ".join(code(k) for k in c.classes),
                 code(c.confirmed), code(c.ruled_out), esc(c.question)] for c in cands]
        question = loader.playbook_question(path.stem)
        parts.append(f"### `playbook: {path.stem}`\n\n{esc(question)} ({len(cands)} candidates, "
                     f"`perflib/data/playbooks/{path.name}`)\n\n"
                     + table(["id", "label", "measure", "classes", "confirmed", "ruled out", "question"], rows))
    return "\n\n".join(parts)


def section_classes() -> str:
    rows = []
    for name in builtin_backends():
        loaded = load_builtin(name)
        classes = list(dict.fromkeys(r.kernel_class for r in loaded.rules))
        rows.append([code(name), str(len(loaded.rules)), ", ".join(code(c) for c in classes)])
    shared = sorted(p.stem for p in TABLES_DIR.glob("_*.yaml"))
    note = (f"\n\nShared rules that tables put `before:` their own: {', '.join(code(s) for s in shared)} "
            "(their classes are listed in each table that takes them)." if shared else "")
    return table(["`kernel_classes:`", "rules", "classes, in rule order (a kernel no rule matches is `other`)"],
                 rows) + note


# --- campaign file keys -------------------------------------------------------------------------------------

TYPE_WORDS = {str: "text", int: "integer", float: "number", bool: "true or false", Path: "path", Any: "any"}


def holds(tp: Any) -> str:
    """What a key's value is, in words, its nested entries linked to their own table."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        kinds = [holds(a) for a in args if a is not type(None)]
        return " or ".join(kinds) + (" or null" if type(None) in args else "")
    if origin is tuple:
        return f"list of {holds(args[0])}" if len(args) == 2 and args[1] is Ellipsis else "list"
    if origin is dict:
        return f"mapping of {holds(args[0])} to {holds(args[1])}"
    if origin is typing.Literal:
        return "one of " + ", ".join(code(a) for a in args)
    if dataclasses.is_dataclass(tp):
        return f"[{tp.__name__}](#{tp.__name__.lower()})"
    return TYPE_WORDS.get(tp, getattr(tp, "__name__", str(tp)))


def nested(tp: Any) -> list[type]:
    """The dataclasses a key's type holds (its entries' own keys)."""
    if dataclasses.is_dataclass(tp):
        return [tp]
    return [c for a in typing.get_args(tp) for c in nested(a)]


def default_of(f: dataclasses.Field) -> str:
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
        return "required"
    value = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    if value is None or value == () or value == {} or value == "":
        return ""
    if dataclasses.is_dataclass(value) or (isinstance(value, tuple) and any(map(dataclasses.is_dataclass, value))):
        return "see below"
    return code(str(value))


def accepts(f: dataclasses.Field) -> str:
    """The values a key accepts beyond its type: its choices, or what its check says it expects."""
    meta = f.metadata
    if meta.get("choices"):
        return "one of " + ", ".join(code(c) for c in meta["choices"])
    said = " ".join((getattr(meta.get("check"), "__doc__", None) or "").split())
    if not said.startswith("A check:"):  # a check that does not say what it expects in words
        return ""
    return esc(said.removeprefix("A check:").split(". ")[0].split("; None passes")[0].strip().rstrip("."))


def section_campaign_keys() -> str:
    """One table per declared class of a campaign file, from `perflib.config.model` (`Campaign` down)."""
    from perflib.config.declare import keys_of  # late: the declarations, read only for this section
    from perflib.config.model import Campaign  # late: the same

    order: list[type] = [Campaign]
    parts = []
    for cls in order:
        hints, docs = typing.get_type_hints(cls), attribute_docs(cls)
        rows = []
        for name, f in keys_of(cls).items():
            tp = f.metadata.get("yaml") or hints[name]
            order.extend(c for c in nested(hints[name]) if c not in order)
            rows.append([code(name), holds(tp), default_of(f), accepts(f), esc(docs.get(name, ""))])
        title = "The file's top level." if cls is Campaign else first_paragraph(cls.__doc__)
        parts.append(f"### {cls.__name__}\n\n{esc(title)}\n\n"
                     + table(["key", "holds", "default", "accepts", "what"], rows))
    return "\n\n".join(parts)


SECTIONS: dict[str, Callable[[], str]] = {
    "formats": section_formats, "read_modes": section_read_modes, "dialects": section_dialects,
    "dialect_metrics": dialect_metrics, "profilers": section_profilers, "presets": section_presets,
    "placeholders": section_placeholders, "build_backends": section_build_backends,
    "measurements": section_measurements, "playbooks": section_playbooks, "classes": section_classes,
    "campaign_keys": section_campaign_keys,
}
"""Each section the prose places with `<!-- section: NAME -->`, by name."""


def render(source: str) -> str:
    """The page: the prose with each section marker replaced by its section (an unknown or unused name is
    an error)."""
    used = MARKER.findall(source)
    unknown, unused = sorted(set(used) - set(SECTIONS)), sorted(set(SECTIONS) - set(used))
    if unknown or unused:
        raise ValueError(f"{SOURCE.relative_to(REPO)}: unknown section markers {unknown}, sections never placed "
                         f"{unused}")
    return HEADER + MARKER.sub(lambda m: SECTIONS[m.group(1)](), source)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed page differs from its sources")
    args = parser.parse_args(argv)
    text = render(SOURCE.read_text(encoding="utf-8"))
    if args.check:
        stale = not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != text
        if stale:
            print(f"{PAGE.relative_to(REPO)} is stale: run `make docs`", file=sys.stderr)
        return int(stale)
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
