"""Topology -> spec document: the inverse of ``expand``, for ``rabbitry export``.

The contract is a round trip: ``load_spec(dump_yaml(spec_document(t)))`` expands to a topology
equal to ``t``. Defaults are left out to keep the document short, arguments rabbitry checks go
under ``arguments`` (durations and sizes written with units) and the rest under
``unchecked_arguments``, and the text is escaped so the Jinja2 pass of the loader leaves it
untouched. Users are written with a password hash, never a password.
"""

from __future__ import annotations

import functools
import re
import typing
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, BeforeValidator, ValidationError

from rabbitry.topology.emit import block_yaml
from rabbitry.topology.patterns.super_streams import super_streams_in
from rabbitry.topology.primitives import (
    JSON,
    ApplyTo,
    Binding,
    DestinationType,
    Exchange,
    ExchangeType,
    Parameter,
    Permission,
    Policy,
    Queue,
    QueueType,
    TopicPermission,
    Topology,
    User,
    Vhost,
    same_json,
)
from rabbitry.topology.spec.arguments import (
    ExchangeArguments,
    KnownKeys,
    OperatorPolicyDefinition,
    PolicyDefinition,
    QueueArguments,
)
from rabbitry.topology.spec.model import SCHEMA_VERSION
from rabbitry.topology.spec.passwords import DEFAULT_ALGORITHM, hash_password
from rabbitry.topology.spec.quantities import (
    format_duration,
    format_size,
    parse_duration,
    parse_size,
)

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
        doc["users"] = [_user(u) for u in topology.users]
    if topology.global_parameters:
        doc["global_parameters"] = [
            {"name": p.name, "value": p.value} for p in topology.global_parameters
        ]
    if topology.vhosts:
        doc["vhosts"] = [_vhost(v) for v in topology.vhosts]
    return doc


def _user(user: User) -> Document:
    out: Document = {"name": user.name}
    if user.password_hash is not None:
        out["password_hash"] = user.password_hash
    elif user.password is not None:
        # Same password, never the password itself: a fresh salted hash of it, made as the
        # broker makes it (its algorithm, a 4-byte salt)
        out["password_hash"] = hash_password(
            user.password.get_secret_value(), user.hashing_algorithm
        )
    if "password_hash" in out and user.hashing_algorithm != DEFAULT_ALGORITHM:
        out["hashing_algorithm"] = user.hashing_algorithm
    if user.tags:
        out["tags"] = list(user.tags)
    if user.limits:
        out["limits"] = dict(user.limits)
    return out


def _vhost(vhost: Vhost) -> Document:
    out: Document = {"name": vhost.name}
    if vhost.description:
        out["description"] = vhost.description
    if vhost.tags:
        out["tags"] = list(vhost.tags)
    if vhost.default_queue_type is not None:
        out["default_queue_type"] = vhost.default_queue_type.value
    if vhost.protected_from_deletion:
        out["protected_from_deletion"] = True
    if vhost.limits:
        out["limits"] = dict(vhost.limits)
    default_type = vhost.default_queue_type or QueueType.CLASSIC
    streams, covered = _super_streams(vhost)
    sections: list[tuple[str, list[Document]]] = [
        ("exchanges", [_exchange(e) for e in vhost.exchanges if id(e) not in covered]),
        ("queues", [_queue(q, default_type) for q in vhost.queues if id(q) not in covered]),
        ("bindings", [_binding(b) for b in vhost.bindings if id(b) not in covered]),
        ("super_streams", streams),
        ("policies", [_policy(p, ApplyTo.ALL, PolicyDefinition) for p in vhost.policies]),
        (
            "operator_policies",
            [_policy(p, ApplyTo.QUEUES, OperatorPolicyDefinition) for p in vhost.operator_policies],
        ),
        ("permissions", [_permission(p) for p in vhost.permissions]),
        ("topic_permissions", [_topic_permission(p) for p in vhost.topic_permissions]),
        ("parameters", [_parameter(p) for p in vhost.parameters]),
    ]
    out.update((key, items) for key, items in sections if items)
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
        _arguments(entry, found.arguments, QueueArguments, "arguments", "unchecked_arguments")
        if "unchecked_arguments" in entry:
            continue  # a partition argument the spec does not check: kept as separate objects
        entries.append(entry)
        covered.update(id(o) for o in (found.exchange, *found.queues, *found.bindings))
    return entries, covered


def _exchange(exchange: Exchange) -> Document:
    out: Document = {"name": exchange.name}
    if exchange.type is not ExchangeType.DIRECT:
        out["type"] = str(exchange.type)
    _flags(out, exchange.durable, exchange.auto_delete)
    if exchange.internal:
        out["internal"] = True
    arguments = dict(exchange.arguments)
    alternate = arguments.get("alternate-exchange")
    if isinstance(alternate, str):
        out["alternate_exchange"] = alternate
        del arguments["alternate-exchange"]
    _arguments(out, arguments, ExchangeArguments, "arguments", "unchecked_arguments")
    return out


