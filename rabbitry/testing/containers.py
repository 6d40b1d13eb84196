"""RabbitMQ brokers in containers, started through testcontainers.

``start_broker`` starts one and returns a ``BrokerContainer`` (a context manager that removes it).
Several can run side by side (each gets its own host ports), on a shared network with a shared
Erlang cookie for clusters. Host ports are chosen when the container is created, so stopping
and starting a broker keeps its URLs on a local engine. Host files can be bind-mounted
read-only and more container ports published (``mounts``, ``extra_ports``), e.g. certificates
and a TLS listener.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, TypedDict, cast

from rabbitry.errors import BrokerError
from rabbitry.testing.broker import (
    SETUP_HINT,
    Broker,
    BrokerUnavailable,
    wait_until_ready,
)
from rabbitry.testing.engine import (
    LOCAL_TEST_IMAGE,
    ContainerEngine,
    default_image,
    find_engine,
    use_engine,
)
from rabbitry.uri import mask_text

if TYPE_CHECKING:
    from docker import DockerClient
    from testcontainers.core.container import DockerContainer

AMQP_PORT = 5672
MANAGEMENT_PORT = 15672
DEFAULT_STARTUP_TIMEOUT = 120.0
STOP_TIMEOUT = 30
OWNER_LABEL = "rabbitry.owner"
ROLE_LABEL = "rabbitry.role"
_PORT_CONFLICT_MARKERS = ("already in use", "already allocated", "address in use")


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


def require_engine(environ: Mapping[str, str] | None = None) -> ContainerEngine:
    """The container engine to use; ``BrokerUnavailable`` (with what to do) when none answers."""
    env = os.environ if environ is None else environ
    engine = find_engine(env)
    if engine is None:
        where = env.get("DOCKER_HOST") or "the Docker and Podman sockets"
        raise BrokerUnavailable(
            f"no RabbitMQ broker for the tests: RABBITMQ_URL is unset and no container engine "
            f"answers ({where}); {SETUP_HINT}"
        )
    return engine


def docker_client(engine: ContainerEngine) -> DockerClient:
    """A Docker SDK client for ``engine`` (the SDK comes with rabbitry's ``test`` extra)."""
    try:
        import docker
    except ImportError as exc:
        raise BrokerUnavailable(
            "the Docker SDK is not installed: pip install 'rabbitry[test]'"
        ) from exc
    try:
        if engine.docker_host is None:
            return docker.from_env()
        return docker.DockerClient(base_url=engine.docker_host)
    except docker.errors.DockerException as exc:
        raise BrokerError(f"cannot talk to {engine.describe()}: {exc}") from exc


def broker_environment(
    *,
    username: str,
    password: str,
    erlang_cookie: str | None = None,
    nodename: str | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Container environment understood by the official image and by rabbitry's own image."""
    out = {"RABBITMQ_DEFAULT_USER": username, "RABBITMQ_DEFAULT_PASS": password}
    if erlang_cookie is not None:
        out["RABBITMQ_ERLANG_COOKIE"] = erlang_cookie
    if nodename is not None:
        out["RABBITMQ_NODENAME"] = nodename
    out.update(env or {})
    return out


def free_port() -> int:
    """A TCP port nobody listens on right now (the engine may still lose a race for it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def is_port_conflict(exc: BaseException) -> bool:
    return any(marker in str(exc).lower() for marker in _PORT_CONFLICT_MARKERS)


def port_bindings(
    engine: ContainerEngine,
    amqp: int | None,
    management: int | None,
    extra: Mapping[int, int | None] | None = None,
) -> dict[str, Any]:
    """Docker SDK ``ports``: loopback only on a local engine (the broker has known credentials).

    ``extra`` maps more container ports to host ports (None: the engine picks one).
    """

    def bind(port: int | None) -> Any:
        if not engine.local:
            return port
        return ("127.0.0.1", port) if port is not None else ("127.0.0.1",)

    out = {f"{AMQP_PORT}/tcp": bind(amqp), f"{MANAGEMENT_PORT}/tcp": bind(management)}
    for container_port, host_port in (extra or {}).items():
        out[f"{container_port}/tcp"] = bind(host_port)
    return out


def check_extra_ports(ports: Sequence[int]) -> tuple[int, ...]:
    """``extra_ports`` as given, or ``ValueError`` saying which one is not a port to publish."""
    out: list[int] = []
    for port in ports:
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ValueError(f"extra_ports: {port!r} is not a TCP port number (1-65535)")
        if port in (AMQP_PORT, MANAGEMENT_PORT):
            raise ValueError(f"extra_ports: {port} is published anyway (AMQP or management)")
        if port in out:
            raise ValueError(f"extra_ports: {port} is listed twice")
        out.append(port)
    return tuple(out)


def bind_mounts(mounts: Mapping[str, str | os.PathLike[str]]) -> dict[str, str]:
    """``mounts`` (container path -> host path) as host path -> container path, checked.

    Container paths must be absolute; host paths must exist (they are made absolute, since the
    engine resolves relative ones against its own working directory); a host path may be
    mounted once.
    """
    out: dict[str, str] = {}
    for target, source in mounts.items():
        if not PurePosixPath(target).is_absolute():
            raise ValueError(f"mounts: container path {target!r} must be absolute")
        host = Path(source).absolute()
        if not host.exists():
            raise ValueError(f"mounts: host path {str(host)!r} (for {target!r}) does not exist")
        if str(host) in out:
            raise ValueError(
                f"mounts: host path {str(host)!r} is mounted twice"
                f" ({out[str(host)]!r} and {target!r})"
            )
        out[str(host)] = target
    return out


def published_port(attrs: Mapping[str, Any], port: int) -> int:
    """Host port of container ``port`` from ``docker inspect`` data."""
    bindings = (attrs.get("NetworkSettings") or {}).get("Ports") or {}
    for binding in bindings.get(f"{port}/tcp") or []:
        if binding.get("HostPort"):
            return int(binding["HostPort"])
    raise BrokerError(f"container port {port} is not published on the host")


def broker_host(engine: ContainerEngine) -> str:
    """Host name clients use for published ports."""
    if engine.local:
        return "127.0.0.1"
    from urllib.parse import urlsplit

    assert engine.docker_host is not None
    return urlsplit(engine.docker_host.replace("tcp://", "http://", 1)).hostname or "localhost"


# Orphans: without a reaper container (Podman), brokers of a killed test run would stay. Each
# container is labelled with its owner process; a later run on this host removes those whose
# owner is gone.
def _process_start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22 (starttime) counts from after the parenthesised command name, which may hold spaces.
    return stat.rsplit(")", 1)[1].split()[19]


def owner_label(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_process_start_time(pid) or '?'}"


def owner_is_gone(
    label: str,
    hostname: str,
    start_time_of: Callable[[int], str | None] = _process_start_time,
) -> bool:
    """True when ``label`` names a process of this host that no longer runs."""
    host, _, rest = label.partition(":")
    pid_text, _, started = rest.partition(":")
    if host != hostname or not pid_text.isdigit() or started in ("", "?"):
        return False
    return start_time_of(int(pid_text)) != started


def reap_orphans(client: DockerClient) -> list[str]:
    """Remove broker containers whose owner process on this host has exited; their names."""
    if not Path("/proc/self/stat").exists():
        return []
    removed = []
    hostname = socket.gethostname()
    try:
        containers = client.containers.list(all=True, filters={"label": OWNER_LABEL})
    except Exception:
        return []
    for container in containers:
        label = (container.labels or {}).get(OWNER_LABEL, "")
        if owner_is_gone(label, hostname):
            with contextlib.suppress(Exception):
                container.remove(force=True)
                removed.append(container.name)
    return removed


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
                    "testcontainers is not installed: pip install 'rabbitry[test]'"
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

    Raises ``ValueError`` for a bad mount or port, ``BrokerUnavailable`` when no container
    engine answers, ``BrokerError`` otherwise.
    """
    volumes = bind_mounts(mounts or {})
    more_ports = check_extra_ports(extra_ports)
    env_map = os.environ if environ is None else environ
    engine = require_engine(env_map)
    use_engine(engine)
    container_class = _rabbitmq_container_class()
    image = image or default_image(engine, env_map)
    with contextlib.suppress(BrokerError):
        client = docker_client(engine)
        reap_orphans(client)
        client.close()

    aliases = list(network_aliases)
    if network and hostname and hostname not in aliases:
        aliases.append(hostname)
    labels = {OWNER_LABEL: owner_label(), ROLE_LABEL: "test-broker"}
    extra: dict[str, Any] = {"labels": labels}
    if hostname:
        extra["hostname"] = hostname

    attempts = 5
    for attempt in range(1, attempts + 1):
        # Fixed host ports (chosen here, not by the engine) survive a stop/start on Docker too.
        chosen_amqp = amqp_port or (free_port() if engine.local else None)
        chosen_mgmt = management_port or (free_port() if engine.local else None)
        chosen_extra = {port: free_port() if engine.local else None for port in more_ports}
        container = container_class(image, username=username, password=password)
        container.ports.clear()
        container.ports.update(port_bindings(engine, chosen_amqp, chosen_mgmt, chosen_extra))
        for host_path, container_path in volumes.items():
            container.with_volume_mapping(host_path, container_path, mode="ro")
        for key, value in broker_environment(
            username=username,
            password=password,
            erlang_cookie=erlang_cookie,
            nodename=nodename,
            env=env,
        ).items():
            container.with_env(key, value)
        container.with_kwargs(**extra)
        container.with_name(name or f"rabbitry-broker-{uuid.uuid4().hex[:8]}")
        if network:
            container.with_network(cast(Any, _NetworkName(network)))
            if aliases:
                container.with_network_aliases(*aliases)
        try:
            _start_without_probe(container)
        except Exception as exc:
            with contextlib.suppress(Exception):
                container.stop()
            retry = (
                is_port_conflict(exc)
                and attempt < attempts
                and (amqp_port is None or management_port is None or bool(more_ports))
            )
            if retry:
                continue
            raise BrokerError(_start_failure(image, engine, exc)) from exc
        break
    handle = BrokerContainer(
        container,
        engine,
        username=username,
        password=password,
        startup_timeout=startup_timeout,
    )
    try:
        handle.wait_until_ready()
    except BrokerError as exc:
        if isinstance(exc, ContainerExited):  # its message has the output already
            handle.remove()
            raise
        logs = handle.logs()[-3000:]
        handle.remove()
        raise BrokerError(f"{exc}\nlast container output:\n{logs}") from exc
    return handle


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
