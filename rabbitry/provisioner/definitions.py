"""Definitions files as input: a ``definitions.json`` (``rabbitmqctl export_definitions``,
``GET /api/definitions``, any RabbitMQ from 3.8 on) turned into the topology a spec declares.

``rabbitry import-definitions FILE`` writes that topology as a spec (passwords inside URIs as
environment references, as ``rabbitry export`` does; a user's plain ``password`` as the hash the
broker would make of it); applying it to an empty broker makes the
same definitions. Exchanges of types rabbitry does not know (a plugin's, such as
``x-local-random``) are kept, passed through unchecked. What a spec cannot hold is left out by
name, never silently: what the broker made for its plugins (``topology.plugin_objects``:
federation links, shard queues, MQTT and STOMP subscriptions), runtime parameters of other
components, bindings to or from what was left out, and the broker's own global parameters
(``internal_cluster_id``). What the broker's own import takes is taken: an object written twice
is its last entry (the others named, and where they differ and the broker's import declares
the kind concurrently, said to be a race there), ``amq.*`` queues and exchanges are left out by name
(the broker's import skips them: a server-named ``amq.gen-...`` queue is its client's), but a
binding to such a queue is refused where the broker's import refuses it, RabbitMQ 4.0 on
(``check_server_named_bindings``): judged by the broker the file is applied to when there is
one (plan, apply), else by the version that wrote the file.

Both shapes RabbitMQ has written are read: tags as a list or a comma-separated string, vhost
metadata at the top of the entry or under ``metadata``, vhost limits in the vhost entry or as
``vhost-limits`` parameters, queue types as ``type`` or ``x-queue-type``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from rabbitry.errors import SpecError, SpecProblem
from rabbitry.provisioner.definitions_check import check_definitions
from rabbitry.provisioner.names import LOCK_PREFIX, stack_name
from rabbitry.provisioner.ownership import RECORD_PREFIX
from rabbitry.provisioner.state import observed_vhost
from rabbitry.provisioner.strict_json import loads
from rabbitry.topology.kinds.kind import limits_of, tags_of
from rabbitry.topology.primitives import GlobalParameter, Topology, User, Vhost
from rabbitry.topology.spec.passwords import DEFAULT_ALGORITHM
from rabbitry.topology.versions import (
    SERVER_NAMED_BINDING,
    Kind,
    Use,
    Version,
    judge,
    parse_version,
)

if TYPE_CHECKING:
    from rabbitry.topology.spec.model import Spec

JSONDict = dict[str, Any]

SPEC_COMPONENTS = frozenset({"federation-upstream", "federation-upstream-set", "shovel"})
"""Vhost runtime parameters a spec holds as ``parameters`` (operator policies and vhost limits
have keys of their own)."""

BROKER_GLOBALS = frozenset({"internal_cluster_id"})
"""Global parameters the broker makes for itself: never part of a spec."""


@dataclass
class Imported:
    """A definitions file as a topology, and what it held that a spec cannot."""

    topology: Topology
    left_out: list[str] = field(default_factory=list)
    """One line per object left out, naming it and why."""


def read_definitions(path: Path) -> JSONDict:
    """The JSON of a definitions file; clear errors for anything else (``strict_json``: what
    JSON cannot carry, keys written twice, nesting past the limit)."""
    try:
        data = loads(path.read_text(encoding="utf-8"), str(path))
    except OSError as exc:
        raise SpecError(
            SpecProblem(f"cannot read {path}: {exc.strerror}", file=str(path))
        ) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise SpecError(
            SpecProblem(f"not a JSON definitions file ({exc})", file=str(path))
        ) from None
    if not isinstance(data, dict) or not any(k in data for k in ("vhosts", "users", "queues")):
        raise SpecError(
            SpecProblem(
                "not a RabbitMQ definitions file: expected an object with vhosts, users,"
                " queues ... (rabbitmqctl export_definitions, or GET /api/definitions)",
                file=str(path),
            )
        )
    return data


IDENTITY: dict[str, Callable[[JSONDict], tuple[object, ...]]] = {
    "vhosts": lambda e: (e["name"],),
    "users": lambda e: (e["name"],),
    "permissions": lambda e: (e.get("vhost", "/"), e["user"]),
    "topic_permissions": lambda e: (e.get("vhost", "/"), e["user"], e["exchange"]),
    "parameters": lambda e: (e.get("vhost", "/"), e["component"], e["name"]),
    "global_parameters": lambda e: (e["name"],),
    "policies": lambda e: (e.get("vhost", "/"), e["name"]),
    "queues": lambda e: (e.get("vhost", "/"), e["name"]),
    "exchanges": lambda e: (e.get("vhost", "/"), e["name"]),
    "bindings": lambda e: (
        e.get("vhost", "/"),
        e["source"],
        e["destination_type"],
        e["destination"],
        e.get("routing_key", ""),
        json.dumps(e.get("arguments") or {}, sort_keys=True),
    ),
}
"""What names one object of each kind: two entries with the same identity are one object."""


SET_IN_ORDER = frozenset({"parameters", "global_parameters", "policies"})
"""Kinds the broker's import sets one entry after the other, so that of an object written twice
the last entry holds. It imports every other kind concurrently (rabbit_definitions
concurrent_for_all), so which of two different entries holds is not defined: RabbitMQ 4.0.5
kept the first entry of a queue written twice, 3.10.8 the last (checked)."""


def one_of_each(data: JSONDict, left_out: list[str]) -> JSONDict:
    """``data`` with one entry per object, the last; each other entry is named in
    ``left_out``, and said to be a race on the broker where it differs from the last and the
    broker imports its kind concurrently (``SET_IN_ORDER``)."""
    out = dict(data)
    for kind, identity in IDENTITY.items():
        entries = data.get(kind) or []
        last: dict[tuple[object, ...], int] = {}
        for index, entry in enumerate(entries):
            last[identity(entry)] = index
        if len(last) == len(entries):
            continue
        for index, entry in enumerate(entries):
            kept = last[identity(entry)]
            if kept == index:
                continue
            shown = "/".join(str(part) for part in identity(entry)[:3])
            if entry == entries[kept]:
                why = "the same entry is written again there"
            elif kind in SET_IN_ORDER:
                why = "the broker's import keeps the last entry too"
            else:
                why = (
                    "rabbitry keeps the last; the broker's import declares these concurrently"
                    " and may keep either (4.0.5 kept the first, 3.10.8 the last): remove the"
                    " entry not meant"
                )
            left_out.append(f"{kind}[{index}] ({shown}): {kind}[{kept}] is the same object; {why}")
        keep = set(last.values())
        out[kind] = [entry for index, entry in enumerate(entries) if index in keep]
    return out


USER_SCOPES = ("none", "access", "all")
"""Which users a scoped import takes: none; those with a permission in the vhosts taken; all,
those without any permission too (as ``rabbitry export --users``)."""

VHOST_KINDS = (
    "permissions",
    "topic_permissions",
    "parameters",
    "policies",
    "queues",
    "exchanges",
    "bindings",
)


def scoped(
    data: JSONDict, vhosts: tuple[str, ...] = (), users: str = "all", file: str | None = None
) -> JSONDict:
    """The part of a definitions document a take-over asks for, by the rules of ``rabbitry
    export``: only the objects of ``vhosts`` (every vhost when empty; the broker-wide global
    parameters only then), and the users of scope ``users`` (``USER_SCOPES``). With a user left
    out, its permissions are too, and with no user at all every permission, so that the spec
    grants nothing to users it leaves out."""
    if users not in USER_SCOPES:
        raise ValueError(f"users is one of {', '.join(USER_SCOPES)}, not {users!r}")
    out = dict(data)
    if vhosts:
        known = {str(v.get("name")) for v in data.get("vhosts") or [] if isinstance(v, dict)}
        missing = [v for v in vhosts if v not in known]
        if missing:
            raise SpecError(
                SpecProblem(
                    f"no such vhost in the file: {', '.join(missing)} (it lists:"
                    f" {', '.join(sorted(known)) or 'none'})",
                    file=file,
                )
            )
        wanted = set(vhosts)
        out["vhosts"] = [v for v in data.get("vhosts") or [] if v.get("name") in wanted]
        for kind in VHOST_KINDS:
            out[kind] = [e for e in data.get(kind) or [] if str(e.get("vhost", "/")) in wanted]
        out["global_parameters"] = []
    if users == "none":
        out["users"] = []
    elif users == "access":
        allowed = {str(p.get("user")) for p in out.get("permissions") or []}
        out["users"] = [u for u in data.get("users") or [] if str(u.get("name")) in allowed]
    # the permissions of a user left out go with it; those of a user the file does not list
    # (one it counts on existing, as `guest`) stay, unless no user is taken at all
    taken = {str(u.get("name")) for u in out.get("users") or []}
    dropped = {str(u.get("name")) for u in data.get("users") or []} - taken
    for kind in ("permissions", "topic_permissions"):
        out[kind] = [
            p for p in out.get(kind) or [] if users != "none" and str(p.get("user")) not in dropped
        ]
    return out


def version_of_definitions(data: JSONDict) -> Version | None:
    """The RabbitMQ version that wrote a definitions file (``rabbitmq_version``, or
    ``rabbit_version`` before 3.8), None when it does not say."""
    for key in ("rabbitmq_version", "rabbit_version"):
        version = parse_version(str(data.get(key) or ""))
        if version:
            return version
    return None


SERVER_NAMED_PREFIX = "amq.gen-"
"""The names the broker gives the queues a client declares without a name."""


def server_named_bindings(data: JSONDict) -> list[JSONDict]:
    """The file's bindings to a server-named (``amq.gen-...``) queue."""
    return [
        entry
        for entry in data.get("bindings") or []
        if entry.get("destination_type") == "queue"
        and str(entry.get("destination", "")).startswith(SERVER_NAMED_PREFIX)
    ]


