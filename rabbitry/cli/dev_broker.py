"""``rabbitry dev-broker``: a long-lived local RabbitMQ in a container, for development.

It runs on the same engine and image as the test brokers (``rabbitry.testing``) but, unlike
them, outlives the command: it is created through the Docker SDK directly, without the
testcontainers session labels a reaper would remove. Its URLs (with the generated password) are
recorded in ``.rabbitry/dev-broker.json`` when the current directory has a ``.rabbitry/`` folder,
otherwise in ``~/.cache/rabbitry/dev-broker.json``.

The broker offers the stream protocol too (``rabbitmq_stream`` on a published port it
advertises, as the test brokers do), so the Spark source and sink take their fast path.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click

from rabbitry.cli.common import group, json_option
from rabbitry.errors import BrokerError
from rabbitry.files import write_private
from rabbitry.uri import mask_uri

DEFAULT_NAME = "rabbitry-dev"
DEFAULT_USER = "rabbitry"
STATE_FILE = "dev-broker.json"
STARTUP_TIMEOUT = 120.0
# A reused broker that claims to run answers at once; one silent this long is restarted.
REUSE_PROBE_TIMEOUT = 15.0


@dataclass(frozen=True)
class DevBrokerState:
    """What ``up`` records: enough for ``url``/``env`` without asking the engine."""

    name: str
    image: str
    engine: str
    host: str
    amqp_port: int
    management_port: int
    username: str
    password: str
    # 0: not published (a broker created before rabbitry offered the stream protocol)
    stream_port: int = 0

    def amqp_url(self, vhost: str | None = "/") -> str:
        """With ``vhost`` None the URL names no vhost: each client gives it the one it uses."""
        userinfo = f"{quote(self.username, safe='')}:{quote(self.password, safe='')}"
        path = "" if vhost is None else f"/{quote(vhost, safe='')}"
        return f"amqp://{userinfo}@{self.host}:{self.amqp_port}{path}"

    def management_url(self) -> str:
        """With credentials as userinfo: rabbitry's management client reads them from there."""
        userinfo = f"{quote(self.username, safe='')}:{quote(self.password, safe='')}"
        return f"http://{userinfo}@{self.host}:{self.management_port}"

    def stream_url(self) -> str | None:
        """``rabbitmq-stream://user:pass@host:port/`` (the stream clients' form), if published."""
        if not self.stream_port:
            return None
        userinfo = f"{quote(self.username, safe='')}:{quote(self.password, safe='')}"
        return f"rabbitmq-stream://{userinfo}@{self.host}:{self.stream_port}/"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> DevBrokerState:
        data = json.loads(text)
        fields = cls.__dataclass_fields__
        return cls(
            **{name: data[name] for name in fields if name != "stream_port"},
            stream_port=int(data.get("stream_port", 0)),
        )


def state_file_name(name: str) -> str:
    return STATE_FILE if name == DEFAULT_NAME else f"dev-broker-{name}.json"


def state_dirs(cwd: Path, environ: Mapping[str, str]) -> list[Path]:
    """Where the record may live, first match wins: ./.rabbitry, then the user cache."""
    cache = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME", "~")) / ".cache")
    dirs = []
    if (cwd / ".rabbitry").is_dir():
        dirs.append(cwd / ".rabbitry")
    dirs.append(Path(cache).expanduser() / "rabbitry")
    return dirs


def env_exports(state: DevBrokerState) -> str:
    """Shell line for ``eval "$(rabbitry dev-broker env)"``, secrets included."""
    # naming no vhost: a spec's workers and publishers use the spec's (a URL naming another
    # vhost than the one a client is asked for is an error)
    amqp = shlex.quote(state.amqp_url(None))
    mgmt = shlex.quote(state.management_url())
    line = f"export RABBITMQ_URL={amqp} RABBITRY_URL={amqp} RABBITRY_MANAGEMENT_URL={mgmt}"
    stream = state.stream_url()
    if stream is not None:
        line += f" RABBITRY_STREAM_URL={shlex.quote(stream)}"
    return line


def _write_state(state: DevBrokerState) -> Path:
    directory = state_dirs(Path.cwd(), os.environ)[0]
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / state_file_name(state.name)
    write_private(path, state.to_json())  # the password is in there: owner only
    return path


