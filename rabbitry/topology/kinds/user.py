"""A broker user: tags, limits and a password compared through the broker's hash, never sent
back or printed."""

from __future__ import annotations

from typing import Any

from rabbitry.topology.kinds.kind import (
    Document,
    Hashes,
    JSONDict,
    Kind,
    Write,
    limit_writes,
    limits_of,
    segment,
    tags_of,
)
from rabbitry.topology.primitives import Primitive, User, Vhost
from rabbitry.topology.spec.passwords import DEFAULT_ALGORITHM, hash_password, password_matches

LIMITS = ("max-connections", "max-channels")


def user_of(item: JSONDict, limits: Any) -> User:
    """A user as ``/api/users`` lists it, with its limits (``/api/user-limits``)."""
    return User(name=item["name"], tags=tuple(tags_of(item.get("tags"))), limits=limits_of(limits))


class UserKind(Kind[User], name="user"):
    primitive = User

    def path(self, resource: User, vhost: str) -> str:
        return f"/users/{segment(resource.name)}"

    def body(self, resource: User, vhost: str) -> JSONDict:
        body: JSONDict = {"tags": ",".join(resource.tags)}
        if resource.password is not None:
            body["password"] = resource.password.get_secret_value()
        elif resource.password_hash is not None:
            body["password_hash"] = resource.password_hash
            body["hashing_algorithm"] = resource.hashing_algorithm
        else:
            body["password_hash"] = ""  # no password: the user can only use other mechanisms
        return body

    def puts(self, resource: User, vhost: str, observed: Primitive | None) -> list[Write]:
        writes = super().puts(resource, vhost, observed)
        if resource.limits or getattr(observed, "limits", None):
            limits_path = f"/user-limits/{segment(resource.name)}"
            writes += limit_writes(limits_path, resource.limits, LIMITS)
        return writes

    def more_differences(self, desired: User, observed: User, hashes: Hashes) -> list[str]:
        stored_hash, algorithm = hashes.get(desired.name, ("", ""))
        if desired.password is not None:
            if not password_matches(desired.password.get_secret_value(), stored_hash, algorithm):
                return ["password differs"]
        elif desired.password_hash is not None and desired.password_hash != stored_hash:
            return ["password_hash differs"]
        return []

    def exported(self, resource: User, vhost: Vhost | None) -> Document:
        out: Document = {"name": resource.name}
        if resource.password_hash is not None:
            out["password_hash"] = resource.password_hash
        elif resource.password is not None:
            # Same password, never the password itself: a fresh salted hash of it, made as the
            # broker makes it (its algorithm, a 4-byte salt)
            secret = resource.password.get_secret_value()
            out["password_hash"] = hash_password(secret, resource.hashing_algorithm)
        if "password_hash" in out and resource.hashing_algorithm != DEFAULT_ALGORITHM:
            out["hashing_algorithm"] = resource.hashing_algorithm
        if resource.tags:
            out["tags"] = list(resource.tags)
        if resource.limits:
            out["limits"] = dict(resource.limits)
        return out


KIND = UserKind()
