"""The CLI against a real broker when the credentials are wrong, when it is asked to say more,
and when the management API speaks TLS with a private CA.

Wrong passwords read the same through every command and every client (rabbitry's own AMQP
client, pika, the management API): who was refused, where, and what to check; never the
password, never a traceback, and a worker refused at login stops at once instead of
reconnecting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from click.testing import CliRunner

from rabbitry.cli import cli
from rabbitry.testing.containers import BrokerContainer
from tests.integration.conftest import Broker, one_vhost_spec, with_credentials
from tests.integration.test_publisher_tls import (  # noqa: F401
    MANAGEMENT_TLS_PORT,
    TLS_GROUP,
    Certs,
    amqps_url,
    certs,
    tls_broker,
    tls_brokers,
    with_queue,
)

pytestmark = pytest.mark.broker

WRONG = "Wr0ng-pa55word"
PYTHON_CLI = [sys.executable, "-c", "from rabbitry.cli import main; main()"]


def wrong_password(url: str) -> str:
    parts = urlsplit(url)
    assert parts.username is not None
    return with_credentials(url, parts.username, WRONG)


def invoke(*argv: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(argv), env=env, prog_name="rabbitry")
    return result.exit_code, result.stdout, result.stderr


def one_error(code: int, out: str, err: str) -> str:
    assert code == 1, (code, out, err)
    assert "Traceback" not in out + err and WRONG not in out + err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("error: "), err
    return lines[-1]


def test_a_wrong_management_password_names_the_user_and_what_to_check(broker: Broker) -> None:
    spec = str(broker.spec(one_vhost_spec("        queues: [{name: q}]\n")))
    bad = wrong_password(broker.management_url)
    user = urlsplit(broker.management_url).username
    vars_ = ["--var", f"vhost={broker.vhost}", "--var", f"stack={broker.stack}"]
    for argv in (
        ["plan", spec, *vars_],
        ["apply", spec, "--auto-approve", *vars_],
        ["status", spec, *vars_],
        ["export", "--vhost", broker.vhost],
        ["dlq", "list", "--vhost", broker.vhost],
        ["stacks", "--vhost", broker.vhost],
    ):
        line = one_error(*invoke(*argv, "--management-url", bad))
        assert f"refused user {user!r}" in line and "--management-url" in line, argv
    code, _, err = invoke("plan", spec, *vars_, "--json", "--management-url", bad)
    assert code == 1 and "refused user" in json.loads(err)["error"]["message"]


def test_a_wrong_amqp_password_reads_the_same_through_every_client(
    broker: Broker, tmp_path: Path
) -> None:
    bad = wrong_password(broker.amqp_url)
    user = urlsplit(broker.amqp_url).username
    expected = f"refused the connection of user {user!r}"
    for argv in (
        ["dlq", "show", "q.parking", "--vhost", broker.vhost],
        ["dlq", "replay", "q.parking", "--all", "--vhost", broker.vhost],
        ["dlq", "purge", "q.parking", "--yes", "--vhost", broker.vhost],
    ):
        line = one_error(*invoke(*argv, "--url", bad, "--management-url", broker.management_url))
        assert expected in line and "check the user name and password" in line, argv

    # The worker, blocking and asyncio, as a process: refused at login, it stops at once.
    app = tmp_path / "refused_app.py"
    app.write_text(
        textwrap.dedent(
            """
            from rabbitry.consumer import App
            app = App()

            @app.handler("q")
            def handle(message):
                pass
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITRY_", "RABBITMQ_"))}
    for mode in ([], ["--sync"]):
        done = subprocess.run(
            [*PYTHON_CLI, "worker", "run", f"{app}:app", "--url", f"{bad}{broker.vhost}", *mode],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=tmp_path,
        )
        output = done.stdout + done.stderr
        assert done.returncode == 1, output
        assert "Traceback" not in output and WRONG not in output
        assert "reconnecting" not in output, output
        assert expected in done.stderr.strip().splitlines()[-1], output