def _read_state(name: str) -> tuple[DevBrokerState, Path] | None:
    for directory in state_dirs(Path.cwd(), os.environ):
        path = directory / state_file_name(name)
        if path.is_file():
            try:
                return DevBrokerState.from_json(path.read_text()), path
            except (ValueError, KeyError, TypeError) as exc:
                raise BrokerError(
                    f"{path}: unreadable ({exc}); delete it and run up again"
                ) from exc
    return None


def _require_state(name: str) -> DevBrokerState:
    found = _read_state(name)
    if found is None:
        raise BrokerError(f"no dev broker {name!r} recorded here: run `rabbitry dev-broker up`")
    return found[0]


def _container_env(container: Any) -> dict[str, str]:
    pairs = container.attrs.get("Config", {}).get("Env") or []
    return dict(pair.split("=", 1) for pair in pairs if "=" in pair)


def _up(name: str, image: str | None, amqp_port: int, management_port: int) -> DevBrokerState:
    # Imported here: the CLI starts without them, and they need the `containers` extra.
    from rabbitry.errors import BrokerUnavailable
    from rabbitry.testing.engine import default_image, use_engine
    from rabbitry.testing.host import (
        docker_client,
        require_engine,
    )

    try:
        engine = require_engine()
    except BrokerUnavailable as exc:
        raise BrokerError(
            "no container engine answers (Docker or Podman's service socket): run rabbitry's "
            "scripts/setup.sh, or start Docker"
        ) from exc
    use_engine(engine)
    client = docker_client(engine)
    import docker.errors

    try:
        container = client.containers.get(name)
    except docker.errors.NotFound:
        container = None
    except docker.errors.APIError as exc:
        raise BrokerError(f"cannot look up container {name!r}: {exc}") from exc

    if container is not None:
        return _reuse(engine, client, container, name)
    image = image or default_image(engine, os.environ)
    return _create(
        engine, client, name, image, secrets.token_urlsafe(18), amqp_port, management_port
    )


def _create(
    engine: Any, client: Any, name: str, image: str, password: str, amqp_port: int, mgmt_port: int
) -> DevBrokerState:
    import docker.errors

    from rabbitry.testing.container_recipe import STREAM_PORT, stream_environment
    from rabbitry.testing.engine import LOCAL_TEST_IMAGE
    from rabbitry.testing.host import (
        AMQP_PORT,
        MANAGEMENT_PORT,
        ROLE_LABEL,
        broker_environment,
        broker_host,
        free_port,
        is_port_conflict,
        port_bindings,
        port_is_free,
        published_host_ports,
    )

    taken = published_host_ports(client)

    def choose(asked: int, usual: int, flag: str) -> int:
        # The usual ports when free, so tools with default settings find the broker. "Free"
        # includes not published by another container: rootful Podman holds no socket for them.
        if asked:
            if asked in taken:
                raise BrokerError(
                    f"host port {asked} is published by container {taken[asked]!r}: choose "
                    f"another {flag}, or remove that container"
                )
            return asked
        return usual if usual not in taken and port_is_free(usual) else free_port(taken)

    amqp = choose(amqp_port, AMQP_PORT, "--port")
    mgmt = choose(mgmt_port, MANAGEMENT_PORT, "--management-port")
    stream = choose(0, STREAM_PORT, "")
    container = None
    for attempt in range(3):
        # The broker advertises the host's address and port: stream clients connect there.
        environment = broker_environment(
            username=DEFAULT_USER,
            password=password,
            env=stream_environment(broker_host(engine), stream),
        )
        try:
            container = client.containers.run(
                image,
                detach=True,
                name=name,
                hostname=name,
                environment=environment,
                ports=port_bindings(engine, amqp, mgmt, {STREAM_PORT: stream}),
                labels={ROLE_LABEL: "dev-broker"},
            )
            break
        except docker.errors.APIError as exc:
            with contextlib.suppress(Exception):
                client.containers.get(name).remove(force=True)
            if is_port_conflict(exc) and attempt < 2:
                amqp, mgmt, stream = free_port(taken), free_port(taken), free_port(taken)
                continue
            hint = " (run rabbitry's scripts/setup.sh)" if image == LOCAL_TEST_IMAGE else ""
            raise BrokerError(f"could not start {name!r} from {image!r}: {exc}{hint}") from exc
    assert container is not None
    return _wait(engine, container, name, image, STARTUP_TIMEOUT)


