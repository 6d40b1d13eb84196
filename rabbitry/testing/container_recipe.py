"""What a broker's container is made of, apart from starting it (``containers``): the ports
asked for and chosen, the stream protocol's plugins and advertised address, the recipe every
attempt at creating the container follows."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import uuid
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, cast

from rabbitry.errors import BrokerError
from rabbitry.testing.engine import ContainerEngine
from rabbitry.testing.host import (
    OWNER_LABEL,
    ROLE_LABEL,
    broker_environment,
    broker_host,
    docker_client,
    free_port,
    port_bindings,
    published_host_ports,
    reap_orphans,
)

if TYPE_CHECKING:
    from testcontainers.core.container import DockerContainer

STREAM_PORT = 5552
# The plugins of rabbitry's image (its entrypoint's enabled_plugins) plus the stream protocol;
# given as RABBITMQ_ENABLED_PLUGINS so the official image enables the same ones.
DEFAULT_PLUGINS = (
    "rabbitmq_management",
    "rabbitmq_federation",
    "rabbitmq_federation_management",
    "rabbitmq_shovel",
    "rabbitmq_shovel_management",
    "rabbitmq_consistent_hash_exchange",
    "rabbitmq_sharding",
    "rabbitmq_prometheus",
    "rabbitmq_stream",
)


STREAM_READ_AHEAD = 1 << 20
"""Bytes a stream reader of the broker reads past the chunk it sends (``stream.read_ahead`` in
rabbitmq.conf, RabbitMQ 4.2.1 and newer; older releases do not read the setting). The default,
4 KiB, only helps chunks smaller than that; a stream written over AMQP 0-9-1 holds chunks of 40-55
1 KB messages, and the broker spent about 155 us of CPU sending each. With 1 MiB, reading 500,000
such messages over the stream protocol on RabbitMQ 4.3: the broker's CPU 1.6 -> 0.6 s, the read
2.0 -> 0.65 s; streams of large chunks read as before (bench/spark_source.py, docs/spark.md)."""


ERL_ARGS = "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS"


def stream_environment(advertised_host: str, advertised_port: int) -> dict[str, str]:
    """Container variables enabling the stream protocol, advertised at the published address,
    and its readers' read-ahead (``STREAM_READ_AHEAD``).

    Both images start ``rabbitmq-server``, which reads these two variables itself. A caller's
    own ``RABBITMQ_ENABLED_PLUGINS`` (a broker without the stream plugin, say) wins over these;
    a caller's own Erlang arguments are added before them (``with_caller_environment``).
    """
    return {
        "RABBITMQ_ENABLED_PLUGINS": ",".join(DEFAULT_PLUGINS),
        ERL_ARGS: (
            f'-rabbitmq_stream advertised_host "{advertised_host}" '
            f"-rabbitmq_stream advertised_port {advertised_port} "
            f"-rabbit stream_read_ahead {STREAM_READ_AHEAD}"
        ),
    }


def with_caller_environment(streams: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """``env`` over ``streams``, but for the Erlang arguments, which are joined: the caller's,
    then those of ``streams`` the caller does not set. A parameter both set (``-rabbit
    stream_read_ahead``, say) is given once, the caller's: given twice, RabbitMQ 4.0 and 3.10
    keep the first and 4.3 the last (measured). The stream settings the caller does not name
    stay (a TLS listener given this way would otherwise leave the stream port advertised as the
    container's own)."""
    merged = {**streams, **env}
    caller, ours = env.get(ERL_ARGS), streams.get(ERL_ARGS)
    if caller and ours:
        kept = [
            f"-{app} {key} {value}"
            for app, key, value in _PARAMETER.findall(ours)
            if not re.search(rf"(?:^|\s)-{app}\s+{key}(?:\s|$)", caller)
        ]
        merged[ERL_ARGS] = " ".join([caller, *kept])
    return merged


_PARAMETER = re.compile(r'-(\w+) (\w+) ("[^"]*"|\S+)')
"""An application parameter as ``stream_environment`` writes it: ``-app key value``."""


class NetworkName:
    """What testcontainers needs of a network: its name (the network exists already)."""

    def __init__(self, name: str) -> None:
        self.name = name


@dataclasses.dataclass(frozen=True)
class PortRequest:
    """The host ports asked for (None: a free one) and the more container ports to publish."""

    amqp: int | None
    management: int | None
    extra: tuple[int, ...]

    def choose(self, engine: ContainerEngine, taken: Collection[int]) -> ChosenPorts:
        """Host ports for one attempt; fixed here (not by the engine) on a local engine, so a
        stop/start keeps them on Docker too."""
        local = engine.local
        extra = {port: free_port(taken) if local else None for port in self.extra}
        # Chosen even on a remote engine: the broker must advertise it (a conflict retries).
        stream = extra[STREAM_PORT] = free_port(taken)
        return ChosenPorts(
            amqp=self.amqp or (free_port(taken) if local else None),
            management=self.management or (free_port(taken) if local else None),
            extra=extra,
            stream=stream,
        )


@dataclasses.dataclass(frozen=True)
class ChosenPorts:
    amqp: int | None
    management: int | None
    extra: Mapping[int, int | None]
    stream: int


@dataclasses.dataclass(frozen=True)
class ContainerRecipe:
    """All that every attempt at creating the broker's container sets alike."""

    container_class: type[DockerContainer]
    image: str
    name: str | None
    hostname: str | None
    owner: str
    username: str
    password: str
    erlang_cookie: str | None
    nodename: str | None
    env: Mapping[str, str]
    volumes: Mapping[str, str]
    network: str | None
    network_aliases: tuple[str, ...]

    def build(self, engine: ContainerEngine, ports: ChosenPorts) -> DockerContainer:
        """The container, configured but not created yet."""
        container = self.container_class(self.image, username=self.username, password=self.password)
        container.ports.clear()
        container.ports.update(port_bindings(engine, ports.amqp, ports.management, ports.extra))
        for host_path, container_path in self.volumes.items():
            container.with_volume_mapping(host_path, container_path, mode="ro")
        streams = stream_environment(broker_host(engine), ports.stream)
        for key, value in broker_environment(
            username=self.username,
            password=self.password,
            erlang_cookie=self.erlang_cookie,
            nodename=self.nodename,
            env=with_caller_environment(streams, self.env),
        ).items():
            container.with_env(key, value)
        extra: dict[str, Any] = {"labels": {OWNER_LABEL: self.owner, ROLE_LABEL: "test-broker"}}
        if self.hostname:
            extra["hostname"] = self.hostname
        container.with_kwargs(**extra)
        container.with_name(self.name or f"rabbitry-broker-{uuid.uuid4().hex[:8]}")
        if self.network:
            container.with_network(cast(Any, NetworkName(self.network)))
            if self.network_aliases:
                container.with_network_aliases(*self.network_aliases)
        return container


def ports_in_use(engine: ContainerEngine) -> Collection[int]:
    """Host ports the engine's containers publish, after removing orphaned test brokers
    (none when the engine cannot say: a conflict then retries)."""
    taken: Collection[int] = ()
    with contextlib.suppress(BrokerError):
        client = docker_client(engine)
        reap_orphans(client)
        taken = published_host_ports(client)
        client.close()
    return taken


__all__ = [
    "DEFAULT_PLUGINS",
    "ERL_ARGS",
    "STREAM_PORT",
    "STREAM_READ_AHEAD",
    "ChosenPorts",
    "ContainerRecipe",
    "NetworkName",
    "PortRequest",
    "ports_in_use",
    "stream_environment",
    "with_caller_environment",
]
