"""One module per kind of broker object, and the registry of them.

The registry is ``primitives.KIND_ORDER``: each name in it has its module here, of the same
name, whose ``KIND`` (a ``kind.Kind``) holds everything specific to that kind. ``KINDS`` is
them in that order; the generic code (``provisioner.state``, ``writes``, ``field_diff``,
``broker_documents``, ``topology.document``) iterates it or looks a kind up with ``kind_of``,
and never asks which kind it holds.
"""

from __future__ import annotations

import importlib

from rabbitry.topology.kinds.kind import Kind
from rabbitry.topology.primitives import KIND_ORDER, Primitive, ResourceKey


def _registered() -> tuple[Kind, ...]:
    found = []
    for name in KIND_ORDER:
        kind = importlib.import_module(f"{__name__}.{name}").KIND
        if not isinstance(kind, Kind) or kind.name != name:
            raise TypeError(f"{__name__}.{name}.KIND is not the Kind of {name!r}")
        found.append(kind)
    return tuple(found)


KINDS: tuple[Kind, ...] = _registered()
"""Every kind, in dependency order (creation; deletion runs it backwards)."""

_BY_NAME: dict[str, Kind] = {kind.name: kind for kind in KINDS}

VHOST_KINDS: tuple[Kind, ...] = tuple(kind for kind in KINDS if kind.vhost_field)
"""The kinds that live inside a vhost, in creation order (``Vhost.members``)."""


def kind_of(name: str) -> Kind:
    """The kind named ``name`` (``Primitive.kind``, a key's ``kind``)."""
    return _BY_NAME[name]


def kind_of_resource(resource: Primitive) -> Kind:
    """The kind of ``resource``."""
    return _BY_NAME[resource.kind]


def describe_key(key: ResourceKey) -> str:
    """A short human name: ``queue orders/work``, ``binding orders/ex -> queue q [rk]``."""
    return _BY_NAME[key[0]].describe(ResourceKey(key))


__all__ = ["KINDS", "VHOST_KINDS", "Kind", "describe_key", "kind_of", "kind_of_resource"]