def check_server_named_bindings(
    data: JSONDict,
    version: Version | None,
    file: str | None = None,
    runs: str = "the file is from",
) -> None:
    """A SpecError naming each binding to a server-named queue when the broker of ``version``
    refuses the file for it (``versions.SERVER_NAMED_BINDING``: 4.0 on), as its own import
    would; older brokers, and an unknown version, leave such a binding out with its queue.
    ``runs`` says where the version is from (the file, or the broker it is applied to)."""
    if version is None:
        return
    verdicts = judge([Use(Kind.FEATURE, SERVER_NAMED_BINDING)], version)
    if not any(v.refused for v in verdicts):
        return
    problems: list[SpecProblem] = []
    for entry in server_named_bindings(data):
        where = (
            f"binding {entry.get('vhost', '/')}/{entry.get('source', '')} ->"
            f" {entry.get('destination', '')} (routing key {entry.get('routing_key', '')!r})"
        )
        problems.extend(SpecProblem(v.message(where, runs=runs), file=file) for v in verdicts)
    if problems:
        raise SpecError(problems)


def refused_at(data: JSONDict, version: Version, file: str | None = None) -> list[str]:
    """What the broker at ``version`` would refuse of the definitions file (``plan
    --target-version``: a file the broker of today takes, the version planned for may not)."""
    try:
        check_server_named_bindings(data, version, file, runs="the target is")
    except SpecError as refused:
        return [problem.message for problem in refused.problems]
    return []


