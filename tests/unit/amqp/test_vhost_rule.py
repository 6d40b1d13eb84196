"""The one rule of URL and vhost every client follows (``url_for_vhost``), and the clients that
follow it: the publishers (``from_spec`` included), the workers and the Spark sink."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rabbitry.amqp.settings import (
    ConnectionSettings,
    named_vhost,
    settings_for_vhost,
    url_for_vhost,
)
from rabbitry.consumer.app import App
from rabbitry.consumer.engine import vhost_parts, worker_settings
from rabbitry.errors import BrokerError, RabbitryError
from rabbitry.publisher import AsyncPublisher, Publisher
from rabbitry.spark.options import SinkOptionError, SinkOptions

SHOP_SPEC = """
version: 1
vhosts:
  - name: shop
    queues:
      - name: orders
"""

TWO_VHOSTS = """
version: 1
vhosts:
  - name: shop
    queues:
      - name: orders
  - name: billing
    queues:
      - name: invoices
"""


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("amqp://u:p@h:5672", None),
        ("amqp://u:p@h:5672/", None),
        ("amqp://u:p@h:5672/%2F", "/"),
        ("amqp://u:p@h/shop", "shop"),
        ("amqp://u:p@h/a%2Fb?heartbeat=5", "a/b"),
        ("amqp://u:p@a,amqp://u:p@b/shop", "shop"),
    ],
)
def test_the_vhost_a_url_names_is_its_path_and_none_without_one(
    url: str, named: str | None
) -> None:
    assert named_vhost(url) == named


def test_a_url_naming_no_vhost_takes_the_one_asked_for() -> None:
    assert url_for_vhost("amqp://u:p@h:5672", "shop") == "amqp://u:p@h:5672/shop"
    assert url_for_vhost("amqp://u:p@h:5672/?heartbeat=5", "a/b") == (
        "amqp://u:p@h:5672/a%2Fb?heartbeat=5"
    )
    assert url_for_vhost("amqp://u:p@a,amqp://u:p@b:5673/", "shop") == (
        "amqp://u:p@a/shop,amqp://u:p@b:5673/shop"
    )


def test_a_url_naming_the_vhost_asked_for_stays_as_it_is() -> None:
    assert url_for_vhost("amqp://u:p@h/shop", "shop") == "amqp://u:p@h/shop"
    assert url_for_vhost("amqp://u:p@h/%2F", "/") == "amqp://u:p@h/%2F"


def test_nothing_asked_for_keeps_the_url_and_no_url_is_the_local_broker() -> None:
    assert url_for_vhost("amqp://u:p@h/%2F", None) == "amqp://u:p@h/%2F"
    assert ConnectionSettings.from_url(url_for_vhost(None, None)).vhost == "/"
    local = ConnectionSettings.from_url(url_for_vhost(None, "shop"))
    assert (local.host, local.port, local.vhost) == ("localhost", 5672, "shop")


def test_a_url_naming_another_vhost_is_an_error_naming_both_with_the_password_masked() -> None:
    with pytest.raises(BrokerError) as caught:
        url_for_vhost("amqp://app:s3cret@h:5672/%2F", "shop")
    message = str(caught.value)
    assert "names vhost '/'" in message and "vhost 'shop' was asked for" in message
    assert "s3cret" not in message and "amqp://app:***@h:5672/%2F" in message
    assert "/shop" in message  # what to write instead


def test_ready_settings_name_their_vhost() -> None:
    settings = ConnectionSettings.from_url("amqp://u:p@h/shop")
    assert settings_for_vhost(settings, "shop") is settings
    assert settings_for_vhost(settings, None) is settings
    with pytest.raises(BrokerError, match=r"name vhost 'shop'.*'billing' was asked for"):
        settings_for_vhost(settings, "billing")


@pytest.mark.parametrize("cls", [Publisher, AsyncPublisher])
def test_publishers_follow_the_rule(cls: type[Publisher] | type[AsyncPublisher]) -> None:
    assert cls("amqp://u:p@h:5672", vhost="shop").settings.vhost == "shop"
    assert cls("amqp://u:p@h:5672/shop", vhost="shop").settings.vhost == "shop"
    assert cls("amqp://u:p@h:5672/%2F").settings.vhost == "/"
    with pytest.raises(BrokerError, match="names vhost '/'"):
        cls("amqp://u:p@h:5672/%2F", vhost="shop")


def test_from_spec_refuses_a_url_naming_another_vhost_than_the_one_asked_for(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SHOP_SPEC)
    with pytest.raises(BrokerError, match=r"names vhost '/'.*'shop' was asked for"):
        Publisher.from_spec(spec, vhost="shop", url="amqp://u:p@h:5672/%2F")
    # the spec's one vhost is the one asked for when vhost= is not given
    assert Publisher.from_spec(spec, url="amqp://u:p@h:5672").settings.vhost == "shop"
    assert Publisher.from_spec(spec, url="amqp://u:p@h:5672/shop").settings.vhost == "shop"
    with pytest.raises(RabbitryError, match="vhost '/' is not in the topology"):
        Publisher.from_spec(spec, url="amqp://u:p@h:5672/%2F")


def test_from_spec_without_a_url_takes_the_specs_broker_as_workers_do(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("broker:\n  url: amqp://app:s3cret@rabbit.internal:5673\n" + SHOP_SPEC)
    settings = Publisher.from_spec(spec).settings
    assert settings.display == "amqp://app@rabbit.internal:5673/shop"
    assert settings.display == worker_settings(App(spec), App(spec).url, {}).display
    # a url= given wins over the spec's
    assert Publisher.from_spec(spec, url="amqp://u:p@h:5672").settings.display == (
        "amqp://u@h:5672/shop"
    )


def test_workers_follow_the_rule(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SHOP_SPEC)
    app = App(spec)
    assert worker_settings(app, "amqp://u:p@h:5672", {}).vhost == "shop"
    assert worker_settings(app, None, {}).vhost == "shop"  # localhost, the spec's vhost
    with pytest.raises(BrokerError, match=r"names vhost '/'.*'shop' was asked for"):
        worker_settings(app, "amqp://u:p@h:5672/%2F", {})


def test_a_worker_of_several_vhosts_needs_a_url_naming_none(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(TWO_VHOSTS)
    app = App(spec)
    app.add("orders", lambda m: None)
    app.add("invoices", lambda m: None)
    parts = vhost_parts(app, "amqp://u:p@h:5672", {})
    assert sorted(s.vhost for _, s in parts) == ["billing", "shop"]
    with pytest.raises(BrokerError, match=r"names vhost 'shop'.*'billing' was asked for"):
        vhost_parts(app, "amqp://u:p@h:5672/shop", {})


def test_the_spark_sink_follows_the_rule() -> None:
    given = {"url": "amqp://u:p@h:5672", "vhost": "shop", "exchange": "x"}
    assert SinkOptions.parse(given, {}).url == "amqp://u:p@h:5672/shop"
    assert SinkOptions.parse(given, {}).url_vhost == "shop"
    with pytest.raises(SinkOptionError, match=r"option vhost: .*names vhost '/'"):
        SinkOptions.parse({**given, "url": "amqp://u:s3cret@h:5672/%2F"}, {})


def test_rabbitry_worker_run_refuses_a_url_naming_another_vhost_before_connecting(
    tmp_path: Path,
) -> None:
    (tmp_path / "spec.yaml").write_text(SHOP_SPEC)
    (tmp_path / "shop_app.py").write_text(
        "from pathlib import Path\n"
        "from rabbitry.consumer import App\n"
        "app = App(Path(__file__).with_name('spec.yaml'))\n"
        "app.add('orders', lambda m: None)\n"
    )
    url = "amqp://u:s3cret@127.0.0.1:1/%2F"  # nothing listens there: refused before any connect
    # a process of its own, bounded: a worker that went on would retry connecting for ever
    command = ["worker", "run", f"{tmp_path / 'shop_app.py'}:app", "--url", url]
    done = subprocess.run(
        [sys.executable, "-c", "from rabbitry.cli import main; main()", *command],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "names vhost '/'" in last and "'shop'" in last
    assert "s3cret" not in done.stdout + done.stderr


@pytest.mark.parametrize("command", [["purge", "work.parking", "--yes"], ["list"]])
def test_the_dlq_tools_refuse_a_vhost_other_than_the_one_their_url_names(
    command: list[str],
) -> None:
    from click.testing import CliRunner

    from rabbitry.cli import cli

    url = "amqp://app:s3cret@127.0.0.1:1/shop"
    args = ["dlq", *command, "--url", url, "--management-url", "http://app:s3cret@127.0.0.1:1"]
    result = CliRunner().invoke(cli, [*args, "--vhost", "billing"])
    assert result.exit_code == 1
    assert "names vhost 'shop', but vhost 'billing' was asked for" in result.output
    assert "s3cret" not in result.output


def test_the_dlq_tools_act_on_the_vhost_their_url_names_without_vhost() -> None:
    from rabbitry.cli.dlq import lot_vhost
    from rabbitry.management.endpoints import Endpoints

    def endpoints(url: str) -> Endpoints:
        return Endpoints(url, "http://127.0.0.1:15672", True)

    assert lot_vhost(endpoints("amqp://u:p@h/shop"), None) == "shop"
    assert lot_vhost(endpoints("amqp://u:p@h/"), None) == "/"
    assert lot_vhost(endpoints("amqp://u:p@h"), "billing") == "billing"
    assert lot_vhost(endpoints("amqp://u:p@h/shop"), "shop") == "shop"
