"""Semantic checks: every one reports the right path, line and severity, all at once."""

from __future__ import annotations

import pytest

from rabbitry.errors import SpecProblem
from rabbitry.topology import validate
from rabbitry.topology.spec.model import QueueSpec, Spec, VhostSpec

from .conftest import check, vhost_spec


def only(problems: list[SpecProblem], severity: str = "error") -> list[tuple[str, str]]:
    return [(p.path, p.message) for p in problems if p.severity == severity]


def paths(problems: list[SpecProblem], severity: str = "error") -> list[str]:
    return [p.path for p in problems if p.severity == severity]


def test_valid_spec_has_no_problems() -> None:
    problems = check(
        vhost_spec(
            """\
            exchanges:
              - {name: e, type: topic, alternate_exchange: ae}
              - {name: ae, type: fanout}
              - {name: dlx}
            queues:
              - name: q
                type: quorum
                arguments: {x-dead-letter-exchange: dlx, x-delivery-limit: 3}
              - {name: unrouted}
            bindings:
              - {source: e, destination: q, routing_key: a.*}
              - {source: ae, destination: unrouted}
              - {source: amq.topic, destination: e, destination_type: exchange}
            """
        )
    )
    assert problems == []


def test_duplicates_are_errors_at_the_second_declaration() -> None:
    problems = check(
        """\
        version: 1
        users: [{name: u}, {name: u}]
        vhosts:
          - name: v
            exchanges: [{name: e}, {name: e}]
            queues: [{name: q}, {name: q}]
            bindings:
              - {source: e, destination: q, routing_key: k}
              - {source: e, destination: q, routing_key: k}
            policies:
              - {name: p, pattern: a, definition: {max-length: 1}}
              - {name: p, pattern: b, definition: {max-length: 1}}
            permissions: [{user: u}, {user: u}]
            parameters:
              - {component: shovel, name: s, value: {}}
              - {component: shovel, name: s, value: {}}
          - name: v
        """
    )
    assert paths(problems) == [
        "users[1]",
        "vhosts[0].exchanges[1]",
        "vhosts[0].queues[1]",
        "vhosts[0].bindings[1]",
        "vhosts[0].policies[1]",
        "vhosts[0].permissions[1]",
        "vhosts[0].parameters[1]",
        "vhosts[1]",
    ]
    first = problems[0]
    assert first.message == "duplicate user 'u': already declared at users[0]"
    assert (first.file, first.line) == ("spec.yaml", 2)


def test_reserved_names() -> None:
    problems = check(vhost_spec("exchanges: [{name: amq.mine}]\nqueues: [{name: amq.q}]\n"))
    assert paths(problems) == ["vhosts[0].exchanges[0].name", "vhosts[0].queues[0].name"]


def test_exclusive_queue_is_rejected_with_an_explanation() -> None:
    problems = check(vhost_spec("queues:\n  - name: q\n    exclusive: true\n"))
    ((path, message),) = only(problems)
    assert path == "vhosts[0].queues[0].exclusive"
    assert "belongs to the connection" in message
    assert problems[0].line == 6


def test_quorum_and_stream_must_be_durable_and_not_auto_delete() -> None:
    problems = check(
        vhost_spec(
            """\
            queues:
              - {name: a, type: quorum, durable: false}
              - {name: b, type: stream, auto_delete: true}
            """
        )
    )
    assert paths(problems) == ["vhosts[0].queues[0].durable", "vhosts[0].queues[1].auto_delete"]
    assert "always durable" in problems[0].message


def test_vhost_default_queue_type_applies() -> None:
    problems = check(
        vhost_spec(
            """\
            default_queue_type: quorum
            queues:
              - {name: a, durable: false}
            """
        )
    )
    ((_, message),) = only(problems)
    assert "quorum queue (the vhost's default type)" in message


