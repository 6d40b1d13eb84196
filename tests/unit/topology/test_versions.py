"""The table of what each RabbitMQ version accepts, and the checks that read it."""

from __future__ import annotations

import pytest

from rabbitry.errors import SpecProblem
from rabbitry.topology import validate
from rabbitry.topology.primitives import QueueType
from rabbitry.topology.spec.loader import load_spec_text
from rabbitry.topology.version_facts import facts_of
from rabbitry.topology.versions import (
    FACTS,
    RETRY_VIA_BROKER,
    SERIES,
    SERVER_NAMED_BINDING,
    VHOST_DELETION_PROTECTION,
    Kind,
    Use,
    judge,
    parse_version,
    release,
    uses_of_policy,
    uses_of_queue,
    uses_of_vhost,
)


def spec_problems(body: str, version: str | None) -> list[SpecProblem]:
    broker = f'broker:\n  version: "{version}"\n' if version else ""
    text = f"version: 1\nname: app\n{broker}vhosts:\n  - name: v\n{body}"
    return validate(load_spec_text(text, "spec.yaml", environ={}))


def errors(body: str, version: str | None) -> list[str]:
    return [f"{p.path}: {p.message}" for p in spec_problems(body, version) if p.severity == "error"]


def warnings(body: str, version: str | None) -> list[str]:
    found = spec_problems(body, version)
    return [f"{p.path}: {p.message}" for p in found if p.severity == "warning"]


LAZY = "    queues:\n      - {name: lazy, arguments: {x-queue-mode: lazy}}\n"


def test_every_fact_cites_a_source_and_says_what_to_do() -> None:
    for fact in FACTS:
        assert fact.source.strip() and fact.advice.strip(), fact
        assert any(v is not None for v in (fact.added, fact.ignored, fact.removed, fact.changed))


def test_the_features_rabbitry_names_in_code_are_rows_of_the_table() -> None:
    keys = {fact.key for fact in FACTS if fact.kind is Kind.FEATURE}
    assert {RETRY_VIA_BROKER, SERVER_NAMED_BINDING, VHOST_DELETION_PROTECTION} <= keys


def test_a_row_makes_one_fact_a_kind_and_key_with_its_key_and_prefixes_in_its_texts() -> None:
    table = {
        "prefixes": {"notes": "https://notes/"},
        "facts": [
            {
                "kinds": ["policy key", "operator policy key"],
                "keys": ["a", "b"],
                "source": "{notes}4.0.md",
                "advice": "remove {key}",
                "removed": [4, 0],
            }
        ],
    }
    facts = list(facts_of(table))
    assert [(str(f.kind), f.key, f.advice) for f in facts] == [
        ("policy key", "a", "remove a"),
        ("policy key", "b", "remove b"),
        ("operator policy key", "a", "remove a"),
        ("operator policy key", "b", "remove b"),
    ]
    assert {f.source for f in facts} == {"https://notes/4.0.md"}
    assert {f.removed for f in facts} == {(4, 0)}


def test_a_row_with_a_field_the_table_does_not_have_is_refused() -> None:
    row = {"kind": "feature", "key": "k", "source": "s", "advice": "a", "remvoed": [4, 0]}
    with pytest.raises(ValueError, match="unknown fields \\['remvoed'\\]"):
        list(facts_of({"prefixes": {}, "facts": [row]}))


def test_no_fact_is_refused_before_it_is_added() -> None:
    for fact in FACTS:
        if fact.added and fact.removed:
            assert fact.added < fact.removed, fact
        if fact.ignored and fact.removed:
            assert fact.ignored <= fact.removed, fact


def test_the_table_covers_3_10_to_4_3() -> None:
    assert SERIES[0] == (3, 10) and SERIES[-1] == (4, 3)
    assert list(SERIES) == sorted(SERIES)


def test_x_queue_mode_works_on_3_10_and_is_ignored_from_3_12_through_4_3() -> None:
    """The 4.3.0 notes announced a refusal; RabbitMQ 4.3.6 declares such a queue (the real
    broker test in tests/integration/test_broker_versions.py holds the table to it)."""
    uses = list(uses_of_queue(QueueType.CLASSIC, True, {"x-queue-mode": "lazy"}))
    assert judge(uses, (3, 10, 8)) == []
    (ignored,) = judge(uses, (3, 12))
    assert not ignored.refused and "3.12" in ignored.message()
    (still,) = judge(uses, (4, 3))
    assert not still.refused
    assert "RabbitMQ 3.12 and newer accept queue argument x-queue-mode without effect" in (
        still.message()
    )
    assert "(the broker runs 4.3)" in still.message()


def test_x_queue_version_1_is_refused_on_4_3_but_2_is_not() -> None:
    one = list(uses_of_queue(QueueType.CLASSIC, True, {"x-queue-version": 1}))
    two = list(uses_of_queue(QueueType.CLASSIC, True, {"x-queue-version": 2}))
    assert [v.refused for v in judge(one, (4, 0))] == [False]
    assert [v.refused for v in judge(one, (4, 3))] == [True]
    assert judge(two, (4, 3)) == []


