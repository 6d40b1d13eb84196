"""Where a message goes, as the spec says: exchanges, shard keys, delays, reachable queues.

Pure: reads a ``Topology`` (or nothing, then every exchange name is taken as given). The one
door to the broker is ``Router.layout_check``, a callable the publisher may set: it is called
once per delay, before that delay's first message (``rabbitry.publisher.layout``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from rabbitry.amqp.topic import topic_matches
from rabbitry.errors import NoRoute as NoRoute
from rabbitry.errors import PublishError
from rabbitry.errors import UnknownExchange as UnknownExchange
from rabbitry.policies.delay import DelayScheme, Route
from rabbitry.topology.patterns.delays import delay_addresses, delay_scheme
from rabbitry.topology.primitives import (
    Binding,
    DestinationType,
    Exchange,
    ExchangeType,
    Topology,
    Vhost,
)
from rabbitry.topology.spec.model import VhostSpec


@dataclass(frozen=True)
class Target:
    """Exchange, routing key and headers to add, after shard keys and delays are applied."""

    exchange: str
    routing_key: str
    headers: Mapping[str, Any] | None
    delayed: bool = False


@dataclass(frozen=True)
class SpecDelays:
    """The delays of one vhost of a spec: a delayed message goes through the delay whose
    targets include its address (the routing key it is published with)."""

    vhost: str
    patterns: tuple[tuple[DelayScheme, frozenset[str]], ...]
    """Each delay's levels and the addresses it delivers to."""

    @classmethod
    def of(cls, vhost: VhostSpec) -> SpecDelays:
        return cls(
            vhost.name,
            tuple((delay_scheme(d), frozenset(delay_addresses(vhost, d))) for d in vhost.delays),
        )

    def _describe(self) -> str:
        return "; ".join(
            f"{scheme.prefix} -> {', '.join(sorted(targets)) or 'no targets'}"
            for scheme, targets in self.patterns
        )

    def named(self, name: str) -> DelayScheme:
        """The levels of the delay called ``name``."""
        for scheme, _ in self.patterns:
            if scheme.prefix == name:
                return scheme
        known = ", ".join(scheme.prefix for scheme, _ in self.patterns) or "none"
        raise PublishError(
            f"vhost {self.vhost!r} of the spec declares no delay {name!r} (delays: {known})"
        )

    def scheme_for(self, address: str) -> DelayScheme:
        """The levels of the one delay that delivers to ``address``."""
        fits = [scheme for scheme, targets in self.patterns if address in targets]
        if len(fits) == 1:
            return fits[0]
        if not self.patterns:
            raise PublishError(
                f"delay= needs delay levels: vhost {self.vhost!r} of the spec declares no"
                " delays (vhosts[].delays); declare one or pass delays="
            )
        if not fits:
            raise PublishError(
                f"no delay of vhost {self.vhost!r} delivers to {address!r} (the routing key of"
                f" a delayed message is its target address; {self._describe()}): add it to"
                " the targets of a delay (vhosts[].delays[].targets), or pass delays= (the name"
                " of a delay of the spec, or its levels)"
            )
        names = ", ".join(scheme.prefix for scheme in fits)
        raise PublishError(
            f"several delays of vhost {self.vhost!r} deliver to {address!r} ({names}): pass"
            " delays= with the name of the one to use"
        )

    def route(self, delay: float | timedelta, address: str) -> Route:
        """Entry exchange and routing key through the delay that delivers to ``address``."""
        return self.scheme_for(address).route(delay, address)


DelayLevels = DelayScheme | SpecDelays
"""What a router delays messages with: one delay's levels, or a spec's delays by target."""


