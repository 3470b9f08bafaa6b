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


# ------------------------------------------------------------------------ the page reads no file

FILE_OPS = frozenset({
    "open", "read_text", "read_bytes", "write_text", "write_bytes", "exists", "is_file", "is_dir", "is_symlink",
    "glob", "rglob", "iterdir", "stat", "lstat", "resolve", "readlink", "samefile", "unlink", "mkdir", "rmdir",
    "touch", "listdir", "scandir", "walk", "load", "safe_load", "read_csv", "read_json", "read_parquet",
    "read_table", "read_pickle", "read_excel", "read_sql", "read_feather", "copy2", "copyfile", "copytree",
    "rmtree", "FileSystemLoader", "PackageLoader",
})
"""Python's, pandas', json's, yaml's and jinja2's ways to open, read, list, ask about or change a file or
folder, by the name a call ends in (`Path(p).read_text()`, `json.load(f)`, `pd.read_csv(p)`, `open(p)`)."""

PAGE_WRITES = {
    ("perflib.report.page.write_report", "perflib.atomic.write_atomic"): "the page",
    ("perflib.report.page.write_report", "mkdir"): "the reports folder",
    ("perflib.report.page.write_report", "unlink"): "a figure no longer drawn, so no stale PNG stays",
    ("perflib.report.figures.save_figure", "perflib.atomic.write_atomic"): "a figure's PNG",
    ("perflib.report.page.render", "FileSystemLoader"): "the page's own template (package data, not an input)",
}
"""The only file operations of `perflib.report`: (the function, what it calls) -> what it writes."""

COMMON_METHODS = frozenset(name for kind in (str, bytes, list, tuple, dict, set, int, float, object) for name in dir(kind))
"""Method names of Python's own types: `x.add(...)` on a set is not a perflib method of that name."""


