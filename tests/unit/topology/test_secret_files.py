"""``{{ file(PATH) }}`` in a spec: secrets from files (a Kubernetes Secret mounted as one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rabbitry.errors import SpecError
from rabbitry.topology import load_spec

SPEC = """\
version: 1
name: shop
users:
  - name: app
    password: "{{ file('secrets/app-password') }}"
vhosts:
  - name: shop
"""


def write(tmp_path: Path, secret: bytes | None) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    if secret is not None:
        (tmp_path / "secrets").mkdir()
        (tmp_path / "secrets" / "app-password").write_bytes(secret)
    return spec


def test_a_secret_file_is_read_next_to_the_spec_without_its_trailing_newline(
    tmp_path: Path,
) -> None:
    spec = load_spec(write(tmp_path, b"s3cret-pw\n"))
    password = spec.users[0].password
    assert password is not None and password.get_secret_value() == "s3cret-pw"
    assert "s3cret-pw" not in repr(spec)


def test_only_one_trailing_newline_is_stripped(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, b"pw\r\n"))
    password = spec.users[0].password
    assert password is not None and password.get_secret_value() == "pw"


def test_a_missing_secret_file_is_an_error_naming_it_and_the_spec_line(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, None))
    (problem,) = info.value.problems
    assert problem.message.startswith("file('secrets/app-password'): cannot read ")
    assert "app-password" in problem.message and "No such file" in problem.message
    assert "template error" not in problem.message
    assert problem.line == 5


def test_a_changed_secret_file_is_read_again_at_the_next_load(tmp_path: Path) -> None:
    path = write(tmp_path, b"first\n")
    first = load_spec(path).users[0].password
    assert first is not None and first.get_secret_value() == "first"
    (tmp_path / "secrets" / "app-password").write_text("second\n")
    password = load_spec(path).users[0].password
    assert password is not None and password.get_secret_value() == "second"