class Router:
    """Resolves publish targets against one vhost of a topology."""

    def __init__(
        self,
        topology: Topology | None = None,
        vhost: str | None = None,
        *,
        delays: DelayLevels | None = None,
    ) -> None:
        self.delays = delays
        self.layout_check: Callable[[DelayScheme], None] | None = None
        """Called with a delay's levels before its first message (raises to refuse it)."""
        self._checked_layouts: set[DelayScheme] = set()
        self._lane_turn = 0
        self._vhost: Vhost | None = None
        self._exchanges: dict[str, Exchange] = {}
        self._bindings: dict[str, list[Binding]] = {}
        self._queues: set[str] = set()
        if topology is not None:
            chosen = self._pick_vhost(topology, vhost)
            self._vhost = chosen
            self._exchanges = {e.name: e for e in chosen.exchanges}
            self._queues = {q.name for q in chosen.queues}
            for b in chosen.bindings:
                self._bindings.setdefault(b.source, []).append(b)

    @staticmethod
    def _pick_vhost(topology: Topology, vhost: str | None) -> Vhost:
        if vhost is None:
            if len(topology.vhosts) != 1:
                names = ", ".join(v.name for v in topology.vhosts) or "none"
                raise PublishError(f"the topology has several vhosts ({names}): pass vhost=")
            return topology.vhosts[0]
        found = topology.vhost(vhost)
        if found is None:
            names = ", ".join(v.name for v in topology.vhosts) or "none"
            raise PublishError(f"vhost {vhost!r} is not in the topology (it has: {names})")
        return found

    @property
    def vhost(self) -> str | None:
        return self._vhost.name if self._vhost is not None else None

    @property
    def knows_topology(self) -> bool:
        return self._vhost is not None

    def exchange(self, name: str) -> Exchange | None:
        return self._exchanges.get(name)

    def check_exchange(self, name: str) -> None:
        if self._vhost is None or name == "" or name.startswith("amq."):
            return
        if name not in self._exchanges:
            known = ", ".join(sorted(self._exchanges)) or "none"
            raise UnknownExchange(
                f"exchange {name!r} is not declared in vhost {self._vhost.name!r} of the spec"
                f" (declared: {known})"
            )

    def resolve(
        self,
        exchange: str,
        routing_key: str,
        *,
        shard_key: str | None = None,
        delay: float | timedelta | None = None,
    ) -> Target:
        """Apply a shard key and a delay to a publish target."""
        headers: dict[str, Any] | None = None
        if shard_key is not None:
            spec = self._exchanges.get(exchange)
            hash_header = None
            if spec is not None and spec.type is ExchangeType.CONSISTENT_HASH:
                hash_header = spec.arguments.get("hash-header")
            if hash_header:
                headers = {str(hash_header): shard_key}
            else:
                routing_key = shard_key
        if delay is not None:
            if self.delays is None:
                raise PublishError(
                    "delay= needs delay levels: make the publisher with from_spec(<spec path or"
                    " Spec>) to use the spec's delays, or pass delays= (a BinaryDelays or"
                    " FixedDelays, e.g. rabbitry.topology.patterns.delays.delay_scheme of a"
                    " spec's delay)"
                )
            delays = self.delays
            scheme = delays.scheme_for(routing_key) if isinstance(delays, SpecDelays) else delays
            if self.layout_check is not None and scheme not in self._checked_layouts:
                self.layout_check(scheme)
                self._checked_layouts.add(scheme)
            # lanes in turn: a burst spreads evenly over a level's queues (policies.delay)
            self._lane_turn += 1
            route = scheme.route(delay, routing_key, self._lane_turn)
            return Target(route.exchange, route.routing_key, headers, delayed=True)
        self.check_exchange(exchange)
        return Target(exchange, routing_key, headers)

    def reaches_queue(
        self, exchange: str, routing_key: str, headers: Mapping[str, Any] | None = None
    ) -> bool:
        """Whether, by the topology, a message would reach at least one queue."""
        if self._vhost is None:
            return True
        if exchange == "":
            return routing_key in self._queues
        return self._reaches(exchange, routing_key, headers or {}, set())

    def _reaches(self, exchange: str, key: str, headers: Mapping[str, Any], seen: set[str]) -> bool:
        if exchange in seen:
            return False
        seen.add(exchange)
        spec = self._exchanges.get(exchange)
        if spec is None:
            return False
        for binding in self._bindings.get(exchange, ()):
            if not self._binding_matches(spec, binding, key, headers):
                continue
            if binding.destination_type is DestinationType.QUEUE:
                if binding.destination in self._queues:
                    return True
            elif self._reaches(binding.destination, key, headers, seen):
                return True
        alternate = spec.arguments.get("alternate-exchange")
        return bool(alternate) and self._reaches(str(alternate), key, headers, seen)

    @staticmethod
    def _binding_matches(
        spec: Exchange, binding: Binding, key: str, headers: Mapping[str, Any]
    ) -> bool:
        kind = spec.type
        if kind is ExchangeType.DIRECT:
            return binding.routing_key == key
        if kind is ExchangeType.TOPIC:
            return topic_matches(binding.routing_key, key)
        if kind is ExchangeType.HEADERS:
            wanted = {k: v for k, v in binding.arguments.items() if not k.startswith("x-")}
            if binding.arguments.get("x-match", "all") in ("any", "any-with-x"):
                return any(headers.get(k) == v for k, v in wanted.items())
            return all(headers.get(k) == v for k, v in wanted.items())
        # fanout and the hash exchanges deliver to some bound destination
        return True
