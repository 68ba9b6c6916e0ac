"""No import cycle inside ``src/nvpair_wm``: each module's imports, read with ``ast``, form a
graph without cycles.

Every ``import`` and ``from ... import`` counts wherever it stands: at the top, inside a
function (a lazy import is still a dependency), and under ``if TYPE_CHECKING`` (a cycle that
only the type checker sees is still two modules that cannot be understood apart). An import of
``package.name`` counts as an edge to the module ``package.name`` when that is a module, else
to ``package`` (a name defined in its ``__init__``). The packages a dotted import passes
through are not edges of their own: importing ``nvpair_wm.proto.h2.frames`` from a sibling runs
``nvpair_wm/proto/h2/__init__.py`` first, which Python resolves without a cycle of ours.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

from tests.support.source_tree import ROOT

PACKAGE = "nvpair_wm"
SRC = ROOT / "src"


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute name of a relative import's base (``from ..x import y``: ``..x``)."""
    if level == 0:
        return name or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def imports_in(module: str, source: str, is_package: bool, known: Iterable[str]) -> set[str]:
    """The modules among ``known`` that ``module`` (its ``source``) imports (see the module
    docstring)."""
    known = set(known)
    targets: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package, node.level, node.module)
            for alias in node.names:
                child = f"{base}.{alias.name}"
                targets.add(child if child in known else base)
    return {t for t in targets if t in known and t != module}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {
        name: imports_in(name, path.read_text(encoding="utf-8"), path.name == "__init__.py", known)
        for name, path in known.items()
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), plus self-loops."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in edges.get(v, ()):
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycle() -> None:
    edges = graph()
    assert cycles(edges) == [], "import cycles: " + "; ".join(
        " <-> ".join(c) for c in cycles(edges)
    )


def test_the_walk_sees_every_kind_of_import() -> None:
    """Guards the walk: a lazy import and a TYPE_CHECKING import are edges, and a cycle made of
    them is found."""
    known = ["p", "p.a", "p.b", "p.c"]
    source = {
        "p.a": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.b import B\n",
        "p.b": "def f() -> None:\n    from . import c\n",
        "p.c": "import p.a\n",
    }
    edges = {name: imports_in(name, text, False, known) for name, text in source.items()}
    assert edges == {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}}
    assert cycles(edges) == [["p.a", "p.b", "p.c"]]
    assert cycles({"x": {"y"}, "y": set()}) == []


def test_the_graph_covers_the_package() -> None:
    edges = graph()
    assert "nvpair_wm.node" in edges and "nvpair_wm.proto.h2.connection" in edges
    assert "nvpair_wm.broadcaster" in edges["nvpair_wm.node"]
