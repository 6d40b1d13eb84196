"""RabbitMQ brokers in containers, started through testcontainers.

``start_broker`` starts one and returns a ``BrokerContainer`` (a context manager that removes it).
Several can run side by side (each gets its own host ports), on a shared network with a shared
Erlang cookie for clusters. Host ports are chosen when the container is created, so stopping
and starting a broker keeps its URLs on a local engine. Host files can be bind-mounted
read-only and more container ports published (``mounts``, ``extra_ports``), e.g. certificates
and a TLS listener.

Every broker offers the stream protocol: ``rabbitmq_stream`` is enabled (through RabbitMQ's own
``RABBITMQ_ENABLED_PLUGINS``, which the official image and rabbitry's honour alike) and its port
5552 is published on a host port chosen before the container is created, which the broker
advertises (``advertised_host``/``advertised_port``): a stream client connects to the address
the broker advertises, and the container's own address is not reachable from the host.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import uuid
import warnings
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, cast

from rabbitry.errors import BrokerError
from rabbitry.testing.broker import (
    Broker,
    BrokerUnavailable,
    wait_until_ready,
)
from rabbitry.testing.engine import (
    LOCAL_TEST_IMAGE,
    ContainerEngine,
    default_image,
    use_engine,
)
from rabbitry.testing.host import (
    AMQP_PORT,
    MANAGEMENT_PORT,
    OWNER_LABEL,
    ROLE_LABEL,
    bind_mounts,
    broker_environment,
    broker_host,
    check_extra_ports,
    docker_client,
    free_port,
    is_port_conflict,
    owner_label,
    port_bindings,
    published_host_ports,
    published_port,
    reap_orphans,
    require_engine,
)
from rabbitry.uri import mask_text

if TYPE_CHECKING:
    from testcontainers.core.container import DockerContainer

DEFAULT_STARTUP_TIMEOUT = 120.0
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
STOP_TIMEOUT = 30


def stream_environment(advertised_host: str, advertised_port: int) -> dict[str, str]:
    """Container variables enabling the stream protocol, advertised at the published address.

    Both images start ``rabbitmq-server``, which reads these two variables itself. A caller's
    own ``RABBITMQ_ENABLED_PLUGINS`` (a broker without the stream plugin, say) wins over these.
    """
    return {
        "RABBITMQ_ENABLED_PLUGINS": ",".join(DEFAULT_PLUGINS),
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": (
            f'-rabbitmq_stream advertised_host "{advertised_host}" '
            f"-rabbitmq_stream advertised_port {advertised_port}"
        ),
    }


class ContainerExited(BrokerError):
    """A broker's container stopped while rabbitry waited for it to answer."""


class BrokerOptions(TypedDict, total=False):
    """Keyword arguments of ``start_broker`` (and of ``rabbitmq_broker_factory``)."""

    image: str | None
    env: Mapping[str, str] | None
    network: str | None
    network_aliases: Sequence[str]
    name: str | None
    hostname: str | None
    erlang_cookie: str | None
    nodename: str | None
    username: str
    password: str
    amqp_port: int | None
    management_port: int | None
    startup_timeout: float
    environ: Mapping[str, str] | None
    mounts: Mapping[str, str | os.PathLike[str]] | None
    extra_ports: Sequence[int]


def _rabbitmq_container_class() -> type[DockerContainer]:
    with warnings.catch_warnings():
        # testcontainers' RabbitMQ module uses its own deprecated wait decorator.
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            from testcontainers.community.rabbitmq import RabbitMqContainer
        except ImportError:
            try:
                from testcontainers.rabbitmq import RabbitMqContainer
            except ImportError as exc:
                raise BrokerUnavailable(
                    "testcontainers is not installed: pip install 'rabbitry[containers]'"
                ) from exc
    return cast("type[DockerContainer]", RabbitMqContainer)


class _NetworkName:
    """What testcontainers needs of a network: its name (the network exists already)."""

    def __init__(self, name: str) -> None:
        self.name = name


