"""The broker-free parts of rabbitry.testing: URLs, masking, provider and engine choice."""

from __future__ import annotations

import dataclasses
import json
import socket
from pathlib import Path

import pytest

from rabbitry.cli.dev_broker import DevBrokerState, env_exports, state_dirs, state_file_name
from rabbitry.errors import BrokerError
from rabbitry.testing import (
    LOCAL_TEST_IMAGE,
    OFFICIAL_TEST_IMAGE,
    Broker,
    ProviderKind,
    TestVhost,
    broker_from_env,
    broker_from_urls,
    choose_provider,
)
from rabbitry.testing.container_recipe import (
    ERL_ARGS,
    STREAM_READ_AHEAD,
    stream_environment,
    with_caller_environment,
)
from rabbitry.testing.containers import start_broker
from rabbitry.testing.engine import (
    ContainerEngine,
    EngineProbe,
    Prober,
    candidate_sockets,
    default_image,
    engine_settings,
    find_engine,
    use_engine,
)
from rabbitry.testing.host import (
    bind_mounts,
    broker_environment,
    check_extra_ports,
    is_port_conflict,
    owner_is_gone,
    port_bindings,
    published_host_ports,
    published_port,
    reap_orphans,
)

pytest_plugins = ["pytester"]

# --- Broker values -----------------------------------------------------------------------------


def test_amqp_url_quotes_vhost_and_credentials() -> None:
    broker = Broker(host="h", amqp_port=5673, username="us er", password="p@ss:w/rd")
    assert broker.amqp_url() == "amqp://us%20er:p%40ss%3Aw%2Frd@h:5673/%2F"
    assert broker.amqp_url("a/b c").endswith("/a%2Fb%20c")
    assert broker.amqp_url("plain").endswith("@h:5673/plain")


def test_ipv6_hosts_are_bracketed() -> None:
    broker = Broker(host="::1", amqp_port=1, management_port=2)
    assert broker.amqp_url() == "amqp://guest:guest@[::1]:1/%2F"
    assert broker.management_url == "http://[::1]:2"


def test_repr_masks_the_password() -> None:
    broker = Broker(host="h", username="u", password="s3cret")
    text = repr(broker)
    assert "s3cret" not in text
    assert "amqp://u:***@h:5672/%2F" in text
    assert "http://h:15672" in text
    vhost = TestVhost(name="v", broker=broker)
    assert "s3cret" not in repr(vhost)


def test_management_url_has_no_credentials() -> None:
    broker = Broker(host="h", management_port=15999, username="u", password="p")
    assert broker.management_url == "http://h:15999"
    assert broker.auth == ("u", "p")


def test_test_vhost_derives_everything_from_its_broker() -> None:
    broker = Broker(host="h", username="u", password="p")
    vhost = TestVhost(name="rabbitry-test-1234abcd", broker=broker)
    assert vhost.amqp_url == "amqp://u:p@h:5672/rabbitry-test-1234abcd"
    assert vhost.management_url == "http://h:15672"
    assert (vhost.username, vhost.password) == ("u", "p")


def test_brokers_not_run_by_rabbitry_cannot_be_stopped() -> None:
    with pytest.raises(BrokerError, match="RABBITMQ_URL"):
        Broker(host="h").stop()


def test_brokers_compare_without_their_control() -> None:
    class Control:
        def stop(self) -> None:
            pass

        def start(self) -> Broker:
            return Broker(host="h")

    assert Broker(host="h", control=Control()) == Broker(host="h")


# --- from the environment ----------------------------------------------------------------------


def test_broker_from_url_defaults() -> None:
    broker = broker_from_urls("amqp://rabbit.example")
    assert (broker.host, broker.amqp_port, broker.management_port) == (
        "rabbit.example",
        5672,
        15672,
    )
    assert (broker.username, broker.password) == ("guest", "guest")
    assert broker.management_url == "http://rabbit.example:15672"


def test_broker_from_url_decodes_credentials_and_ignores_the_vhost() -> None:
    broker = broker_from_urls("amqp://a%40b:p%2Fw@h:5999/some-vhost")
    assert (broker.username, broker.password, broker.amqp_port) == ("a@b", "p/w", 5999)
    assert broker.amqp_url() == "amqp://a%40b:p%2Fw@h:5999/%2F"


