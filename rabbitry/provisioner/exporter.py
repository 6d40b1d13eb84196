"""Adopting an existing broker: read vhosts into a topology that round-trips through a spec.

Users granted access to an exported vhost come along, with their password hash (never a
password), only when asked (``include_users``; ``all_users`` for every user of the broker);
without them their permissions stay out too, so that the spec does not grant access to users
it does not declare. rabbitry's own ownership
records and locks are left out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from rabbitry.errors import BrokerError, ObjectNotFound
from rabbitry.gcpause import pauses_collector
from rabbitry.management.client import ManagementClient
from rabbitry.provisioner.names import LOCK_PREFIX
from rabbitry.provisioner.ownership import RECORD_PREFIX
from rabbitry.provisioner.state import read_state
from rabbitry.topology.document import dump_yaml, spec_document
from rabbitry.topology.primitives import JSON, Topology, User


@pauses_collector
def export_topology(
    client: ManagementClient,
    vhosts: Iterable[str],
    *,
    name: str,
    include_users: bool = False,
    all_users: bool = False,
    left_out: list[str] | None = None,
    vanished: list[str] | None = None,
) -> Topology:
    """The given vhosts as they are on the broker, as a topology named ``name``; what no spec
    can declare is left out, one line each in ``left_out``. ``include_users``: the users with a
    permission in those vhosts come along; ``all_users``: every user of the broker does, those
    without any permission too (an administrator-only or monitoring-only user), for a
    take-over of the whole broker. A vhost that is not on the broker is an error; with
    ``vanished`` (an export of every vhost, listed beforehand), one deleted before or while it
    is read is left out whole and named there instead."""
    wanted = list(vhosts)
    existing = {v["name"] for v in client.vhosts()}
    missing = [v for v in wanted if v not in existing]
    if missing and vanished is None:
        raise BrokerError(
            f"no such vhost on the broker: {', '.join(missing)}"
            f" (known: {', '.join(sorted(existing))})"
        )
    if vanished is not None:
        vanished.extend(missing)
        wanted = [v for v in wanted if v in existing]
    users: set[str] = set()
    if all_users:
        users.update(u["name"] for u in client.users())
    elif include_users:
        for vhost in list(wanted):
            try:
                users.update(p["user"] for p in client.permissions(vhost))
            except ObjectNotFound:
                if vanished is None or client.vhost_exists(vhost):
                    raise
                vanished.append(vhost)
                wanted.remove(vhost)
    state = read_state(
        client,
        stack=name,
        vhosts=wanted,
        users=users,
        with_stats=False,
        left_out=left_out,
        vanished=vanished,
    )
    exported_users = tuple(
        User(
            name=user.name,
            tags=user.tags,
            limits=user.limits,
            password_hash=state.password_hashes[user.name][0] or None,
            hashing_algorithm=state.password_hashes[user.name][1]
            or "rabbit_password_hashing_sha256",
        )
        for user in state.topology.users
    )
    exported_vhosts = state.topology.vhosts
    if not (include_users or all_users):
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


@dataclass(frozen=True)
class SecretReference:
    """A password an export leaves out: the environment variable that must hold it on apply."""

    variable: str
    where: str
    """What it belongs to, e.g. ``federation-upstream dc1 (uri)``, never the secret."""


_URI_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^:@/\s]*:)(?P<pw>[^@/\s]*)@")
_TOKEN = "RABBITRYSECRETREF{}X"


def _variable(*parts: str) -> str:
    return "RABBITRY_" + re.sub(r"[^A-Z0-9]+", "_", "_".join(parts).upper()).strip("_")


def export_text(
    topology: Topology, *, reveal_secrets: bool = False, passwords_from_env: bool = False
) -> tuple[str, list[SecretReference]]:
    """The spec of ``topology`` as YAML, with every password inside a parameter's URIs (the
    uri of a federation upstream, the src-uri and dest-uri of a shovel ...) replaced by an
    environment reference ``{{ env.RABBITRY_..._PASSWORD }}`` (as written in the URI,
    percent-encoded); the references come back to be listed for whoever applies the spec.
    ``reveal_secrets`` writes the passwords themselves. ``passwords_from_env``: users get
    ``password: {{ env.RABBITRY_USER_..._PASSWORD }}`` instead of their password hash."""
    references: list[SecretReference] = []
    by_variable: dict[str, str] = {}

    def reference(variable: str, where: str) -> str:
        if variable not in by_variable:
            by_variable[variable] = _TOKEN.format(len(by_variable))
            references.append(SecretReference(variable, where))
        return by_variable[variable]

    if reveal_secrets:
        return _finished(spec_document(topology), passwords_from_env, reference, by_variable), []

    def hide(value: JSON, owner: tuple[str, ...], key: str) -> JSON:
        if isinstance(value, str):

            def swap(match: re.Match[str]) -> str:
                variable = _variable(*owner, key, "password")
                token = reference(variable, f"{' '.join(owner)} ({key})")
                return match["head"] + token + "@"

            return _URI_PASSWORD.sub(swap, value)
        if isinstance(value, list):
            return [hide(item, owner, key) for item in value]
        if isinstance(value, dict):
            return {k: hide(v, owner, k if key == "" else f"{key}-{k}") for k, v in value.items()}
        return value

    vhosts = tuple(
        vhost.model_copy(
            update={
                "parameters": tuple(
                    p.model_copy(update={"value": hide(p.value, (p.component, p.name), "")})
                    for p in vhost.parameters
                )
            }
        )
        for vhost in topology.vhosts
    )
    global_parameters = tuple(
        p.model_copy(update={"value": hide(p.value, ("global", p.name), "")})
        for p in topology.global_parameters
    )
    hidden = topology.model_copy(update={"vhosts": vhosts, "global_parameters": global_parameters})
    text = _finished(spec_document(hidden), passwords_from_env, reference, by_variable)
    return text, references


def _finished(
    doc: dict[str, Any],
    passwords_from_env: bool,
    reference: Callable[[str, str], str],
    by_variable: dict[str, str],
) -> str:
    """The spec's text, users' password hashes swapped for environment references if asked."""
    if passwords_from_env:
        for user in doc.get("users", []):
            name = user["name"]
            token = reference(_variable("user", name, "password"), f"user {name}")
            dropped = ("name", "password_hash", "hashing_algorithm")
            rest = {k: v for k, v in user.items() if k not in dropped}
            user.clear()
            user.update({"name": name, "password": token, **rest})
    text = dump_yaml(doc)
    for variable, token in by_variable.items():
        text = text.replace(token, "{{ env." + variable + " }}")
    return text