class BrokerContainer:
    """A broker in a container this process started: its ``broker`` value and its controls.

    Use it as a context manager (or call ``remove``); anything left is removed at exit.
    """

    def __init__(
        self,
        container: DockerContainer,
        engine: ContainerEngine,
        *,
        username: str,
        password: str,
        startup_timeout: float,
    ) -> None:
        self._container = container
        self._engine = engine
        self._username = username
        self._password = password
        self._startup_timeout = startup_timeout
        self._removed = False
        self._broker = self._read_broker()
        atexit.register(self.remove)

    @property
    def broker(self) -> Broker:
        """The broker as it is reachable now (after ``start`` its ports may differ remotely)."""
        return self._broker

    @property
    def container_id(self) -> str:
        return str(self._container.get_wrapped_container().id)

    @property
    def name(self) -> str:
        return str(self._container.get_wrapped_container().name)

    @property
    def hostname(self) -> str:
        wrapped = self._container.get_wrapped_container()
        return str(wrapped.attrs.get("Config", {}).get("Hostname", ""))

    @property
    def running(self) -> bool:
        """Whether the container runs now, as its engine says: false after ``stop`` or ``kill``
        (the broker's cluster peers may take a minute to notice a kill)."""
        wrapped = self._container.get_wrapped_container()
        wrapped.reload()
        return bool(wrapped.status == "running")

    def host_port(self, container_port: int) -> int:
        """The host port a container port is published on (as of now: see ``broker``).

        The AMQP and management ports, and those given as ``extra_ports`` to ``start_broker``;
        ``BrokerError`` for a port that is not published. Connect to ``broker.host``.
        """
        wrapped = self._container.get_wrapped_container()
        wrapped.reload()
        return published_port(wrapped.attrs, container_port)

    def _read_broker(self) -> Broker:
        wrapped = self._container.get_wrapped_container()
        wrapped.reload()
        return Broker(
            host=broker_host(self._engine),
            amqp_port=published_port(wrapped.attrs, AMQP_PORT),
            management_port=published_port(wrapped.attrs, MANAGEMENT_PORT),
            stream_port=published_port(wrapped.attrs, STREAM_PORT),
            username=self._username,
            password=self._password,
            control=self,
        )

    def wait_until_ready(self) -> Broker:
        return wait_until_ready(self._broker, self._startup_timeout, check=self._check_running)

    def _check_running(self) -> None:
        wrapped = self._container.get_wrapped_container()
        wrapped.reload()
        if wrapped.status in ("exited", "dead"):
            raise ContainerExited(
                f"container {self.name} stopped while starting (status {wrapped.status}); "
                f"its last output:\n{self.logs()[-3000:]}"
            )

    def stop(self, timeout: int = STOP_TIMEOUT) -> None:
        """Stop the broker gracefully (SIGTERM, then SIGKILL after ``timeout`` seconds)."""
        self._container.get_wrapped_container().stop(timeout=timeout)

    def kill(self) -> None:
        """Stop the broker abruptly, as a crash would."""
        self._container.get_wrapped_container().kill()

    def start(self) -> Broker:
        """Start the stopped broker again and wait until it answers."""
        self._container.get_wrapped_container().start()
        self._broker = self._read_broker()
        return self.wait_until_ready()

    def restart(self) -> Broker:
        self.stop()
        return self.start()

    def exec(self, *argv: str) -> tuple[int, str]:
        """Run a command in the container (``rabbitmqctl ...``); exit code and combined output."""
        code, output = self._container.get_wrapped_container().exec_run(list(argv))
        return int(code), output.decode(errors="replace") if output else ""

    def logs(self) -> str:
        out = self._container.get_wrapped_container().logs()
        return out.decode(errors="replace") if isinstance(out, bytes) else str(out)

    def detach(self) -> str:
        """Leave the container running past this handle and this process (another process
        removes it, by the id returned); the handle no longer removes it."""
        self._removed = True
        atexit.unregister(self.remove)
        return self.container_id

    def remove(self) -> None:
        if self._removed:
            return
        self._removed = True
        atexit.unregister(self.remove)
        with contextlib.suppress(Exception):
            self._container.stop()

    def __enter__(self) -> BrokerContainer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        state = "removed" if self._removed else self._engine.describe()
        return f"BrokerContainer({self._broker!r}, {state})"


