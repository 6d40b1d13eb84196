"""The sink's options: parsed, typed, checked, and the URL's password never shown."""

from __future__ import annotations

import pytest

from rabbitry.spark.options import SinkOptionError, SinkOptions

URL = "amqp://app:s3cret@rabbit:5672/orders"


def parse(env: dict[str, str] | None = None, **options: str) -> SinkOptions:
    return SinkOptions.parse(options, env or {})


def test_defaults_and_types() -> None:
    o = parse(
        url=URL,
        exchange="events",
        routing_key_column="kind",
        header_columns="a, b",
        window="1024",
        mandatory="true",
        persistent="false",
        priority="5",
        expiration="60000",
        confirm_timeout="2.5",
    )
    assert (o.exchange, o.routing_key_column, o.header_columns) == ("events", "kind", ("a", "b"))
    assert (o.window, o.mandatory, o.persistent, o.priority, o.expiration) == (
        1024,
        True,
        False,
        5,
        60000,
    )
    assert o.confirm_timeout == 2.5
    assert parse(url=URL, spec="s.yaml", spec_vars="vhost=shop, stack = a=b").spec_vars == (
        ("vhost", "shop"),
        ("stack", "a=b"),
    )
    assert o.check_exchange is True
    assert o.url_vhost == "orders"
    assert o.columns == {"kind": "routing_key_column", "a": "header_columns", "b": "header_columns"}


def test_rows_are_published_mandatory_unless_told_otherwise() -> None:
    # an unroutable row fails its task rather than be confirmed and dropped by the broker
    assert parse(url=URL, exchange="events").mandatory is True
    assert parse(url=URL, exchange="events", mandatory="false").mandatory is False


def test_option_names_are_case_insensitive_and_spark_options_pass() -> None:
    o = SinkOptions.parse({"URL": URL, "Exchange": "x", "checkpointLocation": "/tmp/c"}, {})
    assert o.exchange == "x"


def test_unknown_option_suggests_the_close_one() -> None:
    with pytest.raises(SinkOptionError, match=r"'routingkey' \(did you mean 'routing_key'\?\)"):
        parse(url=URL, routingkey="x")


def test_password_is_never_in_repr_or_messages() -> None:
    o = parse(url=URL)
    assert "s3cret" not in repr(o)
    assert o.display_url == "amqp://app:***@rabbit:5672/orders"
    with pytest.raises(SinkOptionError) as err:
        parse(url="http://app:s3cret@rabbit/")
    assert "s3cret" not in str(err.value)
    assert "app:***@rabbit" in str(err.value)


def test_url_from_the_environment_and_password_from_another_variable() -> None:
    env = {"RABBITRY_URL": "amqp://app@rabbit/v", "BROKER_PW": "p@ss/word"}
    o = parse(env, password_env="BROKER_PW")
    assert o.url == "amqp://app:p%40ss%2Fword@rabbit/v"
    assert parse({"MY_URL": URL}, url_env="MY_URL").url == URL


def test_missing_url_says_where_to_put_it() -> None:
    with pytest.raises(SinkOptionError, match="set the environment variable RABBITRY_URL"):
        parse()
    with pytest.raises(SinkOptionError, match="BROKER_PW, which is not set"):
        parse(url=URL, password_env="BROKER_PW")
    with pytest.raises(SinkOptionError, match="url or url_env, not both"):
        parse({"X": URL}, url=URL, url_env="X")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mandatory": "maybe"}, "mandatory must be true or false, not 'maybe'"),
        ({"window": "0"}, "window must be between 1 and 65535, not 0"),
        ({"window": "lots"}, "window must be a whole number"),
        ({"priority": "300"}, "priority must be between 0 and 255"),
        ({"confirm_timeout": "-1"}, "confirm_timeout must be positive"),
        ({"routing_key": "a", "routing_key_column": "b"}, "not both"),
        ({"body_column": " "}, "body_column is empty"),
        ({"header_columns": "a,a"}, "names a column twice"),
        ({"delay_column": "d"}, "delay_column needs spec="),
        ({"delay_column": "d", "spec": "s.yaml", "exchange": "x"}, "leave out exchange"),
        ({"delays": "delay"}, "give both"),
        ({"spec_vars": "a=b"}, "give spec= too"),
        ({"spec": "s.yaml", "spec_vars": "a=b,c"}, "name=value pairs separated by commas, not 'c'"),
        ({"id_prefix": "p", "message_id_column": "id"}, "id_prefix or message_id_column"),
    ],
)
def test_bad_values_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(SinkOptionError, match=message):
        parse(url=URL, **options)


def test_a_clusters_urls_each_get_the_password_and_keep_the_first_vhost() -> None:
    env = {"RABBITRY_URL": "amqp://app@r1:5672/shop,amqp://app@r2:5672/shop", "PW": "s3cr,et"}
    o = parse(env, password_env="PW", node_order="in-order")
    assert o.url == "amqp://app:s3cr%2Cet@r1:5672/shop,amqp://app:s3cr%2Cet@r2:5672/shop"
    assert o.url_vhost == "shop" and o.node_order == "in-order"
    assert o.display_url == "amqp://app:***@r1:5672/shop,amqp://app:***@r2:5672/shop"


def test_a_bad_url_in_a_list_is_named_and_an_unknown_node_order_refused() -> None:
    with pytest.raises(SinkOptionError, match=r"'http://u:\*\*\*@r2' is not an amqp"):
        parse(url="amqp://u:pw@r1,http://u:pw@r2")
    with pytest.raises(SinkOptionError, match="node_order='random'"):
        parse(url="amqp://u:pw@r1", node_order="random")


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("cacertfile=/ca.pem&verify=verify_peer", "asks for TLS with cacertfile, verify"),
        ("ssl=true", "unknown option 'ssl'"),
        ("heartbeat=soon", "heartbeat='soon' must be a whole number"),
    ],
)
def test_the_urls_query_is_checked_on_the_driver_as_each_connection_reads_it(
    query: str, says: str
) -> None:
    with pytest.raises(SinkOptionError) as caught:
        parse(url=f"amqp://app:s3cret@rabbit:5672/orders?{query}")
    text = str(caught.value)
    assert "option url: AMQP URL 'amqp://app:***@rabbit:5672/orders?" in text
    assert says in text and "s3cret" not in text
    # the files a TLS URL names are read where it connects, not on the driver
    assert parse(url="amqps://app:s3cret@rabbit/orders?cacertfile=/on/executors.pem").url