def test_verbose_logs_each_management_call_with_secrets_masked(broker: Broker) -> None:
    spec = str(broker.spec(one_vhost_spec("        queues: [{name: q}]\n")))
    password = urlsplit(broker.management_url).password
    assert password
    plan = ["plan", spec, "--var", f"vhost={broker.vhost}", "--var", f"stack={broker.stack}"]
    plan += ["--management-url", broker.management_url]
    code, out, err = invoke(*plan, "-v")
    assert code == 0, err
    assert "GET /api/overview -> 200" in err
    assert "/api/definitions" in err or "/api/queues" in err
    assert f":{password}@" not in out + err and "Basic " not in err
    quiet = invoke(*plan)
    assert "GET /api/overview" not in quiet[2]


def test_export_leaves_users_out_unless_asked_and_names_the_connected_user(
    broker: Broker,
) -> None:
    broker.apply(
        one_vhost_spec(
            """
        queues: [{name: q}]
        permissions:
          - {user: "app-{{ vars.vhost }}", configure: ".*", write: ".*", read: ".*"}
    users:
      - {name: "app-{{ vars.vhost }}", password: "app-pw", tags: []}
"""
        )
    )
    connected = urlsplit(broker.management_url).username
    app_user = f"app-{broker.vhost}"
    code, out, err = invoke(
        "export", "--vhost", broker.vhost, "--management-url", broker.management_url
    )
    assert code == 0, err
    assert app_user not in out and "password_hash" not in out
    assert "left out" in err and app_user in err and "--users" in err
    code, out, err = invoke(
        "export", "--vhost", broker.vhost, "--users", "--management-url", broker.management_url
    )
    assert code == 0, err
    assert app_user in out and "password_hash" in out
    assert f"holds user {connected!r}, the one this command connected as" in err


@TLS_GROUP
def test_a_management_api_with_a_private_ca_needs_ca_file_or_insecure(
    tls_broker: BrokerContainer,  # noqa: F811
    certs: Certs,  # noqa: F811
    tmp_path: Path,
) -> None:
    container = tls_broker
    b = container.broker
    url = with_credentials(
        f"https://127.0.0.1:{container.host_port(MANAGEMENT_TLS_PORT)}", b.username, b.password
    )
    spec = tmp_path / "tls.yaml"
    spec.write_text("version: 1\nname: tls-stack\nvhosts:\n  - name: tls-vhost\n")
    base = ["plan", str(spec), "--management-url", url, "--url", b.amqp_url("/")]

    line = one_error(*invoke(*base))
    assert "certificate" in line and "--ca-file" in line and "--insecure" in line
    wrong_ca = one_error(*invoke(*base, "--ca-file", str(certs.other_ca)))
    assert "--ca-file" in wrong_ca

    for extra, env in (
        (["--ca-file", str(certs.ca)], None),
        ([], {"RABBITRY_CA_FILE": str(certs.ca)}),
        (["--insecure"], None),
        ([], {"RABBITRY_INSECURE": "1"}),
    ):
        code, out, err = invoke(*base, *extra, env=env)
        assert code == 0, (extra, env, err)
        assert "+ vhost tls-vhost" in out


@TLS_GROUP
def test_amqps_url_options_work_on_every_connection_the_cli_makes(
    tls_broker: BrokerContainer,  # noqa: F811
    certs: Certs,  # noqa: F811
) -> None:
    container = with_queue(tls_broker, "jobs.parking")
    management = with_credentials(
        container.broker.management_url, container.broker.username, container.broker.password
    )
    trusted = amqps_url(container, cacertfile=str(certs.ca))
    code, out, err = invoke(
        "dlq", "show", "jobs.parking", "--url", trusted, "--management-url", management
    )
    assert code == 0, err
    assert "jobs.parking: 0 message(s)" in out
    untrusted = amqps_url(container, cacertfile=str(certs.other_ca))
    line = one_error(*invoke("dlq", "show", "jobs.parking", "--url", untrusted))
    assert "TLS handshake" in line and "ca_file" in line
    missing = amqps_url(container, cacertfile="/no/such/ca.pem")
    line = one_error(*invoke("dlq", "show", "jobs.parking", "--url", missing))
    assert "cacertfile" in line and "/no/such/ca.pem" in line


