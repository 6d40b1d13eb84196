"""Finding a container engine that speaks the Docker API: Docker, or Podman's service socket.

``DOCKER_HOST`` wins when set. Otherwise the usual Docker sockets are tried, then the Podman
sockets (the one ``scripts/setup.sh`` starts first), so ``pytest`` works right after setup
without sourcing anything.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

LOCAL_TEST_IMAGE = "localhost/rabbitry-rabbitmq:4.0"
"""The image ``scripts/setup.sh`` builds from Debian packages where no registry is reachable."""

OFFICIAL_TEST_IMAGE = "rabbitmq:4.0-management"
"""The image used with a Docker engine (pulled from Docker Hub)."""

RABBITRY_PODMAN_SOCKET = "/run/rabbitry/podman.sock"


@dataclass(frozen=True)
class EngineProbe:
    """What a socket answered: whether it is up and whether it is Podman."""

    answers: bool
    podman: bool = False


@dataclass(frozen=True)
class ContainerEngine:
    """An engine that answered. ``docker_host`` is None for the Docker SDK's own default."""

    docker_host: str | None
    podman: bool

    @property
    def local(self) -> bool:
        """Containers publish ports on this machine (a unix socket, not a remote daemon)."""
        return self.docker_host is None or self.docker_host.startswith(("unix://", "npipe://"))

    def describe(self) -> str:
        kind = "Podman" if self.podman else "Docker"
        return f"{kind} at {self.docker_host or 'the default Docker socket'}"


Prober = Callable[[str], EngineProbe]


def candidate_sockets(environ: Mapping[str, str]) -> list[str]:
    """Unix sockets to try when ``DOCKER_HOST`` is unset, Docker's first."""
    runtime = environ.get("XDG_RUNTIME_DIR", "")
    home = environ.get("HOME", "")
    docker = ["/var/run/docker.sock"]
    if home:
        docker.append(f"{home}/.docker/run/docker.sock")  # Docker Desktop
    if runtime:
        docker.append(f"{runtime}/docker.sock")  # rootless Docker
    podman = [environ.get("RABBITRY_PODMAN_SOCKET", "") or RABBITRY_PODMAN_SOCKET]
    podman.append("/run/podman/podman.sock")
    if runtime:
        podman.append(f"{runtime}/podman/podman.sock")
    seen: list[str] = []
    for path in docker + podman:
        if path not in seen:
            seen.append(path)
    return seen


def probe_docker_host(docker_host: str) -> EngineProbe:
    """Ask ``GET /version`` of a ``unix://`` or plain ``tcp://`` Docker API endpoint."""
    if docker_host.startswith("unix://"):
        path = docker_host.removeprefix("unix://")
        if not Path(path).is_socket():
            return EngineProbe(False)
        transport = httpx.HTTPTransport(uds=path)
        base = "http://engine"
    elif docker_host.startswith(("tcp://", "http://")):
        transport = httpx.HTTPTransport()
        base = "http://" + docker_host.split("://", 1)[1]
    else:
        # ssh://, npipe://, TLS: let the Docker SDK find out; assume it answers.
        return EngineProbe(True)
    try:
        # Podman's service answers /version in milliseconds when idle and took over 5 s on a
        # machine at load 20: the socket exists, so wait for the answer rather than call the
        # engine missing; a socket nobody listens on still fails at once (connect).
        timeout = httpx.Timeout(30.0, connect=5.0)
        with httpx.Client(transport=transport, base_url=base, timeout=timeout) as client:
            response = client.get("/version")
    except httpx.HTTPError:
        return EngineProbe(False)
    if response.status_code != 200:
        return EngineProbe(False)
    try:
        version = response.json()
    except ValueError:
        return EngineProbe(False)
    names = [str(c.get("Name", "")) for c in version.get("Components") or []]
    names.append(str((version.get("Platform") or {}).get("Name", "")))
    return EngineProbe(True, podman=any("podman" in name.lower() for name in names))


def find_engine(
    environ: Mapping[str, str],
    probe: Prober = probe_docker_host,
    sockets: Sequence[str] | None = None,
) -> ContainerEngine | None:
    """The engine to use, or None when none answers."""
    docker_host = environ.get("DOCKER_HOST", "").strip()
    if docker_host:
        answer = probe(docker_host)
        return ContainerEngine(docker_host, answer.podman) if answer.answers else None
    for path in candidate_sockets(environ) if sockets is None else sockets:
        answer = probe(f"unix://{path}")
        if answer.answers:
            if path == "/var/run/docker.sock" and not answer.podman:
                return ContainerEngine(None, False)
            return ContainerEngine(f"unix://{path}", answer.podman)
    return None


def engine_settings(engine: ContainerEngine, environ: Mapping[str, str]) -> dict[str, str]:
    """Environment testcontainers needs for ``engine``; values already in ``environ`` win."""
    wanted: dict[str, str] = {}
    if engine.docker_host is not None:
        wanted["DOCKER_HOST"] = engine.docker_host
    if engine.podman:
        # No reaper image can be pulled for Podman here, and testcontainers (which may believe it
        # runs inside a container) would otherwise ask for a gateway address Podman lacks.
        wanted["TESTCONTAINERS_RYUK_DISABLED"] = "true"
        wanted["TESTCONTAINERS_CONNECTION_MODE"] = "docker_host"
    return {key: value for key, value in wanted.items() if not environ.get(key)}


def default_image(engine: ContainerEngine, environ: Mapping[str, str]) -> str:
    """``RABBITRY_TEST_IMAGE``, else the local build on Podman, else the official image."""
    configured = environ.get("RABBITRY_TEST_IMAGE", "").strip()
    if configured:
        return configured
    return LOCAL_TEST_IMAGE if engine.podman else OFFICIAL_TEST_IMAGE


def use_engine(engine: ContainerEngine, environ: MutableMapping[str, str] | None = None) -> None:
    """Point testcontainers and the Docker SDK (they read os.environ) at ``engine``."""
    env = os.environ if environ is None else environ
    for key, value in engine_settings(engine, env).items():
        env[key] = value
    # testcontainers reads part of its configuration when first imported; if that already
    # happened, set the same values on its configuration object.
    import sys

    config_module = sys.modules.get("testcontainers.core.config")
    if config_module is None:
        return
    config = config_module.testcontainers_config
    if env.get("TESTCONTAINERS_RYUK_DISABLED", "").lower() in ("1", "true", "yes", "y", "t"):
        config.ryuk_disabled = True
    mode = env.get("TESTCONTAINERS_CONNECTION_MODE")
    if mode and getattr(config, "connection_mode_override", None) is None:
        config.connection_mode_override = config_module.ConnectionMode(mode)
