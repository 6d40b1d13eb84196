"""Package names loaded on first use (PEP 562), for the packages whose parts weigh on start-up.

``rabbitry --version`` must not import httpx, a worker must not import the blocking worker and the
asyncio one both, and ``import rabbitry.topology`` must not build every model: a package lists
which module holds each of its names, and ``names`` gives it the module-level ``__getattr__`` and
``__dir__`` that import one when it is first asked for.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def names(
    package: str,
    where: Mapping[str, str],
    listed: Iterable[str],
    modules: Iterable[str] = (),
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``where`` maps a name to the module that
    holds it, ``modules`` names those that are the module itself, ``listed`` is the package's
    ``__all__``."""
    public, whole = set(listed), set(modules)

    def getattr_(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        imported = importlib.import_module(module)
        value = imported if name in whole else getattr(imported, name)
        setattr(sys.modules[package], name, value)  # the next access is an ordinary attribute
        return value

    def dir_() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | public)

    return getattr_, dir_
