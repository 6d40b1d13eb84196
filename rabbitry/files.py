"""Files rabbitry writes that may hold secrets: readable by their owner only, replaced whole."""

from __future__ import annotations

import os
from pathlib import Path


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only, replacing it whole (a reader
    never sees half a file, and a file that existed does not keep a wider mode)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(tmp, 0o600)  # an existing tmp file keeps its mode through O_CREAT
    tmp.replace(path)


__all__ = ["write_private"]
