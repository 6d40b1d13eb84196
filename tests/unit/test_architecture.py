"""The layers of docs/ARCHITECTURE.md, enforced: who may import whom, and no import circles.

Every import counts, those inside functions too: an import deferred to a function keeps a
heavy module off the start-up path, and still ties the two layers together when it runs. Only
``TYPE_CHECKING`` blocks are left out (they never run). pika may not be imported anywhere
(rabbitry's own client serves every AMQP user).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import rabbitry

ROOT = Path(rabbitry.__file__).parent

# one xdist worker reads the package for all four tests, not each worker for its share
pytestmark = pytest.mark.xdist_group("architecture")

ABOVE_THE_WIRE = (
    "rabbitry.topology",
    "rabbitry.provisioner",
    "rabbitry.publisher",
    "rabbitry.consumer",
    "rabbitry.spark",
    "rabbitry.cli",
)
"""What the protocol layers (amqp, stream, management) serve and so never import."""

# package -> packages it must never import at load time
FORBIDDEN = {
    "rabbitry.topology": (
        "rabbitry.provisioner",
        "rabbitry.amqp",
        "rabbitry.publisher",
        "rabbitry.consumer",
        "rabbitry.spark",
        "rabbitry.cli",
        "rabbitry.testing",
    ),
    "rabbitry.policies": (
        "rabbitry.topology",
        "rabbitry.provisioner",
        "rabbitry.amqp",
        "rabbitry.publisher",
        "rabbitry.consumer",
        "rabbitry.cli",
    ),
    "rabbitry.amqp": ABOVE_THE_WIRE,
    "rabbitry.management": (
        *ABOVE_THE_WIRE,
        "rabbitry.amqp",
        "rabbitry.stream",
        "rabbitry.testing",
    ),
    "rabbitry.publisher": (
        "rabbitry.provisioner",
        "rabbitry.consumer",
        "rabbitry.spark",
        "rabbitry.cli",
    ),
    "rabbitry.consumer": ("rabbitry.provisioner", "rabbitry.spark", "rabbitry.cli"),
    "rabbitry.provisioner": (
        "rabbitry.publisher",
        "rabbitry.consumer",
        "rabbitry.spark",
        "rabbitry.cli",
    ),
    # the source reads streams through consumer.streams (its deliveries are a worker's)
    "rabbitry.spark": ("rabbitry.provisioner", "rabbitry.cli"),
    "rabbitry.testing": ("rabbitry.cli",),
    # the stream protocol stands beside amqp: it borrows its connection settings only
    "rabbitry.stream": (*ABOVE_THE_WIRE, "rabbitry.testing"),
}
# consumer/ may use the publisher only through its public front
PUBLIC_ONLY = {"rabbitry.consumer": "rabbitry.publisher"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(tree: ast.Module, path: Path) -> set[str]:
    """The rabbitry modules the file at ``path`` imports, at load time or inside its functions."""
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            if "TYPE_CHECKING" in ast.unparse(node.test):
                for statement in node.orelse:
                    self.visit(statement)
                return
            self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            found.update(a.name for a in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            assert node.level == 0, f"{path}: relative import"
            if node.module:
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)

    Visitor().visit(tree)
    return {name for name in found if name.startswith("rabbitry")}


def imports_anywhere(tree: ast.Module) -> set[str]:
    """Every module a file imports: at load time, inside functions, under TYPE_CHECKING."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@functools.cache  # every test reads the same source: each file parsed once, trees not kept
def read_imports(path: Path) -> tuple[frozenset[str], frozenset[str]]:
    """``imports`` and ``imports_anywhere`` of the file at ``path``."""
    tree = ast.parse(path.read_text())
    return frozenset(imports(tree, path)), frozenset(imports_anywhere(tree))


@functools.cache
def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in ROOT.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges[name] = {m for m in read_imports(path)[0] if m in modules and m != name}
    return edges


def test_no_layer_imports_one_it_must_not() -> None:
    wrong = []
    for module, targets in graph().items():
        for package, banned in FORBIDDEN.items():
            if module == package or module.startswith(package + "."):
                wrong += [
                    f"{module} -> {t}" for t in targets if t.startswith(banned) and t != package
                ]
    assert wrong == []


def test_the_consumer_uses_only_the_publishers_front() -> None:
    wrong = [
        f"{module} -> {t}"
        for module, targets in graph().items()
        for package, front in PUBLIC_ONLY.items()
        if module.startswith(package)
        for t in targets
        if t.startswith(front + ".")
    ]
    assert wrong == []


def test_no_import_circles() -> None:
    edges = graph()
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            # a package's __init__ importing its own modules is how packages work
            if nxt.startswith(node + "."):
                continue
            if state.get(nxt) == 1:
                circles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            walk(node)
    assert circles == []


def test_no_module_imports_pika_not_even_inside_a_function() -> None:
    # rabbitry's own client (rabbitry.amqp) serves every AMQP user; pika is a test and
    # benchmark peer only, not a dependency of the package
    wrong = [
        f"{module_name(path)} imports {name}"
        for path in sorted(ROOT.rglob("*.py"))
        for name in sorted(read_imports(path)[1])
        if name == "pika" or name.startswith("pika.")
    ]
    assert wrong == []