def topology_from_definitions(
    data: JSONDict, name: str, file: str | None = None, version: Version | None = None
) -> Imported:
    """The topology of a definitions document, as stack ``name``; ``file`` is what problems
    name as the file. ``version``: the version of the broker the file is applied to, which
    it is judged against (by default the one that wrote it, ``version_of_definitions``)."""
    check_definitions(data, file)
    if version is not None:
        check_server_named_bindings(data, version, file, runs="the broker runs")
    else:
        check_server_named_bindings(data, version_of_definitions(data), file)
    left_out: list[str] = []
    data = one_of_each(data, left_out)
    topology = Topology(
        name=name,
        vhosts=_vhosts_of(data, left_out),
        users=tuple(_user_of(item) for item in data.get("users") or []),
        global_parameters=_global_parameters_of(data, left_out),
    )
    return Imported(topology, left_out)


_VHOST_KINDS = ("queues", "exchanges", "bindings", "policies", "permissions", "topic_permissions")


def _vhosts_of(data: JSONDict, left_out: list[str]) -> tuple[Vhost, ...]:
    """Each vhost the file lists with its objects; what rabbitry does not declare (and the
    objects of a vhost the file does not list) is added to ``left_out``."""
    by_vhost: dict[str, JSONDict] = defaultdict(lambda: defaultdict(list))
    vhost_limits: dict[str, dict[str, int]] = defaultdict(dict)
    for kind in _VHOST_KINDS:
        for item in data.get(kind) or []:
            by_vhost[str(item.get("vhost", "/"))][kind].append(item)
    for item in data.get("parameters") or []:
        vhost, component = str(item.get("vhost", "/")), str(item.get("component"))
        if component == "vhost-limits":
            vhost_limits[vhost].update(limits_of(item.get("value")))
        elif component in SPEC_COMPONENTS or component == "operator_policy":
            by_vhost[vhost]["parameters"].append(item)
        else:
            left_out.append(
                f"parameter {vhost}/{component}/{item.get('name')}: rabbitry declares only"
                f" {', '.join(sorted(SPEC_COMPONENTS))} parameters"
            )

    vhosts = []
    for meta in data.get("vhosts") or []:
        vhost = str(meta["name"])
        vhost_limits[vhost].update(limits_of(meta.get("limits")))
        objects = by_vhost.get(vhost, defaultdict(list))
        observed = observed_vhost(
            vhost,
            _vhost_meta(meta),
            {k: objects[k] for k in ("exchanges", "queues", "bindings", "policies", "parameters")},
            objects["permissions"],
            objects["topic_permissions"],
            vhost_limits[vhost],
            left_out=left_out,
        )
        vhosts.append(observed)
    known = {str(v.get("name")) for v in data.get("vhosts") or []}
    for vhost in sorted(set(by_vhost) - known):
        left_out.append(f"the objects of vhost {vhost}: the file lists no such vhost")
    return tuple(vhosts)


