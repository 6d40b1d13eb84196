"""Which shovels of a plan the broker would refuse for the user applying it, found before the
first change.

A shovel's URI without a host (``amqp://``, ``amqp:///vhost``) is a direct connection inside
the node, made as the user who declares the shovel: the broker's validation of the parameter
(rabbit_shovel_parameters) checks that this user may connect to that vhost and otherwise answers
HTTP 400 "Validation failed ... user U may not connect to vhost V". An apply that met it there
would stop half way, after every change ordered before parameters; the plan finds it instead.

Pure: the caller passes the vhosts the user can reach now; the plan tells what it adds (a vhost
it creates, whose creator the broker grants full permissions, and permissions it declares for
that user).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

from rabbitry.diagnostics import Diagnostic
from rabbitry.provisioner.plans import Action, Plan
from rabbitry.provisioner.refusals import refused
from rabbitry.topology.primitives import JSON, Parameter

DECLARING = frozenset({Action.CREATE, Action.UPDATE, Action.REPLACE})


def direct_vhosts(value: JSON) -> list[tuple[str, str]]:
    """(key, vhost) of each direct AMQP 0-9-1 URI of a shovel's value; a URI without a path
    names the default vhost ``/``, as the broker's URI parser reads it."""
    if not isinstance(value, dict):
        return []
    out = []
    for end in ("src", "dest"):
        if value.get(f"{end}-protocol", "amqp091") != "amqp091":
            continue
        uris = value.get(f"{end}-uri")
        for uri in uris if isinstance(uris, list) else [uris]:
            if not isinstance(uri, str):
                continue
            try:
                parts = urlsplit(uri)
            except ValueError:
                continue
            if parts.scheme not in ("amqp", "amqps") or parts.netloc:
                continue
            path = parts.path[1:] if parts.path.startswith("/") else parts.path
            out.append((f"{end}-uri", unquote(path) if parts.path else "/"))
    return out


def unreachable_shovels(plan: Plan, user: str, reachable: Iterable[str]) -> list[Diagnostic]:
    """The shovels the plan declares whose direct URIs name a vhost ``user`` (the one applying)
    may not connect to once the plan's earlier changes are made: the broker would refuse them."""
    can = set(reachable)
    for change in plan.changes:
        if change.action not in DECLARING:
            continue
        if change.kind == "vhost":
            can.add(change.vhost)  # the broker grants a vhost's creator full permissions
        elif change.kind == "permission" and change.key.identity == (user,):
            can.add(change.vhost)
    problems: list[Diagnostic] = []
    for change in plan.changes:
        desired = change.desired
        if change.action not in DECLARING or not isinstance(desired, Parameter):
            continue
        if desired.component != "shovel":
            continue
        for key, vhost in direct_vhosts(desired.value):
            if vhost not in can:
                detail = (
                    f"{change.title}: its {key} connects inside the node to vhost {vhost!r},"
                    f" which user {user!r} (the one applying) may not connect to; the broker"
                    f" refuses such a shovel. Give {user!r} a permission in {vhost!r}, or"
                    " name a host in the URI"
                )
                problems.append(refused(change, "a shovel the broker would refuse", detail))
    return problems


__all__ = ["direct_vhosts", "unreachable_shovels"]
