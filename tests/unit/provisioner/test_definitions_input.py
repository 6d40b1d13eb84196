"""Definitions files checked before they become a topology: what the broker's import would
refuse is an error naming the entry, never a silent default."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from rabbitry.errors import SpecError
from rabbitry.provisioner.definitions import (
    check_definitions,
    refused_at,
    scoped,
    spec_of_definitions,
    topology_from_definitions,
)
from rabbitry.topology.document import spec_document
from rabbitry.topology.primitives import Queue, QueueType
from rabbitry.topology.spec.passwords import DEFAULT_ALGORITHM, password_matches


def queue(**entry: object) -> dict[str, object]:
    return {"vhosts": [{"name": "/"}], "queues": [{"name": "q", "vhost": "/", **entry}]}


@pytest.mark.parametrize(
    "entry",
    [
        {"arguments": {"x-queue-type": "bogus"}},
        {"type": "bogus", "arguments": {}},
        {"type": "quorum", "arguments": {"x-queue-type": "qourum"}},
        {"type": ["quorum"], "arguments": {}},
    ],
)
def test_an_unknown_queue_type_is_an_error_naming_the_entry(entry: dict[str, object]) -> None:
    with pytest.raises(SpecError) as caught:
        check_definitions(queue(**entry), "defs.json")
    text = str(caught.value)
    assert "defs.json: queues[0]: unknown queue type" in text, text
    assert "classic, quorum or stream" in text


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"arguments": {"x-queue-type": "quorum"}}, QueueType.QUORUM),
        ({"type": "stream", "arguments": {}}, QueueType.STREAM),
        ({"arguments": {}}, QueueType.CLASSIC),
        ({"type": "classic", "arguments": {"x-queue-type": "classic"}}, QueueType.CLASSIC),
    ],
)
def test_known_queue_types_are_read_in_either_shape(
    entry: dict[str, object], expected: QueueType
) -> None:
    imported = topology_from_definitions(queue(**entry), "defs")
    (made,) = [r for r in imported.topology.resources().values() if isinstance(r, Queue)]
    assert made.type is expected


def hashed(digest: str, size: int | None = None) -> str:
    raw = b"salt" + hashlib.new(digest, b"password").digest()
    return base64.b64encode(raw if size is None else raw[:size]).decode()


def user(**entry: object) -> dict[str, object]:
    return {"vhosts": [], "users": [{"name": "app", "tags": "", **entry}]}


def refused(entry: dict[str, object]) -> str:
    with pytest.raises(SpecError) as caught:
        check_definitions(user(**entry), "defs.json")
    return str(caught.value)


@pytest.mark.parametrize(
    ("algorithm", "digest", "length"),
    [
        ("rabbit_password_hashing_sha256", "sha256", 36),
        ("rabbit_password_hashing_sha512", "sha512", 68),
        ("rabbit_password_hashing_md5", "md5", 20),
    ],
)
def test_a_hash_of_the_length_its_algorithm_makes_is_taken(
    algorithm: str, digest: str, length: int
) -> None:
    password_hash = hashed(digest)
    assert len(base64.b64decode(password_hash)) == length
    check_definitions(user(password_hash=password_hash, hashing_algorithm=algorithm))
    (made,) = topology_from_definitions(
        user(password_hash=password_hash, hashing_algorithm=algorithm), "defs"
    ).topology.users
    assert (made.password_hash, made.hashing_algorithm) == (password_hash, algorithm)


def test_a_hash_that_is_not_base64_is_refused() -> None:
    text = refused({"password_hash": "not base64!"})
    assert "defs.json: users[0].password_hash: password_hash is not base64" in text


def test_a_hash_too_short_for_its_algorithm_is_refused() -> None:
    text = refused({"password_hash": hashed("sha256", 20)})
    assert "users[0].password_hash: password_hash decodes to 20 bytes, not the 36" in text
    assert "no password would ever match it" in text
    # 20 bytes is an MD5 hash's length: the message says so
    assert "rabbit_password_hashing_md5 hash: is hashing_algorithm right?" in text


def test_a_hash_labelled_with_the_wrong_algorithm_is_refused_naming_the_right_one() -> None:
    text = refused(
        {"password_hash": hashed("sha512"), "hashing_algorithm": "rabbit_password_hashing_sha256"}
    )
    assert "decodes to 68 bytes, not the 36 of a rabbit_password_hashing_sha256 hash" in text
    assert "68 bytes is a rabbit_password_hashing_sha512 hash" in text
    # no label: the broker's default, SHA-256
    assert "not the 36" in refused({"password_hash": hashed("sha512")})


def test_an_unknown_algorithm_is_refused() -> None:
    text = refused({"password_hash": hashed("sha256"), "hashing_algorithm": "bcrypt"})
    assert "users[0].hashing_algorithm: unknown hashing_algorithm 'bcrypt'" in text


@pytest.mark.parametrize("entry", [{"password_hash": ""}, {}, {"password_hash": None}])
def test_a_user_without_a_hash_is_refused_unless_the_entry_says_passwordless(
    entry: dict[str, object],
) -> None:
    text = refused(entry)
    assert "users[0].password_hash: the user has no password hash" in text
    assert '"passwordless": true' in text
    said = user(**entry, passwordless=True)
    check_definitions(said)
    (made,) = topology_from_definitions(said, "defs").topology.users
    assert made.password_hash is None and made.password is None


def test_passwordless_with_a_hash_or_not_a_boolean_is_refused() -> None:
    assert "keep one" in refused({"password_hash": hashed("sha256"), "passwordless": True})
    assert "`passwordless` is true or false" in refused({"passwordless": "yes"})


@pytest.mark.parametrize(
    ("algorithm", "digest"),
    [
        (None, "sha256"),
        ("rabbit_password_hashing_sha512", "sha512"),
        ("rabbit_password_hashing_md5", "md5"),
    ],
)
def test_a_plain_password_is_hashed_as_the_broker_hashes_it_never_written_in_clear(
    algorithm: str | None, digest: str
) -> None:
    entry: dict[str, object] = {"password": "s3cret"}
    if algorithm:
        entry["hashing_algorithm"] = algorithm
    (made,) = topology_from_definitions(user(**entry), "defs").topology.users
    (written,) = spec_document(topology_from_definitions(user(**entry), "defs").topology)["users"]
    assert "s3cret" not in str(written) and "password" not in written
    raw = base64.b64decode(written["password_hash"])
    # base64(salt4 + H(salt4 + password)), as rabbit_password does
    assert raw[4:] == hashlib.new(digest, raw[:4] + b"s3cret").digest()
    assert written.get("hashing_algorithm") == algorithm
    assert made.password is not None and made.password.get_secret_value() == "s3cret"
    assert password_matches("s3cret", written["password_hash"], algorithm or DEFAULT_ALGORITHM)


def test_a_definitions_file_read_as_the_spec_keeps_the_password_so_a_plan_can_settle(
    tmp_path: Path,
) -> None:
    source = tmp_path / "defs.json"
    spec = spec_of_definitions(source, user(password="s3cret"), lambda problem: None)
    (made,) = spec.users
    assert made.password_hash is None
    assert made.password is not None and made.password.get_secret_value() == "s3cret"
    assert "s3cret" not in repr(spec)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"password": "s3cret", "password_hash": hashed("sha256")}, "both `password` and"),
        ({"password": "s3cret", "passwordless": True}, "says `passwordless` and gives a password"),
        ({"password": ""}, "users[0].password: the password is empty"),
        ({"password": 42}, "users[0].password: password is a string"),
        ({"password": "s3cret", "hashing_algorithm": "bcrypt"}, "unknown hashing_algorithm"),
    ],
)
def test_a_plain_password_the_broker_would_refuse_or_that_is_empty_is_refused(
    entry: dict[str, object], message: str
) -> None:
    text = refused(entry)
    assert message in text, text
    assert "s3cret" not in text


def test_an_object_written_twice_is_its_last_entry_and_the_other_is_named() -> None:
    data = {
        "vhosts": [{"name": "v"}, {"name": "v"}],
        "queues": [
            {"name": "q", "vhost": "v", "arguments": {"x-max-length": 1}},
            {"name": "other", "vhost": "v", "arguments": {}},
            {"name": "q", "vhost": "v", "arguments": {"x-max-length": 5}},
        ],
        "policies": [
            {"name": "p", "vhost": "v", "pattern": "a", "definition": {"max-length": 1}},
            {"name": "p", "vhost": "v", "pattern": "b", "definition": {"max-length": 2}},
        ],
    }
    imported = topology_from_definitions(data, "defs")
    queues = {r.name: r for r in imported.topology.resources().values() if isinstance(r, Queue)}
    assert queues["q"].arguments == {"x-max-length": 5} and set(queues) == {"q", "other"}
    (vhost,) = imported.topology.vhosts
    assert [p.pattern for p in vhost.policies] == ["b"]
    assert sorted(imported.left_out) == [
        "policies[0] (v/p): policies[1] is the same object; the broker's import keeps the last"
        " entry too",
        "queues[0] (v/q): queues[2] is the same object; rabbitry keeps the last; the broker's"
        " import declares these concurrently and may keep either (4.0.5 kept the first, 3.10.8"
        " the last): remove the entry not meant",
        "vhosts[0] (v): vhosts[1] is the same object; the same entry is written again there",
    ]


def test_what_the_broker_named_or_keeps_for_itself_is_left_out_with_its_bindings() -> None:
    data = {
        "vhosts": [{"name": "v"}],
        "exchanges": [
            {"name": "amq.foobar", "vhost": "v", "type": "topic"},
            {"name": "amq.topic", "vhost": "v", "type": "topic"},
        ],
        "queues": [{"name": "amq.gen-x1", "vhost": "v"}, {"name": "q", "vhost": "v"}],
        "bindings": [
            {"source": "amq.foobar", "vhost": "v", "destination": "q", "destination_type": "queue"},
            {"source": "amq.topic", "vhost": "v", "destination": "q", "destination_type": "queue"},
            {
                "source": "amq.topic",
                "vhost": "v",
                "destination": "amq.gen-x1",
                "destination_type": "queue",
            },
        ],
    }
    imported = topology_from_definitions(data, "defs")
    (vhost,) = imported.topology.vhosts
    assert [q.name for q in vhost.queues] == ["q"] and vhost.exchanges == ()
    assert [(b.source, b.destination) for b in vhost.bindings] == [("amq.topic", "q")]
    text = "\n".join(imported.left_out)
    assert "exchange v/amq.foobar: named under the broker's reserved prefix amq.*" in text
    assert "exchange v/amq.topic: the broker's own, declared in every vhost" in text
    assert "queue v/amq.gen-x1: named by the broker (amq.*)" in text
    assert "binding v/amq.foobar -> q: to or from an object left out" in text
    assert "binding v/amq.topic -> amq.gen-x1" in text


SHARED = {
    "vhosts": [{"name": "a"}, {"name": "b"}],
    "users": [{"name": "admin"}, {"name": "app"}, {"name": "other"}],
    "permissions": [
        {"user": "app", "vhost": "a", "configure": ".*", "write": ".*", "read": ".*"},
        {"user": "other", "vhost": "b", "configure": ".*", "write": ".*", "read": ".*"},
    ],
    "queues": [{"name": "qa", "vhost": "a"}, {"name": "qb", "vhost": "b"}],
    "global_parameters": [{"name": "cluster_name", "value": "c"}],
}


def test_one_vhost_of_a_shared_broker_is_taken_with_the_users_export_would_take() -> None:
    taken = scoped(SHARED, ("a",), "access")
    assert [v["name"] for v in taken["vhosts"]] == ["a"]
    assert [q["name"] for q in taken["queues"]] == ["qa"]
    assert [u["name"] for u in taken["users"]] == ["app"]
    assert [p["user"] for p in taken["permissions"]] == ["app"]
    assert taken["global_parameters"] == []  # broker-wide: only with every vhost


def test_without_users_their_permissions_stay_out_and_all_keeps_users_without_any() -> None:
    none = scoped(SHARED, ("a",), "none")
    assert none["users"] == [] and none["permissions"] == []
    every = scoped(SHARED, (), "all")
    assert [u["name"] for u in every["users"]] == ["admin", "app", "other"]
    assert len(every["permissions"]) == 2 and every["global_parameters"]


def test_a_vhost_the_file_does_not_list_is_an_error() -> None:
    with pytest.raises(SpecError) as caught:
        scoped(SHARED, ("a", "c"), "none", "defs.json")
    assert "defs.json: no such vhost in the file: c (it lists: a, b)" in str(caught.value)


def test_the_permissions_of_a_user_the_file_counts_on_existing_stay_with_users() -> None:
    data = {**SHARED, "permissions": [*SHARED["permissions"], {"user": "guest", "vhost": "a"}]}
    assert [p["user"] for p in scoped(data, (), "all")["permissions"]] == ["app", "other", "guest"]
    assert [p["user"] for p in scoped(data, ("a",), "access")["permissions"]] == ["app", "guest"]
    assert scoped(data, (), "none")["permissions"] == []


def server_named_binding(version: str | None) -> dict[str, object]:
    data: dict[str, object] = {
        "vhosts": [{"name": "v"}],
        "queues": [{"name": "amq.gen-x1", "vhost": "v"}, {"name": "q", "vhost": "v"}],
        "bindings": [
            {"source": "amq.topic", "vhost": "v", "destination": "q", "destination_type": "queue"},
            {
                "source": "amq.topic",
                "vhost": "v",
                "destination": "amq.gen-x1",
                "destination_type": "queue",
                "routing_key": "orders.#",
            },
        ],
    }
    if version is not None:
        data["rabbitmq_version"] = version
    return data


@pytest.mark.parametrize("version", ["4.0.5", "4.3.1"])
def test_a_binding_to_a_server_named_queue_is_refused_as_a_4x_broker_refuses_it(
    version: str,
) -> None:
    with pytest.raises(SpecError) as caught:
        topology_from_definitions(server_named_binding(version), "defs", "defs.json")
    text = str(caught.value)
    assert "defs.json" in text
    assert "binding v/amq.topic -> amq.gen-x1 (routing key 'orders.#')" in text
    assert "RabbitMQ 4.0 and newer refuse" in text and version in text
    assert "remove the binding" in text


def test_the_broker_named_against_overrides_the_version_the_file_was_written_by() -> None:
    with pytest.raises(SpecError, match=r"amq\.gen-x1"):
        topology_from_definitions(server_named_binding("3.10.8"), "defs", version=(4, 0, 5))
    imported = topology_from_definitions(server_named_binding("4.0.5"), "defs", version=(3, 10))
    assert "binding v/amq.topic -> amq.gen-x1" in "\n".join(imported.left_out)


@pytest.mark.parametrize("version", ["3.10.8", None])
def test_a_binding_to_a_server_named_queue_is_left_out_where_the_broker_skips_it(
    version: str | None,
) -> None:
    imported = topology_from_definitions(server_named_binding(version), "defs")
    (vhost,) = imported.topology.vhosts
    assert [(b.source, b.destination) for b in vhost.bindings] == [("amq.topic", "q")]
    assert "binding v/amq.topic -> amq.gen-x1" in "\n".join(imported.left_out)


def test_a_4x_definitions_file_with_a_server_named_binding_is_no_spec(tmp_path: Path) -> None:
    path = tmp_path / "defs.json"
    with pytest.raises(SpecError, match=r"amq\.gen-x1"):
        spec_of_definitions(path, server_named_binding("4.0.5"), lambda problem: None)


def test_a_file_applied_to_a_broker_is_judged_by_that_broker_s_version(tmp_path: Path) -> None:
    path = tmp_path / "defs.json"
    # a 3.x file the broker takes as it is (binding left out) is refused by a 4.x broker
    with pytest.raises(SpecError) as caught:
        spec_of_definitions(
            path, server_named_binding("3.10.8"), lambda problem: None, lambda: (4, 3, 6)
        )
    assert "RabbitMQ 4.0 and newer refuse" in str(caught.value)
    assert "(the broker runs 4.3.6)" in str(caught.value)
    # a 4.x file applied to a 3.10 broker: left out with its queue, as that broker's import does
    said: list[str] = []
    spec = spec_of_definitions(
        path,
        server_named_binding("4.0.5"),
        lambda problem: said.append(problem.message),
        lambda: (3, 10, 8),
    )
    assert [b.destination for b in spec.vhosts[0].bindings] == ["q"]
    assert any("amq.gen-x1" in line for line in said)


def test_the_broker_is_asked_its_version_only_for_a_server_named_binding(tmp_path: Path) -> None:
    def never() -> tuple[int, ...]:
        raise AssertionError("the broker's version decides nothing here")

    plain = {"rabbitmq_version": "4.0.5", "vhosts": [{"name": "v"}]}
    spec_of_definitions(tmp_path / "defs.json", plain, lambda problem: None, never)


def test_a_broker_of_unknown_version_leaves_the_file_s_own_version_to_judge(
    tmp_path: Path,
) -> None:
    with pytest.raises(SpecError, match=r"the file is from 4\.0\.5"):
        spec_of_definitions(
            tmp_path / "defs.json",
            server_named_binding("4.0.5"),
            lambda problem: None,
            lambda: None,
        )


@pytest.mark.parametrize(
    ("entry", "protected"),
    [
        ({"name": "v", "metadata": {"protected_from_deletion": True}}, True),
        ({"name": "v", "protected_from_deletion": True}, True),
        ({"name": "v", "metadata": {"description": "d"}}, False),
    ],
)
def test_a_vhost_s_deletion_protection_comes_through_a_definitions_file(
    entry: dict[str, object], protected: bool
) -> None:
    (vhost,) = topology_from_definitions({"vhosts": [entry]}, "defs").topology.vhosts
    assert vhost.protected_from_deletion is protected
    (written,) = spec_document(topology_from_definitions({"vhosts": [entry]}, "defs").topology)[
        "vhosts"
    ]
    assert written.get("protected_from_deletion", False) is protected


@pytest.mark.parametrize(("upgrade", "refused"), [((4, 3, 0), True), ((3, 13, 7), False)])
def test_what_a_version_planned_for_would_refuse_of_a_file_today_s_broker_takes(
    upgrade: tuple[int, ...], refused: bool
) -> None:
    """``plan --target-version 4.3`` against a 3.10 broker: the file is taken as 3.10 takes it
    (the binding left out), and the version planned for is asked apart."""
    data = server_named_binding("3.10.8")
    imported = topology_from_definitions(data, "defs", "defs.json", version=(3, 10, 8))
    assert "binding v/amq.topic -> amq.gen-x1" in "\n".join(imported.left_out)
    found = refused_at(data, upgrade, "defs.json")
    if refused:
        (line,) = found
        assert line.startswith("binding v/amq.topic -> amq.gen-x1 (routing key 'orders.#')")
        assert "(the target is 4.3.0)" in line
    else:
        assert found == []
