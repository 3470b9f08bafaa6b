"""The layers of docs/ARCHITECTURE.md hold in the code: every module is in the table, no import goes
up a layer, and no two modules import each other round a cycle (function-local imports included)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from support import REPO

PACKAGE = REPO / "perflib"
ARCHITECTURE = REPO / "docs" / "ARCHITECTURE.md"


def modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the package."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(REPO).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = path
    return out


def declared_layers() -> dict[str, int]:
    """Dotted name -> layer number, from the table of docs/ARCHITECTURE.md."""
    layers: dict[str, int] = {}
    for line in ARCHITECTURE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not re.match(r"^\d ", cells[0]):
            continue
        layer = int(cells[0].split()[0])
        (name,) = re.findall(r"`([\w.]+)`", cells[1])
        top = "perflib" if name == "perflib" else f"perflib.{name}"
        layers[top] = layer
        for inner in re.findall(r"`(\w+)`:", cells[3]):
            layers[f"{top}.{inner}"] = layer
    return layers


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its body (a submodule's own package and
    the root package named only to reach a submodule are not edges)."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = name.split(".") if is_package else name.split(".")[:-1]
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                targets = subs if subs and len(subs) == len(node.names) else [base, *subs]
            for target in targets:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    edges[name].add(target)
    return edges


def test_every_module_is_in_the_architecture_table_and_nothing_else():
    mods, layers = modules(), declared_layers()
    assert sorted(set(mods) - set(layers)) == [], "modules missing from docs/ARCHITECTURE.md"
    assert sorted(set(layers) - set(mods)) == [], "docs/ARCHITECTURE.md names modules that do not exist"


def upward(edges: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    return [f"{src} (layer {layers[src]}) imports {dst} (layer {layers[dst]})"
            for src, targets in edges.items() for dst in sorted(targets)
            if src in layers and dst in layers and layers[dst] > layers[src]]


def test_no_import_goes_up_a_layer():
    assert upward(imports(modules()), declared_layers()) == []


def test_no_import_cycle():
    edges = imports(modules())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    assert cycles == []


def test_the_checker_sees_function_local_imports_and_upward_arrows(tmp_path):
    """The walk finds an import inside a function body, so a cycle cannot hide there."""
    mods = {"perflib.a": tmp_path / "a.py", "perflib.b": tmp_path / "b.py"}
    mods["perflib.a"].write_text("def f():\n    from perflib import b\n")
    mods["perflib.b"].write_text("from perflib.a import f\n")
    edges = imports(mods)
    assert edges == {"perflib.a": {"perflib.b"}, "perflib.b": {"perflib.a"}}
    assert upward(edges, {"perflib.a": 1, "perflib.b": 2}) == ["perflib.a (layer 1) imports perflib.b (layer 2)"]


FUNCTION_LINES = 60
"""A function body (its docstring aside) longer than this says why in its docstring, after `Long:`."""


def test_functions_are_short_or_say_why():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            doc = ast.get_docstring(node) or ""
            body = node.body[1:] if doc else node.body
            lines = body[-1].end_lineno - body[0].lineno + 1 if body else 0
            if lines > FUNCTION_LINES and "Long:" not in doc:
                long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


TRACES = "perflib.traces"


def traces_exports() -> set[str]:
    """The names `perflib.traces` exports (its `__all__`), read from its source."""
    for node in ast.parse((PACKAGE / "traces" / "__init__.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    raise AssertionError("perflib/traces/__init__.py has no __all__")


def trace_reach(mods: dict[str, Path], exported: set[str]) -> dict[str, list[str]]:
    """Module outside `perflib.traces` -> what it takes from there: `ok NAME` for an exported name
    (`from perflib.traces import NAME`, or `traces.NAME` after `from perflib import traces`), `BAD ...`
    for a submodule of the package (a reader, the registry's internals) or a name it does not export.
    Imports inside functions count."""
    out: dict[str, list[str]] = {}
    for name, path in mods.items():
        if name == TRACES or name.startswith(TRACES + "."):
            continue
        tree = ast.parse(path.read_text())
        seen: list[str] = []
        aliases: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == TRACES:
                seen += [f"{'ok' if a.name in exported else 'BAD'} {a.name}" for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(TRACES + "."):
                seen.append(f"BAD from {node.module}")
            elif isinstance(node, ast.ImportFrom) and node.module == "perflib":
                aliases |= {a.asname or a.name for a in node.names if a.name == "traces"}
            elif isinstance(node, ast.Import):
                seen += [f"BAD import {a.name}" for a in node.names if a.name.startswith(TRACES)]
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                seen.append(f"{'ok' if node.attr in exported else 'BAD'} {node.attr}")
        if seen:
            out[name] = seen
    return out


def test_traces_are_reached_only_through_the_package_exports():
    """Outside `perflib.traces` nothing imports a reader module or the registry's internals: only what
    `perflib.traces` exports (`read_trace` with a `ReadMode`, `detect_format`, `FORMATS`, the prefetch,
    ...), so that a format is one module and one registry entry. The trace CLI, the cut, derive and the
    campaign's captures read traces, so they must appear here, each through the exports alone."""
    reach = trace_reach(modules(), traces_exports())
    bad = {m: [s for s in seen if s.startswith("BAD")] for m, seen in reach.items()}
    assert {m: s for m, s in bad.items() if s} == {}
    assert {"perflib.commands.trace", "perflib.cut", "perflib.derive", "perflib.campaign.captures"} <= set(reach)


def test_the_trace_reach_check_sees_readers_imported_anywhere(tmp_path):
    """A reader imported inside a function, a submodule attribute of the package and a name the package
    does not export are each caught."""
    mods = {"perflib.commands.trace": tmp_path / "a.py", "perflib.cut": tmp_path / "b.py"}
    mods["perflib.commands.trace"].write_text(
        "def f():\n    from perflib.traces import rocprof_csv, read_trace\n    from perflib.traces.prefetch import start\n")
    mods["perflib.cut"].write_text("from perflib import traces\nx = traces.parquet.write_table\ny = traces.read_trace\n")
    assert {m: sorted(seen) for m, seen in trace_reach(mods, {"read_trace"}).items()} == {
        "perflib.commands.trace": ["BAD from perflib.traces.prefetch", "BAD rocprof_csv", "ok read_trace"],
        "perflib.cut": ["BAD parquet", "ok read_trace"],
    }
