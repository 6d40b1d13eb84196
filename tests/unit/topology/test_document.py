"""Export: topology -> document -> YAML -> load -> expand gives back the same topology."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from rabbitry.topology import dump_yaml, expand, load_spec, load_spec_text, spec_document
from rabbitry.topology import primitives as p
from rabbitry.topology.document import topology_data
from rabbitry.topology.spec.passwords import password_matches
from tests.profiles import examples

from .conftest import load
from .test_expand import EXAMPLES, SPEC


def round_trip(topology: p.Topology) -> p.Topology:
    text = dump_yaml(spec_document(topology))
    return expand(load_spec_text(text, "export.yaml", environ={}))


def test_document_omits_defaults() -> None:
    topology = p.Topology(
        name="s",
        vhosts=(
            p.Vhost(
                name="v",
                exchanges=(p.Exchange(name="e"),),
                queues=(p.Queue(name="q"),),
                bindings=(p.Binding(source="e", destination="q"),),
                permissions=(p.Permission(user="u"),),
            ),
        ),
    )
    assert spec_document(topology) == {
        "version": 1,
        "name": "s",
        "vhosts": [
            {
                "name": "v",
                "exchanges": [{"name": "e"}],
                "queues": [{"name": "q"}],
                "bindings": [{"source": "e", "destination": "q"}],
                "permissions": [{"user": "u"}],
            }
        ],
    }


def test_dump_yaml_has_schema_comment_and_stable_order() -> None:
    text = dump_yaml({"version": 1, "name": "s", "vhosts": [{"name": "v"}]})
    assert text == (
        "# yaml-language-server: $schema=rabbitry.schema.json\n"
        "version: 1\nname: s\nvhosts:\n  - name: v\n"
    )
    assert dump_yaml({"version": 1}, schema_ref=None) == "version: 1\n"


def test_units_and_unchecked_split() -> None:
    queue = p.Queue(
        name="q",
        arguments={
            "x-message-ttl": 30_000,
            "x-expires": 1500,
            "x-max-length-bytes": 10 * 1024**2,
            "x-max-priority": 1000,
            "x-plugin": 1,
        },
    )
    (doc,) = spec_document(p.Topology(vhosts=(p.Vhost(name="v", queues=(queue,)),)))["vhosts"]
    assert doc["queues"][0]["arguments"] == {
        "x-message-ttl": "30s",
        "x-expires": 1500,
        "x-max-length-bytes": "10MiB",
    }
    # Out of the checked range, so written where the loader will take it unchanged.
    assert doc["queues"][0]["unchecked_arguments"] == {"x-max-priority": 1000, "x-plugin": 1}


def test_queue_type_relative_to_vhost_default() -> None:
    vhost = p.Vhost(
        name="v",
        default_queue_type=p.QueueType.QUORUM,
        queues=(p.Queue(name="a", type=p.QueueType.QUORUM), p.Queue(name="b")),
    )
    doc = spec_document(p.Topology(vhosts=(vhost,)))["vhosts"][0]
    assert doc["queues"] == [{"name": "a"}, {"name": "b", "type": "classic"}]
    assert round_trip(p.Topology(vhosts=(vhost,))) == p.Topology(vhosts=(vhost,))


def test_users_are_exported_with_a_hash_never_a_password() -> None:
    topology = p.Topology(
        users=(
            p.User(name="a", password=SecretStr("pw"), tags=("administrator",)),
            p.User(name="b", password_hash="xyz", hashing_algorithm="rabbit_password_hashing_md5"),
        )
    )
    a, b = spec_document(topology)["users"]
    assert "password" not in a
    assert password_matches("pw", a["password_hash"])
    assert a["tags"] == ["administrator"]
    assert b == {
        "name": "b",
        "password_hash": "xyz",
        "hashing_algorithm": "rabbit_password_hashing_md5",
    }


def test_template_syntax_in_values_survives_the_loader() -> None:
    tricky = "{{ not a template }} {% nope %} {# no #} }}{"
    topology = p.Topology(
        vhosts=(
            p.Vhost(
                name="v",
                description=tricky,
                queues=(p.Queue(name="{{q}}"),),
                bindings=(p.Binding(source="{%e", destination="{{q}}", routing_key="{#"),),
            ),
        )
    )
    assert round_trip(topology) == topology


def without_passwords(topology: p.Topology) -> p.Topology:
    users = tuple(
        u.model_copy(update={"password": None, "password_hash": None}) for u in topology.users
    )
    return topology.model_copy(update={"users": users})


def test_expanded_spec_round_trips() -> None:
    topology = expand(load(SPEC))
    again = round_trip(topology)
    assert without_passwords(again) == without_passwords(topology)
    hash_ = again.users[0].password_hash
    assert hash_ is not None and password_matches("secret", hash_)


def test_example_round_trips() -> None:
    topology = expand(load_spec(EXAMPLES / "shop.yaml", environ={}))
    assert without_passwords(round_trip(topology)) == without_passwords(topology)


def test_topology_data_masks_passwords() -> None:
    data = topology_data(p.Topology(users=(p.User(name="a", password=SecretStr("pw")),)))
    assert data["users"][0]["password"] == "***"
    assert "pw" not in yaml.safe_dump(data)


# --- property: any topology rabbitry can hold survives export and load --------------------

NAME_CHARS = st.characters(
    codec="utf-8",
    categories=("L", "N", "P", "S", "Zs"),
    exclude_characters="\x85\u2028\u2029",
)
names = st.text(NAME_CHARS, min_size=1, max_size=12).filter(lambda s: s.strip() == s)
texts = st.text(NAME_CHARS, max_size=12)
# vhost names are ASCII: the management API cannot export the definitions of other vhosts
vhost_names = st.text(
    st.characters(codec="ascii", categories=("L", "N", "P", "S", "Zs")), min_size=1, max_size=12
).filter(lambda s: s.strip() == s)
scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | texts
json_values = st.recursive(
    scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
non_negative = st.integers(0, 10**12)

QUEUE_ARGUMENT_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "x-message-ttl": non_negative,
    "x-expires": st.integers(1, 10**12),
    "x-max-length": non_negative,
    "x-max-length-bytes": non_negative,
    "x-overflow": st.sampled_from(["drop-head", "reject-publish", "reject-publish-dlx"]),
    "x-dead-letter-exchange": texts,
    "x-dead-letter-routing-key": texts,
    "x-dead-letter-strategy": st.sampled_from(["at-most-once", "at-least-once"]),
    "x-max-priority": st.integers(0, 300),
    "x-single-active-consumer": st.booleans(),
    "x-delivery-limit": st.integers(-2, 100),
    "x-queue-mode": st.sampled_from(["default", "lazy", "other"]),
    "x-queue-version": st.sampled_from([1, 2, "2"]),
    "x-max-age": st.from_regex(r"\A[0-9]{1,3}[YMDhmsd]\Z"),
    "x-stream-max-segment-size-bytes": non_negative,
    "x-consumer-timeout": non_negative,
}
POLICY_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "message-ttl": non_negative,
    "expires": non_negative,
    "max-length": non_negative,
    "max-length-bytes": non_negative,
    "overflow": st.sampled_from(["drop-head", "reject-publish"]),
    "dead-letter-exchange": texts,
    "delivery-limit": st.integers(-1, 10),
    "ha-mode": st.sampled_from(["all", "exactly"]),
    "ha-params": st.integers(1, 3) | st.lists(names, min_size=1, max_size=2),
    "federation-upstream": names,
    "queue-version": st.sampled_from([1, 2]),
    "max-age": st.sampled_from(["7D", "12h", "1Y"]),
}
unknown_keys = st.from_regex(r"\Ax-zz-[a-z]{1,6}\Z")


def argument_maps(known: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Known keys with good or odd values, plus keys rabbitry does not know."""
    chosen = st.lists(st.sampled_from(sorted(known)), unique=True, max_size=4)

    def fill(keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
        values = st.fixed_dictionaries({k: known[k] | json_values for k in keys})
        extra = st.dictionaries(unknown_keys, json_values, max_size=2)
        return st.tuples(values, extra).map(lambda pair: {**pair[0], **pair[1]})

    return chosen.flatmap(fill)


exchanges = st.builds(
    p.Exchange,
    name=names,
    type=st.sampled_from(p.ExchangeType) | st.sampled_from(["x-local-random", "x-jms-topic"]),
    durable=st.booleans(),
    auto_delete=st.booleans(),
    internal=st.booleans(),
    arguments=argument_maps({"alternate-exchange": names, "hash-header": texts}),
)
queues = st.builds(
    p.Queue,
    name=names,
    type=st.sampled_from(p.QueueType),
    durable=st.booleans(),
    auto_delete=st.booleans(),
    arguments=argument_maps(QUEUE_ARGUMENT_VALUES),
)
bindings = st.builds(
    p.Binding,
    source=texts,
    destination=texts,
    destination_type=st.sampled_from(p.DestinationType),
    routing_key=texts,
    arguments=st.dictionaries(texts, json_values, max_size=2),
)


def policies_of(
    kind: type[p.Policy], priorities: st.SearchStrategy[int], definitions: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    """User or operator policies (``kind``) with these priorities and definitions."""
    return st.builds(
        kind,
        name=names,
        pattern=texts,
        apply_to=st.sampled_from(p.ApplyTo),
        priority=priorities,
        definition=definitions,
    )


policies = policies_of(p.Policy, st.integers(-5, 5), argument_maps(POLICY_VALUES))
operator_policies = policies_of(
    p.OperatorPolicy,
    st.integers(0, 5),
    argument_maps({"max-length": non_negative, "message-ttl": non_negative}),
)
vhosts = st.builds(
    p.Vhost,
    name=vhost_names,
    description=st.text(NAME_CHARS | st.just("\n"), max_size=20),
    tags=st.lists(names, max_size=2).map(tuple),
    default_queue_type=st.none() | st.sampled_from(p.QueueType),
    exchanges=st.lists(exchanges, max_size=3).map(tuple),
    queues=st.lists(queues, max_size=3).map(tuple),
    bindings=st.lists(bindings, max_size=2).map(tuple),
    policies=st.lists(policies, max_size=2).map(tuple),
    operator_policies=st.lists(operator_policies, max_size=1).map(tuple),
    parameters=st.lists(
        st.builds(
            p.Parameter,
            component=st.sampled_from(["federation-upstream", "federation-upstream-set", "shovel"]),
            name=names,
            value=json_values,
        ),
        max_size=2,
    ).map(tuple),
    permissions=st.lists(
        st.builds(p.Permission, user=names, configure=texts, write=texts, read=texts), max_size=2
    ).map(tuple),
    topic_permissions=st.lists(
        st.builds(p.TopicPermission, user=names, exchange=texts, write=texts, read=texts),
        max_size=2,
    ).map(tuple),
)
users = st.builds(
    p.User,
    name=names,
    password=st.none(),
    password_hash=st.none() | st.from_regex(r"\A[A-Za-z0-9+/]{8,20}=?\Z"),
    hashing_algorithm=st.sampled_from(
        [
            "rabbit_password_hashing_sha256",
            "rabbit_password_hashing_sha512",
            "rabbit_password_hashing_md5",
        ]
    ),
    tags=st.lists(names, max_size=2).map(tuple),
)
topologies = st.builds(
    p.Topology,
    name=st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,20}\Z"),
    vhosts=st.lists(vhosts, max_size=2).map(tuple),
    users=st.lists(users, max_size=2).map(tuple),
    global_parameters=st.lists(
        st.builds(p.GlobalParameter, name=names, value=json_values), max_size=2
    ).map(tuple),
)


def normalize_users(topology: p.Topology) -> p.Topology:
    """A user without a hash exports no hashing algorithm, so it comes back with the default."""
    default = p.User.model_fields["hashing_algorithm"].default
    users = tuple(
        u if u.password_hash else u.model_copy(update={"hashing_algorithm": default})
        for u in topology.users
    )
    return topology.model_copy(update={"users": users})


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topologies)
def test_any_topology_round_trips(topology: p.Topology) -> None:
    assert round_trip(topology) == normalize_users(topology)


def test_round_trip_file(tmp_path: Path) -> None:
    topology = expand(load(SPEC))
    path = tmp_path / "export.yaml"
    path.write_text(dump_yaml(spec_document(topology)))
    assert without_passwords(expand(load_spec(path, environ={}))) == without_passwords(topology)
