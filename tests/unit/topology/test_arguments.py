"""Every known queue/exchange argument and policy key is type-checked; unknown ones suggest."""

from __future__ import annotations

from typing import Any

import pytest

from rabbitry.topology.spec.arguments import (
    QUEUE_ARGUMENT_TYPES,
    ExchangeArguments,
    OperatorPolicyDefinition,
    PolicyDefinition,
    QueueArguments,
    aliases,
)

from .conftest import load, one_problem, vhost_spec

# (argument, accepted value, value the broker gets, rejected value, words of the error)
QUEUE_ARGUMENT_CASES: list[tuple[str, Any, Any, Any, str]] = [
    ("x-message-ttl", "30s", 30_000, "soon", "expected a duration"),
    ("x-expires", "1h", 3_600_000, 0, "must be at least 1"),
    ("x-max-length", 10, 10, -1, "must be at least 0"),
    ("x-max-length-bytes", "10MB", 10_000_000, "10 parsecs", "expected a size"),
    ("x-overflow", "reject-publish", "reject-publish", "drop", "did you mean 'drop-head'"),
    ("x-dead-letter-exchange", "dlx", "dlx", ["dlx"], "expected a string"),
    ("x-dead-letter-routing-key", "dead", "dead", {"a": 1}, "expected a string"),
    ("x-dead-letter-strategy", "at-least-once", "at-least-once", "once", "expected 'at-most"),
    ("x-max-priority", 10, 10, 256, "must be at most 255"),
    ("x-single-active-consumer", True, True, "sometimes", "expected true or false"),
    ("x-delivery-limit", 5, 5, "five", "expected an integer"),
    ("x-quorum-initial-group-size", 3, 3, 0, "must be at least 1"),
    ("x-queue-mode", "lazy", "lazy", "eager", "expected 'default' or 'lazy'"),
    ("x-queue-version", 2, 2, 3, "expected 1 or 2"),
    ("x-queue-leader-locator", "balanced", "balanced", "nearest", "expected 'client-local'"),
    ("x-queue-master-locator", "min-masters", "min-masters", "max", "expected 'client-local'"),
    ("x-max-age", "7d", "7D", "7 days", "expected an age"),
    ("x-stream-max-segment-size-bytes", "100MiB", 100 * 1024**2, "4GB", "at most 3000000000"),
    ("x-initial-cluster-size", 3, 3, 0, "must be at least 1"),
    ("x-stream-filter-size-bytes", 32, 32, 8, "must be at least 16"),
    ("x-consumer-timeout", "30m", 1_800_000, "-5s", "expected a duration"),
    ("x-delayed-retry-type", "failed", "failed", "some", "expected 'disabled'"),
    ("x-delayed-retry-min", "2s", 2_000, 0, "must be at least 1"),
    ("x-delayed-retry-max", "1m", 60_000, "later", "expected a duration"),
    ("x-consumer-disconnected-timeout", "1m", 60_000, "-1s", "expected a duration"),
]


def test_every_queue_argument_has_a_case_and_a_type_table_entry() -> None:
    assert {c[0] for c in QUEUE_ARGUMENT_CASES} == set(aliases(QueueArguments))
    assert set(QUEUE_ARGUMENT_TYPES) == set(aliases(QueueArguments))


def _queue_spec(key: str, value: Any) -> str:
    import json

    return vhost_spec(
        f"""\
        queues:
          - name: q
            arguments:
              {key}: {json.dumps(value)}
        """
    )


@pytest.mark.parametrize(("key", "good", "stored", "bad", "words"), QUEUE_ARGUMENT_CASES)
def test_queue_argument_types(key: str, good: Any, stored: Any, bad: Any, words: str) -> None:
    spec = load(_queue_spec(key, good))
    assert spec.vhosts[0].queues[0].arguments.as_broker_dict() == {key: stored}
    problem = one_problem(_queue_spec(key, bad))
    assert problem.path == f"vhosts[0].queues[0].arguments.{key}"
    assert problem.line == 7
    assert words in problem.message, problem.message


def test_x_queue_type_argument_points_at_type() -> None:
    problem = one_problem(_queue_spec("x-queue-type", "quorum"))
    assert problem.path == "vhosts[0].queues[0].arguments.x-queue-type"
    assert "`type: classic|quorum|stream`" in problem.message


def test_unknown_argument_suggests_and_mentions_escape_hatch() -> None:
    problem = one_problem(_queue_spec("x-message-tll", 5))
    assert problem.message.startswith("unknown key 'x-message-tll' (did you mean 'x-message-ttl'?)")
    assert "unchecked_arguments" in problem.message


