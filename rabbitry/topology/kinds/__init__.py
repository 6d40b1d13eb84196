"""One module per kind of broker object, and the registry of them.

The registry is ``primitives.KIND_ORDER``: each name in it has its module here, of the same
name, whose ``KIND`` (a ``kind.Kind``) holds everything specific to that kind. The generic code
(``provisioner.state``, ``planner``, ``writes``, ``field_diff``, ``broker_documents``,
``planfile``, ``targeting``, ``topology.document``, ``patterns.expand``) iterates ``registered()``
or ``in_vhosts()``, or looks a kind up with ``kind_of``, and never asks which kind it holds.
"""

from __future__ import annotations

import importlib
from typing import Any

from rabbitry.topology.kinds.kind import Kind
from rabbitry.topology.primitives import KIND_ORDER, Primitive, ResourceKey


def _modules() -> tuple[Kind[Any], ...]:
    found = []
    for name in KIND_ORDER:
        kind = importlib.import_module(f"{__name__}.{name}").KIND
        if not isinstance(kind, Kind) or kind.name != name or kind.primitive.kind != name:
            raise TypeError(f"{__name__}.{name}.KIND is not the Kind of {name!r}")
        found.append(kind)
    return tuple(found)


_REGISTRY: tuple[Kind[Any], ...] = _modules()
"""Every kind, in dependency order (creation; deletion runs it backwards)."""

_BY_NAME: dict[str, tuple[int, Kind[Any]]] = {
    kind.name: (i, kind) for i, kind in enumerate(_REGISTRY)
}
"""Each kind's place in ``_REGISTRY`` and itself, by name (a test may register another)."""


def registered() -> tuple[Kind[Any], ...]:
    """Every kind, in dependency order (creation; deletion runs it backwards)."""
    return _REGISTRY


def in_vhosts() -> tuple[Kind[Any], ...]:
    """The kinds that live inside a vhost, in creation order (``Vhost.members``)."""
    return tuple(kind for kind in _REGISTRY if kind.vhost_field)


def kind_of(name: str) -> Kind[Any]:
    """The kind named ``name`` (``Primitive.kind``, a key's ``kind``)."""
    return _BY_NAME[name][1]


def kind_of_resource(resource: Primitive) -> Kind[Any]:
    """The kind of ``resource``."""
    return _BY_NAME[resource.kind][1]


def rank(name: str) -> int:
    """The place of kind ``name`` in dependency order."""
    return _BY_NAME[name][0]


def describe_key(key: ResourceKey) -> str:
    """A short human name: ``queue orders/work``, ``binding orders/ex -> queue q [rk]``."""
    named = ResourceKey(key)  # a plain tuple of its parts too
    return _BY_NAME[named.kind][1].describe(named)


__all__ = [
    "Kind",
    "describe_key",
    "in_vhosts",
    "kind_of",
    "kind_of_resource",
    "rank",
    "registered",
]
