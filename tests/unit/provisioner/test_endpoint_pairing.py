"""The AMQP and management URLs of one command name one broker: a URL given as an argument
never pairs with one from the environment naming another host, and a derived URL says so."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from rabbitry.cli import cli
from rabbitry.errors import BrokerError
from rabbitry.management.endpoints import resolve_endpoints

SECRET = "Sup3r-secret"
SPEC = str(Path(__file__).parents[3] / "examples" / "shop.yaml")
A = f"amqp://app:{SECRET}@broker-a.invalid:5672/"
B_MGMT = f"http://app:{SECRET}@broker-b.invalid:15672"


def test_a_given_url_and_an_environment_management_url_of_another_host_are_refused() -> None:
    with pytest.raises(BrokerError) as caught:
        resolve_endpoints(A, environ={"RABBITRY_MANAGEMENT_URL": B_MGMT})
    message = str(caught.value)
    assert "broker-a.invalid" in message and "broker-b.invalid" in message
    assert "(--url)" in message and "(RABBITRY_MANAGEMENT_URL)" in message
    assert "unset RABBITRY_MANAGEMENT_URL" in message
    assert SECRET not in message


def test_a_given_management_url_and_an_environment_url_of_another_host_are_refused() -> None:
    with pytest.raises(BrokerError, match=r"\(RABBITRY_URL\).*\(--management-url\)"):
        resolve_endpoints(management_url=B_MGMT, environ={"RABBITRY_URL": A})


def test_urls_of_one_source_or_of_one_host_pair() -> None:
    same_host = "http://app:pw@broker-a.invalid:15672"
    assert resolve_endpoints(A, environ={"RABBITRY_MANAGEMENT_URL": same_host}).management_url == (
        same_host
    )
    # both given, or both from the environment: the user paired them (a proxy, say)
    assert resolve_endpoints(A, B_MGMT, environ={}).management_url == B_MGMT
    both = {"RABBITRY_URL": A, "RABBITRY_MANAGEMENT_URL": B_MGMT}
    assert resolve_endpoints(environ=both).amqp_url == A
    # loopback names are one host; a cluster's lists pair when they share a node
    local = resolve_endpoints(
        "amqp://u:p@127.0.0.1:5672/", environ={"RABBITRY_MANAGEMENT_URL": "http://u:p@localhost:1"}
    )
    assert local.management_url == "http://u:p@localhost:1"
    cluster = resolve_endpoints(
        "amqp://u:p@n1/,amqp://u:p@n2/", environ={"RABBITRY_MANAGEMENT_URL": "http://u:p@n2:15672"}
    )
    assert cluster.management_url == "http://u:p@n2:15672"


def test_a_derived_management_url_says_so(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="rabbitry.endpoints"):
        endpoints = resolve_endpoints(A, environ={})
    assert endpoints.management_url == f"http://app:{SECRET}@broker-a.invalid:15672"
    assert "management URL http://app:***@broker-a.invalid:15672 derived from" in caplog.text
    assert "(--url)" in caplog.text and SECRET not in caplog.text


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", SPEC],
        ["apply", SPEC, "--auto-approve"],
        ["status", SPEC],
        ["export", "--vhost", "shop"],
        ["stacks"],
    ],
    ids=" ".join,
)
def test_the_cli_refuses_url_with_an_environment_management_url_of_another_host(
    runner: CliRunner, argv: list[str]
) -> None:
    result = runner.invoke(
        cli,
        [*argv, "--url", A],
        env={"RABBITRY_MANAGEMENT_URL": B_MGMT},
        catch_exceptions=False,
    )
    assert result.exit_code == 1, result.output
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "name different hosts" in last
    assert "broker-b.invalid" in last and "(RABBITRY_MANAGEMENT_URL)" in last
    assert SECRET not in result.output + result.stderr


def test_the_cli_pairs_flags_given_together(runner: CliRunner) -> None:
    # both flags given: no pairing error (the command then fails reaching the hosts)
    result = runner.invoke(cli, ["stacks", "--url", A, "--management-url", B_MGMT])
    assert "name different hosts" not in result.output + result.stderr


def test_the_cli_says_in_verbose_mode_that_the_management_url_was_derived(
    runner: CliRunner,
) -> None:
    closed = f"amqp://admin:{SECRET}@127.0.0.1/"  # nothing listens on 127.0.0.1:15672 here
    result = runner.invoke(cli, ["stacks", "-v", "--url", closed])
    assert result.exit_code == 1
    assert "management URL http://admin:***@127.0.0.1:15672 derived from the AMQP URL" in (
        result.stderr
    )
    assert SECRET not in result.stderr


def test_a_management_url_guessed_from_a_moved_amqp_port_is_never_used(
    runner: CliRunner,
) -> None:
    # a container's mapped AMQP port: 15672 on that host is not its management API
    endpoints = resolve_endpoints("amqp://u:pw@127.0.0.1:32771/", environ={})
    with pytest.raises(BrokerError, match=r"would be a guess.*give --management-url"):
        endpoints.management()
    given = resolve_endpoints("amqp://u:pw@127.0.0.1:32771/", "http://u:pw@127.0.0.1:32772")
    with given.management() as client:
        assert client.base_url == "http://127.0.0.1:32772"
    result = runner.invoke(cli, ["stacks", "--url", f"amqp://u:{SECRET}@127.0.0.1:32771/"])
    assert result.exit_code == 1
    last = result.stderr.strip().splitlines()[-1]
    assert "would be a guess" in last and SECRET not in result.stderr


def test_the_library_refuses_the_guess_too(runner: CliRunner) -> None:
    import rabbitry

    with pytest.raises(BrokerError, match="would be a guess"):
        rabbitry.plan(SPEC, url="amqp://u:pw@127.0.0.1:32771/")
