"""Dynamic shovels from ``vhosts[].shovels``: each becomes a ``shovel`` parameter, in the
broker's key names and units, its password percent-encoded into every URI (the value is a
secret the planner and every output mask). ``rabbitry status`` compares the shovels declared
with ``/api/shovels/{vhost}``."""

from __future__ import annotations

from rabbitry.topology.patterns.draft import VhostDraft
from rabbitry.topology.primitives import JSON, Parameter
from rabbitry.topology.spec.model import ShovelEndpointSpec, ShovelSpec
from rabbitry.uri import with_password

__all__ = ["declare_shovels", "endpoint_uris", "shovel_value"]


def endpoint_uris(end: ShovelEndpointSpec) -> list[str]:
    """The end's URIs, with ``password`` put into each (percent-encoded)."""
    password = end.password.get_secret_value() if end.password is not None else None
    return with_password(end.uri, password)


def _end(prefix: str, end: ShovelEndpointSpec) -> dict[str, JSON]:
    uris = endpoint_uris(end)
    value: dict[str, JSON] = {
        f"{prefix}-protocol": end.protocol,
        f"{prefix}-uri": uris[0] if len(uris) == 1 else uris,
    }
    named = {
        f"{prefix}-queue": end.queue,
        f"{prefix}-exchange": end.exchange,
        f"{prefix}-exchange-key": end.routing_key,
        f"{prefix}-address": end.address,
    }
    value.update({k: v for k, v in named.items() if v is not None})
    return value


def shovel_value(spec: ShovelSpec) -> dict[str, JSON]:
    """The ``shovel`` parameter value."""
    value = {**_end("src", spec.source), **_end("dest", spec.destination)}
    value["ack-mode"] = spec.ack_mode or "on-confirm"
    if spec.prefetch is not None:
        value["src-prefetch-count"] = spec.prefetch
    if spec.delete_after is not None:
        value["src-delete-after"] = spec.delete_after
    if spec.reconnect_delay is not None:
        seconds = spec.reconnect_delay / 1000
        value["reconnect-delay"] = int(seconds) if seconds.is_integer() else seconds
    return value


def declare_shovels(draft: VhostDraft) -> None:
    for spec in draft.spec.shovels:
        draft.parameters.append(
            Parameter(component="shovel", name=spec.name, value=shovel_value(spec))
        )
