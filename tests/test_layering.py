"""The house stays in order: snippets_core's packages import only packages below them in the pipeline.

Every module of snippets_core is parsed with ``ast``; every import counts, wherever it is written (module level,
inside a function, under ``if TYPE_CHECKING``), in every form (``import a.b``, ``from a import b``, ``from . import
b``, ``from ..b import c``). The checks:

(a) no import from a higher layer (LAYERS, the order docs/architecture.md "Layering" writes down);
(b) no import cycle between modules (function-level imports included; an import under ``if TYPE_CHECKING`` is left
    out of this check only, since it never runs: two classes that name each other in annotations, such as
    Expression and PortConnector, are not a cycle), hence none between packages either;
(c) no import of a target package, iced_x86 or flatbuffers: the core generates for no machine in particular.

A failure lists each offending import as ``file:line: ...``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "snippets_core"

#: Lowest first. A package may import its own layer and those before it. ``snippets_core`` itself (the facade
#: ``__init__``) sits with cli on top.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),
    ("ir",),
    ("frontends",),
    ("tokenization",),
    ("config",),
    ("passes",),
    ("lowered",),
    ("debug",),
    ("codegen",),
    ("plugins",),
    ("runtime",),
    ("cli", ""),
)
#: Top-level names the core must never import: targets, the plugin example, and the machine-specific libraries.
FORBIDDEN = ("snippets_x86_64", "snippets_shave", "snippets_example_passes", "iced_x86", "flatbuffers")


@dataclass(frozen=True)
class Import:
    """One imported module, as written at ``path:line`` of module ``source``."""

    source: str
    target: str
    path: str
    line: int
    type_only: bool

    def where(self) -> str:
        return f"{self.path}:{self.line}"


def module_sources(root: Path = ROOT) -> dict[str, tuple[str, str]]:
    """{dotted module name: (path relative to the repository, source)} for every module of snippets_core."""
    out = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = (path.relative_to(root).as_posix(), path.read_text())
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST, type_only: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    """Every node below ``node``, with whether it sits in the body of an ``if TYPE_CHECKING``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield stmt, True
                yield from _walk(stmt, True)
            for stmt in child.orelse:
                yield stmt, type_only
                yield from _walk(stmt, type_only)
            continue
        yield child, type_only
        yield from _walk(child, type_only)


