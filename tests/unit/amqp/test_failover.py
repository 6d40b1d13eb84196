"""Failover across a cluster's nodes: URL lists, the walk over the nodes, masking (no broker)."""

from __future__ import annotations

import random

import pytest

from rabbitry.amqp.errors import ConnectionLost, FrameError
from rabbitry.amqp.reconnect import NodeWalk, Reconnect
from rabbitry.amqp.settings import Backoff, ConnectionSettings, Node, NodeOrder
from rabbitry.errors import BrokerError
from rabbitry.uri import mask_uri, split_uris
from tests.unit.amqp.giving_up import error_on_giving_up

THREE = "amqp://app:s3cret@r1:5672/shop,amqp://app:s3cret@r2:5673/shop,amqp://app:s3cret@r3/shop"


def cluster(order: str = "in-order", **backoff: float | None) -> ConnectionSettings:
    return ConnectionSettings.from_url(
        THREE, node_order=order, backoff=Backoff(jitter=0, **backoff)
    )


# -- URL lists --------------------------------------------------------------------------------


def test_a_comma_splits_only_where_a_new_url_begins() -> None:
    assert split_uris(THREE) == [
        "amqp://app:s3cret@r1:5672/shop",
        "amqp://app:s3cret@r2:5673/shop",
        "amqp://app:s3cret@r3/shop",
    ]
    assert split_uris("amqp://u:pa,ss@h/v?connection_name=a,b") == [
        "amqp://u:pa,ss@h/v?connection_name=a,b"
    ]
    assert split_uris(" amqp://a , amqps://b ,") == ["amqp://a", "amqps://b"]


def test_one_url_gives_the_settings_it_always_gave() -> None:
    one = ConnectionSettings.from_url("amqp://app:s3cret@r1:5672/shop")
    assert one.nodes == ()
    assert one.addresses == (Node("r1", 5672),)
    assert one.at(Node("r1", 5672)) is one
    assert one.display == "amqp://app@r1:5672/shop"


def test_several_urls_become_the_nodes_of_one_settings() -> None:
    settings = cluster()
    assert settings.addresses == (Node("r1", 5672), Node("r2", 5673), Node("r3", 5672))
    assert (settings.host, settings.port, settings.vhost) == ("r1", 5672, "shop")
    assert settings.display == "amqp://app@r1:5672,r2:5673,r3:5672/shop"
    assert "s3cret" not in repr(settings)


def test_a_list_and_a_comma_separated_string_are_the_same() -> None:
    listed = ConnectionSettings.from_url(split_uris(THREE), node_order="in-order")
    assert listed.addresses == cluster().addresses


def test_the_settings_of_one_node_name_that_node_only() -> None:
    node = cluster().at(Node("r2", 5673))
    assert (node.host, node.port, node.server_hostname, node.nodes) == ("r2", 5673, "r2", ())
    assert node.display == "amqp://app@r2:5673/shop"
    assert node.password == "s3cret" and node.vhost == "shop"


def test_urls_of_a_list_that_differ_in_more_than_the_host_are_refused_masked() -> None:
    with pytest.raises(BrokerError) as exc:
        ConnectionSettings.from_url("amqp://app:s3cret@r1/shop,amqp://ops:other@r2/audit")
    text = str(exc.value)
    assert "username, password, vhost" in text and "host and port" in text
    assert "s3cret" not in text and "other" not in text


def test_an_unknown_node_order_says_which_orders_exist() -> None:
    with pytest.raises(BrokerError, match="'shuffle' or 'in-order'"):
        ConnectionSettings.from_url(THREE, node_order="random")


def test_every_password_of_a_list_is_masked() -> None:
    assert mask_uri(THREE) == (
        "amqp://app:***@r1:5672/shop,amqp://app:***@r2:5673/shop,amqp://app:***@r3/shop"
    )


# -- the walk ---------------------------------------------------------------------------------


def test_in_order_walks_the_nodes_as_given_and_wraps_around() -> None:
    walk = NodeWalk(cluster())
    seen = [walk.current.host]
    seen += [walk.advance().host for _ in range(3)]
    assert seen == ["r1", "r2", "r3", "r1"]


