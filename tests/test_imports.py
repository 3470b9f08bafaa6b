"""Imports go at the top of a module; one inside a function is there on purpose and says why (issue 23
item 7): a heavy dependency kept off a path that must start fast (`perflib --help`, `import perflib`, the
trace summary before its Kineto prefetch forks), an optional one, a module run with `-m`, ... The reason
is a comment on the import's line, or on the line directly above its group (the imports that follow one
another in the same block). A standard-library import inside a function needs its reason on its own line:
the standard library goes at the top unless a measurement says otherwise."""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize

from support import REPO

PACKAGE = REPO / "perflib"
STDLIB = frozenset(sys.stdlib_module_names)
NOT_A_REASON = re.compile(r"noqa(:\s*[A-Z]+\d+(\s*,\s*[A-Z]+\d+)*)?|type:\s*ignore(\[[^\]]*\])?|pragma:\s*no\s+cover")
"""Tool directives: a comment that holds nothing else gives no reason."""


def reasons(text: str) -> dict[int, str]:
    """Line number -> the reason its comment gives (directives left out; lines without one absent)."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            reason = NOT_A_REASON.sub("", tok.string.lstrip("#")).strip(" -:;,")
            if re.search(r"[A-Za-z]{3}", reason):
                out[tok.start[0]] = reason
    return out


def top_module(node: ast.Import | ast.ImportFrom) -> str:
    if isinstance(node, ast.Import):
        return node.names[0].name.split(".")[0]
    return "." if node.level else (node.module or "").split(".")[0]


def unexplained(text: str, name: str) -> list[str]:
    """`name:line import ...` for each import inside a function (outside `if TYPE_CHECKING:`) that gives no
    reason, and for each standard-library one whose own line gives none."""
    tree = ast.parse(text)
    lines = text.splitlines()
    why = reasons(text)
    type_checking = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in
                     ast.unparse(node.test) for n in ast.walk(node)}
    in_function = {id(n) for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                   for n in ast.walk(node) if n is not node}
    found = []
    for node in ast.walk(tree):
        for block in (getattr(node, field, None) for field in ("body", "orelse", "finalbody")):
            if not isinstance(block, list):
                continue
            group: list[ast.stmt] = []  # the imports that follow one another up to this one
            for stmt in block:
                if not isinstance(stmt, ast.Import | ast.ImportFrom):
                    group = []
                    continue
                group.append(stmt)
                if id(stmt) not in in_function or id(stmt) in type_checking:
                    continue
                own = any(n in why for n in range(stmt.lineno, stmt.end_lineno + 1))
                group_reason = any(g.lineno - 1 in why and lines[g.lineno - 2].lstrip().startswith("#")
                                   for g in group)
                stdlib = top_module(stmt) in STDLIB
                if not own and (stdlib or not group_reason):
                    found.append(f"{name}:{stmt.lineno} {ast.unparse(stmt)}"
                                 + ("  (standard library: say why on its line)" if stdlib and group_reason else ""))
    return found


def test_every_late_import_says_why():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += unexplained(path.read_text(), str(path.relative_to(REPO)))
    assert found == []


def test_the_check_sees_each_unexplained_late_import():
    """An import inside a function or method without a reason is caught (a tool directive is no reason),
    as is a standard-library one covered only by its group's comment; a reason on the line or above the
    group passes, and so do imports at the top and under `if TYPE_CHECKING:`."""
    text = '''from __future__ import annotations
import json
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    import pandas as pd

def a():
    import numpy as np
    import yaml  # noqa: F401

def b():
    # pandas: only where a table is made
    import pandas as pd

    from perflib import derive
    import re
    x = 1
    import numpy as np
    # yaml: only where a file is read
    import yaml
    import tqdm

def c():
    import csv  # late: 0.7 ms (measured) before the fork
    if TYPE_CHECKING:
        import pandas as pd

class K:
    def m(self):
        def inner():
            import httpx
        import gguf  # after _import_gguf: maybe llama.cpp's gguf-py
'''
    assert unexplained(text, "m.py") == [
        "m.py:8 import numpy as np",
        "m.py:9 import yaml",
        "m.py:16 import re  (standard library: say why on its line)",
        "m.py:18 import numpy as np",
        "m.py:31 import httpx",
    ]


def test_reasons_leave_tool_directives_out():
    text = "x = 1  # noqa: E501\ny = 2  # noqa: F401 - imported for its side effect\nz = 3  # type: ignore[attr]\n"
    assert reasons(text) == {2: "imported for its side effect"}


def test_the_walk_reaches_the_package_late_imports():
    """With its comment taken away, a late import of the package is caught where it stands (so the first
    test cannot pass for having found no import to check)."""
    text = (PACKAGE / "cli.py").read_text()
    line = next(n for n, t in enumerate(text.splitlines(), 1) if "from perflib.rundir import" in t)
    bare = re.sub(r"(from perflib\.rundir import [\w, ]+?)\s*#.*", r"\1", text)
    assert unexplained(text, "cli.py") == []
    assert unexplained(bare, "cli.py") == [f"cli.py:{line} from perflib.rundir import SAFE_NAME, name_problem"]