def _reuse(engine: Any, client: Any, container: Any, name: str) -> DevBrokerState:
    """An existing dev broker: started if stopped; brought back if it claims to run but is silent.

    An engine can report a container as running after its processes were killed behind its
    back (a host that ended a session, for one). A restart brings it back, or when the engine
    cannot restart it, a new container with the same password and ports replaces it (its data
    was gone with its processes).
    """
    import docker.errors

    from rabbitry.testing.host import AMQP_PORT, MANAGEMENT_PORT, published_port

    image = str(container.attrs.get("Config", {}).get("Image", "?"))
    try:
        if container.status != "running":
            container.start()
            return _wait(engine, container, name, image, STARTUP_TIMEOUT)
        return _wait(engine, container, name, image, REUSE_PROBE_TIMEOUT)
    except docker.errors.APIError as exc:
        failure: Exception = exc
    except BrokerError as exc:
        failure = exc
    try:
        container.restart(timeout=5)
        return _wait(engine, container, name, image, STARTUP_TIMEOUT)
    except (docker.errors.APIError, BrokerError):
        pass
    password = _container_env(container).get("RABBITMQ_DEFAULT_PASS")
    try:
        ports = [published_port(container.attrs, port) for port in (AMQP_PORT, MANAGEMENT_PORT)]
    except BrokerError:
        ports = [0, 0]
    if password is None:
        raise BrokerError(
            f"the existing {name!r} does not answer ({failure}): remove it with "
            f"`rabbitry dev-broker down --name {name}` and run up again"
        )
    try:
        container.remove(force=True)
    except docker.errors.APIError as exc:
        raise BrokerError(f"could not replace the silent {name!r}: {exc}") from exc
    return _create(engine, client, name, image, password, *ports)


def _wait(engine: Any, container: Any, name: str, image: str, timeout: float) -> DevBrokerState:
    """Wait until the container's broker answers; the error says what the container said."""
    from rabbitry.testing.broker import Broker, wait_until_ready
    from rabbitry.testing.host import AMQP_PORT, MANAGEMENT_PORT, broker_host, published_port

    container.reload()
    env = _container_env(container)
    broker = Broker(
        host=broker_host(engine),
        amqp_port=published_port(container.attrs, AMQP_PORT),
        management_port=published_port(container.attrs, MANAGEMENT_PORT),
        username=env.get("RABBITMQ_DEFAULT_USER", "guest"),
        password=env.get("RABBITMQ_DEFAULT_PASS", "guest"),
    )

    def still_running() -> None:
        container.reload()
        if container.status in ("exited", "dead"):
            raise BrokerError(
                f"container {name!r} stopped while starting (status {container.status})"
                f"{_last_output(container)}"
            )

    try:
        wait_until_ready(broker, timeout, check=still_running)
    except BrokerError as exc:
        if "stopped while starting" in str(exc):
            raise
        raise BrokerError(
            f"{exc}; container {name!r} is {container.status}{_last_output(container)}"
        ) from exc
    from rabbitry.testing.container_recipe import STREAM_PORT

    try:
        stream_port = published_port(container.attrs, STREAM_PORT)
    except BrokerError:
        stream_port = 0  # created before rabbitry published it
    return DevBrokerState(
        name=name,
        image=image,
        engine=engine.describe(),
        host=broker.host,
        amqp_port=broker.amqp_port,
        management_port=broker.management_port,
        username=broker.username,
        password=broker.password,
        stream_port=stream_port,
    )


def _last_output(container: Any, lines: int = 20) -> str:
    try:
        raw = container.logs(tail=lines)
    except Exception:
        return ""
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    text = text.strip()
    return f"; its last output:\n{text}" if text else ""


