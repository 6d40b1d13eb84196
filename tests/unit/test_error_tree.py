"""Every error rabbitry raises on purpose can be caught by its name and is in docs/api.md's
tree: a RabbitryError defined anywhere under rabbitry/ is ``rabbitry.<Name>`` (the Spark data
source's and the test brokers' are their packages' names), and the tree names it."""

from __future__ import annotations

import ast
import functools
import importlib
import textwrap
from pathlib import Path

import pytest

import rabbitry
from rabbitry.errors import RabbitryError

ROOT = Path(rabbitry.__file__).parent
API = (ROOT.parent / "docs" / "api.md").read_text()
OWN_PACKAGE = ("rabbitry.spark", "rabbitry.testing")
"""Whose errors are their package's names, not rabbitry's (they need pyarrow or containers)."""

# one xdist worker reads and imports the package for both tests
pytestmark = pytest.mark.xdist_group("error-tree")


@functools.cache  # both tests read the same source
def error_classes() -> dict[str, type[BaseException]]:
    """Each exception class a module of rabbitry defines, by name (found in the source, so a
    module need not be imported to be searched; each found one is imported to check it)."""
    found: dict[str, type[BaseException]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(
            ".__init__"
        )
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and node.bases:
                cls = getattr(importlib.import_module(module), node.name)
                if isinstance(cls, type) and issubclass(cls, RabbitryError):
                    found[f"{module}.{node.name}"] = cls
    return found


def test_every_error_can_be_caught_by_its_name() -> None:
    missing = []
    for qualified, cls in error_classes().items():
        package = next((p for p in OWN_PACKAGE if qualified.startswith(p + ".")), "rabbitry")
        if getattr(importlib.import_module(package), cls.__name__, None) is not cls:
            missing.append(f"{package}.{cls.__name__} ({qualified})")
    assert missing == []


def test_the_documented_tree_names_every_error() -> None:
    tree = API[API.index("## Errors") :]
    tree = tree[: tree.index("\n## ")] if "\n## " in tree else tree
    assert (
        sorted(qualified for qualified, cls in error_classes().items() if cls.__name__ not in tree)
        == []
    )


INTERNAL_SIGNALS = {
    "Disconnected": "rabbitry.amqp.blocking: the socket is gone; every client connects again or"
    " raises ConnectionLost / a BrokerError",
    "ConnectionRefused": "rabbitry.amqp.session: the broker closed the connection;"
    " amqp.reconnect turns it into a BrokerError",
    "SecretFileUnreadable": "rabbitry.topology.spec.sandbox: a template's file() failed; the"
    " render turns it into a SpecError",
    "FrameError": "rabbitry.amqp.frames: bytes that are not an AMQP frame; amqp.channel turns it"
    " into a BrokerError (known gap: the publisher's and worker's read loops let it through as"
    " the ValueError it is)",
}
"""Exception classes raised under rabbitry/ outside the tree, each caught inside rabbitry: where,
and what a user sees instead. A new one is an error of the tree (a RabbitryError, exported and
documented) unless it never leaves rabbitry."""


def _names_in(node: ast.AST | None) -> set[str]:
    """The names an expression mentions (``X``, ``mod.X``, ``(X, Y)``, ``X | Y``)."""
    if node is None:
        return set()
    return {
        n.id if isinstance(n, ast.Name) else n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Name | ast.Attribute)
    }


def _raised_and_caught(tree: ast.AST) -> tuple[set[str], set[str]]:
    """The names a module raises (``raise X(...)``, ``raise X``) and those it catches
    (``except X``, ``isinstance(exc, X)``, ``suppress(X)``)."""
    raised: set[str] = set()
    caught: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Name | ast.Attribute):
                raised.add(target.id if isinstance(target, ast.Name) else target.attr)
        elif isinstance(node, ast.ExceptHandler):
            caught |= _names_in(node.type)
        elif isinstance(node, ast.Call) and _names_in(node.func) & {"isinstance", "suppress"}:
            caught |= set().union(*(_names_in(arg) for arg in node.args[1:] or node.args))
    return raised, caught


def _sources() -> dict[str, ast.Module]:
    return {
        str(path.relative_to(ROOT.parent)): ast.parse(path.read_text())
        for path in sorted(ROOT.rglob("*.py"))
    }


def _exception_classes(sources: dict[str, ast.Module]) -> dict[str, str]:
    """Each class under rabbitry/ that derives from an exception (by its bases' names, through
    the classes found), by name -> the file that defines it."""
    bases: dict[str, tuple[str, set[str]]] = {}
    for path, tree in sources.items():
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                bases[node.name] = (path, set().union(*map(_names_in, node.bases)))
    found: dict[str, str] = {}
    grew = True
    while grew:
        grew = False
        for name, (path, parents) in bases.items():
            if name in found:
                continue
            if parents & (set(found) | {"Exception", "BaseException", "ValueError"}):
                found[name] = path
                grew = True
    return found


def test_every_exception_raised_is_in_the_tree_or_caught_inside() -> None:
    """A public raise of a class outside the tree (not a RabbitryError, so neither exported nor
    documented by the tests above) fails here, unless it is an internal signal that rabbitry
    catches; a private one (``_Name``) is caught in the module that raises it."""
    sources = _sources()
    classes = _exception_classes(sources)
    scans = {path: _raised_and_caught(tree) for path, tree in sources.items()}
    caught_anywhere = set().union(*(caught for _, caught in scans.values()))
    outside = []
    for path, (raised, caught) in scans.items():
        for name in sorted(raised & set(classes)):
            if name.startswith("_"):
                if name not in caught or classes[name] != path:
                    outside.append(f"{path}: {name} (private: catch it where it is raised)")
                continue
            module = importlib.import_module(
                ".".join(Path(classes[name]).with_suffix("").parts).removesuffix(".__init__")
            )
            if issubclass(getattr(module, name), RabbitryError):
                continue  # exported and documented: the two tests above
            if name not in INTERNAL_SIGNALS or name not in caught_anywhere:
                outside.append(f"{path}: {name} (raise a RabbitryError of the tree)")
    assert outside == []


def test_the_package_docstring_draws_the_documented_tree() -> None:
    tree = API[API.index("## Errors") :]
    drawn = tree[tree.index("```\n") + 4 : tree.index("\n```", tree.index("```\n") + 4)]
    assert textwrap.indent(drawn, "    ") in (rabbitry.__doc__ or "")