def test_policy_key_used_as_argument_suggests_x_name() -> None:
    problem = one_problem(_queue_spec("max-length", 5))
    assert "did you mean 'x-max-length'?" in problem.message


def test_unchecked_arguments_pass_through() -> None:
    spec = load(
        vhost_spec(
            """\
            queues:
              - name: q
                unchecked_arguments: {x-plugin-thing: [1, 2]}
            """
        )
    )
    assert spec.vhosts[0].queues[0].unchecked_arguments == {"x-plugin-thing": [1, 2]}


def test_exchange_arguments() -> None:
    spec = load(
        vhost_spec(
            """\
            exchanges:
              - name: e
                type: x-consistent-hash
                arguments: {hash-header: tenant}
            """
        )
    )
    assert spec.vhosts[0].exchanges[0].arguments.as_broker_dict() == {"hash-header": "tenant"}
    assert set(aliases(ExchangeArguments)) == {"hash-header", "hash-property"}


def test_alternate_exchange_argument_points_at_field() -> None:
    problem = one_problem(
        vhost_spec(
            """\
            exchanges:
              - name: e
                arguments: {alternate-exchange: ae}
            """
        )
    )
    assert "alternate_exchange" in problem.message
    assert problem.path == "vhosts[0].exchanges[0].arguments.alternate-exchange"


def _policy_spec(key: str, value: Any, kind: str = "policies") -> str:
    import json

    return vhost_spec(
        f"""\
        {kind}:
          - name: p
            pattern: .*
            definition:
              {key}: {json.dumps(value)}
        """
    )


POLICY_ONLY_CASES: list[tuple[str, Any, Any, Any]] = [
    ("alternate-exchange", "ae", "ae", {"a": 1}),
    ("federation-upstream", "up", "up", []),
    ("federation-upstream-set", "all", "all", []),
    ("target-group-size", 3, 3, 0),
    ("ha-mode", "exactly", "exactly", "some"),
    ("ha-params", 2, 2, "two"),
    ("ha-sync-mode", "automatic", "automatic", "x"),
    ("ha-sync-batch-size", 100, 100, 0),
    ("ha-promote-on-shutdown", "always", "always", "x"),
    ("ha-promote-on-failure", "when-synced", "when-synced", "x"),
]
"""(key, accepted value, value the broker gets, rejected value) of the policy keys that are not
queue arguments too."""

POLICY_CASES = [
    (key.removeprefix("x-"), good, stored, bad)
    for key, good, stored, bad, _ in QUEUE_ARGUMENT_CASES
    if key.removeprefix("x-") in aliases(PolicyDefinition)
] + POLICY_ONLY_CASES
"""Every policy key's case: one that is a queue argument too (``message-ttl``, ``x-message-ttl``)
takes the same values as the argument."""


def test_every_policy_key_has_a_case() -> None:
    assert {c[0] for c in POLICY_CASES} == set(aliases(PolicyDefinition))


@pytest.mark.parametrize(("key", "good", "stored", "bad"), POLICY_CASES)
def test_policy_key_types(key: str, good: Any, stored: Any, bad: Any) -> None:
    spec = load(_policy_spec(key, good))
    assert spec.vhosts[0].policies[0].definition.as_broker_dict() == {key: stored}
    problem = one_problem(_policy_spec(key, bad))
    assert problem.path == f"vhosts[0].policies[0].definition.{key}"
    assert problem.line == 8


def test_ha_params_accepts_node_list() -> None:
    spec = load(_policy_spec("ha-params", ["rabbit@a", "rabbit@b"]))
    assert spec.vhosts[0].policies[0].definition.ha_params == ["rabbit@a", "rabbit@b"]


def test_unknown_policy_key_suggests() -> None:
    problem = one_problem(_policy_spec("message_ttl", 5))
    assert "did you mean 'message-ttl'?" in problem.message
    assert "unchecked_definition" in problem.message
    problem = one_problem(_policy_spec("x-message-ttl", 5))
    assert "did you mean 'message-ttl'?" in problem.message


def test_operator_policies_accept_only_caps() -> None:
    assert "overflow" not in aliases(OperatorPolicyDefinition)
    problem = one_problem(_policy_spec("dead-letter-exchange", "dlx", "operator_policies"))
    assert problem.path == "vhosts[0].operator_policies[0].definition.dead-letter-exchange"
    spec = load(_policy_spec("max-length", 10, "operator_policies"))
    assert spec.vhosts[0].operator_policies[0].definition.as_broker_dict() == {"max-length": 10}


def test_misplaced_policy_key() -> None:
    problem = one_problem(_policy_spec("queue-type", "quorum"))
    assert "cannot change a queue's type" in problem.message
