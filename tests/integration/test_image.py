"""The repository's Dockerfile builds with the machine's container engine and runs rabbitry."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
LOCAL_BASE = "localhost/rabbitry-rabbitmq-base:trixie"
"""A Debian image built on this machine (no registry is reachable from it); elsewhere the
Dockerfile's own default base (python:3.11-slim) is pulled."""


def engine() -> str:
    for name in ("podman", "docker"):
        found = shutil.which(name)
        if found and subprocess.run([found, "info"], capture_output=True).returncode == 0:
            return found
    pytest.skip("no container engine answers (podman or docker)")


def test_the_image_builds_and_runs_rabbitry_version() -> None:
    tool = engine()
    base = os.environ.get("RABBITRY_IMAGE_BASE")
    if base is None and subprocess.run([tool, "image", "exists", LOCAL_BASE]).returncode == 0:
        base = LOCAL_BASE
    tag = f"localhost/rabbitry-image-test:{uuid.uuid4().hex[:8]}"
    build = [tool, "build", "-t", tag, "-f", str(ROOT / "Dockerfile")]
    if base:
        build += ["--build-arg", f"BASE={base}"]
    ca = os.environ.get("PIP_CERT")  # a TLS-intercepting proxy's CA, as pip on this machine uses
    if ca and Path(ca).is_file():
        build += ["--secret", f"id=pip-ca,src={ca}"]
    built = subprocess.run([*build, str(ROOT)], capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    try:
        ran = subprocess.run(
            [tool, "run", "--rm", tag, "--version"], capture_output=True, text=True, timeout=120
        )
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.startswith("rabbitry, version ")
        helped = subprocess.run(
            [tool, "run", "--rm", tag, "reconcile", "--help"], capture_output=True, text=True
        )
        assert "--listen" in helped.stdout
    finally:
        subprocess.run([tool, "rmi", "-f", tag], capture_output=True)
