"""A plan says exactly how many messages a replace or a delete puts at stake, right after they
were published: the count is asked of the queue over AMQP, not read from the management
statistics, which lag by seconds. Without AMQP the plan still works and says its count may lag.
"""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner, Result

from rabbitry.cli import cli
from rabbitry.publisher import Publisher
from tests.integration.conftest import Broker, one_vhost_spec

pytestmark = pytest.mark.broker

MESSAGES = 20_000
CLASSIC = one_vhost_spec("        queues:\n          - {name: jobs, type: classic}\n")
QUORUM = one_vhost_spec("        queues:\n          - {name: jobs, type: quorum}\n")
EMPTY = one_vhost_spec("        queues: []\n")


def fill(broker: Broker, queue: str, count: int) -> None:
    with Publisher(broker.vhost_amqp_url) as publisher:
        done = publisher.publish_many((b"x" for _ in range(count)), routing_key=queue)
    assert all(d.ok for d in done)


def plan_json(broker: Broker, spec: str, *extra: str) -> dict[str, object]:
    result = broker.run("plan", str(broker.spec(spec, "next.yaml")), "--json", *extra)
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def change_of(plan: dict[str, object], action: str) -> dict[str, object]:
    changes = plan["changes"]
    assert isinstance(changes, list)
    (change,) = [c for c in changes if c["action"] == action and c["kind"] == "queue"]
    return dict(change)


@pytest.mark.versions
def test_a_replace_counts_every_message_just_published(broker: Broker) -> None:
    broker.apply(CLASSIC)
    started = time.monotonic()
    fill(broker, "jobs", MESSAGES)
    replace = change_of(plan_json(broker, QUORUM), "replace")
    assert time.monotonic() - started < 30
    assert replace["messages"] == MESSAGES and replace["messages_source"] == "amqp"
    text = broker.run("plan", str(broker.spec(QUORUM, "next.yaml")))
    assert f"{MESSAGES} message(s)" in text.stdout and "may lag" not in text.stdout


def test_a_pruned_queue_shows_its_exact_count(broker: Broker) -> None:
    broker.apply(CLASSIC)
    fill(broker, "jobs", 1234)
    delete = change_of(plan_json(broker, EMPTY), "delete")
    assert delete["messages"] == 1234 and delete["messages_source"] == "amqp"


@pytest.mark.versions
def test_without_amqp_the_plan_counts_from_statistics_and_says_so(broker: Broker) -> None:
    broker.apply(CLASSIC)
    fill(broker, "jobs", 10)
    closed = "amqp://guest:secret-pw@127.0.0.1:1/"
    spec = str(broker.spec(QUORUM, "next.yaml"))

    def plan(*extra: str) -> Result:
        argv = ["plan", spec, "--management-url", broker.management_url, "--url", closed]
        argv += ["--var", f"vhost={broker.vhost}", "--var", f"stack={broker.stack}"]
        return CliRunner().invoke(cli, [*argv, *extra])

    result = plan("--json")
    assert result.exit_code == 0, result.output
    replace = change_of(json.loads(result.stdout), "replace")
    assert replace["messages_source"] == "statistics"
    text = plan()
    assert text.exit_code == 0, text.output
    assert "AMQP unreachable: cannot count the messages" in text.stdout
    assert "secret-pw" not in text.output


def test_apply_without_amqp_refuses_a_migration_before_changing_anything(broker: Broker) -> None:
    broker.apply(CLASSIC)
    fill(broker, "jobs", 10)
    spec = str(broker.spec(QUORUM, "next.yaml"))
    argv = ["apply", spec, "--auto-approve", "--allow-replace", "--force"]
    argv += ["--management-url", broker.management_url, "--url", "amqp://guest:guest@127.0.0.1:1/"]
    argv += ["--var", f"vhost={broker.vhost}", "--var", f"stack={broker.stack}"]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 1, result.output
    assert "nothing was applied" in result.stderr and "needs exact message counts" in result.stderr
    queue = broker.get("/queues/{vhost}/jobs")
    assert queue["type"] == "classic" and broker.count("jobs") == 10
    assert broker.get("/queues/{vhost}/jobs.rabbitry-migration") is None
