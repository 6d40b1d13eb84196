"""RabbitMQ's salted password hashes, so a spec can carry a hash instead of a password.

The broker stores ``base64(salt + H(salt + password))`` with a 4-byte salt; computing the same
here lets an export write a hash for a user known only by its password, and lets the planner
tell whether a declared password still matches the broker's hash without ever printing either.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os

DEFAULT_ALGORITHM = "rabbit_password_hashing_sha256"

_DIGESTS = {
    "rabbit_password_hashing_sha256": "sha256",
    "rabbit_password_hashing_sha512": "sha512",
    "rabbit_password_hashing_md5": "md5",
}
SALT_BYTES = 4
ALGORITHMS = tuple(sorted(_DIGESTS))
"""The hashing algorithms the broker ships (``hashing_algorithm`` of a user)."""


def hash_password(
    password: str, algorithm: str = DEFAULT_ALGORITHM, salt: bytes | None = None
) -> str:
    """The broker's hash of ``password`` (random salt unless one is given)."""
    digest_name = _DIGESTS.get(algorithm)
    if digest_name is None:
        raise ValueError(f"unknown hashing algorithm {algorithm!r}: use one of {sorted(_DIGESTS)}")
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    digest = hashlib.new(digest_name, salt + password.encode("utf-8")).digest()
    return base64.b64encode(salt + digest).decode("ascii")


def password_matches(password: str, password_hash: str, algorithm: str = DEFAULT_ALGORITHM) -> bool:
    """Whether ``password_hash`` (as the broker stores it) is a hash of ``password``."""
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except (binascii.Error, ValueError):
        return False
    if len(raw) <= SALT_BYTES or algorithm not in _DIGESTS:
        return False
    expected = hash_password(password, algorithm, raw[:SALT_BYTES])
    return hmac.compare_digest(expected, password_hash)


def hash_problem(password_hash: str, algorithm: str = DEFAULT_ALGORITHM) -> str | None:
    """Why the broker could never match a password against ``password_hash`` labelled
    ``algorithm``, or None. The broker stores the hash as given (base64-decoded) and, at each
    login, splits off the 4-byte salt and compares the rest with the digest
    (rabbit_auth_backend_internal:user_login_authentication): a hash that is not base64 stops
    an import half way, and one of another length than salt + digest makes a user who can
    never log in."""
    digest_name = _DIGESTS.get(algorithm)
    if digest_name is None:
        return f"unknown hashing_algorithm {algorithm!r}: use one of {', '.join(sorted(_DIGESTS))}"
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except (binascii.Error, ValueError):
        return (
            "password_hash is not base64: give the hash as the broker exports it"
            " (rabbitmqctl hash_password, or GET /api/auth/hash_password/PASSWORD)"
        )
    expected = SALT_BYTES + hashlib.new(digest_name).digest_size
    if len(raw) == expected:
        return None
    fits = [
        name
        for name, other in _DIGESTS.items()
        if len(raw) == SALT_BYTES + hashlib.new(other).digest_size
    ]
    hint = (
        f"; {len(raw)} bytes is a {fits[0]} hash: is hashing_algorithm right?"
        if fits
        else ": give the hash as the broker exports it"
    )
    return (
        f"password_hash decodes to {len(raw)} bytes, not the {expected} of a {algorithm} hash"
        f" ({SALT_BYTES}-byte salt + {expected - SALT_BYTES}-byte {digest_name.upper()} digest):"
        f" no password would ever match it{hint}"
    )
