"""Private files on a shared host: what another local user can put where rabbitry writes or
reads does not become rabbitry's (its owner, its mode, its content, a link it follows).

"Another user" is a real one, made here with ``useradd``: the tests run as root (CI does) and
hand files to that user with ``chown``, as that user would have made them.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
from pathlib import Path

import pytest

from rabbitry.files import UnsafeFileError, private_directory, read_private, write_private

OTHER = "rabbitry-other"
"""The second local user (made once, kept: useradd is not cheap and the name is ours)."""


@pytest.fixture(scope="session")
def other_uid() -> int:
    if os.geteuid() != 0:
        pytest.skip("needs root: making a second local user and handing it files")
    try:
        return pwd.getpwnam(OTHER).pw_uid
    except KeyError:
        pass
    made = subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER],
        capture_output=True,
        text=True,
    )
    try:
        return pwd.getpwnam(OTHER).pw_uid  # made here, or by another run meanwhile
    except KeyError:
        pytest.skip(f"cannot make a second user: {made.stderr.strip()}")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


# -- writing ----------------------------------------------------------------------------------


def test_a_temp_file_another_user_made_at_the_old_name_does_not_make_them_the_owner(
    tmp_path: Path, other_uid: int
) -> None:
    plan = tmp_path / "plan.json"
    planted = tmp_path / ".plan.json.tmp"  # the name rabbitry wrote through before
    planted.write_text("theirs")
    planted.chmod(0o666)
    os.chown(planted, other_uid, -1)

    write_private(plan, '{"password": "s3cret"}')

    info = plan.stat()
    assert (info.st_uid, mode(plan)) == (os.geteuid(), 0o600)
    assert plan.read_text() == '{"password": "s3cret"}'
    assert planted.read_text() == "theirs", "their file was neither used nor changed"


def test_a_symlink_at_the_old_temp_name_is_not_followed(tmp_path: Path, other_uid: int) -> None:
    victim = tmp_path / "passwd"
    victim.write_text("root:x:0:0\n")
    link = tmp_path / ".plan.json.tmp"
    link.symlink_to(victim)
    os.lchown(link, other_uid, -1)

    write_private(tmp_path / "plan.json", "the plan")

    assert victim.read_text() == "root:x:0:0\n"
    assert (tmp_path / "plan.json").read_text() == "the plan"
    assert not (tmp_path / "plan.json").is_symlink()


def test_a_file_of_another_user_at_the_target_is_replaced_by_ours(
    tmp_path: Path, other_uid: int
) -> None:
    target = tmp_path / "export.yaml"
    target.write_text("old")
    target.chmod(0o644)
    os.chown(target, other_uid, -1)

    write_private(target, "new")

    assert (target.stat().st_uid, mode(target), target.read_text()) == (os.geteuid(), 0o600, "new")


def test_no_temp_file_is_left_behind(tmp_path: Path) -> None:
    write_private(tmp_path / "a.json", "x")
    write_private(tmp_path / "a.json", "y")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


# -- directories --------------------------------------------------------------------------------


def test_a_missing_directory_is_made_owner_only_with_its_parents(tmp_path: Path) -> None:
    where = tmp_path / "cache" / "rabbitry" / "worker-views"
    os.close(private_directory(where))
    for directory in (where, where.parent, where.parent.parent):
        assert mode(directory) == 0o700, directory


def test_a_directory_of_another_user_is_refused(tmp_path: Path, other_uid: int) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, other_uid, -1)
    with pytest.raises(UnsafeFileError, match=f"belongs to user id {other_uid}"):
        private_directory(theirs)


def test_a_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UnsafeFileError, match="written by its group or others"):
        private_directory(shared)


def test_a_symlink_in_place_of_the_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        private_directory(tmp_path / "link")


# -- reading ------------------------------------------------------------------------------------


def test_a_file_of_another_user_is_not_read(tmp_path: Path, other_uid: int) -> None:
    fd = private_directory(tmp_path / "d")
    try:
        entry = tmp_path / "d" / "entry.json"
        entry.write_text("{}")
        entry.chmod(0o600)
        assert read_private(fd, "entry.json", tmp_path / "d") == "{}"
        os.chown(entry, other_uid, -1)
        with pytest.raises(UnsafeFileError, match="belongs to user id"):
            read_private(fd, "entry.json", tmp_path / "d")
    finally:
        os.close(fd)


def test_a_file_others_may_write_or_a_symlink_is_not_read(tmp_path: Path) -> None:
    fd = private_directory(tmp_path / "d")
    try:
        entry = tmp_path / "d" / "entry.json"
        entry.write_text("{}")
        entry.chmod(0o622)
        with pytest.raises(UnsafeFileError, match="written by its group or others"):
            read_private(fd, "entry.json", tmp_path / "d")
        (tmp_path / "d" / "link.json").symlink_to(entry)
        with pytest.raises(OSError):  # ELOOP: O_NOFOLLOW
            read_private(fd, "link.json", tmp_path / "d")
    finally:
        os.close(fd)
