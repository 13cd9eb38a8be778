"""The import graph of ``src/sunlib`` is one-way, as docs/architecture.md draws it.

Every import counts: module level, inside functions (lazy) and under ``TYPE_CHECKING``. A
package may import from its own layer or any layer below, never above; no two modules import
each other, directly or round a loop; and no name starting with ``_`` is imported from another
module. The checker also runs on a small package made to break each rule, so it can fail.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

# Bottom to top. A package imports only from its own layer or those below it.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(layer.split())
    for layer in (
        "errors version config config_sources contracts steps trace",  # the kernel
        "text",
        "ingest",
        "store",
        "providers",
        "sync",  # the write path: indexing, watch, freshness, file status, note I/O
        "retrieve",
        "answer",
        "library",
        "evaluate",
        "server",
        "cli __main__",
        "sunlib",  # the package itself: the public API re-exports
    )
)
DATA_PACKAGES = frozenset({"qa", "web", "sample_vault"})  # files, no code that imports


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(src: Path, package: str) -> dict[str, set[tuple[str, str]]]:
    """Per module of ``package``: (module imported, name) pairs; name "" for ``import x``."""
    files = {module_name(p, src): p for p in (src / package).rglob("*.py")}
    out: dict[str, set[tuple[str, str]]] = {}
    for mod, path in files.items():
        here = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        found: set[tuple[str, str]] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update((a.name, "") for a in node.names if a.name.split(".")[0] == package)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                if target.split(".")[0] != package:
                    continue
                if target in files and target != mod:  # ``from pkg import x`` runs pkg first: an edge to it
                    found.add((target, ""))
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.add((sub, "") if sub in files else (target, alias.name))
        out[mod] = found
    return out


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of(module: str, layers: tuple[frozenset[str], ...]) -> int:
    name = top(module)
    for i, layer in enumerate(layers):
        if name in layer:
            return i
    raise AssertionError(f"{module}: package {name!r} is in no layer (add it to LAYERS)")


def upward(graph: Mapping[str, set[tuple[str, str]]], layers: tuple[frozenset[str], ...]) -> list[str]:
    return sorted(
        {
            f"{mod} imports {target} (layer {top(target)} is above {top(mod)})"
            for mod, found in graph.items()
            for target, _ in found
            if layer_of(target, layers) > layer_of(mod, layers)
        }
    )


def private(graph: Mapping[str, set[tuple[str, str]]]) -> list[str]:
    return sorted(
        f"{mod} imports {name} from {target}"
        for mod, found in graph.items()
        for target, name in found
        if name.startswith("_") and not name.startswith("__") and target != mod
    )


def cycles(graph: Mapping[str, set[tuple[str, str]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    edges = defaultdict(set)
    for mod, found in graph.items():
        edges[mod].update(t for t, _ in found if t in graph and t != mod)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> Iterator[None]:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                yield from visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
        yield

    for v in sorted(graph):
        if v not in index:
            for _ in visit(v):
                pass
    return out


def code_modules(graph: dict[str, set[tuple[str, str]]]) -> dict[str, set[tuple[str, str]]]:
    return {m: f for m, f in graph.items() if top(m) not in DATA_PACKAGES}


def test_no_package_imports_a_layer_above_its_own() -> None:
    assert upward(code_modules(imports(SRC, "sunlib")), LAYERS) == []


def test_no_import_cycles_between_modules() -> None:
    assert cycles(imports(SRC, "sunlib")) == []


def test_no_private_name_is_imported_from_another_module() -> None:
    assert private(imports(SRC, "sunlib")) == []


def test_every_package_is_in_a_layer() -> None:
    for mod in code_modules(imports(SRC, "sunlib")):
        layer_of(mod, LAYERS)


def checked(module: str) -> bool:
    """Modules whose private names no test may import: sunlib's, the harnesses', the tools' and the benchmarks'."""
    return module.split(".")[0] in {"sunlib", "tools", "benchmarks"} or module.startswith("tests.harness")


def test_the_tests_import_no_private_name() -> None:
    tests = Path(__file__).resolve().parent
    found = []
    for path in tests.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and checked(node.module or ""):
                found += [
                    f"{path.name}: {a.name} from {node.module}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert found == []


def test_the_checker_finds_each_kind_of_break(tmp_path: Path) -> None:
    pkg = tmp_path / "demo"
    (pkg / "low").mkdir(parents=True)
    (pkg / "high").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "high" / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ..high.b import B\n"  # type-only, and upward
        "def f():\n    from . import c\n"  # lazy, and back to the module that imports this one
    )
    (pkg / "low" / "c.py").write_text("from .a import f, _hidden\n")
    (pkg / "high" / "b.py").write_text("class B: ...\n")
    graph = imports(tmp_path, "demo")
    layers = (frozenset({"low"}), frozenset({"high"}), frozenset({"demo"}))
    assert upward(graph, layers) == ["demo.low.a imports demo.high.b (layer high is above low)"]
    assert cycles(graph) == [["demo.low.a", "demo.low.c"]]
    assert private(graph) == ["demo.low.c imports _hidden from demo.low.a"]
