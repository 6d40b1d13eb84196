"""What the AsyncAPI document says of an ``App``'s handlers (``rabbitry asyncapi --app``).

``handler_docs(app)`` reads each route once: its queue and vhost, the handler's name and the
first line of its docstring, and for a typed handler (``consumer.bodies``) the JSON Schema of
its body type, as pydantic makes it, with references pointing into the document's
``#/components/schemas``. Nothing runs and nothing connects.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from rabbitry.amqp.codecs import adapter
from rabbitry.consumer.app import App, Route
from rabbitry.topology.asyncapi import HandlerDoc

__all__ = ["body_type_name", "handler_docs"]

SCHEMA_REFERENCE = "#/components/schemas/{model}"


def handler_docs(app: App) -> list[HandlerDoc]:
    """One ``HandlerDoc`` per route of ``app``, in the order they were added."""
    return [handler_doc(route) for route in app.routes.values()]


def handler_doc(route: Route) -> HandlerDoc:
    name = getattr(route.handler, "__qualname__", None) or repr(route.handler)
    doc = inspect.getdoc(route.handler)
    summary = doc.strip().splitlines()[0] if doc and doc.strip() else None
    if route.body_type is None:
        return HandlerDoc(route.queue, name, vhost=route.vhost, summary=summary)
    schema: dict[str, Any] = adapter(route.body_type).json_schema(ref_template=SCHEMA_REFERENCE)
    definitions = schema.pop("$defs", {})
    return HandlerDoc(
        route.queue,
        name,
        vhost=route.vhost,
        summary=summary,
        body_name=body_type_name(route.body_type),
        payload=schema,
        definitions=definitions,
        content_type=route.codec.content_type,
    )


def body_type_name(kind: Any) -> str:
    """``Order`` for a class, ``list[Order]`` for a generic (module paths left out)."""
    if isinstance(kind, type) and not getattr(kind, "__args__", None):
        return kind.__qualname__
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)", r"\1", repr(kind))