def test_amqps_defaults_to_5671() -> None:
    broker = broker_from_urls("amqps://u:p@h")
    assert broker.amqp_port == 5671
    assert broker.amqp_url().startswith("amqps://")


def test_management_url_in_the_default_form_keeps_the_value_simple() -> None:
    broker = broker_from_urls("amqp://u:p@h", "http://h:15673/")
    assert broker.management_base is None
    assert broker.management_url == "http://h:15673"


def test_management_url_elsewhere_is_kept_whole_without_userinfo() -> None:
    broker = broker_from_urls("amqp://h", "https://admin:pw@mgmt.example/rabbit/")
    assert broker.management_url == "https://mgmt.example:443/rabbit"
    # The AMQP URL had no credentials: the management URL's are used.
    assert (broker.username, broker.password) == ("admin", "pw")
    assert "pw" not in repr(broker)


@pytest.mark.parametrize(
    ("amqp", "mgmt", "message"),
    [
        ("http://h", None, "not an AMQP URL"),
        ("amqp://", None, "not an AMQP URL"),
        ("amqp://u:secret@h:notaport", None, "RABBITMQ_URL"),
        ("amqp://h", "ftp://h", "not an http"),
    ],
)
def test_bad_urls_are_errors_that_hide_the_password(
    amqp: str, mgmt: str | None, message: str
) -> None:
    with pytest.raises(BrokerError, match=message) as info:
        broker_from_urls(amqp, mgmt)
    assert "secret" not in str(info.value)


def test_broker_from_env_reads_both_variables() -> None:
    broker = broker_from_env(
        {"RABBITMQ_URL": "amqp://u:p@h:1", "RABBITRY_MANAGEMENT_URL": "http://h:2"}
    )
    assert (broker.amqp_port, broker.management_port) == (1, 2)
    with pytest.raises(BrokerError, match="unset"):
        broker_from_env({})


# --- provider choice ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "kind", "forced"),
    [
        ({}, ProviderKind.TESTCONTAINERS, False),
        ({"RABBITMQ_URL": "amqp://h"}, ProviderKind.ENV, False),
        ({"RABBITMQ_URL": "  "}, ProviderKind.TESTCONTAINERS, False),
        ({"RABBITRY_TEST_BROKER": "auto"}, ProviderKind.TESTCONTAINERS, False),
        ({"RABBITRY_TEST_BROKER": "testcontainers"}, ProviderKind.TESTCONTAINERS, True),
        (
            {"RABBITRY_TEST_BROKER": "testcontainers", "RABBITMQ_URL": "amqp://h"},
            ProviderKind.TESTCONTAINERS,
            True,
        ),
        ({"RABBITRY_TEST_BROKER": "ENV", "RABBITMQ_URL": "amqp://h"}, ProviderKind.ENV, True),
    ],
)
def test_choose_provider(env: dict[str, str], kind: ProviderKind, forced: bool) -> None:
    choice = choose_provider(env)
    assert (choice.kind, choice.forced) == (kind, forced)


def test_forcing_env_without_a_url_is_an_error() -> None:
    with pytest.raises(BrokerError, match="RABBITMQ_URL is unset"):
        choose_provider({"RABBITRY_TEST_BROKER": "env"})


def test_unknown_provider_is_an_error_listing_the_choices() -> None:
    with pytest.raises(BrokerError, match="env, testcontainers"):
        choose_provider({"RABBITRY_TEST_BROKER": "docker"})


# --- container engine --------------------------------------------------------------------------


def fake_probe(answers: dict[str, EngineProbe]) -> tuple[Prober, list[str]]:
    asked: list[str] = []

    def probe(docker_host: str) -> EngineProbe:
        asked.append(docker_host)
        return answers.get(docker_host, EngineProbe(False))

    return probe, asked


