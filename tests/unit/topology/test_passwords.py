"""The broker's salted password hashes."""

from __future__ import annotations

import base64
import hashlib

import pytest

from rabbitry.topology.spec.passwords import hash_password, password_matches


def test_hash_is_salt_plus_sha256_of_salt_and_password() -> None:
    salt = b"\x01\x02\x03\x04"
    expected = base64.b64encode(salt + hashlib.sha256(salt + b"guest").digest()).decode()
    assert hash_password("guest", salt=salt) == expected


@pytest.mark.parametrize(
    "algorithm",
    [
        "rabbit_password_hashing_sha256",
        "rabbit_password_hashing_sha512",
        "rabbit_password_hashing_md5",
    ],
)
def test_matches(algorithm: str) -> None:
    stored = hash_password("s3cret", algorithm)
    assert password_matches("s3cret", stored, algorithm)
    assert not password_matches("other", stored, algorithm)


def test_salts_differ_and_bad_hashes_never_match() -> None:
    assert hash_password("a") != hash_password("a")
    assert not password_matches("a", "not base64!")
    assert not password_matches("a", "")
    assert not password_matches("a", hash_password("a"), "rabbit_password_hashing_sha3")
    with pytest.raises(ValueError, match="unknown hashing algorithm"):
        hash_password("a", "plain")