def test_arguments_must_suit_the_queue_type() -> None:
    problems = check(
        vhost_spec(
            """\
            queues:
              - name: quorum-with-priority
                type: quorum
                arguments: {x-max-priority: 5, x-overflow: reject-publish-dlx}
              - name: classic-with-delivery-limit
                arguments: {x-delivery-limit: 5, x-max-age: 1D}
              - name: stream-with-ttl
                type: stream
                arguments: {x-message-ttl: 1s, x-max-age: 1D}
            """
        )
    )
    assert only(problems) == [
        (
            "vhosts[0].queues[0].arguments.x-max-priority",
            "x-max-priority does not apply to a quorum queue; remove it: quorum queues"
            " (RabbitMQ 4.0+) deliver by the messages' priority property without"
            " x-max-priority, and every version refuses it on a quorum queue",
        ),
        (
            "vhosts[0].queues[0].arguments.x-overflow",
            "x-overflow reject-publish-dlx is not supported by a quorum queue; use drop-head "
            "or reject-publish",
        ),
        (
            "vhosts[0].queues[1].arguments.x-delivery-limit",
            "x-delivery-limit does not apply to a classic queue; it is valid for: quorum",
        ),
        (
            "vhosts[0].queues[1].arguments.x-max-age",
            "x-max-age does not apply to a classic queue; it is valid for: stream",
        ),
        (
            "vhosts[0].queues[2].arguments.x-message-ttl",
            "x-message-ttl does not apply to a stream queue; it is valid for: classic, quorum",
        ),
    ]
    assert [p.line for p in problems] == [7, 7, 9, 9, 12]


def test_dead_letter_routing_key_needs_exchange() -> None:
    problems = check(
        vhost_spec("queues:\n  - {name: q, arguments: {x-dead-letter-routing-key: k}}\n")
    )
    assert paths(problems) == ["vhosts[0].queues[0].arguments.x-dead-letter-routing-key"]


def test_default_exchange_is_a_valid_dead_letter_exchange() -> None:
    problems = check(
        vhost_spec(
            """\
            queues:
              - name: q
                arguments: {x-dead-letter-exchange: "", x-dead-letter-routing-key: q.dead}
              - name: q.dead
            """
        )
    )
    assert problems == []


# (a vhost's body, the paths of its errors, the paths of its warnings)
ERRORS_AND_WARNINGS = [
    pytest.param(
        """\
            exchanges: [{name: dlx}]
            queues:
              - name: no-overflow
                type: quorum
                arguments: {x-dead-letter-strategy: at-least-once, x-dead-letter-exchange: dlx}
              - name: wrong-overflow
                type: quorum
                arguments:
                  x-dead-letter-strategy: at-least-once
                  x-overflow: drop-head
                  x-dead-letter-exchange: dlx
              - name: fine
                type: quorum
                arguments:
                  x-dead-letter-strategy: at-least-once
                  x-overflow: reject-publish
                  x-dead-letter-exchange: dlx
              - name: no-dlx
                type: quorum
                arguments: {x-dead-letter-strategy: at-least-once, x-overflow: reject-publish}
              - name: overflow-from-policy
                type: quorum
                arguments: {x-dead-letter-strategy: at-least-once, x-dead-letter-exchange: dlx}
            policies:
              - name: p
                pattern: ^overflow-from-policy$
                definition: {overflow: reject-publish}
        """,
        ["vhosts[0].queues[1].arguments.x-dead-letter-strategy"],
        [
            "vhosts[0].queues[0].arguments.x-dead-letter-strategy",
            "vhosts[0].queues[3].arguments.x-dead-letter-strategy",
        ],
        id="at-least-once dead lettering",
    ),
    pytest.param(
        """\
            parameters:
              - {component: federation-upstream, name: up, value: {uri: "amqp://x"}}
            policies:
              - {name: a, pattern: x, definition: {federation-upstream: up}}
              - {name: b, pattern: y, definition: {federation-upstream: down}}
              - {name: c, pattern: z, definition: {federation-upstream-set: all}}
              - name: d
                pattern: w
                definition: {federation-upstream-set: s, federation-upstream: up}
        """,
        ["vhosts[0].policies[3].definition"],
        [
            "vhosts[0].policies[1].definition.federation-upstream",
            "vhosts[0].policies[3].definition.federation-upstream-set",
        ],
        id="federation references",
    ),
]


@pytest.mark.parametrize(("body", "errors", "warnings"), ERRORS_AND_WARNINGS)
def test_each_check_reports_errors_and_warnings_at_their_paths(
    body: str, errors: list[str], warnings: list[str]
) -> None:
    problems = check(vhost_spec(body))
    assert paths(problems) == errors
    assert paths(problems, "warning") == warnings