def _user_of(item: JSONDict) -> User:
    # a plain password stays a secret in memory: a spec written of it gets its hash
    # (topology.document), a plan compares it with the broker's hash
    password = SecretStr(item["password"]) if item.get("password") else None
    return User(
        name=str(item["name"]),
        password=password,
        password_hash=item.get("password_hash") or None,
        hashing_algorithm=str(item.get("hashing_algorithm") or DEFAULT_ALGORITHM),
        tags=tags_of(item.get("tags")),
        limits=limits_of(item.get("limits")),
    )


def _global_parameters_of(data: JSONDict, left_out: list[str]) -> tuple[GlobalParameter, ...]:
    """The file's global parameters but the broker's own and rabbitry's records of stacks
    (added to ``left_out``)."""
    out = []
    for item in data.get("global_parameters") or []:
        parameter = str(item.get("name"))
        if parameter in BROKER_GLOBALS:
            left_out.append(f"global parameter {parameter}: the broker makes it for itself")
        elif parameter.startswith((RECORD_PREFIX, LOCK_PREFIX)):
            left_out.append(f"global parameter {parameter}: rabbitry's own record of a stack")
        else:
            out.append(GlobalParameter(name=parameter, value=item.get("value")))
    return tuple(out)


def _vhost_meta(meta: JSONDict) -> JSONDict:
    """The vhost entry as ``observed_vhost`` reads it (the management API's vhost shape)."""
    metadata = meta.get("metadata") or {}
    out = {
        "description": meta.get("description", metadata.get("description", "")),
        "tags": list(tags_of(meta.get("tags", metadata.get("tags", [])))),
    }
    queue_type = meta.get("default_queue_type", metadata.get("default_queue_type"))
    if queue_type:
        out["default_queue_type"] = queue_type
    # a file says what it wants: not saying it is not protected (4.x writes it only when set)
    protected = meta.get("protected_from_deletion", metadata.get("protected_from_deletion"))
    out["protected_from_deletion"] = protected is True
    return out


def spec_of_definitions(
    path: Path,
    data: JSONDict,
    on_warning: Callable[[SpecProblem], None],
    target_version: Callable[[], Version | None] | None = None,
) -> Spec:
    """The spec ``import-definitions`` would write for the definitions file at ``path`` (its
    ``data``), as a model, without the text: what ``plan`` and ``apply`` take a definitions
    file as. The stack is named after the file; what a spec cannot hold is a warning.
    ``target_version``: the version of the broker the file is applied to (asked only when
    that version decides something: a binding to a server-named queue), None for unknown."""
    from pydantic import ValidationError

    from rabbitry.topology.document import spec_document, unknown_to_rabbitry
    from rabbitry.topology.spec.model import Spec
    from rabbitry.topology.spec.problems import problems_from_validation_error

    version = None
    if target_version is not None and server_named_bindings(data):
        version = target_version()
    stack = stack_name(path.stem, "imported")
    imported = topology_from_definitions(data, stack, str(path), version)
    for line in imported.left_out:
        on_warning(SpecProblem(f"left out: {line}", file=str(path), severity="warning"))
    for line in unknown_to_rabbitry(imported.topology):
        on_warning(SpecProblem(f"kept unchecked: {line}", file=str(path), severity="warning"))
    document = spec_document(imported.topology)
    _keep_plain_passwords(document, imported.topology)
    try:
        return Spec.model_validate(document)
    except ValidationError as exc:
        raise SpecError(
            [
                SpecProblem(
                    "the spec made of this definitions file does not pass rabbitry's checks;"
                    " `rabbitry import-definitions` writes it out to look at",
                    file=str(path),
                ),
                *problems_from_validation_error(exc, Spec, None),
            ]
        ) from None


def _keep_plain_passwords(document: JSONDict, topology: Topology) -> None:
    """The users of a file read as the spec itself (never written out) keep a plain password
    as it is, in memory, instead of the fresh salted hash a written spec holds: a plan then
    compares the password with the broker's hash, so a second plan of the same file has
    nothing to change."""
    passwords = {u.name: u.password for u in topology.users if u.password is not None}
    for user in document.get("users", []):
        if user["name"] in passwords:
            user.pop("password_hash", None)
            user.pop("hashing_algorithm", None)  # the broker hashes it with its own default
            user["password"] = passwords[user["name"]]


__all__ = [
    "USER_SCOPES",
    "Imported",
    "check_definitions",
    "read_definitions",
    "scoped",
    "spec_of_definitions",
    "topology_from_definitions",
    "version_of_definitions",
]