def imports_of(name: str, path: str, source: str, modules: Mapping[str, object]) -> list[Import]:
    """The imports of module ``name``; ``from pkg import x`` names ``pkg.x`` when that is a module, else ``pkg``."""
    is_package = path.endswith("__init__.py")
    found = []
    for node, type_only in _walk(ast.parse(source, filename=path)):
        if isinstance(node, ast.Import):
            found += [Import(name, a.name, path, node.lineno, type_only) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: level 1 is this module's package
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                found.append(Import(name, sub if sub in modules else mod, path, node.lineno, type_only))
    return found


def _known_module(target: str, modules: Mapping[str, object]) -> str | None:
    """The snippets_core module an import runs (``a.b.C`` -> ``a.b``), or None outside snippets_core."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def layer_of(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(f"{module}: its package '{top}' has no place in LAYERS (tests/test_layering.py); add it "
                         "where what it imports allows and write it down in docs/architecture.md")


def _layer_name(i: int) -> str:
    return "/".join(n or PACKAGE for n in LAYERS[i])


def all_imports(sources: Mapping[str, tuple[str, str]]) -> list[Import]:
    """Every import of every module, once per (module, imported module, line)."""
    unique = {(imp.source, imp.target, imp.line): imp
              for name, (path, src) in sources.items() for imp in imports_of(name, path, src, sources)}
    return list(unique.values())


def upward_imports(sources: Mapping[str, tuple[str, str]]) -> list[str]:
    """(a): imports of a module in a higher layer."""
    bad = []
    for imp in all_imports(sources):
        target = _known_module(imp.target, sources)
        if target is None:
            continue
        src, dst = layer_of(imp.source), layer_of(target)
        if dst > src:
            bad.append(f"{imp.where()}: {imp.source} ({_layer_name(src)}) imports {imp.target} "
                       f"({_layer_name(dst)}, a higher layer)")
    return bad


def forbidden_imports(sources: Mapping[str, tuple[str, str]]) -> list[str]:
    """(c): imports of a target package, iced_x86 or flatbuffers."""
    return [f"{imp.where()}: {imp.source} imports {imp.target}" for imp in all_imports(sources)
            if imp.target.split(".")[0] in FORBIDDEN]


def import_cycles(sources: Mapping[str, tuple[str, str]]) -> list[str]:
    """(b): every cycle of run-time imports between modules (one per strongly connected component), each edge
    with its file:line."""
    graph: dict[str, dict[str, Import]] = {m: {} for m in sources}
    for imp in all_imports(sources):
        target = _known_module(imp.target, sources)
        if target is not None and target != imp.source and not imp.type_only:
            graph[imp.source].setdefault(target, imp)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components = []

    def connect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    bad = []
    for comp in components:
        members = set(comp)
        edges = [f"    {imp.where()}: {a} imports {imp.target}"
                 for a in comp for b, imp in sorted(graph[a].items()) if b in members]
        bad.append(f"import cycle between {', '.join(comp)}:\n" + "\n".join(edges))
    return bad


def _report(what: str, bad: list[str]) -> str:
    return f"{len(bad)} {what}:\n" + "\n".join(bad)


# --- the checks on snippets_core ---------------------------------------------------------------------------------

SOURCES = module_sources()


def test_every_package_has_a_layer() -> None:
    for name in SOURCES:
        layer_of(name)


def test_no_import_from_a_higher_layer() -> None:
    bad = upward_imports(SOURCES)
    assert not bad, _report("imports from a higher layer", bad)


def test_no_import_cycle() -> None:
    bad = import_cycles(SOURCES)
    assert not bad, _report("import cycles", bad)


def test_no_target_iced_or_flatbuffers_import() -> None:
    bad = forbidden_imports(SOURCES)
    assert not bad, _report("imports the core must not make", bad)


def test_architecture_doc_states_these_layers() -> None:
    order = " < ".join(_layer_name(i) for i in range(len(LAYERS)))
    assert order in (ROOT / "docs" / "architecture.md").read_text(), f"docs/architecture.md should say: {order}"


# --- the checker catches what it is meant to catch ---------------------------------------------------------------

def _fake(files: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Sources keyed like module_sources, from {path: source}."""
    out = {}
    for path, src in files.items():
        parts = path[:-3].split("/")
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = (path, src)
    return out


def test_checker_finds_upward_imports_in_every_form() -> None:
    sources = _fake({
        "snippets_core/__init__.py": "",
        "snippets_core/ir/__init__.py": "",
        "snippets_core/ir/a.py": "def f():\n    from snippets_core.codegen.gen import g\n",
        "snippets_core/ir/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import snippets_core.lowered.x\n",
        "snippets_core/ir/c.py": "from ..codegen import gen\n",
        "snippets_core/ir/d.py": "from snippets_core import runtime\n",
        "snippets_core/ir/e.py": "from . import a\nfrom snippets_core.errors import E\n",
        "snippets_core/codegen/__init__.py": "",
        "snippets_core/codegen/gen.py": "from snippets_core.ir.a import f\n",
        "snippets_core/lowered/__init__.py": "",
        "snippets_core/lowered/x.py": "",
        "snippets_core/runtime/__init__.py": "",
        "snippets_core/errors.py": "",
    })
    bad = upward_imports(sources)
    assert [b.split(":")[0] + ":" + b.split(":")[1] for b in bad] == [
        "snippets_core/ir/a.py:2", "snippets_core/ir/b.py:3", "snippets_core/ir/c.py:1", "snippets_core/ir/d.py:1"]
    assert "snippets_core.codegen.gen (codegen, a higher layer)" in bad[0]


def test_checker_finds_cycles_but_not_type_only_ones() -> None:
    sources = _fake({
        "snippets_core/__init__.py": "",
        "snippets_core/lowered/__init__.py": "",
        "snippets_core/lowered/a.py": "from snippets_core.lowered.b import B\n",
        "snippets_core/lowered/b.py": "def f():\n    from .a import A\n",
        "snippets_core/lowered/c.py": "from snippets_core.lowered.d import D\n",
        "snippets_core/lowered/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import C\n",
    })
    bad = import_cycles(sources)
    assert len(bad) == 1 and "snippets_core.lowered.a, snippets_core.lowered.b" in bad[0]
    assert "snippets_core/lowered/b.py:2: snippets_core.lowered.b imports snippets_core.lowered.a" in bad[0]


def test_checker_finds_forbidden_imports() -> None:
    sources = _fake({
        "snippets_core/__init__.py": "",
        "snippets_core/codegen/__init__.py": "",
        "snippets_core/codegen/x.py": "import iced_x86\ndef f():\n    from snippets_x86_64.asm import rax\n",
    })
    assert forbidden_imports(sources) == [
        "snippets_core/codegen/x.py:1: snippets_core.codegen.x imports iced_x86",
        "snippets_core/codegen/x.py:3: snippets_core.codegen.x imports snippets_x86_64.asm"]
