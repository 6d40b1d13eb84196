"""What every model of the spec shares: the strict base model and the names it checks.

``SpecModel`` forbids unknown keys and hands its field docstrings to the JSON Schema (through
``field_docs.describe``); ``Name`` and ``VhostName`` are what AMQP and the management API
accept as object names; ``SpecExchangeType`` is an exchange type rabbitry knows or a plugin's;
``protect_field`` and ``on_remove_field`` are what an exchange and a queue say of their removal.
The models themselves live one kind a module beside this one; ``model`` holds the document.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal, cast

from pydantic import AfterValidator, BaseModel, Field, PlainValidator, WithJsonSchema

from rabbitry.topology.primitives import ExchangeType
from rabbitry.topology.spec.arguments import ExchangeArguments, QueueArguments
from rabbitry.topology.spec.field_docs import SPEC_MODEL_CONFIG
from rabbitry.uri import mask_value

# One shared "no arguments" value: the models are frozen, and a fresh one per queue (21 fields,
# all None) was a third of a 50,000-object spec's memory.
NO_QUEUE_ARGUMENTS = QueueArguments()
NO_EXCHANGE_ARGUMENTS = ExchangeArguments()

SCHEMA_VERSION = 1

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _amqp_name(name: str) -> str:
    if name.isascii() and name.isprintable():  # the usual name: no control character, and
        return name  # at most 255 bytes (max_length counts characters: one byte each here)
    size = len(name.encode("utf-8"))
    if size > 255:
        raise ValueError(
            f"a name is at most 255 bytes in UTF-8 (AMQP sends it as a short string), this one"
            f" is {size}: shorten it"
        )
    found = _CONTROL.search(name)
    if found:
        raise ValueError(
            f"control character U+{ord(found[0]):04X} at position {found.start()} of the name:"
            " names are printable text (clients, logs and the management UI cannot show it)"
        )
    return name


def _vhost_name(name: str) -> str:
    if not name.isascii():
        raise ValueError(
            "a vhost name must be ASCII: the management API fails (HTTP 500) to export the"
            " definitions of a vhost named otherwise, so it could not be planned; objects"
            " inside it may have any name"
        )
    return name


Name = Annotated[str, Field(min_length=1, max_length=255), AfterValidator(_amqp_name)]
"""An AMQP object name: at most 255 bytes in UTF-8 (a short string on the wire), printable."""

VhostName = Annotated[Name, AfterValidator(_vhost_name)]
"""A vhost name: an AMQP name in ASCII (what the management API can export)."""

PLUGIN_EXCHANGE_TYPE = re.compile(r"x-[A-Za-z0-9][A-Za-z0-9._-]*")
"""How plugins name their exchange types (x-local-random, x-recent-history, x-jms-topic)."""


def _exchange_type(value: object) -> ExchangeType | str:
    if isinstance(value, ExchangeType):
        return value
    if isinstance(value, str):
        member = ExchangeType._value2member_map_.get(value)  # the enum's call, minus its cost
        if member is not None:
            return cast(ExchangeType, member)
        if PLUGIN_EXCHANGE_TYPE.fullmatch(value):
            return value  # a plugin's type rabbitry does not know: passed through, unchecked
    known = ", ".join(repr(t.value) for t in ExchangeType)
    close = difflib.get_close_matches(str(value), [t.value for t in ExchangeType], n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"expected {known}, or a plugin's exchange type (x-...), got {value!r}{hint}")


SpecExchangeType = Annotated[
    ExchangeType | str,
    PlainValidator(_exchange_type),
    WithJsonSchema(
        {
            "anyOf": [
                {"enum": [t.value for t in ExchangeType]},
                {"type": "string", "pattern": f"^{PLUGIN_EXCHANGE_TYPE.pattern}$"},
            ]
        }
    ),
]
"""A type rabbitry knows, or a plugin's ``x-`` type it passes through unchecked."""


class SpecModel(BaseModel):
    """Base of the document models: unknown keys are errors, numbers are accepted as names."""

    model_config = SPEC_MODEL_CONFIG

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # passwords in URIs and password-like keys never reach a repr, a log or a traceback
        for name, value in super().__repr_args__():
            secret = name is not None and "password" in name and isinstance(value, str)
            yield name, "***" if secret else mask_value(value)


OnRemove = Literal["delete", "retain"]


def protect_field(kind: str) -> Any:
    """The ``protect`` field of a ``kind`` of object (exchange, queue)."""
    return Field(
        False,
        description=f"Never delete or replace this {kind} on the broker, whatever apply's flags"
        " (`--prune`, `--force`, `--allow-replace`): apply refuses such a change and says why."
        f" Kept in the stack's ownership record, so it still holds once the {kind} has left"
        " the spec; to delete it, apply it with `protect: false` first.",
    )


def on_remove_field(kind: str) -> Any:
    """The ``on_remove`` field of a ``kind`` of object (exchange, queue)."""
    return Field(
        "delete",
        description="What leaving the spec does: `delete` (with `--prune`), or `retain`: the"
        f" {kind} stays on the broker as it is (messages and all) and leaves the stack's"
        " ownership record, so no later apply of this stack touches it. Kept in the record,"
        " like `protect`.",
    )


__all__ = [
    "NO_EXCHANGE_ARGUMENTS",
    "NO_QUEUE_ARGUMENTS",
    "PLUGIN_EXCHANGE_TYPE",
    "Name",
    "OnRemove",
    "SpecExchangeType",
    "SpecModel",
    "VhostName",
    "on_remove_field",
    "protect_field",
]