def test_docker_host_wins_and_is_not_second_guessed() -> None:
    probe, asked = fake_probe({"tcp://remote:2375": EngineProbe(True)})
    engine = find_engine({"DOCKER_HOST": "tcp://remote:2375"}, probe)
    assert engine == ContainerEngine("tcp://remote:2375", podman=False)
    assert asked == ["tcp://remote:2375"]
    assert not engine.local


def test_docker_host_that_does_not_answer_means_no_engine() -> None:
    probe, asked = fake_probe({"unix:///var/run/docker.sock": EngineProbe(True)})
    assert find_engine({"DOCKER_HOST": "unix:///nowhere.sock"}, probe) is None
    assert asked == ["unix:///nowhere.sock"]


def test_default_docker_socket_is_left_to_the_sdk() -> None:
    probe, _ = fake_probe({"unix:///var/run/docker.sock": EngineProbe(True)})
    engine = find_engine({}, probe)
    assert engine == ContainerEngine(None, podman=False)
    assert engine is not None and engine.local


def test_podman_socket_is_found_without_docker_host() -> None:
    probe, asked = fake_probe({"unix:///run/rabbitry/podman.sock": EngineProbe(True, podman=True)})
    engine = find_engine({}, probe)
    assert engine == ContainerEngine("unix:///run/rabbitry/podman.sock", podman=True)
    assert asked[0] == "unix:///var/run/docker.sock"


def test_no_engine_at_all() -> None:
    probe, _ = fake_probe({})
    assert find_engine({}, probe, sockets=["/a.sock", "/b.sock"]) is None


def test_candidate_sockets_docker_first_then_podman() -> None:
    sockets = candidate_sockets(
        {"HOME": "/home/u", "XDG_RUNTIME_DIR": "/run/user/1", "RABBITRY_PODMAN_SOCKET": "/x.sock"}
    )
    assert sockets == [
        "/var/run/docker.sock",
        "/home/u/.docker/run/docker.sock",
        "/run/user/1/docker.sock",
        "/x.sock",
        "/run/podman/podman.sock",
        "/run/user/1/podman/podman.sock",
    ]


def test_podman_needs_no_reaper_and_the_docker_host_connection_mode() -> None:
    podman = ContainerEngine("unix:///p.sock", podman=True)
    assert engine_settings(podman, {}) == {
        "DOCKER_HOST": "unix:///p.sock",
        "TESTCONTAINERS_RYUK_DISABLED": "true",
        "TESTCONTAINERS_CONNECTION_MODE": "docker_host",
    }
    # What the user set stays.
    assert "TESTCONTAINERS_RYUK_DISABLED" not in engine_settings(
        podman, {"TESTCONTAINERS_RYUK_DISABLED": "false"}
    )
    assert engine_settings(ContainerEngine(None, podman=False), {}) == {}


def test_use_engine_writes_into_the_given_environment() -> None:
    env: dict[str, str] = {"DOCKER_HOST": "unix:///mine.sock"}
    use_engine(ContainerEngine("unix:///p.sock", podman=True), env)
    assert env["DOCKER_HOST"] == "unix:///mine.sock"
    assert env["TESTCONTAINERS_CONNECTION_MODE"] == "docker_host"


def test_image_is_a_setting_with_engine_defaults() -> None:
    podman = ContainerEngine("unix:///p.sock", podman=True)
    docker = ContainerEngine(None, podman=False)
    assert default_image(podman, {}) == LOCAL_TEST_IMAGE
    assert default_image(docker, {}) == OFFICIAL_TEST_IMAGE
    assert default_image(docker, {"RABBITRY_TEST_IMAGE": "my/rabbit:1"}) == "my/rabbit:1"


# --- containers --------------------------------------------------------------------------------


def test_ports_bind_to_loopback_on_a_local_engine_only() -> None:
    local = ContainerEngine(None, podman=False)
    remote = ContainerEngine("tcp://remote:2375", podman=False)
    assert port_bindings(local, 1, 2) == {
        "5672/tcp": ("127.0.0.1", 1),
        "15672/tcp": ("127.0.0.1", 2),
    }
    assert port_bindings(remote, None, None) == {"5672/tcp": None, "15672/tcp": None}


