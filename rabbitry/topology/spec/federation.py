"""Federation as the spec writes it: upstream brokers, sets of them, and the policies that
federate exchanges and queues from them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, SecretStr, model_validator

from rabbitry.topology.spec.base import Name, SpecModel
from rabbitry.topology.spec.quantities import Milliseconds

FederationAckMode = Literal["on-confirm", "on-publish", "no-ack"]


class FederationUpstreamSpec(SpecModel):
    """A broker to federate from (a federation-upstream parameter)."""

    name: Name
    """Upstream name (what sets and federation policies refer to)."""
    uri: str | list[str]
    """AMQP URI(s) of the upstream broker, e.g. amqp://user@dc1:5672/%2F; several = failover.
    Credentials belong in `password` or a template ({{ env.X }}); they are masked in output."""
    password: SecretStr | None = None
    """Password inserted into every `uri` (percent-encoded): '{{ env.DC1_PASSWORD }}' or
    "{% include 'secrets/dc1' %}". Never printed."""
    prefetch_count: int | None = Field(None, ge=1)
    """Unacknowledged messages in flight per link (broker default 1000)."""
    reconnect_delay: Milliseconds | None = None
    """Wait before reconnecting after a link fails (e.g. 5s; broker default 5s)."""
    ack_mode: FederationAckMode | None = None
    """on-confirm (default, no loss), on-publish, or no-ack (fastest, may lose messages)."""
    trust_user_id: bool | None = None
    """Pass the user-id property through unchanged (validated upstream)."""
    exchange: str | None = None
    """Exchange federated from (default: the same name as the federated exchange)."""
    queue: str | None = None
    """Queue federated from (default: the same name as the federated queue)."""
    max_hops: int | None = Field(None, ge=1)
    """Exchange federation: how many federation links a message may cross (default 1)."""
    expires: Annotated[Milliseconds, Field(ge=1)] | None = None
    """Exchange federation: delete the upstream's buffer queue after the link is gone this long
    (messages published meanwhile are kept until then)."""
    message_ttl: Milliseconds | None = None
    """Exchange federation: TTL of messages in the upstream's buffer queue."""
    queue_type: Literal["classic", "quorum"] | None = None
    """Exchange federation (RabbitMQ 3.13+): type of the upstream's buffer queue."""


class UpstreamSetMemberSpec(SpecModel):
    """One upstream of a set, optionally with its own upstream exchange or queue."""

    upstream: Name
    """Name of a `federation.upstreams` entry."""
    exchange: str | None = None
    """Exchange to federate from on this upstream (overrides the upstream's)."""
    queue: str | None = None
    """Queue to federate from on this upstream (overrides the upstream's)."""


class UpstreamSetSpec(SpecModel):
    """A named set of upstreams (a federation-upstream-set parameter)."""

    name: Name
    """Set name (what federation policies refer to; `all` is built in)."""
    upstreams: list[Name | UpstreamSetMemberSpec] = Field(min_length=1)
    """Upstream names, or {upstream, exchange, queue} entries."""


class FederationPolicySpec(SpecModel):
    """Federate the exchanges or queues whose names match `pattern` (a policy)."""

    pattern: str
    """Regular expression over exchange or queue names (unanchored: use ^...$)."""
    upstream: Name | None = None
    """Federate from this upstream..."""
    upstream_set: Name | None = None
    """... or from this set of upstreams (`all`: every upstream of the vhost)."""
    name: Name | None = None
    """Policy name (default `federate.<exchanges|queues>.<index>`)."""
    priority: int = 0
    """Policy priority: only the highest-priority matching policy applies to an object, so a
    federated object must not match another policy of higher priority."""

    @model_validator(mode="after")
    def _one_source(self) -> FederationPolicySpec:
        if (self.upstream is None) == (self.upstream_set is None):
            raise ValueError("a federation policy names either `upstream` or `upstream_set`")
        return self


class FederationSpec(SpecModel):
    """Federation: upstream brokers, sets of them, and what is federated from them."""

    upstreams: list[FederationUpstreamSpec] = Field(default_factory=list)
    """Upstream brokers."""
    upstream_sets: list[UpstreamSetSpec] = Field(default_factory=list)
    """Named sets of upstreams."""
    exchanges: list[FederationPolicySpec] = Field(default_factory=list)
    """Federated exchanges: messages published upstream are also routed here."""
    queues: list[FederationPolicySpec] = Field(default_factory=list)
    """Federated queues: local consumers also receive upstream messages when idle upstream."""


__all__ = [
    "FederationAckMode",
    "FederationPolicySpec",
    "FederationSpec",
    "FederationUpstreamSpec",
    "UpstreamSetMemberSpec",
    "UpstreamSetSpec",
]
