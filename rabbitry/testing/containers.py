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
import os
import uuid
import warnings
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict, cast

from rabbitry.errors import BrokerError, BrokerUnavailable
from rabbitry.errors import ContainerExited as ContainerExited
from rabbitry.testing.broker import Broker, wait_until_ready
from rabbitry.testing.container_recipe import (
    STREAM_PORT,
    ContainerRecipe,
    PortRequest,
    ports_in_use,
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
    broker_host,
    check_extra_ports,
    docker_client,
    is_port_conflict,
    owner_label,
    published_port,
    require_engine,
)
from rabbitry.uri import mask_text

if TYPE_CHECKING:
    from testcontainers.core.container import DockerContainer

DEFAULT_STARTUP_TIMEOUT = 120.0
STOP_TIMEOUT = 30


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
    recipe = ContainerRecipe(
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
    ports = PortRequest(amqp=amqp_port, management=management_port, extra=more_ports)
    container = _create_and_start(recipe, engine, ports, taken=ports_in_use(engine))
    handle = BrokerContainer(
        container,
        engine,
        username=username,
        password=password,
        startup_timeout=startup_timeout,
    )
    _wait_until_ready_or_remove(handle)
    return handle


_START_ATTEMPTS = 5


def _create_and_start(
    recipe: ContainerRecipe,
    engine: ContainerEngine,
    ports: PortRequest,
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
