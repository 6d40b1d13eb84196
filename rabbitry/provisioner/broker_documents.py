"""The management API's documents of the objects a definitions import creates (pure): a
vhost's definitions document, each entry as its kind's module writes it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from rabbitry.topology.kinds import kind_of_resource
from rabbitry.topology.primitives import Primitive


def definitions_for(resources: Iterable[Primitive]) -> dict[str, list[dict[str, Any]]]:
    """A per-vhost definitions document creating exactly these objects."""
    doc: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in resources:
        kind = kind_of_resource(r)
        if not kind.imported or kind.section is None:
            raise TypeError(f"{type(r).__name__} is not part of a vhost definitions import")
        doc[kind.section].append(kind.definitions_entry(r))
    return dict(doc)


__all__ = ["definitions_for"]