def test_shuffle_draws_one_order_per_client_from_the_random_source() -> None:
    settings = cluster("shuffle")
    orders = {NodeWalk(settings, random.Random(seed)).order for seed in range(20)}
    assert len(orders) > 1
    assert all(sorted(order, key=str) == list(settings.addresses) for order in orders)
    assert settings.node_order is NodeOrder.SHUFFLE


def test_a_failed_node_hands_over_to_the_next_at_once_and_a_full_round_backs_off() -> None:
    retry = Reconnect(cluster(initial=0.5, give_up_after=None), now=0.0)
    targets, pauses = [], []
    for i in range(6):
        targets.append(retry.target.host)
        pauses.append(retry.failed(ConnectionRefusedError("refused"), now=float(i)))
    assert targets == ["r1", "r2", "r3", "r1", "r2", "r3"]
    assert pauses == [0.0, 0.0, 0.5, 0.0, 0.0, 1.0]
    assert retry.attempt == 2 and retry.failures == 6


def test_a_rule_of_one_round_gives_up_when_the_last_node_failed_instead_of_pausing() -> None:
    retry = Reconnect(cluster(initial=5.0, give_up_after=None), now=0.0, rounds=1)
    assert [retry.failed(ConnectionRefusedError("refused"), now=0.0) for _ in range(2)] == [0, 0]
    with pytest.raises(ConnectionLost, match="r1:5672,r2:5673,r3:5672/shop, every node tried"):
        retry.failed(ConnectionRefusedError("refused"), now=0.0)


def test_after_a_lost_connection_the_lost_node_is_tried_last() -> None:
    settings = cluster()
    walk = NodeWalk(settings)
    assert walk.current.host == "r1"  # connected there, then it went away
    retry = Reconnect(settings, now=0.0, walk=walk, after_loss=True)
    assert retry.target.host == "r2"
    retry.failed(OSError("refused"), now=0.0)
    retry.failed(OSError("refused"), now=0.0)
    assert retry.target.host == "r1"


def test_the_walk_is_shared_across_outages() -> None:
    settings = cluster()
    walk = NodeWalk(settings)
    Reconnect(settings, now=0.0, walk=walk, after_loss=True)
    assert Reconnect(settings, now=1.0, walk=walk, after_loss=True).target.host == "r3"


def test_giving_up_names_every_node() -> None:
    error = error_on_giving_up(cluster(give_up_after=5.0), started=0.0, failed=1.0, gave_up=6.0)
    assert "amqp://app@r1:5672,r2:5673,r3:5672/shop" in str(error)


def test_with_one_node_the_back_off_is_what_it_was() -> None:
    one = ConnectionSettings.from_url(
        "amqp://app:s3cret@r1/shop", backoff=Backoff(jitter=0, initial=0.1, give_up_after=None)
    )
    retry = Reconnect(one, now=0.0, after_loss=True)
    pauses = [retry.failed(OSError("refused"), now=float(i)) for i in range(3)]
    assert pauses == [pytest.approx(0.1), pytest.approx(0.2), pytest.approx(0.4)]
    assert retry.target is one


def test_a_node_answering_garbage_hands_over_and_ends_the_outage_when_it_does_again() -> None:
    retry = Reconnect(cluster(initial=0.5, give_up_after=None), now=0.0)
    garbage = FrameError("r1:5672 sent bytes that are no AMQP 0-9-1 frame")
    assert retry.failed(garbage, now=0.0) == 0.0  # r1: the next node at once
    assert retry.target.host == "r2"
    retry.failed(OSError("refused"), now=0.0)
    assert retry.failed(OSError("refused"), now=0.0) == 0.5  # r3: a full round, a pause
    assert retry.target.host == "r1"
    with pytest.raises(FrameError) as caught:
        retry.failed(garbage, now=1.0)
    assert caught.value is garbage


def test_with_one_node_garbage_ends_the_outage_at_once() -> None:
    one = ConnectionSettings.from_url("amqp://app:s3cret@r1/shop")
    garbage = FrameError("r1:5672 sent bytes that are no AMQP 0-9-1 frame")
    with pytest.raises(FrameError):
        Reconnect(one, now=0.0).failed(garbage, now=0.0)