def test_extra_ports_are_published_like_the_others() -> None:
    local = ContainerEngine(None, podman=False)
    remote = ContainerEngine("tcp://remote:2375", podman=False)
    assert port_bindings(local, 1, 2, {5671: 3})["5671/tcp"] == ("127.0.0.1", 3)
    assert port_bindings(remote, None, None, {5671: None})["5671/tcp"] is None
    assert check_extra_ports([5671, 15671]) == (5671, 15671)
    for bad, why in ((5672, "published anyway"), (0, "not a TCP port"), (True, "not a TCP port")):
        with pytest.raises(ValueError, match=why):
            check_extra_ports([bad])
    with pytest.raises(ValueError, match="twice"):
        check_extra_ports([5671, 5671])


def test_mounts_are_checked_and_keyed_by_host_path(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("x")
    assert bind_mounts({"/etc/rabbitry/tls": tmp_path}) == {str(tmp_path): "/etc/rabbitry/tls"}
    with pytest.raises(ValueError, match="must be absolute"):
        bind_mounts({"etc/tls": tmp_path})
    with pytest.raises(ValueError, match="does not exist"):
        bind_mounts({"/etc/tls": tmp_path / "missing"})
    with pytest.raises(ValueError, match="mounted twice"):
        bind_mounts({"/a": tmp_path / "ca.pem", "/b": tmp_path / "ca.pem"})


def test_published_port_reads_inspect_data() -> None:
    attrs = {"NetworkSettings": {"Ports": {"5672/tcp": [{"HostIp": "", "HostPort": "32768"}]}}}
    assert published_port(attrs, 5672) == 32768
    with pytest.raises(BrokerError, match="15672"):
        published_port(attrs, 15672)


def test_broker_environment_speaks_the_official_image_variables() -> None:
    env = broker_environment(
        username="u", password="p", erlang_cookie="c", nodename="rabbit@n1", env={"X": "1"}
    )
    assert env == {
        "RABBITMQ_DEFAULT_USER": "u",
        "RABBITMQ_DEFAULT_PASS": "p",
        "RABBITMQ_ERLANG_COOKIE": "c",
        "RABBITMQ_NODENAME": "rabbit@n1",
        "X": "1",
    }


def test_port_conflicts_are_recognised_for_docker_and_podman() -> None:
    assert is_port_conflict(RuntimeError("Bind for 0.0.0.0:5672 failed: port is already allocated"))
    assert is_port_conflict(RuntimeError("listen tcp4 :5672: bind: address already in use"))
    assert not is_port_conflict(RuntimeError("no such image"))


def test_orphans_are_containers_of_dead_processes_on_this_host() -> None:
    def started(pid: int) -> str | None:
        return {10: "555"}.get(pid)

    assert not owner_is_gone("me:10:555", "me", started)  # still running
    assert owner_is_gone("me:10:444", "me", started)  # pid reused by another process
    assert owner_is_gone("me:11:555", "me", started)  # gone
    assert not owner_is_gone("other:11:555", "me", started)  # another host's
    assert not owner_is_gone("me:11:?", "me", started)  # unknown start time: keep
    assert not owner_is_gone("garbage", "me", started)


# --- dev broker --------------------------------------------------------------------------------

DEV = DevBrokerState(
    name="rabbitry-dev",
    image="img",
    engine="Podman",
    host="127.0.0.1",
    amqp_port=5672,
    management_port=15672,
    username="rabbitry",
    password="pa ss",
)


def test_dev_broker_state_round_trips() -> None:
    assert DevBrokerState.from_json(DEV.to_json()) == DEV
    assert json.loads(DEV.to_json())["password"] == "pa ss"


def test_dev_broker_env_is_quoted_for_eval() -> None:
    line = env_exports(DEV)
    assert line == (
        "export RABBITMQ_URL=amqp://rabbitry:pa%20ss@127.0.0.1:5672"
        " RABBITRY_URL=amqp://rabbitry:pa%20ss@127.0.0.1:5672"
        " RABBITRY_MANAGEMENT_URL=http://rabbitry:pa%20ss@127.0.0.1:15672"
    )


def test_dev_broker_env_names_the_stream_port_when_published() -> None:
    with_streams = dataclasses.replace(DEV, stream_port=5552)
    assert env_exports(with_streams).endswith(
        " RABBITRY_STREAM_URL=rabbitmq-stream://rabbitry:pa%20ss@127.0.0.1:5552/"
    )
    old_record = json.loads(DEV.to_json())
    del old_record["stream_port"]  # written before rabbitry published the stream port
    assert DevBrokerState.from_json(json.dumps(old_record)).stream_port == 0


def test_container_brokers_enable_streams_advertised_where_published() -> None:
    env = stream_environment("127.0.0.1", 40001)
    assert "rabbitmq_stream" in env["RABBITMQ_ENABLED_PLUGINS"].split(",")
    assert env["RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS"] == (
        '-rabbitmq_stream advertised_host "127.0.0.1" -rabbitmq_stream advertised_port 40001'
        " -rabbit stream_read_ahead 1048576"  # read by RabbitMQ 4.2.1+: small chunks read fast
    )
    with pytest.raises(ValueError, match="5552"):
        start_broker(extra_ports=[5552])


def test_a_callers_environment_wins_but_its_erlang_arguments_are_added() -> None:
    streams = stream_environment("127.0.0.1", 40001)
    env = with_caller_environment(
        streams,
        {
            "RABBITMQ_ENABLED_PLUGINS": "rabbitmq_management",
            ERL_ARGS: "-rabbit ssl_listeners [5671]",
        },
    )
    assert env["RABBITMQ_ENABLED_PLUGINS"] == "rabbitmq_management"
    assert env[ERL_ARGS] == "-rabbit ssl_listeners [5671] " + streams[ERL_ARGS]
    assert with_caller_environment(streams, {}) == streams


def test_a_parameter_the_caller_sets_is_given_once_with_the_callers_value() -> None:
    """RabbitMQ 4.0 keeps the first of a parameter given twice, 4.3 the last: so it is given once."""
    streams = stream_environment("127.0.0.1", 40001)
    args = with_caller_environment(streams, {ERL_ARGS: "-rabbit stream_read_ahead 8192"})[ERL_ARGS]
    assert args.split().count("stream_read_ahead") == 1
    assert args.startswith("-rabbit stream_read_ahead 8192 ")
    assert '-rabbitmq_stream advertised_host "127.0.0.1"' in args
    assert "-rabbitmq_stream advertised_port 40001" in args
    # a longer name that merely starts like one of rabbitry's is not that parameter
    other = with_caller_environment(streams, {ERL_ARGS: "-rabbit stream_read_ahead_limit 1"})
    assert f"-rabbit stream_read_ahead {STREAM_READ_AHEAD}" in other[ERL_ARGS]


def test_dev_broker_state_lives_in_dot_rabbitry_or_the_cache(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path / "home")}
    assert state_dirs(tmp_path, env) == [tmp_path / "home" / ".cache" / "rabbitry"]
    (tmp_path / ".rabbitry").mkdir()
    assert state_dirs(tmp_path, {**env, "XDG_CACHE_HOME": "/c"}) == [
        tmp_path / ".rabbitry",
        Path("/c/rabbitry"),
    ]
    assert state_file_name("rabbitry-dev") == "dev-broker.json"
    assert state_file_name("other") == "dev-broker-other.json"


