"""Private files on a shared host: what another local user can put where rabbitry writes or
reads does not become rabbitry's (its owner, its mode, its content, a link it follows).

"Another user" is a real one, made here with ``useradd``: the tests run as root (CI does) and
hand files to that user with ``chown``, as that user would have made them.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


# -- the worker view cache ------------------------------------------------------------------------

SPEC = """\
version: 1
name: planted
broker:
  url: amqp://app@rabbit-1:5672/
vhosts:
  - name: jobs
    queues:
      - {name: jobs, type: quorum, retry: {attempts: 2, backoff: [1s]}}
"""


def warm_app(spec: Path) -> Any:
    """What ``worker run`` makes of ``spec``: an ``App`` that reads the cached view if any."""
    from rabbitry.consumer.app import App

    App.views = True
    return App(spec, vhost="jobs")


def parking_queue(app: Any) -> str:
    return str(app._place(*app._find("jobs", None)).retry.parking_queue)


def plant(spec_text: str, cache: Path, changes: dict[str, Any]) -> Path:
    """An entry for ``spec_text`` that names and seals itself exactly as rabbitry would (its
    maker knows the key: it wrote the key file too), its view changed by ``changes``."""
    from rabbitry.consumer import view
    from rabbitry.topology.spec.loader import load_spec_text

    view.remember(spec_text, load_spec_text(spec_text, "spec.yaml", environ={}))
    where = cache / "worker-views"
    secret = bytes.fromhex((where / view.KEY_FILE).read_text())
    name = view._entry_name(secret, spec_text)
    entry = json.loads((where / name).read_text())
    body = json.loads(entry["view"])
    retry = body["queues"]["jobs"]["jobs"]["retry"]
    retry.update(changes.get("retry", {}))
    body.update(changes.get("view", {}))
    entry["view"] = json.dumps(body)
    entry["seal"] = view._seal(secret, name, entry["view"])
    (where / name).write_text(json.dumps(entry))
    return where / name


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from rabbitry.consumer import view

    monkeypatch.setenv("RABBITRY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(view, "_warned", False, raising=False)
    return tmp_path / "cache"


def as_other(uid: int, *argv: str) -> None:
    """Run ``argv`` as the second user (its own uid and group), as that user would."""
    gid = pwd.getpwuid(uid).pw_gid

    def become() -> None:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)

    done = subprocess.run(argv, preexec_fn=become, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.fixture()
def shared_dir() -> Iterator[Path]:
    """A directory every local user may write (as a shared ``/srv/cache`` would be)."""
    where = Path(tempfile.mkdtemp(prefix="rabbitry-shared-", dir="/tmp"))
    where.chmod(0o777)
    yield where
    shutil.rmtree(where)


def test_a_view_another_user_planted_in_a_shared_cache_directory_is_not_read(
    tmp_path: Path,
    cache: Path,
    shared_dir: Path,
    other_uid: int,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    # the other user makes the cache rabbitry will look in, and puts there a key of their own
    # and an entry named and sealed with it that parks failed jobs in their queue
    plant(SPEC, cache, {"retry": {"parking_queue": "stolen"}})
    staged = shared_dir / "staged"
    shutil.copytree(cache / "worker-views", staged)
    for path in (staged, *staged.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    as_other(other_uid, "/bin/cp", "-r", str(staged), str(shared_dir / "worker-views"))
    monkeypatch.setenv("RABBITRY_CACHE_DIR", str(shared_dir))

    with caplog.at_level(logging.WARNING, logger="rabbitry.worker"):
        app = warm_app(spec)
        warm_app(spec)

    assert app._view is None, "the spec was loaded in full"
    assert parking_queue(app) == "jobs.parking"
    warnings = [r.getMessage() for r in caplog.records if "worker view cache" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert f"belongs to user id {other_uid}" in warnings[0]
    entries = sorted(p.name for p in (shared_dir / "worker-views").iterdir())
    assert entries == sorted(p.name for p in staged.iterdir()), "nothing written there either"


def test_a_view_in_a_directory_others_may_write_is_not_read(
    tmp_path: Path, cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    plant(SPEC, cache, {"retry": {"parking_queue": "stolen"}})
    (cache / "worker-views").chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="rabbitry.worker"):
        app = warm_app(spec)
    assert app._view is None and parking_queue(app) == "jobs.parking"
    assert "written by its group or others" in caplog.text


def test_a_view_entry_another_user_owns_is_not_read(
    tmp_path: Path, cache: Path, other_uid: int, caplog: pytest.LogCaptureFixture
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    entry = plant(SPEC, cache, {"retry": {"parking_queue": "stolen"}})
    os.chown(entry, other_uid, -1)
    with caplog.at_level(logging.WARNING, logger="rabbitry.worker"):
        app = warm_app(spec)
    assert app._view is None and parking_queue(app) == "jobs.parking"
    assert f"belongs to user id {other_uid}" in caplog.text


def test_a_view_sealed_with_another_key_is_not_read(tmp_path: Path, cache: Path) -> None:
    from rabbitry.consumer import view

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    plant(SPEC, cache, {"retry": {"parking_queue": "stolen"}})
    write_private(cache / "worker-views" / view.KEY_FILE, os.urandom(view.KEY_BYTES).hex())
    app = warm_app(spec)
    assert app._view is None and parking_queue(app) == "jobs.parking"


def test_the_broker_url_is_read_off_the_spec_never_from_the_cache(
    tmp_path: Path, cache: Path
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    plant(SPEC, cache, {"view": {"url": "amqp://thief:pw@elsewhere/", "node_order": "in-order"}})
    app = warm_app(spec)
    assert app._view is not None, "our own entry, sealed with our key: read"
    assert (app.url, app.node_order) == ("amqp://app@rabbit-1:5672/", None)
    stored = "".join(p.read_text() for p in (cache / "worker-views").iterdir())
    assert "rabbit-1" not in stored, "an entry holds no broker URL"


def test_the_cache_key_is_created_owner_only(tmp_path: Path, cache: Path) -> None:
    from rabbitry.consumer import view

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    warm_app(spec)
    assert mode(cache / "worker-views") == 0o700
    assert mode(cache / "worker-views" / view.KEY_FILE) == 0o600
    assert warm_app(spec)._view is not None, "the second start reads the view"


def test_an_entry_named_from_the_spec_text_alone_is_not_read(tmp_path: Path, cache: Path) -> None:
    """Anyone who can read a spec could compute the name entries had (length, CRC-32 and
    Adler-32 of its text): one planted under that name is never looked at."""
    import zlib
    from dataclasses import asdict

    from rabbitry.consumer import view
    from rabbitry.topology.spec.limits import SpecLimits

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    data = SPEC.encode()
    key = {
        "format": 1,
        "code": view._code_stamp(),
        "limits": asdict(SpecLimits.from_environment()),
        "text": [len(data), zlib.crc32(data), zlib.adler32(data)],
    }
    name = f"{zlib.crc32(json.dumps(key, sort_keys=True).encode()):08x}-{len(data)}.json"
    os.close(private_directory(cache / "worker-views"))
    planted = {"vhosts": ["jobs"], "url": "amqp://thief@elsewhere/", "node_order": None}
    planted["queues"] = {
        "jobs": {
            "jobs": {
                "declared_by": "jobs",
                "stream": False,
                "ordered": False,
                "retry": None,
                "retry_error": None,
            }
        }
    }
    write_private(cache / "worker-views" / name, json.dumps({"key": key, "view": planted}))

    app = warm_app(spec)
    assert app._view is None and app.url == "amqp://app@rabbit-1:5672/"
