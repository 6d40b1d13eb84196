"""Saved plans: ``rabbitry plan -o FILE`` writes one, ``rabbitry apply FILE`` applies exactly it.

The review workflow Terraform taught: a plan is made, read (``rabbitry show FILE``), approved,
and what is applied is that plan, not whatever the spec and the broker say by then. A plan file
holds the changes, the topology they come from, and what the broker held of every object they
touch when the plan was made (a fingerprint of its settings, or "absent"), with the stack's
ownership record and the broker it was made against: the cluster's ``internal_cluster_id`` (a
random id the broker makes on its first start; the cluster's name is ``rabbit@<hostname>`` by
default, which staging and production made from one chart share) and the management URL. ``apply
FILE`` refuses, changing nothing, on another cluster or at another URL; it reads the objects
again and refuses when one changed, appeared or vanished since, or when another apply of the
stack ran. A checksum over the content catches a file edited by hand (an edit, not a forgery:
keep plan files where only the people who apply can write).

What apply sends is in the file: user passwords are stored as the broker's salted hash, never in
the clear; a parameter's URI keeps the spec's password (a federation upstream needs it), so the
file is written readable by its owner only. What the broker holds now is never stored in the
clear: the parameters as observed are kept without their values, and the fingerprints are keyed
by a random salt of the plan's own (they tell a change, not the value).
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rabbitry.errors import PlanError
from rabbitry.management.client import ManagementClient
from rabbitry.management.endpoints import Endpoints, resolve_endpoints
from rabbitry.provisioner.ownership import OwnershipRecord
from rabbitry.provisioner.planner import owners_of
from rabbitry.provisioner.plans import Action, Change, Plan
from rabbitry.provisioner.relayout import DelayRelayout
from rabbitry.provisioner.state import BrokerState
from rabbitry.topology.kinds import describe_key, kind_of
from rabbitry.topology.primitives import (
    KIND_ORDER,
    GlobalParameter,
    Parameter,
    Primitive,
    ResourceKey,
    Topology,
    User,
    Vhost,
    canonical_json,
)
from rabbitry.topology.spec.passwords import DEFAULT_ALGORITHM, hash_password

FORMAT = "rabbitry-plan"
FORMAT_VERSION = 2
"""2: pinned to the cluster's id and management URLs, salted fingerprints, observed parameters
without their values (1 held the broker's current secrets: it is refused, to be made again)."""


def fingerprint(resource: Primitive | None, salt: str) -> str | None:
    """What the broker held of one object, as a plan compares it (None: absent): keyed by the
    plan's ``salt``, so that a secret in its settings cannot be looked up from it."""
    if resource is None:
        return None
    settings = canonical_json(resource.settings()).encode()
    return hmac.new(salt.encode(), settings, hashlib.sha256).hexdigest()[:32]


def record_fingerprint(record: OwnershipRecord) -> str:
    return hashlib.sha256(canonical_json(record.to_value()).encode()).hexdigest()[:32]


def _without_password(user: User) -> User:
    if user.password is None:
        return user
    return User(
        name=user.name,
        password_hash=hash_password(user.password.get_secret_value()),
        hashing_algorithm=DEFAULT_ALGORITHM,
        tags=user.tags,
    )


def _bare(vhost: Vhost) -> Vhost:
    """A vhost's own settings, without the objects in it (a change to a vhost is to those)."""
    return Vhost(
        name=vhost.name,
        description=vhost.description,
        tags=vhost.tags,
        default_queue_type=vhost.default_queue_type,
        protected_from_deletion=vhost.protected_from_deletion,
    )


def _primitive_json(resource: Primitive | None, observed: bool = False) -> dict[str, Any] | None:
    """One object as the file keeps it; ``observed``: as the broker holds it now. A parameter's
    value may hold the broker's current secrets (an upstream's URI password) and apply needs
    only its name (to delete it): the file keeps no value of it."""
    if resource is None:
        return None
    if isinstance(resource, User):
        resource = _without_password(resource)
    if isinstance(resource, Vhost):
        resource = _bare(resource)
    data = {"kind": resource.kind, **resource.model_dump(mode="json")}
    if observed and isinstance(resource, Parameter | GlobalParameter):
        data["value"] = None
    return data


def _primitive(data: Any, where: str) -> Primitive | None:
    if data is None:
        return None
    if not isinstance(data, dict) or data.get("kind") not in KIND_ORDER:
        raise PlanError(f"{where}: not an object of a kind rabbitry plans")
    fields = {k: v for k, v in data.items() if k != "kind"}
    read: Primitive = kind_of(data["kind"]).primitive.model_validate(fields)
    return read


def _topology_json(topology: Topology) -> dict[str, Any]:
    users = [_without_password(u) for u in topology.users]
    return topology.model_copy(update={"users": tuple(users)}).model_dump(mode="json")


@dataclass(frozen=True)
class BrokerIdentity:
    """Which broker a plan is made against, or applied to."""

    cluster_id: str
    """The cluster's ``internal_cluster_id``: made at random on its first start, kept for its
    life, and not carried by a definitions export ('' on a broker without one)."""
    cluster: str
    """The cluster's name, for people (``rabbit@<hostname>`` unless set: not unique)."""
    urls: tuple[str, ...]
    """The management API's URLs, credentials left out, in name order."""

    def describe(self) -> str:
        return f"cluster {self.cluster_id or '(no id)'} ({self.cluster}) at {', '.join(self.urls)}"


def broker_identity(client: ManagementClient) -> BrokerIdentity:
    """The identity of the broker ``client`` speaks to (two reads)."""
    cluster_id = client.global_parameter("internal_cluster_id")
    return BrokerIdentity(
        str(cluster_id) if cluster_id is not None else "",
        cluster_name(client),
        tuple(sorted(client.base_urls)),
    )


@dataclass(frozen=True)
class SavedPlan:
    """A plan as saved: the plan, and what the broker held when it was made."""

    plan: Plan
    made_against: BrokerIdentity
    """The broker the plan was made against: it applies there only."""
    broker: str
    """The management API the plan was made against (credentials masked), for people."""
    seen: Mapping[ResourceKey, str | None]
    """The fingerprint of every object the plan touches, as it was (None: absent)."""
    salt: str
    """The key of those fingerprints: the plan's own, random."""
    record: str
    """The fingerprint of the stack's ownership record as it was."""
    created: str

    @property
    def cluster(self) -> str:
        return self.made_against.cluster

    @classmethod
    def of(cls, plan: Plan, made_against: BrokerIdentity, broker: str) -> SavedPlan:
        salt = secrets.token_hex(16)
        seen = {change.key: fingerprint(change.observed, salt) for change in plan.changes}
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        return cls(plan, made_against, broker, seen, salt, record_fingerprint(plan.record), now)

    def elsewhere(self, broker: BrokerIdentity) -> str | None:
        """Why ``broker`` is not the one this plan was made against (None: it is)."""
        made = self.made_against
        if broker.cluster_id == made.cluster_id and set(broker.urls) == set(made.urls):
            return None
        return (
            f"the plan was made against {made.describe()}; this broker is {broker.describe()}:"
            " apply it to the broker it was made against, or make a plan against this one"
        )

    def stale(self, state: BrokerState, broker: BrokerIdentity) -> list[str]:
        """Why the broker no longer matches what this plan was made against (empty: it does)."""
        elsewhere = self.elsewhere(broker)
        if elsewhere is not None:
            return [elsewhere]
        problems = []
        if record_fingerprint(state.record) != self.record:
            problems.append(
                f"stack {self.plan.stack!r} was applied since the plan was made (its ownership"
                " record changed)"
            )
        for change in self.plan.changes:
            owners = owners_of(change.action, change.key, state.other_owners)
            if owners != change.owners:
                holder = "stack " + ", ".join(map(repr, owners)) if owners else "no other stack"
                problems.append(
                    f"{change.title} changed hands since the plan was made (now owned by {holder})"
                )
        now = state.topology.resources()
        for key, then in self.seen.items():
            current = fingerprint(now.get(key), self.salt)
            if current == then:
                continue
            if then is None:
                problems.append(f"{describe_key(key)} appeared since the plan was made")
            elif current is None:
                problems.append(f"{describe_key(key)} vanished since the plan was made")
            else:
                problems.append(f"{describe_key(key)} changed since the plan was made")
        return problems

    # -- the file ------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        plan = self.plan
        body: dict[str, Any] = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "created": self.created,
            "broker": self.broker,
            "cluster": self.cluster,
            "cluster_id": self.made_against.cluster_id,
            "management_urls": list(self.made_against.urls),
            "salt": self.salt,
            "stack": plan.stack,
            "summary": plan.counts(),
            "changes": [_change_json(c) for c in plan.changes],
            "warnings": list(plan.warnings),
            "delay_relayouts": [r.to_json() for r in plan.relayouts],
            "seen": [[then, *key] for key, then in self.seen.items()],
            "excluded": sorted(list(key) for key in plan.excluded),
            "record": plan.record.to_value(),
            "record_fingerprint": self.record,
            "desired": _topology_json(plan.desired) if plan.desired is not None else None,
        }
        return {**body, "checksum": _checksum(body)}

    def to_text(self) -> str:
        """The file's text (write it with ``rabbitry.files.write_private``: it holds what
        apply sends)."""
        return json.dumps(self.to_json(), separators=(",", ":")) + "\n"

    @classmethod
    def read(cls, path: Path) -> SavedPlan:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise PlanError(f"cannot read plan file {path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise PlanError(f"{path} is not a rabbitry plan file (not UTF-8 text)") from None
        data = parse(text)
        if data is None:
            raise PlanError(
                f"{path} is not a rabbitry plan file: make one with `rabbitry plan SPEC -o FILE`"
            )
        return cls.from_json(data, str(path))

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str) -> SavedPlan:
        version = data.get("format_version")
        if version != FORMAT_VERSION:
            raise PlanError(
                f"{where} is a plan of format {version!r}; this rabbitry reads format"
                f" {FORMAT_VERSION}: make the plan again with this rabbitry"
            )
        body = {k: v for k, v in data.items() if k != "checksum"}
        if data.get("checksum") != _checksum(body):
            raise PlanError(
                f"{where} was changed after it was saved (its checksum does not match):"
                " nothing was applied; make the plan again with `rabbitry plan SPEC -o FILE`"
            )
        try:
            desired = data.get("desired")
            topology = Topology.model_validate(desired) if desired is not None else None
            vhosts = {v.name: v for v in topology.vhosts} if topology is not None else {}
            changes = tuple(_change(item, where, vhosts) for item in data["changes"])
            stack = str(data["stack"])
            record = OwnershipRecord.from_value(stack, data["record"])
            seen = {ResourceKey(str(p) for p in entry[1:]): entry[0] for entry in data["seen"]}
            excluded = frozenset(
                ResourceKey(str(p) for p in key) for key in data.get("excluded", ())
            )
            warnings = tuple(str(w) for w in data.get("warnings", ()))
            relayouts = tuple(DelayRelayout.from_json(r) for r in data.get("delay_relayouts", ()))
            plan = Plan(stack, changes, record, warnings, topology, excluded, relayouts)
            made_against = BrokerIdentity(
                str(data["cluster_id"]),
                str(data["cluster"]),
                tuple(str(url) for url in data["management_urls"]),
            )
            return cls(
                plan,
                made_against,
                str(data.get("broker", "")),
                seen,
                str(data["salt"]),
                str(data["record_fingerprint"]),
                str(data.get("created", "")),
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise PlanError(f"{where} is not a readable rabbitry plan ({exc!r})") from None


@dataclass(frozen=True)
class SavedTarget:
    """A saved plan and the broker to apply it to (flags and environment, never the spec)."""

    saved: SavedPlan
    endpoints: Endpoints

    @classmethod
    def read(cls, path: Path, broker: Mapping[str, Any]) -> SavedTarget:
        return cls(SavedPlan.read(path), resolve_endpoints(**broker))


def cluster_name(client: ManagementClient) -> str:
    """The name the cluster goes by (``rabbitmqctl set_cluster_name``; a node name by default)."""
    return str(client.get("/cluster-name").get("name", ""))


def parse(text: str) -> dict[str, Any] | None:
    """The JSON of a plan file; None when ``text`` is not one (a spec, say)."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    return data


def is_plan_file(path: Path) -> bool:
    """Whether ``path`` holds a saved plan rather than a spec (read from its first bytes)."""
    try:
        with path.open("rb") as f:
            head = f.read(512)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and _FORMAT_KEY.search(head) is not None


_FORMAT_KEY = re.compile(rb'"format"\s*:\s*"' + FORMAT.encode() + rb'"')


def _checksum(body: dict[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(body).encode()).hexdigest()


def _change_json(change: Change) -> dict[str, Any]:
    return {
        "action": change.action.value,
        "key": list(change.key),
        "desired": _primitive_json(change.desired),
        "observed": _primitive_json(change.observed, observed=True),
        "reasons": list(change.reasons),
        "drift": change.drift,
        "messages": change.messages,
        "consumers": change.consumers,
        "counted": change.counted,
        "count_note": change.count_note,
        "owners": list(change.owners),
        "protected": change.protected,
    }


def _change(item: dict[str, Any], where: str, vhosts: Mapping[str, Vhost]) -> Change:
    key = ResourceKey(str(part) for part in item["key"])
    desired = _primitive(item.get("desired"), f"{where}: {describe_key(key)}")
    if isinstance(desired, Vhost) and desired.name in vhosts:
        desired = vhosts[desired.name]  # with its objects, as the plan had it
    return Change(
        action=Action(item["action"]),
        key=key,
        desired=desired,
        observed=_primitive(item.get("observed"), f"{where}: {describe_key(key)}"),
        reasons=tuple(str(r) for r in item.get("reasons", ())),
        drift=bool(item.get("drift", False)),
        messages=item.get("messages"),
        consumers=item.get("consumers"),
        counted=str(item.get("counted", "")),
        count_note=str(item.get("count_note", "")),
        owners=tuple(str(s) for s in item.get("owners", ())),
        protected=bool(item.get("protected", False)),
    )


__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "BrokerIdentity",
    "SavedPlan",
    "SavedTarget",
    "broker_identity",
    "cluster_name",
    "is_plan_file",
]
