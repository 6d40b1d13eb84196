"""Apply never deletes, demotes or locks out the user it is connected as (no broker)."""

from __future__ import annotations

import base64
import hashlib

from pydantic import SecretStr

from rabbitry.provisioner.applier import ApplyOptions, refusals, self_harm
from rabbitry.provisioner.ownership import OwnershipRecord, digest
from rabbitry.provisioner.planner import plan
from rabbitry.provisioner.state import BrokerState
from rabbitry.topology.primitives import Permission, Topology, User, Vhost


def stored_hash(password: str) -> str:
    salt = b"salt"
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


ADMIN = User(name="ops", tags=("administrator",))
V = Vhost(name="shop", permissions=(Permission(user="ops"),))
ON_BROKER = Topology(name="s", vhosts=(V,), users=(ADMIN,))
OWNED = {k: digest(r) for k, r in ON_BROKER.resources().items()}


def planned(desired: Topology) -> object:
    state = BrokerState(
        topology=ON_BROKER,
        record=OwnershipRecord("s", OWNED),
        password_hashes={"ops": (stored_hash("current"), "rabbit_password_hashing_sha256")},
    )
    return plan(desired, state)


def test_demoting_or_repassing_the_connected_user_is_refused_and_named_in_the_plan() -> None:
    demoted = Topology(name="s", vhosts=(V,), users=(User(name="ops", tags=("management",)),))
    p = planned(demoted)
    (problem,) = refusals(p, ApplyOptions(), connected="ops")  # type: ignore[arg-type]
    assert "takes the administrator tag from user 'ops'" in problem
    assert "the user this apply is connected as" in problem
    assert refusals(p, ApplyOptions(), connected="someone-else") == []  # type: ignore[arg-type]

    repassed = User(name="ops", tags=("administrator",), password=SecretStr("new"))
    p = planned(Topology(name="s", vhosts=(V,), users=(repassed,)))
    assert any("changes the password" in r for r in self_harm(p, "ops"))  # type: ignore[arg-type]
    same = User(name="ops", tags=("administrator",), password=SecretStr("current"))
    assert self_harm(planned(Topology(name="s", vhosts=(V,), users=(same,))), "ops") == []  # type: ignore[arg-type]


def test_pruning_the_connected_user_or_its_permissions_is_refused() -> None:
    p = planned(Topology(name="s", vhosts=(Vhost(name="shop"),)))
    assert refusals(p, ApplyOptions(), connected="ops") == []  # type: ignore[arg-type]
    problems = refusals(p, ApplyOptions(prune=True), connected="ops")  # type: ignore[arg-type]
    assert any("deletes user 'ops'" in r for r in problems)
    assert any("removes the permissions of user 'ops' in shop" in r for r in problems)