def test_facts_about_one_queue_type_leave_the_others_alone() -> None:
    uses = list(uses_of_queue(QueueType.QUORUM, True, {"x-queue-leader-locator": "balanced"}))
    assert judge(uses, (3, 10)) == []
    classic = list(uses_of_queue(QueueType.CLASSIC, True, {"x-queue-leader-locator": "balanced"}))
    (needs,) = judge(classic, (3, 13))
    assert needs.refused and "needs RabbitMQ 4.0 or newer" in needs.message()


def test_mirroring_policy_keys_are_refused_from_4_0() -> None:
    uses = list(uses_of_policy("queues", {"ha-mode": "all", "ha-sync-mode": "automatic"}))
    assert judge(uses, (3, 13, 7)) == []
    assert len([v for v in judge(uses, (4, 0)) if v.refused]) == 2


def test_delayed_retry_policy_keys_need_4_3_1_and_the_arguments_4_3() -> None:
    policy = list(uses_of_policy("quorum_queues", {"delayed-retry-type": "all"}))
    assert [v.refused for v in judge(policy, (4, 3))] == [True]
    assert judge(policy, (4, 3, 1)) == []
    argument = [Use(Kind.QUEUE_ARGUMENT, "x-delayed-retry-min", 1000, QueueType.QUORUM)]
    assert judge(argument, (4, 3)) == []
    # an older broker declares the queue and ignores the argument: a warning, not a refusal
    (unknown,) = judge(argument, (4, 2, 1))
    assert not unknown.refused
    assert "takes effect from RabbitMQ 4.3; older brokers accept it without effect" in (
        unknown.message()
    )


def test_the_new_delivery_limit_default_is_news_only_to_an_upgrade_across_4_0() -> None:
    uses = list(uses_of_queue(QueueType.QUORUM, True, {}))
    assert judge(uses, (4, 0)) == []
    (changed,) = judge(uses, (4, 0), upgrading_from=(3, 13, 7))
    assert not changed.refused and "20 deliveries" in changed.message()
    assert judge(uses, (4, 3), upgrading_from=(4, 0, 5)) == []
    limited = list(uses_of_queue(QueueType.QUORUM, True, {"x-delivery-limit": 5}))
    assert judge(limited, (4, 0), upgrading_from=(3, 13)) == []


def test_non_durable_queues_are_refused_by_default_on_4_3() -> None:
    uses = list(uses_of_queue(QueueType.CLASSIC, False, {}))
    assert judge(uses, (4, 2)) == []
    (refused,) = judge(uses, (4, 3))
    assert "refuse feature non-durable non-exclusive queues by default" in refused.message()
    assert "deprecated_features.permit.transient_nonexcl_queues" in refused.message()


def test_a_broker_that_permits_transient_queues_takes_them_whatever_its_version() -> None:
    # Debian's RabbitMQ 4.3 permits transient_nonexcl_queues by default
    uses = list(uses_of_queue(QueueType.CLASSIC, False, {}))
    assert judge(uses, (4, 3, 6), deprecated={"transient_nonexcl_queues": True}) == []
    # what it says of other features leaves this one to the version's default
    (refused,) = judge(uses, (4, 3, 6), deprecated={"global_qos": True})
    assert refused.state == "removed"


def test_a_broker_that_denies_transient_queues_refuses_them_whatever_its_version() -> None:
    # deprecated_features.permit.transient_nonexcl_queues = false on a 4.0 broker
    uses = list(uses_of_queue(QueueType.CLASSIC, False, {}))
    (denied,) = judge(uses, (4, 0, 5), deprecated={"transient_nonexcl_queues": False})
    assert denied.refused
    assert "reports deprecated feature transient_nonexcl_queues denied" in denied.message()
    assert "(the broker runs 4.0.5)" in denied.message()
    assert judge(uses, (4, 0, 5)) == []  # its version's default alone permits it


@pytest.mark.parametrize(
    ("text", "version"), [("3.10.8", (3, 10, 8)), ("4.3", (4, 3)), ("4.1.0-beta.2", (4, 1, 0))]
)
def test_versions_parse(text: str, version: tuple[int, ...]) -> None:
    assert parse_version(text) == version


V1 = "    queues:\n      - {name: old, arguments: {x-queue-version: 1}}\n"


def test_a_spec_using_x_queue_version_1_against_4_3_fails_naming_the_version() -> None:
    (problem,) = errors(V1, "4.3")
    assert problem.startswith("vhosts[0].queues[0].arguments.x-queue-version: RabbitMQ 4.3")
    assert "(broker.version is 4.3)" in problem and "remove x-queue-version" in problem
    (ignored,) = warnings(V1, "4.0")
    assert "without effect" in ignored and "(broker.version is 4.0)" in ignored
    assert errors(V1, "3.10") == [] and warnings(V1, "3.10") == []
    (lazy,) = warnings(LAZY, "4.3")
    assert "x-queue-mode" in lazy and errors(LAZY, "4.3") == []


