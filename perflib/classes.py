"""Kernel classes: regex tables per backend (package data YAML), matched on the kernel's function name.

A table is an ordered list of `{class, pattern}` rules; the first match wins and an unmatched kernel is
`other`. Patterns are `re.search`ed against the function name (`qmv_wide_kernel` for
`void mlx::core::rocm::qmv_wide_kernel<__half, ...>(...)`, `fused_add_rms_norm_kernel` for
`std::enable_if<...>::type vllm::fused_add_rms_norm_kernel<...>(...)`), so return, template and argument
types in a demangled signature cannot trip them; a generic entry point is named by the operator it runs
(`FlashAttnFwdSm90` for `cutlass::device_kernel<flash::...FlashAttnFwdSm90...>`, `function_name`). A rule
with `scope: name` searches the full name instead (for `cutlass::Kernel2<cutlass_80_..._gemm...>`). A table
may name tables whose rules go `before:` its own (the shared `_common` copy / fill / collective rules,
`_triton` and `_moe`) and tables it `extends:` (their rules follow). A user file (`--classes FILE`, same
format) is put in front of the built-in table: its rules override.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from perflib.errors import InputError, PerflibError
from perflib.safeinput import read_text

OTHER = "other"
MATCHING = 2
"""How names meet the rules: bumped when that changes (2: rules match `function_name`, not the base name),
so that tables a cache keyed on the rules alone (`perflib.runcache`) are attributed again."""
TABLES_DIR = Path(__file__).resolve().parent / "data" / "classes"
"""Shipped tables (package data). A plain path, not importlib.resources: it also works where the
package is reached through an editable install's namespace path."""


@dataclass(frozen=True)
class ClassRule:
    """One rule: kernels whose base name (or full name, `scope="name"`) matches `pattern` are `kernel_class`."""

    kernel_class: str
    pattern: str
    scope: str = "base"

    def compiled(self) -> re.Pattern[str]:
        return _compile(self.pattern)


@lru_cache(maxsize=512)
def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


@dataclass(frozen=True)
class ClassTable:
    """An ordered rule list with a name (`mlx-rocm`, `user:FILE+mlx-rocm`, ...)."""

    name: str
    rules: tuple[ClassRule, ...]
    standalone: bool = True  # False: a user file naming no base, to be put in front of the auto-picked table

    def classify(self, kernel: str) -> str:
        """Class of one kernel name: first rule that matches, else `other`."""
        base = function_name(kernel)
        for rule in self.rules:
            if rule.compiled().search(kernel if rule.scope == "name" else base):
                return rule.kernel_class
        return OTHER

    def classify_names(self, names: Iterable[str]) -> list[str]:
        """Classes of distinct names (call it on uniques, then map by code: a trace has few names)."""
        return [self.classify(n) for n in names]

    def extended_by(self, user: ClassTable) -> ClassTable:
        """The user's rules first (they override), then this table's."""
        return ClassTable(f"{user.name}+{self.name}", user.rules + self.rules, True)


@lru_cache(maxsize=4096)
def base_name(kernel: str) -> str:
    """The kernel's bare identifier: no return type, namespace, template arguments or parameter list.

    `void mlx::core::rocm::qmv_wide_kernel<__half, 64>(__half const*, ...)` → `qmv_wide_kernel`;
    `binary_vv<Add, f16>` → `binary_vv`; `Cijk_Alik_..._MT96x128x64` unchanged; names with spaces and no
    signature (`compiled Cf2I...`, `Memcpy HtoD (Pageable -> Device)`) are kept whole. A return type that
    is itself a template expression is dropped too (`std::enable_if<(((8)>(0)))&&..., void>::type
    vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(...)` → `fused_add_rms_norm_kernel`). Cached: `auto`
    asks it of every distinct name once per built-in table.
    """
    return _split(kernel.strip())[0]


@lru_cache(maxsize=4096)
def function_name(kernel: str) -> str:
    """What the kernel computes, by name: its base name, or, for a generic entry point that only launches
    the operator it is instantiated with (`ENTRY_POINTS`), that operator's base name.

    `void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<...> > >(...)` →
    `FlashAttnFwdSm90`; `_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdI...` → `Rmsnorm2dFwd`;
    `cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_...>` → `cutlass_80_tensorop_s1688gemm_...`.
    """
    name = kernel.strip()
    if name.startswith("_Z"):
        return _mangled_function(name) or base_name(name)
    base, args = _split(name)
    for _ in range(8):  # entry points nest (`device_kernel<enable_sm90_or_later<...>>`), never deeply
        if base not in ENTRY_POINTS or args is None:
            break
        operator = next((a for a in _top_level_args(args) if _IDENTIFIER.match(a)), None)
        if operator is None:
            break
        base, args = _split(operator)
    return base


