"""Message bodies as typed values: the ``Codec`` protocol, JSON by default, and models.

A codec turns plain data (dicts, lists, strings, numbers) into bytes and back, and names its
``content_type``. Typed values (pydantic models, dataclasses, or anything else pydantic can
validate) cross it through pydantic: a publisher dumps a model to plain data and encodes it;
a worker decodes the body and validates it into the handler's declared type. pydantic is
imported only when a model is met, so bytes, strings and dicts cost what they cost before.
"""

from __future__ import annotations

import json
import sys
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeAlias, runtime_checkable

if TYPE_CHECKING:
    from pydantic import BaseModel, TypeAdapter


class DataclassInstance(Protocol):
    """Any dataclass instance (what ``dataclasses.is_dataclass`` accepts)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]


Model: TypeAlias = "BaseModel | DataclassInstance"
"""A typed body: a pydantic model or a dataclass instance."""


@runtime_checkable
class Codec(Protocol):
    """Plain data to bytes and back; ``content_type`` is set on the messages it encodes."""

    content_type: str

    def encode(self, data: Any) -> bytes:
        """Bytes for plain data (what a model dumps to in JSON mode)."""
        ...

    def decode(self, body: bytes) -> Any:
        """Plain data from a body; raise ``ValueError`` when the bytes are not this format."""
        ...


class JsonCodec:
    """UTF-8 JSON without spaces (``application/json``), the default codec."""

    content_type = "application/json"

    def encode(self, data: Any) -> bytes:
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def decode(self, body: bytes) -> Any:
        return json.loads(body)

    def __repr__(self) -> str:
        return "JsonCodec()"


JSON = JsonCodec()


def is_model(value: object) -> bool:
    """True for a pydantic model instance or a dataclass instance (not a class)."""
    if isinstance(value, type):
        return False
    if hasattr(type(value), "__dataclass_fields__"):
        return True
    pydantic = sys.modules.get("pydantic")  # no pydantic loaded: no model can exist
    return pydantic is not None and isinstance(value, pydantic.BaseModel)


@lru_cache(maxsize=512)
def adapter(kind: Any) -> TypeAdapter[Any]:
    """pydantic's validator and serializer for ``kind``, built once per type."""
    from pydantic import TypeAdapter

    return TypeAdapter(kind)


def encode_model(value: Any, codec: Codec = JSON) -> bytes:
    """The body of a typed value: its JSON-mode dump, encoded by ``codec``."""
    kind: Any = type(value)
    if type(codec) is JsonCodec:
        return adapter(kind).dump_json(value)  # one pass in pydantic-core
    return codec.encode(adapter(kind).dump_python(value, mode="json"))


def decode_model(body: bytes, kind: Any, codec: Codec = JSON) -> Any:
    """``body`` decoded by ``codec`` and validated into ``kind``.

    Raises ``ValueError`` when the bytes are not the codec's format and pydantic's
    ``ValidationError`` (a ``ValueError`` too) when the data does not fit ``kind``."""
    if type(codec) is JsonCodec:
        return adapter(kind).validate_json(body)
    return adapter(kind).validate_python(codec.decode(body))