def _down(name: str) -> bool:
    from rabbitry.errors import BrokerUnavailable
    from rabbitry.testing.host import docker_client, require_engine

    try:
        engine = require_engine()
    except BrokerUnavailable as exc:
        raise BrokerError("no container engine answers: nothing to stop") from exc
    client = docker_client(engine)
    import docker.errors

    try:
        container = client.containers.get(name)
    except docker.errors.NotFound:
        return False
    try:
        # No graceful stop: the broker's data goes with the container anyway.
        container.remove(force=True)
    except docker.errors.APIError as exc:
        raise BrokerError(f"could not remove {name!r}: {exc}") from exc
    return True


name_option = click.option(
    "--name",
    default=DEFAULT_NAME,
    show_default=True,
    help="Container name (one dev broker per name).",
)


@group("dev-broker")
def dev_broker_group() -> None:
    """A long-lived local RabbitMQ (a container) for development."""


@dev_broker_group.command("up")
@name_option
@click.option(
    "--image",
    envvar="RABBITRY_TEST_IMAGE",
    show_envvar=True,
    help="Image (default: the local build on Podman, else rabbitmq:4.0-management).",
)
@click.option(
    "--port",
    "amqp_port",
    type=click.IntRange(0, 65535),
    default=0,
    help="AMQP host port (0: 5672 if free, else any free port).",
)
@click.option(
    "--management-port",
    type=click.IntRange(0, 65535),
    default=0,
    help="Management host port (0: 15672 if free, else any free port).",
)
@json_option
def up_command(
    name: str, image: str | None, amqp_port: int, management_port: int, as_json: bool
) -> None:
    """Start the dev broker, or reuse it, and print its URLs (password masked)."""
    state = _up(name, image, amqp_port, management_port)
    path = _write_state(state)
    stream_url = state.stream_url()
    if as_json:
        payload = {
            "format_version": 1,
            "name": state.name,
            "engine": state.engine,
            "image": state.image,
            "amqp_url": mask_uri(state.amqp_url()),
            "management_url": mask_uri(state.management_url()),
            "stream_url": None if stream_url is None else mask_uri(stream_url),
            "recorded_in": str(path),
        }
        click.echo(json.dumps(payload, indent=2))
        return
    click.echo(f"{state.name} is up ({state.engine}, image {state.image})")
    click.echo(f"  AMQP:        {mask_uri(state.amqp_url())}")
    click.echo(f"  management:  {mask_uri(state.management_url())}")
    if stream_url is not None:
        click.echo(f"  streams:     {mask_uri(stream_url)}")
    click.echo(f"  recorded in  {path}")
    named = "" if state.name == DEFAULT_NAME else f" --name {shlex.quote(state.name)}"
    click.echo(f'Use it from a shell with: eval "$(rabbitry dev-broker env{named})"')


@dev_broker_group.command("down")
@name_option
def down_command(name: str) -> None:
    """Stop and remove the dev broker (its data goes with it)."""
    removed = _down(name)
    found = _read_state(name)
    if found is not None:
        found[1].unlink(missing_ok=True)
    click.echo(f"{name} removed" if removed else f"{name} was not running")


@dev_broker_group.command("url")
@name_option
@click.option("--management", is_flag=True, help="Print the management API URL instead.")
@click.option("--vhost", default="/", show_default=True, help="Vhost of the AMQP URL.")
@click.option("--reveal", is_flag=True, help="Print the password instead of ***.")
@json_option
def url_command(name: str, management: bool, vhost: str, reveal: bool, as_json: bool) -> None:
    """Print the dev broker's AMQP URL (or management URL)."""
    state = _require_state(name)
    shown = (lambda url: url) if reveal else mask_uri
    if as_json:
        payload = {
            "format_version": 1,
            "name": state.name,
            "amqp_url": shown(state.amqp_url(vhost)),
            "management_url": shown(state.management_url()),
        }
        click.echo(json.dumps(payload, indent=2))
        return
    url = state.management_url() if management else state.amqp_url(vhost)
    click.echo(shown(url))


@dev_broker_group.command("env")
@name_option
def env_command(name: str) -> None:
    """Print shell exports of the URLs, secrets included: eval "$(rabbitry dev-broker env)"."""
    click.echo(env_exports(_require_state(name)))