ENTRY_POINTS = frozenset({
    "device_kernel",         # CUTLASS 3 / CuTe: cutlass::device_kernel<Operator> (FlashAttention-3, CUTLASS GEMMs)
    "Kernel", "Kernel2",     # CUTLASS 2: cutlass::Kernel<Operator>, cutlass::Kernel2<Operator>
    "enable_sm90_or_later", "enable_sm80_to_sm89", "enable_sm100_or_later",  # FlashAttention-3's arch guards
    "kentry",                # composable_kernel's ck_tile::kentry<MinBlocksPerCu, Kernel, ...>
})
"""Generic kernels that only run the operator they are instantiated with: a name is classed by that
operator (`function_name`), never by the launcher (CUTLASS's would make FlashAttention a GEMM)."""

_SIGNATURE_END = re.compile(r"\s*(const)?\s*(\[clone [^\]]*\])?\s*")
"""What may follow a parameter list: nothing, `const`, or rocprof's ` [clone .kd]`."""
_IDENTIFIER = re.compile(r"\s*(?:::)?(?!(?:true|false)\b)[A-Za-z_]")


def _split(name: str) -> tuple[str, str | None]:
    """(the bare identifier, the text of its own template arguments or None) of a demangled name.

    One pass with a bracket stack: `(`...`)` always pair, a `>` closes a `<` only when a `<` is the
    innermost open bracket (so `(((8)>(0)))` in a template argument closes nothing), and the parameter
    list is the `(` at depth 0 after an identifier or `>` whose `)` ends the name (or that a truncated
    name never closes): `std::enable_if<T2>(int)0&&...` is not one.
    """
    if name.startswith("_Z"):
        return (_mangled_base(name) or name), None
    if "<" not in name and "(" not in name and "::" not in name:
        return name, None
    cut = _parameter_list(name)
    head = name[:cut].rstrip()
    # the identifier: depth-0 text with template arguments dropped; its own arguments are the last group
    out: list[str] = []
    stack: list[str] = []
    args_from: int | None = None
    args_to: int | None = None
    for i, ch in enumerate(head):
        if ch == "<":
            if not stack:
                args_from, args_to = i + 1, None
            stack.append(ch)
            continue
        if ch == ">" and stack and stack[-1] == "<":
            stack.pop()
            if not stack:
                args_to = i
            continue
        if ch == "(":
            stack.append(ch)
        elif ch == ")":
            while stack and stack.pop() != "(":
                pass
        if "<" not in stack:  # outside template arguments: parentheses kept (`(anonymous namespace)`)
            out.append(ch)
    args = None
    if args_from is not None and (args_to is None or args_to == len(head) - 1):  # unclosed: a truncated name
        args = head[args_from:args_to]
    bare = "".join(out).strip()
    if " " in bare and "::" in bare or bare.startswith(("void ", "__global__ ")):
        bare = bare.split(" ")[-1]
    bare = bare.rsplit("::", 1)[-1].strip()
    return (bare or name), args


def _parameter_list(name: str) -> int:
    """Where the parameter list of a demangled name begins (its length where it has none)."""
    stack: list[str] = []
    candidate: int | None = None
    for i, ch in enumerate(name):
        if ch == "(":
            if not stack and i > 0 and (name[i - 1].isalnum() or name[i - 1] in "_>"):
                candidate = i  # `f(` or `f<...>(`; `::(anonymous namespace)` and `X (` are not parameter lists
            stack.append(ch)
        elif ch == ")":
            while stack and stack.pop() != "(":
                pass
            if not stack and candidate is not None:
                if _SIGNATURE_END.fullmatch(name, i + 1):
                    return candidate
                candidate = None  # `enable_if<T2>(int)0&&...`: a cast inside the return type
        elif ch == "<":
            stack.append(ch)
        elif ch == ">" and stack and stack[-1] == "<":
            stack.pop()
    return candidate if candidate is not None else len(name)  # a `(` never closed: a truncated name


