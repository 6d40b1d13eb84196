"""Topology -> spec document: the inverse of ``expand``, for ``rabbitry export``.

The contract is a round trip: ``load_spec(dump_yaml(spec_document(t)))`` expands to a topology
equal to ``t``. Defaults are left out to keep the document short, arguments rabbitry checks go
under ``arguments`` (durations and sizes written with units) and the rest under
``unchecked_arguments``, and the text is escaped so the Jinja2 pass of the loader leaves it
untouched. Users are written with a password hash, never a password.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rabbitry.topology.emit import block_yaml
from rabbitry.topology.kinds import in_vhosts, kind_of_resource
from rabbitry.topology.kinds.exported_arguments import model_keys, split_arguments
from rabbitry.topology.patterns.super_streams import super_streams_in
from rabbitry.topology.primitives import JSON, ExchangeType, Primitive, Topology, Vhost
from rabbitry.topology.spec.arguments import (
    ExchangeArguments,
    KnownKeys,
    OperatorPolicyDefinition,
    PolicyDefinition,
    QueueArguments,
)
from rabbitry.topology.spec.model import SCHEMA_VERSION, VhostSpec

__all__ = [
    "DEFAULT_SCHEMA_REF",
    "dump_yaml",
    "plain_yaml",
    "spec_document",
    "topology_data",
    "unknown_to_rabbitry",
]

DEFAULT_SCHEMA_REF = "rabbitry.schema.json"
"""Where the schema comment points by default (write it with ``rabbitry schema``)."""

Document = dict[str, Any]


def spec_document(topology: Topology) -> Document:
    """A plain dict that, dumped as YAML, loads back into a spec expanding to ``topology``."""
    doc: Document = {"version": SCHEMA_VERSION, "name": topology.name}
    if topology.users:
        doc["users"] = [_exported(u, None) for u in topology.users]
    if topology.global_parameters:
        doc["global_parameters"] = [_exported(p, None) for p in topology.global_parameters]
    if topology.vhosts:
        doc["vhosts"] = [_vhost(v) for v in topology.vhosts]
    return doc


def _exported(resource: Primitive, vhost: Vhost | None) -> Document:
    return kind_of_resource(resource).exported(resource, vhost)


def _sections() -> list[str]:
    """The spec's vhost sections in the order the spec model declares them, the super streams
    after the bindings (they stand for exchanges, queues and bindings); a kind the spec model
    has no section of comes last."""
    fields = [kind.vhost_field or "" for kind in in_vhosts()]
    order = list(VhostSpec.model_fields)
    fields.sort(key=lambda f: order.index(f) if f in order else len(order))
    at = fields.index("bindings") + 1
    return [*fields[:at], "super_streams", *fields[at:]]


def _vhost(vhost: Vhost) -> Document:
    out = _exported(vhost, None)
    streams, covered = _super_streams(vhost)
    sections: dict[str, list[Document]] = {"super_streams": streams}
    for kind in in_vhosts():
        field = kind.vhost_field or ""
        sections[field] = [
            kind.exported(o, vhost) for o in getattr(vhost, field) if id(o) not in covered
        ]
    out.update((key, sections[key]) for key in _sections() if sections[key])
    return out


def _super_streams(vhost: Vhost) -> tuple[list[Document], set[int]]:
    """The vhost's super streams as spec entries, and the objects they stand for (by id)."""
    entries: list[Document] = []
    covered: set[int] = set()
    for found in super_streams_in(vhost):
        entry: Document = {"name": found.name}
        if found.numbered:
            entry["partitions"] = len(found.keys)
        else:
            entry["routing_keys"] = list(found.keys)
        split_arguments(entry, found.arguments, QueueArguments, "arguments", "unchecked_arguments")
        if "unchecked_arguments" in entry:
            continue  # a partition argument the spec does not check: kept as separate objects
        entries.append(entry)
        covered.update(id(o) for o in (found.exchange, *found.queues, *found.bindings))
    return entries, covered


def unknown_to_rabbitry(topology: Topology) -> list[str]:
    """What ``spec_document`` keeps unchecked because rabbitry does not know it, one line per
    object: exchange types of plugins, and argument and policy keys it has no check for
    (validate warns about known keys whose values it would not take back)."""
    lines: list[str] = []
    for vhost in topology.vhosts:
        for exchange in vhost.exchanges:
            if not isinstance(exchange.type, ExchangeType):
                lines.append(
                    f"exchange {vhost.name}/{exchange.name}: type {exchange.type!r} is not one"
                    " rabbitry knows"
                )
        keyed: list[tuple[str, list[tuple[str, Mapping[str, JSON]]], type[KnownKeys]]] = [
            ("exchange", [(e.name, e.arguments) for e in vhost.exchanges], ExchangeArguments),
            ("queue", [(q.name, q.arguments) for q in vhost.queues], QueueArguments),
            ("policy", [(p.name, p.definition) for p in vhost.policies], PolicyDefinition),
            (
                "operator policy",
                [(p.name, p.definition) for p in vhost.operator_policies],
                OperatorPolicyDefinition,
            ),
        ]
        for label, objects, model in keyed:
            # an exchange's alternate-exchange is written as alternate_exchange, checked
            known = model_keys(model)[1] | {"alternate-exchange"}
            for name, values in objects:
                keys = sorted(k for k in values if k not in known)
                if keys:
                    lines.append(f"{label} {vhost.name}/{name}: keys {', '.join(keys)}")
    return lines


def topology_data(topology: Topology) -> Document:
    """The expanded primitives as plain data (``rabbitry render``), passwords masked."""
    data: Document = topology.model_dump(mode="json")
    for user in data.get("users", ()):
        if user.get("password") is not None:
            user["password"] = "***"
    return data


_JINJA_OPENERS = re.compile(r"\{[{%#]")


def plain_yaml(data: Any) -> str:
    """Block-style YAML in the data's own key order, lines never folded."""
    return block_yaml(data)


def dump_yaml(doc: Mapping[str, Any], schema_ref: str | None = DEFAULT_SCHEMA_REF) -> str:
    """YAML text for ``doc`` in its own key order, with the editor schema comment on top.

    Text that Jinja2 would read as template syntax (``{{``, ``{%``, ``{#``) is written as a
    template expression producing that text, so loading renders it back unchanged.
    """
    body = _JINJA_OPENERS.sub(lambda m: "{{ '" + m[0] + "' }}", plain_yaml(dict(doc)))
    header = f"# yaml-language-server: $schema={schema_ref}\n" if schema_ref else ""
    return header + body
