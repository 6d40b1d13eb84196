"""The test broker's and test vhost's URLs: both credentialed, so ``rabbitry.apply`` takes them
as they are, and ``repr`` still masks the password."""

from __future__ import annotations

from rabbitry.testing import Broker, TestVhost, broker_from_urls


def test_the_management_url_with_credentials_names_the_same_broker_with_its_user() -> None:
    broker = Broker(host="h", amqp_port=32771, management_port=32772, username="u", password="p@ss")
    assert broker.management_url == "http://h:32772"
    assert broker.management_url_with_credentials == "http://u:p%40ss@h:32772"
    vhost = TestVhost(name="rabbitry-test-1", broker=broker)
    assert vhost.management_url_with_credentials == broker.management_url_with_credentials
    assert vhost.amqp_url == "amqp://u:p%40ss@h:32771/rabbitry-test-1"
    assert "p@ss" not in repr(vhost) + repr(broker) and "p%40ss" not in repr(vhost) + repr(broker)


def test_a_management_api_behind_a_path_keeps_it() -> None:
    broker = broker_from_urls("amqp://u:p@h:5672/", "https://proxy.example/rabbit/")
    assert broker.management_url_with_credentials == "https://u:p@proxy.example:443/rabbit"