def _top_level_args(args: str) -> list[str]:
    """Template arguments split at the commas outside any bracket."""
    parts: list[str] = []
    stack: list[str] = []
    start = 0
    for i, ch in enumerate(args):
        if ch in "(<":
            stack.append(ch)
        elif ch == ")":
            while stack and stack.pop() != "(":
                pass
        elif ch == ">" and stack and stack[-1] == "<":
            stack.pop()
        elif ch == "," and not stack:
            parts.append(args[start:i].strip())
            start = i + 1
    parts.append(args[start:].strip())
    return parts


_SOURCE_NAME = re.compile(r"(\d+)")


def _mangled_base(name: str) -> str | None:
    """The identifier of an Itanium-mangled name without demangling it: the last length-prefixed
    component of the (possibly nested) name, before any template arguments or parameters.

    `_Z13mul_mat_vec_qIL9ggml_type2ELi8E...` → `mul_mat_vec_q`; `_ZN4mlx4core15qmv_kernelI...EEvPK6__half`
    → `qmv_kernel`; `_Z15addition_kernelIfEvPT_PKfS3_ii.kd` → `addition_kernel`. CUPTI's text sample,
    rocprofv3 `-M` and stripped builds give such names; `None` when the name does not parse. A nested
    name whose inner component has template arguments stops at that component (kernels are rarely
    members of class templates).
    """
    pos = 2
    nested = name.startswith("N", pos)
    if nested:
        pos += 1
        while pos < len(name) and name[pos] in "rVKRO":  # cv- and ref-qualifiers of a nested name
            pos += 1
    last = None
    while pos < len(name):
        if name.startswith("St", pos):  # std::
            pos += 2
            continue
        match = _SOURCE_NAME.match(name, pos)
        if match is None:
            break
        start = match.end()
        end = start + int(match.group(1))
        if end > len(name):
            return None
        last, pos = name[start:end], end
        if not nested:
            break
    return last


def _mangled_function(name: str) -> str | None:
    """`function_name` of an Itanium-mangled name: past an entry point, the first type named in its
    template arguments (`_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdI...` → `Rmsnorm2dFwd`). Literals
    (`Li1E`) and substitutions (`S_`, `S1_`, `St`) are skipped; a name followed by another name is a
    namespace, one followed by `I` or `E` the type."""
    base = _mangled_base(name)
    if base not in ENTRY_POINTS:
        return base
    pos = name.find(f"{len(base)}{base}I")
    if pos < 0:
        return base
    pos += len(str(len(base))) + len(base) + 1
    while pos < len(name):
        ch = name[pos]
        if ch == "L":  # a literal: L <type> <value> E
            end = name.find("E", pos)
            if end < 0:
                return base
            pos = end + 1
        elif ch == "S":  # a substitution: S_, S<seq-id>_, or St (std::)
            if name.startswith("St", pos):
                pos += 2
                continue
            end = name.find("_", pos)
            if end < 0:
                return base
            pos = end + 1
        elif ch.isdigit():
            match = _SOURCE_NAME.match(name, pos)
            assert match is not None  # a digit starts a number
            start = match.end()
            end = start + int(match.group(1))
            if end > len(name):
                return base
            ident, pos = name[start:end], end
            if pos < len(name) and name[pos].isdigit():
                continue  # a namespace: another name follows
            if ident in ENTRY_POINTS:
                pos += 1 if name.startswith("I", pos) else 0
                continue
            return ident
        else:  # N (nested), K (const), I/E and other type codes
            pos += 1
    return base


def _rules_from(data: Any, where: str) -> tuple[list[ClassRule], list[str], list[str]]:
    """Rules, `before` and `extends` from a parsed YAML document (a mapping with `classes:` or a bare list).

    `before:` names tables whose rules go in front of this one's (the shared copy / fill / collective
    rules, so that `copy` or `reduce` patterns cannot take `__amd_rocclr_copyBuffer` or an NCCL
    all-reduce); `extends:` names tables whose rules follow.
    """
    extends: list[str] = []
    before: list[str] = []
    if isinstance(data, dict):
        extends = [str(x) for x in (data.get("extends") or [])]
        before = [str(x) for x in (data.get("before") or [])]
        items = data.get("classes")
    else:
        items = data
    if not isinstance(items, list):
        raise InputError(where, None, "a list of {class, pattern} rules (or a mapping with `classes:`)", type(items).__name__)
    rules = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or "class" not in item or "pattern" not in item:
            raise InputError(where, f"classes[{i}]", "a mapping with `class` and `pattern`", repr(item))
        scope = str(item.get("scope", "base"))
        if scope not in ("base", "name"):
            raise InputError(where, f"classes[{i}].scope", "`base` or `name`", scope)
        try:
            _compile(str(item["pattern"]))
        except re.error as exc:
            raise InputError(where, f"classes[{i}].pattern", "a Python regular expression", f"{item['pattern']!r} ({exc})") from None
        rules.append(ClassRule(str(item["class"]), str(item["pattern"]), scope))
    return rules, before, extends


