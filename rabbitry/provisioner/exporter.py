"""Adopting an existing broker: read vhosts into a topology that round-trips through a spec.

Users granted access to an exported vhost come along, with their password hash (never a
password), only when asked (``include_users``); without them their permissions stay out too, so
that the spec does not grant access to users it does not declare. rabbitry's own ownership
records and locks are left out.
"""

from __future__ import annotations

from collections.abc import Iterable

from rabbitry.errors import BrokerError
from rabbitry.provisioner.lock import LOCK_PREFIX
from rabbitry.provisioner.management import ManagementClient
from rabbitry.provisioner.ownership import RECORD_PREFIX
from rabbitry.provisioner.state import read_state
from rabbitry.topology.primitives import Topology, User


def export_topology(
    client: ManagementClient,
    vhosts: Iterable[str],
    *,
    name: str,
    include_users: bool = False,
) -> Topology:
    """The given vhosts as they are on the broker, as a topology named ``name``."""
    wanted = list(vhosts)
    existing = {v["name"] for v in client.vhosts()}
    missing = [v for v in wanted if v not in existing]
    if missing:
        raise BrokerError(
            f"no such vhost on the broker: {', '.join(missing)}"
            f" (known: {', '.join(sorted(existing))})"
        )
    users: set[str] = set()
    if include_users:
        for vhost in wanted:
            users.update(p["user"] for p in client.permissions(vhost))
    state = read_state(client, stack=name, vhosts=wanted, users=users, with_stats=False)
    exported_users = tuple(
        User(
            name=user.name,
            tags=user.tags,
            password_hash=state.password_hashes[user.name][0] or None,
            hashing_algorithm=state.password_hashes[user.name][1]
            or "rabbit_password_hashing_sha256",
        )
        for user in state.topology.users
    )
    exported_vhosts = state.topology.vhosts
    if not include_users:
        exported_vhosts = tuple(
            vhost.model_copy(update={"permissions": (), "topic_permissions": ()})
            for vhost in exported_vhosts
        )
    return Topology(
        name=name,
        vhosts=exported_vhosts,
        users=exported_users,
        global_parameters=tuple(
            p
            for p in state.topology.global_parameters
            if not p.name.startswith((RECORD_PREFIX, LOCK_PREFIX))
        ),
    )
