"""Saved plans on hand-made topologies (no broker): what a plan file holds, what it refuses."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from pydantic import SecretStr

from rabbitry.errors import PlanError
from rabbitry.files import write_private
from rabbitry.provisioner.planfile import BrokerIdentity, SavedPlan, is_plan_file
from rabbitry.provisioner.planner import Action, plan
from rabbitry.topology.primitives import Parameter, Queue, QueueType, Topology, User, Vhost
from rabbitry.topology.spec.passwords import password_matches
from tests.unit.provisioner.hand_made import BIND, ORDERS, WORK, V, owned, state

UPSTREAM = Parameter(
    component="federation-upstream", name="dc2", value={"uri": "amqp://fed:Upstr3am-pw@dc2"}
)
APP = User(name="app", password=SecretStr("S3cret-pw!"), tags=("monitoring",))


def topo(*members: object, users: tuple[User, ...] = ()) -> Topology:
    kinds: dict[str, list[object]] = {}
    for m in members:
        kinds.setdefault(type(m).__name__.lower() + "s", []).append(m)
    fields = {
        "exchanges": tuple(kinds.get("exchanges", ())),
        "queues": tuple(kinds.get("queues", ())),
        "bindings": tuple(kinds.get("bindings", ())),
        "parameters": tuple(kinds.get("parameters", ())),
    }
    return Topology(name="shop", vhosts=(Vhost(name=V, **fields),), users=users)  # type: ignore[arg-type]


DESIRED = topo(ORDERS, WORK, BIND, UPSTREAM, users=(APP,))
OLD_WORK = Queue(name="work", type=QueueType.QUORUM, arguments={"x-delivery-limit": 3})
OBSERVED = topo(ORDERS, OLD_WORK)


STAGING = BrokerIdentity("rabbitmq-cluster-id-staging", "rabbit@a", ("http://a:15672",))


def saved(tmp_path: Path, observed: Topology = OBSERVED) -> tuple[SavedPlan, Path]:
    made = plan(DESIRED, state(observed, owned(observed)))
    path = tmp_path / "shop.plan"
    write_private(path, SavedPlan.of(made, STAGING, "http://admin:***@a:15672").to_text())
    return SavedPlan.read(path), path


def test_a_saved_plan_reads_back_as_the_same_plan(tmp_path: Path) -> None:
    made = plan(DESIRED, state(OBSERVED, owned(OBSERVED)))
    again, path = saved(tmp_path)
    assert is_plan_file(path) and not is_plan_file(Path(__file__))
    assert [(c.action, c.key, c.reasons) for c in again.plan.changes] == [
        (c.action, c.key, c.reasons) for c in made.changes
    ]
    assert again.plan.desired_digests == made.desired_digests
    assert again.plan.record == made.record and again.cluster == "rabbit@a"
    replace = again.plan.by_action(Action.REPLACE)
    assert [c.desired for c in replace] == [WORK] and [c.observed for c in replace] == [OLD_WORK]
    # a vhost change carries the vhost with its objects, as the plan had it
    vhost_changes = [c for c in again.plan.changes if c.kind == "vhost"]
    assert all(c.desired is None or c.desired.queues for c in vhost_changes)


def test_a_plan_file_holds_no_clear_password_and_only_its_owner_reads_it(tmp_path: Path) -> None:
    again, path = saved(tmp_path)
    text = path.read_text()
    assert "S3cret-pw!" not in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    (user,) = [c.desired for c in again.plan.changes if c.kind == "user"]
    assert isinstance(user, User) and user.password is None and user.password_hash
    assert password_matches("S3cret-pw!", user.password_hash, user.hashing_algorithm) is True
    # what a federation upstream needs to connect is kept (the file is the owner's only)
    assert "Upstr3am-pw" in text


def test_an_edited_plan_file_is_refused(tmp_path: Path) -> None:
    _, path = saved(tmp_path)
    data = json.loads(path.read_text())
    data["changes"][0]["action"] = "delete"
    path.write_text(json.dumps(data))
    with pytest.raises(PlanError, match="changed after it was saved"):
        SavedPlan.read(path)
    path.write_text("version: 1\nname: shop\n")
    with pytest.raises(PlanError, match="not a rabbitry plan file"):
        SavedPlan.read(path)


def test_a_plan_is_stale_once_what_it_touches_changes(tmp_path: Path) -> None:
    again, _ = saved(tmp_path)
    assert again.stale(state(OBSERVED, owned(OBSERVED)), STAGING) == []
    # objects the plan does not touch may change
    extra = topo(ORDERS, OLD_WORK, Queue(name="other"))
    assert again.stale(state(extra, owned(OBSERVED)), STAGING) == []

    changed = topo(ORDERS, Queue(name="work", type=QueueType.QUORUM))
    assert again.stale(state(changed, owned(OBSERVED)), STAGING) == [
        "queue shop/work changed since the plan was made"
    ]
    vanished = topo(ORDERS)
    assert "queue shop/work vanished since the plan was made" in again.stale(
        state(vanished, owned(OBSERVED)), STAGING
    )
    appeared = topo(ORDERS, OLD_WORK, UPSTREAM)
    assert any(
        "appeared since the plan was made" in p
        for p in again.stale(state(appeared, owned(OBSERVED)), STAGING)
    )
    applied = again.stale(state(OBSERVED, owned(DESIRED)), STAGING)
    assert applied == [
        "stack 'shop' was applied since the plan was made (its ownership record changed)"
    ]


@pytest.mark.parametrize(
    "elsewhere",
    [
        # production made from the same chart: the same cluster name, another cluster id
        BrokerIdentity("rabbitmq-cluster-id-prod", "rabbit@a", ("http://a:15672",)),
        BrokerIdentity("rabbitmq-cluster-id-staging", "rabbit@a", ("http://b:15672",)),
    ],
    ids=["another-cluster-id", "another-url"],
)
def test_a_plan_is_refused_on_another_broker_naming_both(
    tmp_path: Path, elsewhere: BrokerIdentity
) -> None:
    again, _ = saved(tmp_path)
    (problem,) = again.stale(state(OBSERVED, owned(OBSERVED)), elsewhere)
    assert problem.startswith(
        "the plan was made against cluster rabbitmq-cluster-id-staging (rabbit@a) at"
        f" http://a:15672; this broker is {elsewhere.describe()}"
    )
    assert again.elsewhere(STAGING) is None


def test_a_plan_file_holds_no_secret_the_broker_holds_now_yet_sees_it_change(
    tmp_path: Path,
) -> None:
    on_broker = Parameter(
        component="federation-upstream", name="dc2", value={"uri": "amqp://fed:Old-pw@dc2"}
    )
    again, path = saved(tmp_path, topo(ORDERS, OLD_WORK, on_broker))
    text = path.read_text()
    assert "Old-pw" not in text, "the password on the broker now"
    assert text.count("Upstr3am-pw") >= 1, "the spec's new password, which apply sends"
    (update,) = [c for c in again.plan.changes if c.kind == "parameter"]
    assert isinstance(update.desired, Parameter) and "Upstr3am-pw" in str(update.desired.value)
    assert update.observed is not None and update.observed.name == "dc2"
    # the salted fingerprint still tells that the broker's password changed since
    same = topo(ORDERS, OLD_WORK, on_broker)
    assert again.stale(state(same, owned(same)), STAGING) == []
    rotated = on_broker.model_copy(update={"value": {"uri": "amqp://fed:Rotated-pw@dc2"}})
    moved = topo(ORDERS, OLD_WORK, rotated)
    assert again.stale(state(moved, owned(same)), STAGING) == [
        "parameter shop/federation-upstream/dc2 changed since the plan was made"
    ]
    # and it is keyed by the plan's own salt: no plain digest of the settings is in the file
    from rabbitry.provisioner.ownership import digest as plain_digest

    assert plain_digest(on_broker) not in text


def test_plan_json_is_what_docs_plan_schema_json_describes(tmp_path: Path) -> None:
    from rabbitry.provisioner.plan_schema import PlanDocument, plan_json_schema

    committed = (Path(__file__).parents[3] / "docs" / "plan.schema.json").read_text()
    assert json.loads(committed) == plan_json_schema(), (
        "docs/plan.schema.json is stale: run `rabbitry schema --plan > docs/plan.schema.json`"
    )
    made = plan(DESIRED, state(OBSERVED, owned(OBSERVED)))
    document = PlanDocument.model_validate(made.to_json())
    assert {c.action for c in document.changes} >= {"create", "replace"}
    assert document.summary.replace == 1
    # a field the schema does not know is an error, so new fields must be documented
    with pytest.raises(ValueError, match="extra"):
        PlanDocument.model_validate({**made.to_json(), "surprise": 1})


def test_the_plan_schema_names_every_kind_a_plan_can_hold() -> None:
    import typing

    from rabbitry.provisioner.plan_schema import Kind
    from rabbitry.topology.primitives import KIND_ORDER

    assert typing.get_args(Kind) == KIND_ORDER
