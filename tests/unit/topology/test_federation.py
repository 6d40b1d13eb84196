"""Federation: upstream parameters (secrets masked), sets, policies, expected links, checks."""

from __future__ import annotations

import pytest

from rabbitry.provisioner.ownership import OwnershipRecord
from rabbitry.provisioner.planner import Action, plan
from rabbitry.provisioner.state import BrokerState
from rabbitry.topology import expand
from rabbitry.topology.patterns.federation import FederatedObject, expected_links
from rabbitry.topology.primitives import ApplyTo, Parameter, Topology, Vhost

from .conftest import assert_reported, check, load, vhost_spec

FEDERATED = """
exchanges: [{name: orders, type: topic}, {name: audit, type: fanout}, {name: local}]
queues: [{name: jobs}]
federation:
  upstreams:
    - name: dc1
      uri: amqp://fed@dc1.example:5672/%2F
      password: "{{ env.DC1_PASSWORD }}"
      prefetch_count: 500
      reconnect_delay: 2500ms
      ack_mode: on-confirm
      max_hops: 2
      expires: 1h
      message_ttl: 10m
    - name: dc2
      uri: [amqp://a@dc2-a/, amqp://a@dc2-b/]
      password: "p@ss/w:rd"
  upstream_sets:
    - name: both
      upstreams: [dc1, {upstream: dc2, exchange: orders.dc2}]
  exchanges:
    - {pattern: "^(orders|audit)$", upstream_set: both}
  queues:
    - {pattern: "^jobs$", upstream: dc1, name: federate-jobs, priority: 5}
"""


def spec_text() -> str:
    return vhost_spec(FEDERATED)


def expanded() -> Vhost:
    return expand(load(spec_text(), environ={"DC1_PASSWORD": "s3cret"})).vhosts[0]


def test_upstreams_become_parameters_in_the_brokers_names_and_units() -> None:
    params = {(p.component, p.name): p.value for p in expanded().parameters}
    assert params[("federation-upstream", "dc1")] == {
        "uri": "amqp://fed:s3cret@dc1.example:5672/%2F",
        "prefetch-count": 500,
        "reconnect-delay": 2.5,
        "ack-mode": "on-confirm",
        "max-hops": 2,
        "expires": 3_600_000,
        "message-ttl": 600_000,
    }
    dc2 = params[("federation-upstream", "dc2")]
    assert dc2 == {"uri": ["amqp://a:p%40ss%2Fw%3Ard@dc2-a/", "amqp://a:p%40ss%2Fw%3Ard@dc2-b/"]}
    assert params[("federation-upstream-set", "both")] == [
        {"upstream": "dc1"},
        {"upstream": "dc2", "exchange": "orders.dc2"},
    ]


def test_federation_entries_become_policies() -> None:
    policies = {p.name: p for p in expanded().policies}
    exchanges = policies["federate.exchanges.0"]
    assert exchanges.apply_to is ApplyTo.EXCHANGES
    assert exchanges.definition == {"federation-upstream-set": "both"}
    jobs = policies["federate-jobs"]
    assert (jobs.apply_to, jobs.priority, jobs.pattern) == (ApplyTo.QUEUES, 5, "^jobs$")
    assert jobs.definition == {"federation-upstream": "dc1"}


def test_expected_links_follow_patterns_sets_and_the_winning_policy() -> None:
    spec = load(spec_text(), environ={"DC1_PASSWORD": "x"})
    vhost = expand(spec).vhosts[0]
    federation = spec.vhosts[0].federation
    assert federation is not None
    assert expected_links(federation, vhost) == [
        FederatedObject("exchange", "audit", "dc1"),
        FederatedObject("exchange", "audit", "dc2"),
        FederatedObject("exchange", "orders", "dc1"),
        FederatedObject("exchange", "orders", "dc2"),
        FederatedObject("queue", "jobs", "dc1"),
    ]
    # A user policy of higher priority on 'audit' wins: the broker will not federate it.
    shadow = vhost.model_copy(
        update={
            "policies": (
                *vhost.policies,
                vhost.policies[0].model_copy(
                    update={"name": "ae", "pattern": "^audit$", "priority": 9, "definition": {}}
                ),
            )
        }
    )
    assert FederatedObject("exchange", "audit", "dc1") not in expected_links(federation, shadow)


def test_the_all_set_means_every_upstream() -> None:
    spec = load(
        vhost_spec(
            """
            exchanges: [{name: x}]
            federation:
              upstreams: [{name: a, uri: "amqp://h1"}, {name: b, uri: "amqp://h2"}]
              exchanges: [{pattern: "^x$", upstream_set: all}]
            """
        )
    )
    federation = spec.vhosts[0].federation
    assert federation is not None
    links = expected_links(federation, expand(spec).vhosts[0])
    assert [link.upstream for link in links] == ["a", "b"]
    assert check(vhost_spec("federation: {exchanges: [{pattern: x, upstream_set: all}]}")) != []