def builtin_backends() -> list[str]:
    """Names of the shipped class tables (`perflib/data/classes/*.yaml`)."""
    return sorted(p.stem for p in TABLES_DIR.glob("*.yaml") if not p.name.startswith("_"))


def shared_tables() -> list[str]:
    """Names of the shipped tables that only go in front of others (`_common`, `_triton`, `_moe`)."""
    return sorted(p.stem for p in TABLES_DIR.glob("_*.yaml"))


def builtin_class_names() -> frozenset[str]:
    """Every class a shipped table can give, and `other`: a candidate naming anything else has a typo
    or needs its own table."""
    return frozenset({OTHER} | {r.kernel_class for b in builtin_backends() for r in load_builtin(b).rules})


@lru_cache(maxsize=32)
def load_builtin(backend: str) -> ClassTable:
    """The shipped table for `backend`, with the tables it extends appended."""
    import yaml  # late: 15 ms (measured) that `trace cut` skips; it imports this module, reads no table

    known = builtin_backends() + shared_tables()
    if backend not in known:
        raise PerflibError(f"unknown class table {backend!r}; built-in: {', '.join(builtin_backends())}")
    res = TABLES_DIR / f"{backend}.yaml"
    # libyaml's parser where PyYAML has it (the same safe constructor: the same data; 10x faster, and
    # `auto` reads every shipped table); user files keep the pure-Python loader, whose error marks we print
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    rules, before, extends = _rules_from(yaml.load(res.read_text(), Loader=loader), f"perflib/data/classes/{backend}.yaml")
    head: list[ClassRule] = [r for b in before for r in load_builtin(b).rules]
    tail: list[ClassRule] = [r for parent in extends for r in load_builtin(parent).rules]
    seen: set[ClassRule] = set()
    ordered = [r for r in head + rules + tail if not (r in seen or seen.add(r))]  # first copy of a rule wins
    return ClassTable(backend, tuple(ordered))


MAX_TABLE_BYTES = 1024 * 1024
"""The largest class table file read (the shipped ones are a few kB)."""


def load_class_file(path: str | Path, base: str | None = None) -> ClassTable:
    """A user's table (same YAML format). Its own `extends:` or `base` names the built-in it extends."""
    import yaml  # late: see load_builtin

    path = Path(path)
    text = read_text(path, "a YAML class table", max_bytes=MAX_TABLE_BYTES) or ""  # a FIFO refused, not read
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{mark.line + 1}:{mark.column + 1}" if mark else None
        raise InputError(path, where, "valid YAML", str(getattr(exc, "problem", exc))) from None
    rules, before, extends = _rules_from(data, str(path))
    rules = [r for b in before for r in load_builtin(b).rules] + rules
    table = ClassTable(f"user:{path.name}", tuple(rules), standalone=False)
    for parent in ([base] if base else []) + extends:
        table = load_builtin(parent).extended_by(table)
    return table


def auto_table(names: Sequence[str], time_ns: np.ndarray | None = None) -> ClassTable:
    """The built-in table that leaves the least kernel time (or count) in `other` for these names."""
    weights = np.ones(len(names)) if time_ns is None else np.asarray(time_ns, dtype=np.float64)
    best: tuple[float, ClassTable] | None = None
    for backend in builtin_backends():
        table = load_builtin(backend)
        other = sum(w for n, w in zip(names, weights, strict=True) if table.classify(n) == OTHER)
        if best is None or other < best[0]:
            best = (other, table)
    assert best is not None, "no built-in class tables shipped"
    return best[1]


def resolve_table(classes: Any, names: Sequence[str], time_ns: np.ndarray | None = None) -> ClassTable:
    """A `ClassTable` from what `summarize` was given: a table, a backend name, `auto`/None."""
    if isinstance(classes, ClassTable):
        return classes if classes.standalone else auto_table(names, time_ns).extended_by(classes)
    if classes is None or classes == "auto":
        return auto_table(names, time_ns)
    if isinstance(classes, str):
        return load_builtin(classes)
    raise PerflibError(f"classes: expected a ClassTable, a backend name or 'auto', got {type(classes).__name__}")
