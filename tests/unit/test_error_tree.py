"""Every error rabbitry raises on purpose can be caught by its name and is in docs/api.md's
tree: a RabbitryError defined anywhere under rabbitry/ is ``rabbitry.<Name>`` (the Spark data
source's and the test brokers' are their packages' names), and the tree names it."""

from __future__ import annotations

import ast
import functools
import importlib
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
