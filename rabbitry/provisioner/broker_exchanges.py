"""Bindings to or from an ``amq.*`` exchange the broker does not have, found before the first
change.

A spec never declares ``amq.*`` exchanges: they are the broker's, and a binding may use them. But
not every vhost has every one: a new vhost has no ``amq.rabbitmq.log`` (3.10, 4.0, 4.3 checked),
and ``amq.rabbitmq.event`` exists only with its plugin. A binding from one that is missing is
refused by the broker (404 on the binding, ``resources_missing`` on a 4.x definitions import;
3.10's import makes nothing of it) after every change ordered before bindings; the plan finds it
instead.

Pure: the caller says which ``amq.*`` exchanges exist in the vhosts that exist; a vhost the plan
creates gets the broker's own set (``plugin_objects.BROKER_EXCHANGES``; checked on 3.10, 4.0 and
4.3: a new vhost has no ``amq.rabbitmq.log``, whatever the default vhost has).
"""

from __future__ import annotations

from collections.abc import Callable

from rabbitry.diagnostics import Address, Diagnostic
from rabbitry.provisioner.plans import Action, Plan
from rabbitry.topology.plugin_objects import BROKER_EXCHANGES, RESERVED_PREFIX
from rabbitry.topology.primitives import Binding, DestinationType

DECLARING = frozenset({Action.CREATE, Action.UPDATE, Action.REPLACE})


def reserved_ends(plan: Plan) -> set[tuple[str, str]]:
    """(vhost, exchange) of each ``amq.*`` exchange a binding the plan declares uses."""
    ends: set[tuple[str, str]] = set()
    for change in plan.changes:
        binding = change.desired
        if change.action not in DECLARING or not isinstance(binding, Binding):
            continue
        names = [binding.source]
        if binding.destination_type is DestinationType.EXCHANGE:
            names.append(binding.destination)
        ends.update((change.vhost, n) for n in names if n.startswith(RESERVED_PREFIX))
    return ends


def missing_exchanges(plan: Plan, exists: Callable[[str, str], bool]) -> list[Diagnostic]:
    """The bindings of the plan whose ``amq.*`` end the broker does not have: ``exists(vhost,
    name)`` answers for vhosts that exist now; in a vhost the plan creates only the broker's
    own exchanges exist."""
    created = {c.vhost for c in plan.changes if c.kind == "vhost" and c.action is Action.CREATE}
    problems: list[Diagnostic] = []
    for vhost, name in sorted(reserved_ends(plan)):
        there = name in BROKER_EXCHANGES if vhost in created else exists(vhost, name)
        if not there:
            detail = (
                f"exchange {vhost}/{name}: a binding of the plan uses it, and the broker has no"
                " such exchange (amq.* exchanges are the broker's own: a new vhost has only"
                f" {', '.join(sorted(BROKER_EXCHANGES))}; amq.rabbitmq.log is not made in every"
                " vhost, amq.rabbitmq.event needs its plugin); leave the binding out, or bind"
                " another exchange"
            )
            address = Address("exchange", vhost, name)
            problems.append(Diagnostic("an exchange the broker lacks", detail, address=address))
    return problems


__all__ = ["missing_exchanges", "reserved_ends"]
