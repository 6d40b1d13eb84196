"""Files rabbitry writes that may hold secrets: readable by their owner only, replaced whole,
and safe in a directory other users can write.

A file is written under a random name opened with ``O_CREAT|O_EXCL|O_NOFOLLOW`` (so a file or
symbolic link another user put at a name rabbitry would use is never opened, truncated or
followed), flushed to disk, then renamed over the target: a reader sees the old file or the new
one, and the new one is the writer's own with mode 0600 whatever existed before.

Directories rabbitry keeps (the worker view cache) are made 0700, and an existing one is used
only when it belongs to the current user and no one else may write it (``private_directory``):
its entries are then read and written through a descriptor of that directory, so swapping the
path for another directory afterwards does not redirect them.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from rabbitry.errors import UnsafeFileError

__all__ = [
    "UnsafeFileError",
    "check_private",
    "private_directory",
    "read_private",
    "write_private",
    "write_private_in",
]


_TRIES = 16
"""Random temporary names tried before giving up (a clash is a 1 in 2**64 chance each)."""


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only, replacing it whole (a reader
    never sees half a file, and a file that existed does not keep a wider mode or its owner)."""
    parent = path.parent
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        write_private_in(fd, path.name, text)
    finally:
        os.close(fd)


def write_private_in(directory: int, name: str, text: str) -> None:
    """``write_private`` of the entry ``name`` of the open ``directory`` (a descriptor)."""
    data = text.encode("utf-8")
    for _ in range(_TRIES):
        tmp = f".{name}.{os.urandom(8).hex()}.tmp"
        try:
            fd = os.open(
                tmp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
                dir_fd=directory,
            )
        except FileExistsError:
            continue
        break
    else:
        raise FileExistsError(f"no free temporary name for {name!r} after {_TRIES} tries")
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=directory)
        raise
    with contextlib.suppress(OSError):  # the rename itself survives a crash
        os.fsync(directory)


def check_private(info: os.stat_result, what: str) -> None:
    """Raise ``UnsafeFileError`` unless ``info`` (of ``what``) belongs to the current user and
    neither its group nor others may write it."""
    if info.st_uid != os.geteuid():
        raise UnsafeFileError(
            f"{what} belongs to user id {info.st_uid}, not to this user ({os.geteuid()})"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeFileError(
            f"{what} may be written by its group or others (mode {stat.S_IMODE(info.st_mode):o}):"
            " make it 0700 (a directory) or 0600 (a file), or remove it"
        )


def private_directory(path: Path, *, make: bool = True) -> int:
    """An open descriptor of the directory ``path``, made (with its missing parents) 0700
    when it does not exist (``FileNotFoundError`` instead when not ``make``); raises
    ``UnsafeFileError`` when it exists but is not the user's own (``check_private``) or is a
    symbolic link, ``OSError`` when it cannot be made."""
    missing: list[Path] = []
    for directory in (path, *path.parents):
        if not make or os.path.lexists(directory):
            break
        missing.append(directory)
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile: checked below
            os.mkdir(directory, 0o700)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if os.path.islink(path):
            raise UnsafeFileError(f"{path} is a symbolic link, not a directory") from None
        raise exc
    try:
        check_private(os.fstat(fd), str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_private(directory: int, name: str, where: Path) -> str:
    """The text of the entry ``name`` of the open ``directory``, read only when it is a regular
    file of the user's own that no one else may write (else ``UnsafeFileError``; ``where`` names
    the directory in the message). ``FileNotFoundError`` when there is none."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFileError(f"{where / name} is not a regular file")
        check_private(info, str(where / name))
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8")
    finally:
        os.close(fd)