def definitions(mods: dict[str, Path]) -> tuple[dict[str, tuple[ast.AST, str, str | None]], dict[str, dict[str, str]]]:
    """(qualified name -> (function node, module, class) for every function and method; module -> its
    local names -> what they import, qualified)."""
    defs: dict[str, tuple[ast.AST, str, str | None]] = {}
    names: dict[str, dict[str, str]] = {}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text())
        local: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    local[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
                    parts = parts[: len(parts) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                local.update({a.asname or a.name: f"{base}.{a.name}" for a in node.names})
        names[mod] = local
        defs[f"{mod}.<module>"] = (ast.Module(body=[n for n in tree.body if not isinstance(
            n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)], type_ignores=[]), mod, None)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                defs[f"{mod}.{node.name}"] = (node, mod, None)
            elif isinstance(node, ast.ClassDef):
                defs.update({f"{mod}.{node.name}.{m.name}": (m, mod, node.name) for m in node.body
                             if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)})
    return defs, names


def call_targets(call: ast.Call, mod: str, cls: str | None, defs: dict, names: dict, mods: dict) -> tuple[str, ...]:
    """What a call may run: a file operation's name, or the qualified perflib functions it names (through
    imports and a package's re-exports); for `obj.m()` on an object of unknown type, every perflib method
    named m (the call touches files only where all of them do). () for anything else."""

    def follow(qualified: str, depth: int = 0) -> str:
        mod_, _, name = qualified.rpartition(".")
        if depth < 8 and mod_ in names and name in names[mod_]:  # a package's re-export wins over a submodule
            return follow(names[mod_][name], depth + 1)
        return qualified

    func = call.func
    if isinstance(func, ast.Name):
        if func.id in FILE_OPS:
            return (func.id,)
        own = f"{mod}.{func.id}"
        return (own,) if own in defs else (follow(names[mod][func.id]),) if func.id in names[mod] else ()
    if not isinstance(func, ast.Attribute):
        return ()
    value = func.value
    if isinstance(value, ast.Name) and value.id in ("self", "cls") and cls:
        return (f"{mod}.{cls}.{func.attr}",)
    if isinstance(value, ast.Name) and value.id in names[mod]:
        base = follow(names[mod][value.id])
        if base in mods:
            return (follow(f"{base}.{func.attr}"),)
    if func.attr in FILE_OPS:
        return (func.attr,)
    if func.attr in COMMON_METHODS or func.attr.startswith("__"):
        return ()
    return tuple(q for q, (_, _, c) in defs.items() if c and q.endswith(f".{c}.{func.attr}"))


def file_access(mods: dict[str, Path], allowed: dict[tuple[str, str], str]) -> dict[str, list[str]]:
    """Function -> its calls that touch a file or folder, directly (a `FILE_OPS` name) or through a perflib
    function that does, however deep; the (function, call) pairs in `allowed` are not counted."""
    defs, names = definitions(mods)
    calls = {q: [(c.lineno, call_targets(c, mod, cls, defs, names, mods)) for c in ast.walk(node)
                 if isinstance(c, ast.Call)] for q, (node, mod, cls) in defs.items()}
    touching: set[str] = set()

    def touches(q: str, targets: tuple[str, ...]) -> bool:
        return bool(targets) and all((t in FILE_OPS or t in touching) and (q, t) not in allowed for t in targets)

    while new := {q for q, cs in calls.items() if q not in touching and any(touches(q, ts) for _, ts in cs)}:
        touching |= new
    return {q: [f"line {line}: {' | '.join(ts)}" for line, ts in cs if touches(q, ts)]
            for q, cs in calls.items() if q in touching}


def page_reads(mods: dict[str, Path], allowed: dict[tuple[str, str], str]) -> dict[str, list[str]]:
    """The file accesses of `perflib.report`'s functions, each named by the call that makes it, not by a
    function of the page calling another."""
    found = file_access(mods, allowed)
    return {q: [a for a in accesses if not a.split(": ", 1)[1].startswith("perflib.report.")]
            for q, accesses in found.items() if q.startswith("perflib.report.")}


def test_the_page_reads_no_file():
    """`perflib.report` renders the derived tables and the page's inputs (`perflib.pageinputs`), resolved
    before it is called: apart from the page, its PNGs and its template (`PAGE_WRITES`), no function of it
    opens, reads, lists or asks about a file, nor calls a perflib function that does (`derive.build`,
    `rundir.read_manifest`, `campaign.run_folders()`, `config.opening_question` ...)."""
    assert {q: a for q, a in page_reads(modules(), PAGE_WRITES).items() if a} == {}


def test_the_page_read_check_sees_every_way_to_read(tmp_path):
    """A JSON read, a method that lists folders, a perflib reader through its package's re-export, one
    reached through a helper of the page, and a write not on the list are each caught; the listed write is not."""
    files = {
        "perflib.rundir": "import os\ndef read_manifest(p):\n    return open(p).read()\n"
                          "def list_runs(root):\n    return sorted(root.iterdir())\ndef safe_name(n):\n    return n\n",
        "perflib.atomic": "def write_atomic(p, t):\n    with open(p, 'w') as f:\n        f.write(t)\n",
        "perflib.config": "from perflib.config.loader import read_campaign\n",
        "perflib.config.loader": "import yaml\ndef read_campaign(p):\n    return yaml.safe_load(p)\n",
        "perflib.config.model": "from perflib import rundir\nclass Campaign:\n    def run_folders(self):\n"
                                "        return rundir.list_runs(self.root)\n    def where(self):\n        return 1\n",
        "perflib.report.page": "import json\nfrom pathlib import Path\nfrom perflib import atomic, rundir\n"
                               "from perflib.config import read_campaign\n"
                               "def a(p):\n    return json.loads(Path(p).read_text())\n"
                               "def b(campaign):\n    return campaign.run_folders(), campaign.where()\n"
                               "def c(p):\n    return rundir.read_manifest(p), rundir.safe_name(p)\n"
                               "def d(p):\n    return read_campaign(p)\n"
                               "def e(p):\n    atomic.write_atomic(p, 'x')\n"
                               "def _helper(p):\n    return p.exists()\n"
                               "def f(p):\n    return _helper(p), {1}.add(2)\n"
                               "def write_report(p):\n    atomic.write_atomic(p, 'x')\n    f(p)\n",
    }
    mods = {}
    for name, text in files.items():
        path = tmp_path / (name.replace(".", "_") + ("/__init__.py" if name == "perflib.config" else ".py"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        mods[name] = path
    found = page_reads(mods, {("perflib.report.page.write_report", "perflib.atomic.write_atomic"): "the page"})
    assert {q: len(a) for q, a in found.items()} == {
        "perflib.report.page.a": 1, "perflib.report.page.b": 1, "perflib.report.page.c": 1,
        "perflib.report.page.d": 1, "perflib.report.page.e": 1, "perflib.report.page._helper": 1,
        "perflib.report.page.f": 0, "perflib.report.page.write_report": 0}
    assert found["perflib.report.page.b"] == ["line 8: perflib.config.model.Campaign.run_folders"]
    assert found["perflib.report.page.d"] == ["line 12: perflib.config.loader.read_campaign"]