def start_broker(
    *,
    image: str | None = None,
    env: Mapping[str, str] | None = None,
    network: str | None = None,
    network_aliases: Sequence[str] = (),
    name: str | None = None,
    hostname: str | None = None,
    erlang_cookie: str | None = None,
    nodename: str | None = None,
    username: str = "guest",
    password: str = "guest",
    amqp_port: int | None = None,
    management_port: int | None = None,
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
    environ: Mapping[str, str] | None = None,
    mounts: Mapping[str, str | os.PathLike[str]] | None = None,
    extra_ports: Sequence[int] = (),
    owner: str | None = None,
) -> BrokerContainer:
    """Start a RabbitMQ broker in a container and wait until AMQP and management answer.

    ``image`` defaults to ``RABBITRY_TEST_IMAGE``, else the local build on Podman, else the
    official ``rabbitmq:4.0-management``. ``network`` is the name of an existing network (see
    ``broker_network``); with a ``hostname`` the container is also reachable on it under that
    name, which a cluster's node names (``rabbit@<hostname>``) need. ``amqp_port`` and
    ``management_port`` are host ports (default: free ones). ``env`` adds container variables.

    ``mounts`` bind-mounts host files or directories read-only, as ``{container path: host
    path}``; the broker runs as the image's ``rabbitmq`` user, so they must be readable by
    others (files 0644, directories 0755). rabbitry's own image changes the owner of everything
    under ``/etc/rabbitmq`` when it starts, so mount outside it (e.g. ``/etc/rabbitry/...``).
    ``extra_ports`` publishes more container ports (e.g. 5671 for a TLS listener) on free host
    ports, loopback only on a local engine; ``BrokerContainer.host_port`` tells which.
    Whether the broker listens on them is up to its configuration (``env``).
    ``owner`` (an ``owner_label``, default this process) names the process whose exit makes the
    container an orphan that the next ``start_broker`` removes.

    Raises ``ValueError`` for a bad mount or port, ``BrokerUnavailable`` when no container
    engine answers, ``BrokerError`` otherwise.
    """
    volumes = bind_mounts(mounts or {})
    more_ports = check_extra_ports(extra_ports)
    if STREAM_PORT in more_ports:
        raise ValueError(f"extra_ports: {STREAM_PORT} is published anyway (the stream protocol)")
    env_map = os.environ if environ is None else environ
    engine = require_engine(env_map)
    use_engine(engine)
    aliases = list(network_aliases)
    if network and hostname and hostname not in aliases:
        aliases.append(hostname)
    recipe = _ContainerRecipe(
        container_class=_rabbitmq_container_class(),
        image=image or default_image(engine, env_map),
        name=name,
        hostname=hostname,
        owner=owner or owner_label(),
        username=username,
        password=password,
        erlang_cookie=erlang_cookie,
        nodename=nodename,
        env=env or {},
        volumes=volumes,
        network=network,
        network_aliases=tuple(aliases),
    )
    ports = _PortRequest(amqp=amqp_port, management=management_port, extra=more_ports)
    container = _create_and_start(recipe, engine, ports, taken=_ports_in_use(engine))
    handle = BrokerContainer(
        container,
        engine,
        username=username,
        password=password,
        startup_timeout=startup_timeout,
    )
    _wait_until_ready_or_remove(handle)
    return handle


@dataclasses.dataclass(frozen=True)
class _PortRequest:
    """The host ports asked for (None: a free one) and the more container ports to publish."""

    amqp: int | None
    management: int | None
    extra: tuple[int, ...]

    def choose(self, engine: ContainerEngine, taken: Collection[int]) -> _ChosenPorts:
        """Host ports for one attempt; fixed here (not by the engine) on a local engine, so a
        stop/start keeps them on Docker too."""
        local = engine.local
        extra = {port: free_port(taken) if local else None for port in self.extra}
        # Chosen even on a remote engine: the broker must advertise it (a conflict retries).
        stream = extra[STREAM_PORT] = free_port(taken)
        return _ChosenPorts(
            amqp=self.amqp or (free_port(taken) if local else None),
            management=self.management or (free_port(taken) if local else None),
            extra=extra,
            stream=stream,
        )


@dataclasses.dataclass(frozen=True)
class _ChosenPorts:
    amqp: int | None
    management: int | None
    extra: Mapping[int, int | None]
    stream: int