def test_dangling_references() -> None:
    problems = check(
        vhost_spec(
            """\
            exchanges:
              - {name: e, alternate_exchange: missing-ae}
            queues:
              - {name: q, arguments: {x-dead-letter-exchange: missing-dlx}}
            bindings:
              - {source: missing-source, destination: q}
              - {source: e, destination: missing-queue}
              - {source: e, destination: missing-ex, destination_type: exchange}
              - {source: "", destination: q}
              - {source: amq.direct, destination: q}
            policies:
              - name: p
                pattern: .*
                definition: {dead-letter-exchange: nope, alternate-exchange: amq.fanout}
            """
        )
    )
    assert paths(problems) == [
        "vhosts[0].bindings[0].source",
        "vhosts[0].bindings[1].destination",
        "vhosts[0].bindings[2].destination",
        "vhosts[0].bindings[3].source",
    ]
    # the broker takes an alternate or dead-letter exchange that does not exist (yet)
    undeclared = [p for p in problems if p.severity == "warning" and "not declared" in p.message]
    assert [(p.path, p.line) for p in undeclared] == [
        ("vhosts[0].exchanges[0].alternate_exchange", 5),
        ("vhosts[0].queues[0].arguments.x-dead-letter-exchange", 7),
        ("vhosts[0].policies[0].definition.dead-letter-exchange", 17),
    ]
    assert [p.line for p in problems if p.severity == "error"] == [9, 10, 11, 12]
    assert "dead-lettered messages are dropped until it exists" in undeclared[1].message


def test_permissions_and_users() -> None:
    problems = check(
        """\
        version: 1
        users: [{name: known, hashing_algorithm: rabbit_password_hashing_sha512}]
        vhosts:
          - name: v
            exchanges: [{name: d}, {name: t, type: topic}]
            permissions:
              - {user: known, configure: "("}
              - {user: stranger}
            topic_permissions:
              - {user: known, exchange: t}
              - {user: known, exchange: d}
              - {user: known, exchange: nowhere}
        """
    )
    assert paths(problems) == ["vhosts[0].permissions[0].configure"]
    assert paths(problems, "warning") == [
        "users[0].hashing_algorithm",
        "vhosts[0].permissions[1].user",
        "vhosts[0].topic_permissions[1].exchange",
        "vhosts[0].topic_permissions[2].exchange",
    ]


def test_policy_pattern_must_compile_and_definition_must_set_something() -> None:
    problems = check(
        vhost_spec(
            """\
            policies:
              - {name: bad, pattern: "[", definition: {max-length: 1}}
              - {name: empty, pattern: x}
            """
        )
    )
    assert paths(problems) == ["vhosts[0].policies[0].pattern", "vhosts[0].policies[1].definition"]
    assert problems[0].message.startswith("not a valid regular expression")


def test_policy_argument_overlap_warns_with_policy_queue_and_key() -> None:
    problems = check(
        vhost_spec(
            """\
            exchanges: [{name: dlx}]
            queues:
              - name: orders
                arguments: {x-message-ttl: 60s, x-dead-letter-exchange: dlx}
              - name: other
                arguments: {x-message-ttl: 60s}
            policies:
              - name: ttl
                pattern: ^orders$
                apply_to: queues
                definition: {message-ttl: 30s, dead-letter-exchange: dlx}
              - name: exchanges-only
                pattern: ^other$
                apply_to: exchanges
                definition: {message-ttl: 1s}
            """
        )
    )
    warnings = [p for p in problems if p.severity == "warning"]
    assert [(p.path, p.line) for p in warnings] == [
        ("vhosts[0].queues[0].arguments.x-message-ttl", 7),
        ("vhosts[0].queues[0].arguments.x-dead-letter-exchange", 7),
    ]
    ttl = warnings[0].message
    assert "policy 'ttl'" in ttl and "queue 'orders'" in ttl and "x-message-ttl" in ttl
    assert "smaller of the two" in ttl
    assert "argument wins" in warnings[1].message


def test_only_the_highest_priority_policy_counts() -> None:
    problems = check(
        vhost_spec(
            """\
            queues:
              - {name: q, arguments: {x-max-length: 5}}
            policies:
              - {name: low, pattern: q, priority: 1, definition: {max-length: 1}}
              - {name: high, pattern: q, priority: 2, definition: {expires: 1h}}
            """
        )
    )
    assert problems == []