# --- the plugin without a broker --------------------------------------------------------------

PLUGIN_TEST = """
def test_uses_broker(rabbitmq_vhost):
    pass

def test_plain():
    pass
"""


def run_plugin_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str, **env: str
) -> pytest.RunResult:
    """PLUGIN_TEST in a pytest subprocess with no broker to be had, apart from ``env``."""
    for name in ("RABBITMQ_URL", "RABBITRY_TEST_BROKER", "RABBITRY_MANAGEMENT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    pytester.makepyfile(PLUGIN_TEST)
    return pytester.runpytest_subprocess(*args, "-p", "no:cacheprovider", *OTHER_PLUGINS_OFF)


OTHER_PLUGINS = (
    "xdist",
    "xdist.looponfail",
    "timeout",
    "anyio",
    "hypothesispytest",
    "random_order",
)
OTHER_PLUGINS_OFF = [arg for name in OTHER_PLUGINS for arg in ("-p", f"no:{name}")]
"""The installed plugins these runs have no use for, turned off: loading them took half of each
pytest's start. rabbitry's plugin still loads by itself, from its entry point."""


def test_plugin_skips_with_what_to_do_when_no_broker_can_be_had(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run_plugin_test(pytester, monkeypatch, "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*scripts/setup.sh*RABBITMQ_URL*"])


def test_plugin_marks_broker_tests(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run_plugin_test(pytester, monkeypatch, "-m", "not broker")
    result.assert_outcomes(passed=1, deselected=1)


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"RABBITRY_TEST_BROKER": "testcontainers"}, "*RABBITRY_TEST_BROKER=testcontainers, but*"),
        ({"RABBITMQ_URL": "http://u:secret@h"}, "*is not an AMQP URL*"),
    ],
    ids=["forced provider fails", "bad RABBITMQ_URL"],
)
def test_plugin_fails_the_broker_tests_when_the_broker_asked_for_cannot_be_had(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], said: str
) -> None:
    result = run_plugin_test(pytester, monkeypatch, **env)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([said])
    assert "secret" not in result.stdout.str()