@dataclasses.dataclass(frozen=True)
class _ContainerRecipe:
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

    def build(self, engine: ContainerEngine, ports: _ChosenPorts) -> DockerContainer:
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
            env={**streams, **self.env},
        ).items():
            container.with_env(key, value)
        extra: dict[str, Any] = {"labels": {OWNER_LABEL: self.owner, ROLE_LABEL: "test-broker"}}
        if self.hostname:
            extra["hostname"] = self.hostname
        container.with_kwargs(**extra)
        container.with_name(self.name or f"rabbitry-broker-{uuid.uuid4().hex[:8]}")
        if self.network:
            container.with_network(cast(Any, _NetworkName(self.network)))
            if self.network_aliases:
                container.with_network_aliases(*self.network_aliases)
        return container


def _ports_in_use(engine: ContainerEngine) -> Collection[int]:
    """Host ports the engine's containers publish, after removing orphaned test brokers
    (none when the engine cannot say: a conflict then retries)."""
    taken: Collection[int] = ()
    with contextlib.suppress(BrokerError):
        client = docker_client(engine)
        reap_orphans(client)
        taken = published_host_ports(client)
        client.close()
    return taken


_START_ATTEMPTS = 5


def _create_and_start(
    recipe: _ContainerRecipe,
    engine: ContainerEngine,
    ports: _PortRequest,
    *,
    taken: Collection[int],
) -> DockerContainer:
    """The container created and started, on other host ports again while one was lost to a
    race (the stream port is always chosen here, so a conflict can always retry)."""
    for attempt in range(1, _START_ATTEMPTS + 1):
        container = recipe.build(engine, ports.choose(engine, taken))
        try:
            _start_without_probe(container)
        except Exception as exc:
            with contextlib.suppress(Exception):
                container.stop()
            if is_port_conflict(exc) and attempt < _START_ATTEMPTS:
                continue
            raise BrokerError(_start_failure(recipe.image, engine, exc)) from exc
        return container
    raise AssertionError("unreachable: the last attempt returns or raises")


def _wait_until_ready_or_remove(handle: BrokerContainer) -> None:
    """Wait for AMQP and management; a broker that never answers is removed, its output told."""
    try:
        handle.wait_until_ready()
    except BrokerError as exc:
        if isinstance(exc, ContainerExited):  # its message has the output already
            handle.remove()
            raise
        logs = handle.logs()[-3000:]
        handle.remove()
        raise BrokerError(f"{exc}\nlast container output:\n{logs}") from exc


def _start_without_probe(container: DockerContainer) -> None:
    """Create and start the container, without RabbitMqContainer's own readiness probe.

    That probe retries AMQP connections for two minutes even when the container has exited;
    ``BrokerContainer.wait_until_ready`` checks AMQP and management and stops at once if the
    container dies.
    """
    from testcontainers.core.container import DockerContainer

    DockerContainer.start(container)


def _start_failure(image: str, engine: ContainerEngine, exc: BaseException) -> str:
    message = f"could not start a RabbitMQ container from {image!r} on {engine.describe()}: "
    message += mask_text(f"{type(exc).__name__}: {exc}")
    text = str(exc).lower()
    if "not found" in text or "no such image" in text or "pull" in text:
        if image == LOCAL_TEST_IMAGE:
            message += " (the image is built by rabbitry's scripts/setup.sh: run it)"
        else:
            message += " (is a registry reachable? set RABBITRY_TEST_IMAGE to a local image)"
    return message


@contextlib.contextmanager
def broker_network(
    name: str | None = None, *, environ: Mapping[str, str] | None = None
) -> Iterator[str]:
    """A container network for brokers that must reach each other by name; removed on exit."""
    engine = require_engine(environ)
    use_engine(engine)
    client = docker_client(engine)
    name = name or f"rabbitry-net-{uuid.uuid4().hex[:8]}"
    try:
        network = client.networks.create(
            name, driver="bridge", labels={OWNER_LABEL: owner_label(), ROLE_LABEL: "network"}
        )
    except Exception as exc:
        raise BrokerError(
            f"could not create network {name!r} on {engine.describe()}: {exc}"
        ) from exc
    try:
        yield name
    finally:
        with contextlib.suppress(Exception):
            network.remove()