def _queue(queue: Queue, default_type: QueueType) -> Document:
    out: Document = {"name": queue.name}
    if queue.type is not default_type:
        out["type"] = queue.type.value
    _flags(out, queue.durable, queue.auto_delete)
    _arguments(out, queue.arguments, QueueArguments, "arguments", "unchecked_arguments")
    return out


def _flags(out: Document, durable: bool, auto_delete: bool) -> None:
    if not durable:
        out["durable"] = False
    if auto_delete:
        out["auto_delete"] = True


def _binding(binding: Binding) -> Document:
    out: Document = {"source": binding.source, "destination": binding.destination}
    if binding.destination_type is not DestinationType.QUEUE:
        out["destination_type"] = binding.destination_type.value
    if binding.routing_key:
        out["routing_key"] = binding.routing_key
    if binding.arguments:
        out["arguments"] = dict(binding.arguments)
    return out


def _policy(policy: Policy, default_apply_to: ApplyTo, model: type[KnownKeys]) -> Document:
    out: Document = {"name": policy.name, "pattern": policy.pattern}
    if policy.apply_to is not default_apply_to:
        out["apply_to"] = policy.apply_to.value
    if policy.priority:
        out["priority"] = policy.priority
    _arguments(out, policy.definition, model, "definition", "unchecked_definition")
    return out


def _permission(perm: Permission) -> Document:
    out: Document = {"user": perm.user}
    out.update(_non_default(configure=perm.configure, write=perm.write, read=perm.read))
    return out


def _topic_permission(perm: TopicPermission) -> Document:
    out: Document = {"user": perm.user, "exchange": perm.exchange}
    out.update(_non_default(write=perm.write, read=perm.read))
    return out


def _non_default(**patterns: str) -> Document:
    return {key: value for key, value in patterns.items() if value != ".*"}


def _parameter(param: Parameter) -> Document:
    return {"component": param.component, "name": param.name, "value": param.value}


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
            known = _model_keys(model)[1] | {"alternate-exchange"}
            for name, values in objects:
                keys = sorted(k for k in values if k not in known)
                if keys:
                    lines.append(f"{label} {vhost.name}/{name}: keys {', '.join(keys)}")
    return lines


def _arguments(
    out: Document,
    values: Mapping[str, JSON],
    model: type[KnownKeys],
    checked_key: str,
    unchecked_key: str,
) -> None:
    """Split ``values`` into the keys the model checks and the ones it would not take back."""
    formatters, known = _model_keys(model)
    checked: Document = {}
    unchecked: Document = {}
    for key, value in values.items():
        if key in known and _survives(model, key, value):
            checked[key] = formatters.get(key, _same)(value)
        else:
            unchecked[key] = value
    if checked:
        out[checked_key] = checked
    if unchecked:
        out[unchecked_key] = unchecked


def _survives(model: type[KnownKeys], key: str, value: JSON) -> bool:
    """Whether loading ``{key: value}`` gives back exactly ``value`` (else keep it unchecked)."""
    try:
        loaded = model.model_validate({key: value}).as_broker_dict()
    except ValidationError:
        return False
    return key in loaded and same_json(loaded[key], value)


def _same(value: JSON) -> JSON:
    return value


@functools.cache
def _model_keys(
    model: type[BaseModel],
) -> tuple[dict[str, Callable[[JSON], JSON]], frozenset[str]]:
    """The unit formatters and the keys of an arguments model: read once per model, not per
    queue (an export of 5,000 queues spent half its time reading the same annotations)."""
    known = frozenset(field.alias or name for name, field in model.model_fields.items())
    return _unit_formatters(model), known


def _unit_formatters(model: type[BaseModel]) -> dict[str, Callable[[JSON], JSON]]:
    """Keys whose values take units, with the function that writes them with units."""
    out: dict[str, Callable[[JSON], JSON]] = {}
    for name, field in model.model_fields.items():
        parsers = set(_before_validators(field.annotation))
        if parse_duration in parsers:
            out[field.alias or name] = _with(format_duration)
        elif parse_size in parsers:
            out[field.alias or name] = _with(format_size)
    return out


def _with(formatter: Callable[[int], int | str]) -> Callable[[JSON], JSON]:
    return lambda value: formatter(value) if isinstance(value, int) else value


def _before_validators(annotation: Any) -> list[Callable[..., Any]]:
    found: list[Callable[..., Any]] = []
    for meta in getattr(annotation, "__metadata__", ()):
        if isinstance(meta, BeforeValidator):
            found.append(meta.func)
    for arg in typing.get_args(annotation):
        found.extend(_before_validators(arg))
    return found


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