def test_without_broker_version_validate_makes_no_version_check() -> None:
    assert errors(LAZY, None) == [] and warnings(LAZY, None) == []


def test_priorities_on_quorum_queues_pass_on_4_x_and_fail_on_3_x() -> None:
    """From 4.0 a quorum queue honours message priorities: the publisher sets them, no
    x-max-priority (which every version refuses on a quorum queue)."""
    quorum = "    queues:\n      - {name: jobs, type: quorum}\n"
    assert errors(quorum, "4.0") == [] and errors(quorum, "3.13") == []
    checked = "    queues:\n      - {name: jobs, type: quorum, arguments: {x-max-priority: 5}}\n"
    (refused,) = errors(checked, "4.3")
    assert "quorum queues (RabbitMQ 4.0+) deliver by the messages' priority" in refused


def test_policy_apply_to_by_queue_type_needs_3_12() -> None:
    body = (
        "    policies:\n"
        "      - {name: p, pattern: '^q', apply_to: quorum_queues, definition: {max-length: 5}}\n"
    )
    (problem,) = errors(body, "3.11")
    assert problem.startswith("vhosts[0].policies[0].apply_to: policy apply-to quorum_queues")
    assert "needs RabbitMQ 3.12 or newer (broker.version is 3.11)" in problem
    assert errors(body, "3.12") == []


def test_x_local_random_is_checked_against_the_version_and_super_streams_are_not() -> None:
    body = (
        "    exchanges:\n      - {name: pick, type: x-local-random}\n"
        "    super_streams:\n      - {name: orders, partitions: 2}\n"
    )
    found = errors(body, "3.10")
    assert any("exchange type x-local-random needs RabbitMQ 4.0" in p for p in found)
    # its parts are plain objects a 3.10 broker makes (AMQP publishing and the Spark source
    # read them); only stream-protocol clients' partition lookup came with 3.11
    assert not any("super" in p for p in found)
    assert errors(body, "4.0") == []


def test_delayed_retry_arguments_must_be_complete() -> None:
    body = (
        "    queues:\n      - {name: q, type: quorum, arguments: {x-delayed-retry-type: all,"
        " x-delayed-retry-max: 1s}}\n"
    )
    found = errors(body, None)
    assert any("does nothing without x-delayed-retry-min" in p for p in found)
    low = body.replace("x-delayed-retry-type: all", "x-delayed-retry-min: 5s")
    assert any("x-delayed-retry-max is below x-delayed-retry-min" in p for p in errors(low, None))


def test_a_release_a_user_names_is_checked() -> None:
    assert release("4.3") == (4, 3) and release("4.0.5") == (4, 0, 5)
    for bad in ("4", "4.x", "latest", "4.1.0-beta.2"):
        with pytest.raises(ValueError, match=r"is not a RabbitMQ version such as 4\.3"):
            release(bad)


def test_a_version_newer_than_the_table_is_named_as_unchecked() -> None:
    (warning,) = warnings(V1, "5.0")
    assert warning.startswith("broker.version: rabbitry knows RabbitMQ up to 4.3")
    assert [e for e in errors(V1, "5.0") if "x-queue-version" in e]  # 4.3's facts still hold


def test_deletion_protection_takes_effect_from_4_0_6_and_older_brokers_accept_it() -> None:
    uses = list(uses_of_vhost(True))
    assert judge(uses, (4, 0, 6)) == [] and judge(uses, (4, 3)) == []
    (unknown,) = judge(uses, (4, 0, 5))
    assert not unknown.refused  # 4.0.5 and 3.10 import the key and keep nothing
    assert "takes effect from RabbitMQ 4.0.6" in unknown.message()
    assert list(uses_of_vhost(False)) == [] and list(uses_of_vhost(None)) == []


def test_validate_warns_of_deletion_protection_where_broker_version_lacks_it() -> None:
    body = "    protected_from_deletion: true\n"
    assert errors(body, "4.0.5") == []
    (warned,) = [p for p in spec_problems(body, "4.0.5") if p.severity == "warning"]
    assert "protected_from_deletion" in str(warned.path)
    assert [p for p in spec_problems(body, "4.3") if p.severity == "warning"] == []


def test_a_queue_master_locator_policy_is_refused_by_default_on_4_3() -> None:
    for operator in (False, True):
        uses = list(uses_of_policy("all", {"queue-master-locator": "client-local"}, operator))
        assert judge(uses, (4, 2)) == []
        (refused,) = judge(uses, (4, 3, 6))
        assert "deprecated_features.permit.queue_master_locator" in refused.message()
        permits = {"queue_master_locator": True}
        assert judge(uses, (4, 3, 6), deprecated=permits) == []
