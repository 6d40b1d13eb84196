"""Exchange types rabbitry does not know (a plugin's, such as ``x-local-random``): declared as
written with a warning, kept by export, never dropped; typos of known types still refused."""

from __future__ import annotations

from rabbitry.provisioner.capabilities import BrokerCapabilities, missing, requirements
from rabbitry.provisioner.state import observed_vhost
from rabbitry.topology import dump_yaml, expand, load_spec_text, spec_document
from rabbitry.topology import primitives as p
from rabbitry.topology.document import unknown_to_rabbitry

from .conftest import check, load, one_problem, vhost_spec

PLUGIN_TYPES = """\
exchanges:
  - {name: random, type: x-local-random}
  - {name: recent, type: x-recent-history, unchecked_arguments: {x-recent-history-length: 5}}
queues:
  - {name: q}
bindings:
  - {source: random, destination: q}
"""


def test_a_plugin_exchange_type_loads_and_validate_warns_once_per_exchange() -> None:
    spec = load(vhost_spec(PLUGIN_TYPES))
    assert [e.type for e in spec.vhosts[0].exchanges] == ["x-local-random", "x-recent-history"]
    problems = check(vhost_spec(PLUGIN_TYPES))
    assert [(p.severity, p.path) for p in problems] == [
        ("warning", "vhosts[0].exchanges[0].type"),
        ("warning", "vhosts[0].exchanges[1].type"),
    ]
    assert "'x-local-random' is not one rabbitry knows" in problems[0].message
    assert "RabbitMQ 4.0 and newer have it built in" in problems[0].message
    assert "plugin that provides it is enabled" in problems[1].message


def test_a_known_type_stays_an_enum_member_and_a_typo_is_refused_with_a_suggestion() -> None:
    spec = load(vhost_spec("exchanges: [{name: e, type: topic}]\n"))
    assert spec.vhosts[0].exchanges[0].type is p.ExchangeType.TOPIC
    problem = one_problem(vhost_spec("exchanges: [{name: e, type: topc}]\n"))
    assert problem.path == "vhosts[0].exchanges[0].type"
    assert "did you mean 'topic'?" in problem.message and "x-..." in problem.message


def test_the_broker_answer_keeps_plugin_types_and_leaves_federation_internals_out() -> None:
    left: list[str] = []
    vhost = observed_vhost(
        "v",
        {},
        {
            "exchanges": [
                {"name": "random", "type": "x-local-random", "arguments": {}},
                {
                    "name": "federation: up -> rabbit@b",
                    "type": "topic",
                    "arguments": {"x-internal-purpose": "federation"},
                },
            ],
            "queues": [{"name": "q", "arguments": {}}],
            "bindings": [
                {"source": "random", "destination": "q", "destination_type": "queue"},
                {
                    "source": "federation: up -> rabbit@b",
                    "destination": "q",
                    "destination_type": "queue",
                },
            ],
        },
        left_out=left,
    )
    assert [(e.name, e.type) for e in vhost.exchanges] == [("random", "x-local-random")]
    assert [b.source for b in vhost.bindings] == ["random"]
    assert left == [
        "exchange v/federation: up -> rabbit@b: internal to the federation plugin",
        "binding v/federation: up -> rabbit@b -> q: to or from an object left out",
    ]


def test_an_export_with_a_plugin_type_round_trips_through_the_spec() -> None:
    topology = expand(load(vhost_spec(PLUGIN_TYPES)))
    text = dump_yaml(spec_document(topology))
    assert "type: x-local-random" in text and "x-recent-history-length: 5" in text
    assert expand(load_spec_text(text, "export.yaml", environ={})) == topology


def test_a_broker_without_the_type_is_named_before_any_change() -> None:
    topology = expand(load(vhost_spec(PLUGIN_TYPES)))
    needs = requirements(topology)
    broker = BrokerCapabilities(
        version=(4, 0, 5), exchange_types=frozenset({"direct", "topic", "x-local-random"})
    )
    (problem,) = missing(needs, broker)
    assert problem.startswith("exchange recent (vhost v) is x-recent-history: the broker has no")
    assert "enable the plugin" in problem
    everything = BrokerCapabilities(
        version=(4, 0, 5), exchange_types=frozenset({"x-local-random", "x-recent-history"})
    )
    assert missing(needs, everything) == []


def test_x_local_random_on_a_broker_older_than_4_0_names_the_version() -> None:
    needs = requirements(expand(load(vhost_spec(PLUGIN_TYPES))))
    old = BrokerCapabilities(
        version=(3, 13, 7), exchange_types=frozenset({"x-local-random", "x-recent-history"})
    )
    (problem,) = missing(needs, old)
    assert problem.startswith("exchange random (vhost v): exchange type x-local-random needs")
    assert "RabbitMQ 4.0 or newer (the broker runs 3.13.7)" in problem


def test_what_export_keeps_unchecked_is_named_per_object() -> None:
    vhost = p.Vhost(
        name="v",
        exchanges=(
            p.Exchange(name="random", type="x-local-random"),
            p.Exchange(name="plain", arguments={"alternate-exchange": "ae", "x-colour": "red"}),
        ),
        queues=(
            p.Queue(name="q", arguments={"x-message-ttl": 5, "x-team": "a", "x-area": "b"}),
            p.Queue(name="checked", arguments={"x-max-length": 3}),
        ),
        policies=(p.Policy(name="pol", pattern=".", definition={"max-length": 1, "x-odd": 1}),),
    )
    assert unknown_to_rabbitry(p.Topology(vhosts=(vhost,))) == [
        "exchange v/random: type 'x-local-random' is not one rabbitry knows",
        "exchange v/plain: keys x-colour",
        "queue v/q: keys x-area, x-team",
        "policy v/pol: keys x-odd",
    ]
