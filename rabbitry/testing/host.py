"""The host side of a broker container: the engine's client, free and published ports, bind
mounts, and the owner labels that let a later run remove what a killed one left behind.

``rabbitry.testing.containers`` starts brokers with these; nothing here starts a container.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from rabbitry.errors import BrokerError, BrokerUnavailable
from rabbitry.testing.broker import SETUP_HINT
from rabbitry.testing.engine import (
    ContainerEngine,
    find_engine,
)

if TYPE_CHECKING:
    from docker import DockerClient

AMQP_PORT = 5672
MANAGEMENT_PORT = 15672
OWNER_LABEL = "rabbitry.owner"
ROLE_LABEL = "rabbitry.role"
_PORT_CONFLICT_MARKERS = ("already in use", "already allocated", "address in use")


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
    """A Docker SDK client for ``engine`` (the SDK comes with rabbitry's ``containers`` extra)."""
    try:
        import docker
    except ImportError as exc:
        raise BrokerUnavailable(
            "the Docker SDK is not installed (it comes with rabbitry's containers extra):"
            " pip install 'rabbitry[containers]'"
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


def free_port(avoid: Collection[int] = ()) -> int:
    """A TCP port nobody listens on right now and not in ``avoid`` (the engine may still lose a
    race for it)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("", 0))
            port = int(sock.getsockname()[1])
        if port not in avoid:
            return port
    raise BrokerError("no free TCP port on this host")


def published_host_ports(client: DockerClient) -> dict[int, str]:
    """Host ports published by the engine's containers, running or stopped, and by which.

    A port free to ``bind`` may still be taken: rootful Podman forwards published ports with
    firewall rules and holds no socket, and a container whose processes were killed behind the
    engine's back (a host that ended a session, say) keeps those rules, which then catch every
    new connection to the port. A stopped container would also want its ports back on start.
    """
    ports: dict[int, str] = {}
    for attrs in engine_containers(client):
        name = str(attrs.get("Name") or "").lstrip("/")
        tables = (
            (attrs.get("HostConfig") or {}).get("PortBindings") or {},
            (attrs.get("NetworkSettings") or {}).get("Ports") or {},
        )
        for table in tables:
            for bindings in table.values():
                for binding in bindings or []:
                    host_port = str(binding.get("HostPort") or "")
                    if host_port.isdigit():
                        ports[int(host_port)] = name
    return ports


def engine_containers(
    client: DockerClient, filters: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """What the engine says of each container, running or stopped (``inspect``'s answer).

    The engine lists, then each container is read on its own; one removed in between (another
    test's broker ending, say) is simply no longer there, not an error. ``client.containers.list``
    would raise for it and fail the caller over a container it never cared about. Docker
    answers such a read 404 (``NotFound``); Podman 500, "no such container".
    An engine that cannot list at all answers nothing: what asked will fail on its next call
    with the engine's own error.
    """
    try:
        summaries = client.api.containers(all=True, filters=dict(filters or {}))
    except Exception:
        return []
    from docker.errors import APIError, NotFound

    found = []
    for summary in summaries:
        try:
            found.append(client.api.inspect_container(summary["Id"]))
        except APIError as error:
            said = str(error.explanation or "").lower()
            if not (isinstance(error, NotFound) or "no such container" in said):
                raise
    return found


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
    for attrs in engine_containers(client, {"label": OWNER_LABEL}):
        label = ((attrs.get("Config") or {}).get("Labels") or {}).get(OWNER_LABEL, "")
        if owner_is_gone(label, hostname):
            with contextlib.suppress(Exception):
                client.api.remove_container(attrs["Id"], force=True)
                removed.append(str(attrs.get("Name") or "").lstrip("/"))
    return removed