class _RacingEngineApi:
    """An engine's API as docker-py calls it: it lists three containers, one of which is removed
    before it can be read (another test's broker ending between the list and the inspect), and
    says so as Docker does (404) or as Podman does (500, "no such container")."""

    def __init__(self, engine: str = "docker") -> None:
        self.engine = engine
        self.removed: list[str] = []
        self.inspected: list[str] = []

    def containers(self, all: bool, filters: dict[str, str]) -> list[dict[str, str]]:
        return [{"Id": "a"}, {"Id": "gone"}, {"Id": "c"}]

    def inspect_container(self, container_id: str) -> dict[str, object]:
        from docker.errors import APIError, NotFound

        self.inspected.append(container_id)
        if container_id == "gone" and self.engine == "docker":
            raise NotFound(f"no container with name or ID {container_id!r} found")
        if container_id == "gone":
            said = f"container {container_id} does not exist in database: no such container"
            raise APIError("500 Server Error: Internal Server Error", explanation=said)
        if container_id == "broken":
            raise APIError("500 Server Error: Internal Server Error", explanation="disk full")
        port = {"a": "35672", "c": "45672"}[container_id]
        # c's owner was a process on this host that has exited; a's is on another host.
        owner = f"{socket.gethostname()}:999999999:1" if container_id == "c" else "elsewhere:1:1"
        return {
            "Id": container_id,
            "Name": f"/broker-{container_id}",
            "Config": {"Labels": {"rabbitry.owner": owner}},
            "HostConfig": {"PortBindings": {"5672/tcp": [{"HostIp": "", "HostPort": port}]}},
        }

    def remove_container(self, container_id: str, force: bool) -> None:
        self.removed.append(container_id)


class _RacingEngine:
    def __init__(self, engine: str = "docker") -> None:
        self.api = _RacingEngineApi(engine)


@pytest.mark.parametrize("kind", ["docker", "podman"])
def test_a_container_removed_while_the_engine_is_read_is_passed_over_not_an_error(
    kind: str,
) -> None:
    engine = _RacingEngine(kind)
    ports = published_host_ports(engine)  # type: ignore[arg-type]
    assert ports == {35672: "broker-a", 45672: "broker-c"}
    assert engine.api.inspected == ["a", "gone", "c"]
    assert reap_orphans(engine) == ["broker-c"]  # type: ignore[arg-type]
    assert engine.api.removed == ["c"]


def test_an_engine_error_other_than_a_removed_container_is_not_passed_over() -> None:
    from docker.errors import APIError

    engine = _RacingEngine()
    engine.api.containers = lambda all, filters: [{"Id": "a"}, {"Id": "broken"}]  # type: ignore[method-assign]
    with pytest.raises(APIError, match="500"):
        published_host_ports(engine)  # type: ignore[arg-type]