def test_tied_policies_warn() -> None:
    problems = check(
        vhost_spec(
            """\
            queues: [{name: q}]
            policies:
              - {name: a, pattern: q, definition: {max-length: 1}}
              - {name: b, pattern: ., definition: {max-length: 2}}
            """
        )
    )
    assert paths(problems, "warning") == ["vhosts[0].queues[0].name"]
    assert "'a', 'b'" in problems[0].message


def test_exchange_checks() -> None:
    problems = check(
        vhost_spec(
            """\
            exchanges:
              - name: direct-with-hash
                arguments: {hash-header: h}
              - name: both
                type: x-consistent-hash
                arguments: {hash-header: h, hash-property: message_id}
              - name: self
                alternate_exchange: self
              - name: hashed
                type: x-consistent-hash
                unchecked_arguments: {alternate-exchange: x}
            queues: [{name: q}]
            bindings:
              - {source: hashed, destination: q, routing_key: not-a-weight}
            """
        )
    )
    assert paths(problems) == [
        "vhosts[0].exchanges[0].arguments.hash-header",
        "vhosts[0].exchanges[1].arguments",
        "vhosts[0].exchanges[2].alternate_exchange",
        "vhosts[0].exchanges[3].unchecked_arguments.alternate-exchange",
        "vhosts[0].bindings[0].routing_key",
    ]


def test_unchecked_keys_that_are_known() -> None:
    problems = check(
        vhost_spec(
            """\
            queues:
              - name: q
                arguments: {x-max-length: 1}
                unchecked_arguments: {x-queue-type: quorum, x-max-length: 2, x-message-ttl: 5}
            """
        )
    )
    assert paths(problems) == [
        "vhosts[0].queues[0].unchecked_arguments.x-queue-type",
        "vhosts[0].queues[0].unchecked_arguments.x-max-length",
    ]
    assert paths(problems, "warning") == ["vhosts[0].queues[0].unchecked_arguments.x-message-ttl"]


def test_mirroring_is_flagged() -> None:
    problems = check(
        vhost_spec(
            """\
            policies:
              - {name: a, pattern: x, definition: {ha-mode: exactly}}
              - {name: b, pattern: y, definition: {ha-params: 2}}
              - {name: c, pattern: z, definition: {ha-mode: all, ha-params: 2}}
            """
        )
    )
    assert paths(problems) == [
        "vhosts[0].policies[0].definition.ha-mode",
        "vhosts[0].policies[1].definition.ha-params",
        "vhosts[0].policies[2].definition.ha-params",
    ]
    assert len(paths(problems, "warning")) == 3


def test_headers_binding_checks() -> None:
    problems = check(
        vhost_spec(
            """\
            exchanges: [{name: h, type: headers}]
            queues: [{name: q}]
            bindings:
              - {source: h, destination: q, routing_key: k, arguments: {x-match: some}}
            """
        )
    )
    assert paths(problems) == ["vhosts[0].bindings[0].arguments.x-match"]
    assert paths(problems, "warning") == ["vhosts[0].bindings[0].routing_key"]


def test_specs_built_in_code_get_paths_without_lines() -> None:
    spec = Spec(
        version=1,
        vhosts=[VhostSpec(name="v", queues=[QueueSpec(name="q", exclusive=True)])],
    )
    (problem,) = validate(spec)
    assert problem.path == "vhosts[0].queues[0].exclusive"
    assert (problem.file, problem.line) == (None, None)


def test_policy_matching_treats_escaped_literals_exactly_and_everything_else_as_regex() -> None:
    from rabbitry.topology.checks.policies import matching_policies
    from rabbitry.topology.spec.model import PolicySpec

    def policy(name: str, pattern: str) -> PolicySpec:
        return PolicySpec.model_validate(
            {"name": name, "pattern": pattern, "definition": {"max-length": 1}}
        )

    policies = [
        policy("exact", r"^audit\.5$"),
        policy("dot", "^a.b$"),
        policy("prefix", r"^audit\."),
        policy("broken", "^(unclosed"),
    ]

    def names(queue: str) -> list[str]:
        return [p.name for _, p in matching_policies(policies, queue, None)]

    assert names("audit.5") == ["exact", "prefix"]  # spec order kept
    assert names("audit.50") == ["prefix"]
    assert names("auditX5") == []
    assert names("aXb") == ["dot"] and names("a.b") == ["dot"]
