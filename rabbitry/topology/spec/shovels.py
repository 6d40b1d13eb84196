"""Dynamic shovels as the spec writes them: two ends, and how messages move between them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, SecretStr, model_validator

from rabbitry.topology.spec.base import Name, SpecModel
from rabbitry.topology.spec.federation import FederationAckMode
from rabbitry.topology.spec.quantities import Milliseconds


class ShovelEndpointSpec(SpecModel):
    """One end of a shovel: a broker (URI) and a queue, an exchange, or an AMQP 1.0 address."""

    uri: str | list[str]
    """AMQP URI(s) of the broker, e.g. amqp://user@dc2:5672/%2F (several: failover);
    `amqp:///VHOST` is a vhost of this broker, no credentials needed."""
    password: SecretStr | None = None
    """Password inserted into every `uri` (percent-encoded): '{{ env.DC2_PASSWORD }}'.
    Never printed."""
    protocol: Literal["amqp091", "amqp10"] = "amqp091"
    """amqp091 (queues and exchanges) or amqp10 (addresses)."""
    queue: str | None = None
    """AMQP 0-9-1: the queue to consume from (source) or to publish to (destination)."""
    exchange: str | None = None
    """AMQP 0-9-1: the exchange to bind a temporary queue to (source) or to publish to."""
    routing_key: str | None = None
    """AMQP 0-9-1, with `exchange`: the binding key (source) or the routing key messages get
    (destination; default: their own)."""
    address: str | None = None
    """AMQP 1.0: the address to consume from or to send to."""


class ShovelSpec(SpecModel):
    """A dynamic shovel: moves messages from a source to a destination, on its own broker
    connection, until deleted (a `shovel` parameter)."""

    name: Name
    """Shovel name."""
    source: ShovelEndpointSpec
    """Where messages come from."""
    destination: ShovelEndpointSpec
    """Where they go."""
    ack_mode: FederationAckMode | None = None
    """on-confirm (default: acknowledged at the source once the destination confirmed, no loss),
    on-publish, or no-ack (fastest, may lose messages)."""
    prefetch: int | None = Field(None, ge=1)
    """Unacknowledged messages in flight (broker default 1000)."""
    delete_after: Literal["never", "queue-length"] | Annotated[int, Field(ge=1)] | None = None
    """never (default), queue-length (the messages there at the start), or a number of
    messages; then the shovel deletes itself, and the next apply starts it again."""
    reconnect_delay: Milliseconds | None = None
    """Wait before reconnecting after a failure (e.g. 5s; broker default 5s)."""

    @model_validator(mode="after")
    def _ends(self) -> ShovelSpec:
        for side, end in (("source", self.source), ("destination", self.destination)):
            named = [k for k in ("queue", "exchange") if getattr(end, k) is not None]
            if end.protocol == "amqp10":
                if named or end.routing_key is not None:
                    raise ValueError(
                        f"shovel {self.name!r}: {side} speaks AMQP 1.0, which has `address`,"
                        " not queue, exchange or routing_key"
                    )
                if end.address is None:
                    raise ValueError(f"shovel {self.name!r}: {side} needs an `address`")
                continue
            if end.address is not None:
                raise ValueError(
                    f"shovel {self.name!r}: `address` is AMQP 1.0: set {side}.protocol: amqp10,"
                    " or give a queue or an exchange"
                )
            if len(named) > 1:
                raise ValueError(
                    f"shovel {self.name!r}: {side} has a queue or an exchange, not both"
                )
            if side == "source" and not named:
                raise ValueError(f"shovel {self.name!r}: the source needs a queue or an exchange")
            if end.routing_key is not None and end.exchange is None:
                raise ValueError(f"shovel {self.name!r}: {side}.routing_key goes with an exchange")
        return self


__all__ = ["ShovelEndpointSpec", "ShovelSpec"]