def test_export_writes_parameter_passwords_as_environment_references(
    broker: Broker, tmp_path: Path
) -> None:
    secret = "Fed-S3cret%2Fpw"  # as written in the URI: percent-encoded
    broker.apply(
        one_vhost_spec(
            f"""
        parameters:
          - component: federation-upstream
            name: dc1
            value: {{uri: "amqp://fed:{secret}@dc1.example:5672", expires: 3600000}}
"""
        )
    )
    out_file = tmp_path / "exported.yaml"
    code, out, err = invoke(
        "export",
        "--vhost",
        broker.vhost,
        "--name",
        broker.stack,
        "-o",
        str(out_file),
        "--management-url",
        broker.management_url,
    )
    assert code == 0, err
    text = out_file.read_text()
    assert secret not in text + out + err and "Fed-S3cret" not in text + err
    variable = "RABBITRY_FEDERATION_UPSTREAM_DC1_URI_PASSWORD"
    assert "amqp://fed:{{ env." + variable + " }}@dc1.example:5672" in text
    assert variable in err and "(federation-upstream dc1 (uri))" in err
    assert out_file.stat().st_mode & 0o777 == 0o600

    revealed = invoke(
        "export",
        "--vhost",
        broker.vhost,
        "--reveal-secrets",
        "--management-url",
        broker.management_url,
    )
    assert secret in revealed[1]

    # The export applies back, with the password from the environment.
    before = broker.get("/parameters/federation-upstream/{vhost}/dc1")["value"]
    broker.http.delete(f"/vhosts/{quote(broker.vhost, safe='')}").raise_for_status()
    code, out, err = invoke(
        "apply",
        str(out_file),
        "--auto-approve",
        "--management-url",
        broker.management_url,
        "--url",
        broker.amqp_url,
        env={variable: secret},
    )
    assert code == 0, err
    assert broker.get("/parameters/federation-upstream/{vhost}/dc1")["value"] == before
    assert before["uri"] == f"amqp://fed:{secret}@dc1.example:5672"


def test_percent_encoded_credentials_work_on_amqp_and_http_alike(broker: Broker) -> None:
    user, password = f"odd-{broker.vhost}", "p@ss/w:rd%?#"
    broker.http.put(
        f"/users/{quote(user, safe='')}", json={"password": password, "tags": "administrator"}
    ).raise_for_status()
    broker.http.put(
        f"/permissions/{quote(broker.vhost, safe='')}/{quote(user, safe='')}",
        json={"configure": ".*", "write": ".*", "read": ".*"},
    ).raise_for_status()
    try:
        management = with_credentials(broker.management_url, user, password)
        amqp = with_credentials(broker.amqp_url, user, password)
        assert "%40" in management and "%2F" in management
        spec = str(broker.spec(one_vhost_spec("        queues: [{name: q.parking}]\n")))
        vars_ = ["--var", f"vhost={broker.vhost}", "--var", f"stack={broker.stack}"]
        code, out, err = invoke(
            "apply", spec, "--auto-approve", *vars_, "--management-url", management, "--url", amqp
        )
        assert code == 0, err
        code, out, err = invoke("dlq", "show", "q.parking", "--vhost", broker.vhost, "--url", amqp)
        assert code == 0 and "q.parking: 0 message(s)" in out, err
        assert password not in out + err
    finally:
        broker.http.delete(f"/users/{quote(user, safe='')}")
