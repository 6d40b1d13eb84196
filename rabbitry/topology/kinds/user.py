"""A broker user: tags, limits and a password compared through the broker's hash, never sent
back or printed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rabbitry.topology.kinds.kind import (
    Document,
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


class UserKind(Kind):
    name = "user"
    primitive = User

    def puts(self, resource: Primitive, vhost: str, observed: Primitive | None) -> list[Write]:
        assert isinstance(resource, User)
        body: dict[str, Any] = {"tags": ",".join(resource.tags)}
        if resource.password is not None:
            body["password"] = resource.password.get_secret_value()
        elif resource.password_hash is not None:
            body["password_hash"] = resource.password_hash
            body["hashing_algorithm"] = resource.hashing_algorithm
        else:
            body["password_hash"] = ""  # no password: the user can only use other mechanisms
        writes = [Write("PUT", f"/users/{segment(resource.name)}", body)]
        if resource.limits or getattr(observed, "limits", None):
            writes += limit_writes(
                f"/user-limits/{segment(resource.name)}", resource.limits, LIMITS
            )
        return writes

    def deletion(self, observed: Primitive, vhost: str) -> Write:
        assert isinstance(observed, User)
        return Write("DELETE", f"/users/{segment(observed.name)}", allow=(404,))

    def more_differences(
        self,
        desired: Primitive,
        observed: Primitive,
        password_hashes: Mapping[str, tuple[str, str]],
    ) -> list[str]:
        assert isinstance(desired, User)
        stored_hash, algorithm = password_hashes.get(desired.name, ("", ""))
        if desired.password is not None:
            if not password_matches(desired.password.get_secret_value(), stored_hash, algorithm):
                return ["password differs"]
        elif desired.password_hash is not None and desired.password_hash != stored_hash:
            return ["password_hash differs"]
        return []

    def exported(self, resource: Primitive, vhost: Vhost | None) -> Document:
        assert isinstance(resource, User)
        out: Document = {"name": resource.name}
        if resource.password_hash is not None:
            out["password_hash"] = resource.password_hash
        elif resource.password is not None:
            # Same password, never the password itself: a fresh salted hash of it, made as the
            # broker makes it (its algorithm, a 4-byte salt)
            out["password_hash"] = hash_password(
                resource.password.get_secret_value(), resource.hashing_algorithm
            )
        if "password_hash" in out and resource.hashing_algorithm != DEFAULT_ALGORITHM:
            out["hashing_algorithm"] = resource.hashing_algorithm
        if resource.tags:
            out["tags"] = list(resource.tags)
        if resource.limits:
            out["limits"] = dict(resource.limits)
        return out


KIND = UserKind()
