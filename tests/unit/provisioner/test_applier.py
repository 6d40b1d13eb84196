"""The applier's pure parts: import chunks, their timeouts, broker errors people can act on."""

from __future__ import annotations

import httpx
import pytest

from rabbitry.management.client import ManagementClient
from rabbitry.provisioner.applier import import_chunks, import_timeout
from rabbitry.provisioner.planner import Action, Change
from rabbitry.topology import primitives as p


def creation(resource: p.Primitive) -> Change:
    return Change(Action.CREATE, resource.key("v"), desired=resource)


def test_chunks_hold_at_most_the_size_and_every_change_once() -> None:
    changes = [creation(p.Queue(name=f"q{i}")) for i in range(2005)]
    chunks = import_chunks(changes, 1000)
    assert [len(c) for c in chunks] == [1000, 1000, 5]
    assert [c for chunk in chunks for c in chunk] == changes  # plan order kept


def test_bindings_come_after_every_exchange_and_queue_they_may_join() -> None:
    changes = []
    for i in range(30):
        changes.append(creation(p.Exchange(name=f"e{i}")))
        changes.append(creation(p.Binding(source=f"e{i}", destination=f"q{i}")))
        changes.append(creation(p.Queue(name=f"q{i}")))
    chunks = import_chunks(changes, 7)
    flat = [c.desired for chunk in chunks for c in chunk]
    first_binding = next(i for i, r in enumerate(flat) if isinstance(r, p.Binding))
    assert all(isinstance(r, p.Binding) for r in flat[first_binding:])
    assert first_binding == 60 and len(flat) == 90


def test_parameters_then_policies_come_before_the_queues_they_apply_to() -> None:
    """A policy made in a vhost full of queues is matched against each of them (seconds a
    policy at 20,000 queues); made first, it costs nothing: the broker's own import order."""
    changes = [creation(p.Queue(name=f"q{i}")) for i in range(10)]
    changes.append(creation(p.Policy(name="cap", pattern="^q", definition={"max-length": 1})))
    changes.append(creation(p.Parameter(component="federation-upstream", name="up",
                                        value={"uri": "amqp://h"})))  # fmt: skip
    changes.append(creation(p.Exchange(name="e")))
    flat = [c.desired for chunk in import_chunks(changes, 3) for c in chunk]
    assert [type(r).__name__ for r in flat[:3]] == ["Parameter", "Policy", "Queue"]
    assert isinstance(flat[-1], p.Exchange)


def test_a_vhost_of_few_creations_takes_one_import() -> None:
    changes = [creation(p.Queue(name=f"q{i}")) for i in range(2005)]
    assert [len(c) for c in import_chunks(changes, 1000, whole=2005)] == [2005]
    assert [len(c) for c in import_chunks(changes, 1000, whole=2004)] == [1000, 1000, 5]
    assert import_chunks([], 1000, whole=10) == []


def test_a_chunk_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="import_chunk"):
        import_chunks([], 0)


def test_import_timeout_follows_the_chunk_size_and_the_previous_chunks_time() -> None:
    assert import_timeout(10) == 120.0
    assert import_timeout(50_000) == pytest.approx(2500.0)
    assert import_timeout(2000, previous=10.0) == 120.0
    assert import_timeout(2000, previous=45.0) == pytest.approx(180.0)


def test_a_known_broker_term_becomes_a_sentence_with_the_raw_answer_below() -> None:
    client = ManagementClient("http://ops:s3cret@localhost:15672")
    raw = '{"error":"bad_request","reason":"{badmatch,{error,{queue_supervisor_not_found,[]}}}"}'
    response = httpx.Response(400, text=raw)
    text = client._describe_failure("POST", "/definitions/v", response)
    first, second = text.split("\n")
    assert "two applies at once" in first and "apply again" in first
    assert "queue_supervisor_not_found" in second and "HTTP 400" in second
    assert "s3cret" not in text


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://[::1", "is not a URL"),
        ("http://ops:s3cret@host:abc", "is not a URL"),
        ("ops:s3cret@host:15672", "must start with http://"),
    ],
)
def test_a_malformed_management_url_is_a_clear_error_without_its_password(
    url: str, said: str
) -> None:
    from rabbitry.errors import BrokerError

    with pytest.raises(BrokerError, match=said) as bad:
        ManagementClient(url)
    assert "s3cret" not in str(bad.value)
