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
