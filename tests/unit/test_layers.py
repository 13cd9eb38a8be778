"""The import graph of ``src/sunlib`` is one-way, as docs/architecture.md draws it.

Every import counts: module level, inside functions (lazy) and under ``TYPE_CHECKING``. A
package may import from its own layer or any layer below, never above; no two modules import
each other, directly or round a loop; and no name starting with ``_`` is imported from another
module. Inside a package, its parts may be ordered too (``SUBLAYERS``: answer's gate, single shot and
agentic loop), and a part imports none above it. The checker also runs on a small package made to
break each rule, so it can fail.

The tests follow the same layers: a test file sits in the folder of the layer it tests
(tests/unit/<layer>/), or in tests/contract/ or tests/system/, and imports no private name.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"

# Bottom to top. A package imports only from its own layer or those below it.
LAYERS: tuple[frozenset[str], ...] = tuple(
    frozenset(layer.split())
    for layer in (
        "errors version process config config_sources contracts trace",  # the kernel
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

# Inside a package of ``LAYERS``, its parts bottom to top (a subpackage or a module directly in it);
# a part imports only from its own or those below it, and the package's other modules sit above them
# all. In answer/: the step records every stage writes, the refusal gate, the single-shot path, the
# agentic loop over it; the top (asker.py, result.py, conversation.py) chooses one and builds the frame.
SUBLAYERS: dict[str, tuple[str, ...]] = {
    "answer": ("details", "gate", "single", "agentic"),
}


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


def sublayer_of(module: str, order: tuple[str, ...]) -> int:
    """Where a module of a package sits among ``order`` (the package's parts): above them all when it
    is in none (the package's ``__init__`` and its other top modules)."""
    parts = module.split(".")
    return order.index(parts[2]) if len(parts) > 2 and parts[2] in order else len(order)


def part_name(module: str, order: tuple[str, ...]) -> str:
    i = sublayer_of(module, order)
    return f"{top(module)}.{order[i]}" if i < len(order) else f"{top(module)} (top)"


def upward_within(graph: Mapping[str, set[tuple[str, str]]], sublayers: Mapping[str, tuple[str, ...]]) -> list[str]:
    """Imports from a part of a package to a part above it (``SUBLAYERS``)."""
    return sorted(
        {
            f"{mod} imports {target} ({part_name(target, order)} is above {part_name(mod, order)})"
            for mod, found in graph.items()
            if (order := sublayers.get(top(mod))) is not None
            for target, _ in found
            if top(target) == top(mod) and sublayer_of(target, order) > sublayer_of(mod, order)
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


def test_no_part_of_a_package_imports_a_part_above_it() -> None:
    assert upward_within(imports(SRC, "sunlib"), SUBLAYERS) == []


def test_every_part_in_sublayers_exists() -> None:
    for package, order in SUBLAYERS.items():
        for part in order:
            here = SRC / "sunlib" / package
            assert (here / part).is_dir() or (here / f"{part}.py").is_file(), f"{package}.{part}"


def test_no_import_cycles_between_modules() -> None:
    assert cycles(imports(SRC, "sunlib")) == []


def test_no_private_name_is_imported_from_another_module() -> None:
    assert private(imports(SRC, "sunlib")) == []


def test_every_package_is_in_a_layer() -> None:
    for mod in code_modules(imports(SRC, "sunlib")):
        layer_of(mod, LAYERS)


def checked(module: str) -> bool:
    """Modules whose private names no test may import: sunlib's, the harnesses', the tests' support
    modules', other test modules', the tools' and the benchmarks'."""
    return (
        module.split(".")[0] in {"sunlib", "tools", "benchmarks"}
        or module.startswith(("tests.harness", "tests.support"))
        or module.split(".")[-1].startswith("test_")
    )


def test_the_tests_import_no_private_name() -> None:
    tests = ROOT / "tests"
    found = []
    for path in tests.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and checked(node.module or ""):
                found += [
                    f"{path.relative_to(tests)}: {a.name} from {node.module}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert found == []


def test_the_tests_follow_the_layers() -> None:
    """Each test file sits in tests/unit/<layer>/ (``kernel`` for the bottom layer, else a package of
    ``LAYERS``), in tests/unit/ itself (checks of the whole package), or in tests/contract/ or
    tests/system/."""
    layers = {"kernel"} | {name for layer in LAYERS[1:] for name in layer} - {"sunlib", "__main__"}
    tests = ROOT / "tests"
    misplaced = []
    for path in sorted(tests.rglob("test_*.py")):
        parts = path.relative_to(tests).parts
        placed = (parts[0] in {"contract", "system"} and len(parts) == 2) or (
            parts[0] == "unit" and (len(parts) == 2 or (len(parts) == 3 and parts[1] in layers))
        )
        if not placed:
            misplaced.append(str(path.relative_to(tests)))
    assert misplaced == []


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
    (pkg / "high" / "b.py").write_text("from .mid.e import E\n")  # the package's top: may import any part
    for part in ("base", "mid"):
        (pkg / "high" / part).mkdir()
        (pkg / "high" / part / "__init__.py").write_text("")
    (pkg / "high" / "base" / "d.py").write_text(
        "from ..mid.e import E\n"  # up a part
        "def g():\n    from ..b import B\n"  # lazy, up to the package's top
    )
    (pkg / "high" / "base" / "f.py").write_text("F = 1\n")
    (pkg / "high" / "mid" / "e.py").write_text("from ..base.f import F\nclass E: ...\n")  # down a part: allowed
    graph = imports(tmp_path, "demo")
    layers = (frozenset({"low"}), frozenset({"high"}), frozenset({"demo"}))
    assert upward(graph, layers) == ["demo.low.a imports demo.high.b (layer high is above low)"]
    assert cycles(graph) == [["demo.low.a", "demo.low.c"]]
    assert private(graph) == ["demo.low.c imports _hidden from demo.low.a"]
    assert upward_within(graph, {"high": ("base", "mid")}) == [
        "demo.high.base.d imports demo.high.b (high (top) is above high.base)",
        "demo.high.base.d imports demo.high.mid.e (high.mid is above high.base)",
    ]