def test_plan_output_never_shows_the_upstream_password() -> None:
    desired = expand(load(spec_text(), environ={"DC1_PASSWORD": "s3cret"}))
    vhost = desired.vhosts[0]
    stale = Parameter(
        component="federation-upstream",
        name="dc1",
        value={"uri": "amqp://fed:old-secret@dc1.example:5672/%2F"},
    )
    observed = Topology(
        name=desired.name, vhosts=(vhost.model_copy(update={"parameters": (stale,)}),)
    )
    record = OwnershipRecord.from_value(desired.name, None)
    the_plan = plan(desired, BrokerState(topology=observed, record=record))
    (update,) = [c for c in the_plan.changes if c.action is Action.UPDATE]
    text = repr(the_plan.to_json()) + " ".join(update.reasons)
    assert "s3cret" not in text and "old-secret" not in text
    assert "fed:***@" in text


def test_rendered_upstream_password_is_masked_by_the_cli(tmp_path: object) -> None:
    from pathlib import Path

    from click.testing import CliRunner

    from rabbitry.cli import cli

    path = Path(str(tmp_path)) / "spec.yaml"
    path.write_text(spec_text())
    for argv in (["render", str(path)], ["render", str(path), "--template-only"]):
        result = CliRunner().invoke(cli, argv, env={"DC1_PASSWORD": "s3cret"})
        assert result.exit_code == 0, result.output
        assert "s3cret" not in result.output
        assert "p@ss/w:rd" not in result.output and "p%40ss" not in result.output


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("federation: {upstreams: [{name: a, uri: 'http://h'}]}", "starts with amqp://"),
        ("federation: {upstreams: [{name: a, uri: 'amqp://h', password: x}]}", "names the user"),
        (
            "federation: {upstreams: [{name: a, uri: 'amqp://h'}, {name: a, uri: 'amqp://h'}]}",
            "declared twice",
        ),
        ("federation: {upstream_sets: [{name: s, upstreams: [nope]}]}", "'nope' is not declared"),
        (
            "federation:\n  upstreams: [{name: a, uri: 'amqp://h'}]\n"
            "  upstream_sets: [{name: s, upstreams: [a]}, {name: s, upstreams: [a]}]",
            "upstream set 's' is declared twice",
        ),
        ("federation: {exchanges: [{pattern: x, upstream: nope}]}", "upstream 'nope' is not"),
        ("federation: {queues: [{pattern: x, upstream_set: nope}]}", "set 'nope' is not"),
        (
            "exchanges: [{name: x}]\nfederation:\n  upstreams: [{name: a, uri: 'amqp://h'}]\n"
            "  exchanges: [{pattern: '(', upstream: a}]",
            "not a valid regular expression",
        ),
        (
            "federation:\n  upstreams: [{name: a, uri: 'amqp://h'}]\n"
            "  exchanges: [{pattern: '^x$', upstream: a}]",
            "matches no exchange",
        ),
        (
            "exchanges: [{name: x}]\npolicies: [{name: p, pattern: '^x$', priority: 1,"
            " definition: {alternate-exchange: y}}]\nfederation:\n"
            "  upstreams: [{name: a, uri: 'amqp://h'}]\n"
            "  exchanges: [{pattern: '^x$', upstream: a}]",
            "only one policy applies",
        ),
        (
            "federation: {upstreams: [{name: a, uri: 'amqp://h', queue_type: quorum}]}",
            "3.13",
        ),
    ],
)
def test_federation_mistakes_are_reported(body: str, message: str) -> None:
    assert_reported(check(vhost_spec(body)), message)


def test_a_policy_names_one_source() -> None:
    from .conftest import load_problems

    problems = load_problems(vhost_spec("federation: {exchanges: [{pattern: x}]}"))
    assert "either `upstream` or `upstream_set`" in str(problems[0])


def test_a_clean_federation_spec_has_no_problems() -> None:
    assert check(spec_text().replace('"{{ env.DC1_PASSWORD }}"', "x")) == []


def test_link_states_compare_expected_links_with_the_brokers_answer() -> None:
    from rabbitry.provisioner.status import LinkStatus, link_states

    expected = [
        FederatedObject("exchange", "orders", "dc1"),
        FederatedObject("exchange", "orders", "dc2"),
        FederatedObject("queue", "jobs", "dc1"),
    ]
    observed = [
        {"type": "exchange", "exchange": "orders", "upstream": "dc1", "status": "running"},
        {
            "type": "exchange",
            "exchange": "orders",
            "upstream": "dc2",
            "status": "error",
            "error": "{auth_failure, amqp://fed:hunter2@dc2/ refused}",
        },
        {"type": "exchange", "exchange": "stray", "upstream": "dc1", "status": "starting"},
    ]
    states = link_states("v", expected, observed)
    assert [(s.name, s.upstream, s.status, s.declared) for s in states] == [
        ("orders", "dc1", LinkStatus.RUNNING, True),
        ("orders", "dc2", LinkStatus.ERROR, True),
        ("jobs", "dc1", LinkStatus.MISSING, True),
        ("stray", "dc1", LinkStatus.STARTING, False),
    ]
    assert "hunter2" not in states[1].reason and "fed:***@" in states[1].reason
    assert states[1].to_json()["status"] == "error"


def test_policy_naming_an_upstream_from_the_federation_block_is_not_warned_about() -> None:
    problems = check(
        vhost_spec(
            """
            exchanges: [{name: x, type: topic}]
            federation:
              upstreams: [{name: dc1, uri: "amqp://dc1"}]
            policies:
              - {name: fed, pattern: "^x$", apply_to: exchanges, definition: {federation-upstream: dc1}}
            """
        )
    )
    assert not any("dc1" in p.message for p in problems), problems
