"""Installs the official AsyncAPI 3.0.0 JSON Schema the tests validate `rabbitry asyncapi`
against: from the `@asyncapi/specs` package on the npm registry (the AsyncAPI Initiative's own
release of its schemas, Apache-2.0), pinned by version and by the registry's sha512 integrity,
into .rabbitry/asyncapi/. scripts/setup.sh runs it; a second run with the file in place does
nothing. Only Python's standard library: it runs before and without the virtualenv too.

Usage: python3 scripts/asyncapi_schema.py [DEST_DIR]
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import sys
import tarfile
import urllib.request
from pathlib import Path

VERSION = "6.11.1"
URL = f"https://registry.npmjs.org/@asyncapi/specs/-/specs-{VERSION}.tgz"
INTEGRITY = (
    "sha512-A3WBLqAKGoJ2+6FWFtpjBlCQ1oFCcs4GxF7zsIGvNqp/klGUHjlA3aAcZ9XMM"
    "pLGE8zPeYDz2x9FmO6DSuKraQ=="
)
MEMBER = "package/schemas/3.0.0-without-$id.json"  # bundled: every reference local
NAME = "asyncapi-3.0.0.schema.json"


def main(dest: Path) -> int:
    target = dest / NAME
    stamp = dest / f"{NAME}.from"
    if target.is_file() and stamp.is_file() and stamp.read_text().strip() == URL:
        return 0
    try:
        with urllib.request.urlopen(URL, timeout=60) as answer:
            data = answer.read()
    except OSError as exc:
        print(f"asyncapi_schema: cannot download {URL}: {exc}", file=sys.stderr)
        return 1
    digest = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    if digest != INTEGRITY:
        print(f"asyncapi_schema: {URL} does not match its pinned integrity", file=sys.stderr)
        return 1
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        member = archive.extractfile(MEMBER)
        if member is None:
            print(f"asyncapi_schema: {MEMBER} is not in {URL}", file=sys.stderr)
            return 1
        schema = member.read()
    dest.mkdir(parents=True, exist_ok=True)
    partial = dest / f".{NAME}.{os.getpid()}"
    partial.write_bytes(schema)
    partial.replace(target)
    stamp.write_text(URL + "\n")
    return 0


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[1]
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else root / ".rabbitry" / "asyncapi"))
