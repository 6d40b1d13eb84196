"""One error tree in one module: every exception a user can catch is defined in
rabbitry/errors.py, can be caught by its name from ``rabbitry``, and is drawn where it stands in
the tree of docs/api.md, which ``rabbitry``'s docstring draws too. Any other exception class
under rabbitry/ is an internal signal caught inside rabbitry, listed here with what a user sees
instead and marked so by a comment where it is defined."""

from __future__ import annotations

import ast
import functools
import importlib
import re
import textwrap
from pathlib import Path

import pytest

import rabbitry
from rabbitry import errors

ROOT = Path(rabbitry.__file__).parent
API = (ROOT.parent / "docs" / "api.md").read_text()
ALSO_FROM = {
    "rabbitry.spark": (
        "SinkOptionError",
        "SourceOptionError",
        "SparkSinkError",
        "SparkSourceError",
    ),
    "rabbitry.testing": ("BrokerUnavailable", "ContainerExited", "NotModelled"),
}
"""The packages whose errors a user also catches from there (their docs name them so)."""

INTERNAL = {
    "rabbitry.amqp.blocking.Disconnected": "the socket is gone; every client connects again or"
    " raises ConnectionLost / a BrokerError",
    "rabbitry.amqp.session.ConnectionRefused": "the broker closed the connection;"
    " amqp.reconnect turns it into a BrokerError",
    "rabbitry.topology.spec.sandbox.SecretFileUnreadable": "a template's file() failed; the"
    " render turns it into a SpecError",
    "rabbitry.topology.spec.sandbox._RenderTimeout": "a render past its time; a SpecError",
    "rabbitry.topology.spec.fast_yaml._Unplain": "text the fast path does not read; the marked"
    " loader reads it",
    "rabbitry.provisioner.queue_counter._Lost": "a count's connection broke; tried once more,"
    " then a BrokerError",
    "rabbitry.stream.columns._Unusual": "a message the fast path does not read; read the slow way",
    "rabbitry.testing.scripted_server._ChannelError": "a client used a channel it did not open;"
    " the scripted broker closes the connection (504)",
}
"""Exception classes defined under rabbitry/ outside errors.py, each caught inside rabbitry:
where, and what a user sees instead. A new one is an error of the tree (defined in errors.py,
exported and drawn) unless it never leaves rabbitry."""

# one xdist worker reads and imports the package for these tests
pytestmark = pytest.mark.xdist_group("error-tree")


def _module_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")


@functools.cache  # every test reads the same source
def _sources() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text()) for path in sorted(ROOT.rglob("*.py"))}


def tree_classes() -> dict[str, type[BaseException]]:
    """The exception classes rabbitry/errors.py defines, by name."""
    return {
        name: value
        for name, value in vars(errors).items()
        if isinstance(value, type)
        and issubclass(value, BaseException)
        and value.__module__ == errors.__name__
    }


def _derives_from_an_exception(node: ast.ClassDef, known: set[str]) -> bool:
    """Whether a class's bases (by name) are an exception: a builtin one or one found before."""
    named = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
    return any(n in known or n.endswith(("Error", "Exception")) for n in named)


@functools.cache
def exceptions_outside_the_tree() -> dict[str, ast.ClassDef]:
    """Every exception class a module under rabbitry/ other than errors.py defines (at its top
    level, found by importing it; inside a class or function, by its bases' names), by
    ``module.Name``."""
    found: dict[str, ast.ClassDef] = {}
    for path, tree in _sources().items():
        if path == ROOT / "errors.py":
            continue
        module = _module_of(path)
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.bases:
                cls = getattr(importlib.import_module(module), node.name)
                if isinstance(cls, type) and issubclass(cls, BaseException):
                    found[f"{module}.{node.name}"] = node
        top = {id(node) for node in tree.body}
        nested = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and id(n) not in top]
        for node in nested:
            if _derives_from_an_exception(node, set(tree_classes())):
                found[f"{module}.<nested>.{node.name}"] = node
    return found


def test_no_module_but_errors_py_defines_an_exception_a_user_can_catch() -> None:
    outside = set(exceptions_outside_the_tree())
    assert sorted(outside - set(INTERNAL)) == [], "define it in rabbitry/errors.py"
    assert sorted(set(INTERNAL) - outside) == [], "gone: strike it from INTERNAL"


def test_each_internal_signal_says_so_where_it_is_defined() -> None:
    unmarked = []
    for qualified, node in exceptions_outside_the_tree().items():
        path = ROOT.parent / (qualified.rsplit(".", 1)[0].replace(".", "/") + ".py")
        if not path.exists():
            path = path.with_suffix("") / "__init__.py"
        above = path.read_text().splitlines()[: node.lineno - 1]
        comment = []
        while above and above[-1].startswith("#"):
            comment.insert(0, above.pop())
        if not comment or not comment[0].startswith("# Internal:"):
            unmarked.append(qualified)
    assert unmarked == [], "put a '# Internal: ...' comment above each: who catches it"


def test_every_class_of_errors_py_is_exported_from_rabbitry() -> None:
    public = {
        name: value
        for name, value in vars(errors).items()
        if isinstance(value, type) and value.__module__ == errors.__name__
    }
    missing = [
        name
        for name, value in public.items()
        if getattr(rabbitry, name, None) is not value or name not in rabbitry.__all__
    ]
    for package, names in ALSO_FROM.items():
        imported = importlib.import_module(package)
        missing += [
            f"{package}.{n}" for n in names if getattr(imported, n, None) is not public.get(n, n)
        ]
    assert missing == []


def _documented_tree() -> str:
    section = API[API.index("## Errors") :]
    start = section.index("```\n") + 4
    return section[start : section.index("\n```", start)]


def drawn_bases(tree: str) -> dict[str, set[str]]:
    """Each class the tree draws -> its bases as drawn: the class it hangs from, and those its
    line names as ``(also a Name)``. A line ``+-- Name ...`` at depth n hangs from the last
    class drawn at depth n - 1; lines without ``+--`` continue the one above."""
    bases: dict[str, set[str]] = {}
    path: list[str] = ["Exception"]
    for line in tree.splitlines():
        if "+-- " in line:
            depth = line.index("+-- ") // 4 + 1
            text = line[line.index("+-- ") + 4 :]
        elif line and not line.startswith(("|", " ")):
            depth, text = 0, line
        else:
            continue
        name = text.split()[0]
        assert name not in bases, f"{name} is drawn twice"
        del path[depth + 1 :]
        also = re.search(r"\(also an? (\w+(?:, \w+)*)\)", text)
        bases[name] = {path[depth], *(also.group(1).split(", ") if also else ())}
        path.append(name)
    return bases


def test_the_documented_tree_is_the_class_hierarchy() -> None:
    real = {name: {base.__name__ for base in cls.__bases__} for name, cls in tree_classes().items()}
    assert drawn_bases(_documented_tree()) == real


def test_the_package_docstring_draws_the_documented_tree() -> None:
    assert textwrap.indent(_documented_tree(), "    ") in (rabbitry.__doc__ or "")


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


def test_every_internal_signal_raised_is_caught_inside() -> None:
    """An internal signal is caught somewhere in rabbitry; a private one (``_Name``) in the
    module that raises it."""
    internal = {q.rsplit(".", 1)[1]: _module_of_name(q) for q in INTERNAL}
    scans = {_module_of(path): _raised_and_caught(tree) for path, tree in _sources().items()}
    caught_anywhere = set().union(*(caught for _, caught in scans.values()))
    loose = []
    for module, (raised, caught) in scans.items():
        for name in sorted(raised & set(internal)):
            if name.startswith("_") and (name not in caught or internal[name] != module):
                loose.append(f"{module}: {name} (private: catch it where it is raised)")
            elif name not in caught_anywhere:
                loose.append(f"{module}: {name} (raise an error of rabbitry/errors.py)")
    assert loose == []


def _module_of_name(qualified: str) -> str:
    return qualified.rsplit(".", 1)[0]
