"""scripts/definitions_corpus.py, which makes the public part of the definitions corpus at setup
time: every pin checked, nothing written for a file that fails one, nothing downloaded when every
file is in place, templates rendered as Ansible renders them. Against a release served from a
local folder (file: URLs), never the registry."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import sys
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).parents[2] / "scripts" / "definitions_corpus.py"
TEMPLATE = """#jinja2: trim_blocks: False
{"users": [{"name": "{{ user }}", "password": "{{ secret }}", "tags": ""}],
{% if ha | bool %}
 "policies": [{"vhost": "/", "name": "ha", "pattern": ".*", "definition": {"ha-mode": "all"}}]
{% else %}
 "policies": []
{% endif %}
}
"""


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("definitions_corpus_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, Any, Path]:
    """The module, serving a release `pkg-1.0.tar.gz` with TEMPLATE from a local folder, and one
    variant of it pinned to what it renders."""
    module = load()
    served = tmp_path / "served"
    served.mkdir()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo("pkg-1.0/definitions.json.j2")
        info.size = len(TEMPLATE.encode())
        archive.addfile(info, io.BytesIO(TEMPLATE.encode()))
    (served / "pkg-1.0.tar.gz").write_bytes(buffer.getvalue())
    monkeypatch.setattr(module, "PYPI_FILES", served.as_uri() + "/")
    template = module.Template(
        "pkg",
        "1.0",
        "pkg-1.0.tar.gz",
        sha256(buffer.getvalue()),
        "pkg-1.0/definitions.json.j2",
        sha256(TEMPLATE.encode()),
        "3.8",
    )
    variables = {"user": "u", "secret": "s", "ha": "yes"}
    expected = {
        "users": [{"name": "u", "password": "s", "tags": ""}],
        "policies": [
            {"vhost": "/", "name": "ha", "pattern": ".*", "definition": {"ha-mode": "all"}}
        ],
    }
    pinned = sha256(json.dumps(expected, sort_keys=True).encode())
    variant = module.Variant("pkg-1.0-ha", template, "shows", variables, pinned)
    return module, variant, tmp_path / "dest"


def test_a_release_is_rendered_into_the_file_its_pins_name(
    corpus: tuple[ModuleType, Any, Path],
) -> None:
    module, variant, dest = corpus
    assert module.install(dest, (variant,)) == ["pkg-1.0-ha"]
    made = json.loads((dest / "pkg-1.0-ha.json").read_text())
    assert made["policies"][0]["definition"] == {"ha-mode": "all"}  # `bool` read "yes" as Ansible
    assert not (dest / "pkg-1.0-ha.json").read_text().startswith("#jinja2")


def test_a_second_run_with_the_file_in_place_downloads_nothing(
    corpus: tuple[ModuleType, Any, Path], tmp_path: Path
) -> None:
    module, variant, dest = corpus
    module.install(dest, (variant,))
    (tmp_path / "served" / "pkg-1.0.tar.gz").unlink()  # a download would now fail
    assert module.install(dest, (variant,)) == []


@pytest.mark.parametrize("pin", ["sha256", "member_sha256", "rendered"])
def test_a_pin_that_does_not_match_stops_the_run_and_writes_nothing(
    corpus: tuple[ModuleType, Any, Path], pin: str
) -> None:
    module, variant, dest = corpus
    wrong = "0" * 64
    if pin == "rendered":
        variant = module.Variant(variant.name, variant.template, "", variant.variables, wrong)
    else:
        fields = {**variant.template.__dict__, pin: wrong}
        variant = module.Variant(
            variant.name, module.Template(**fields), "", variant.variables, variant.sha256
        )
    with pytest.raises(module.CorpusError, match="sha256"):
        module.install(dest, (variant,))
    assert not (dest / "pkg-1.0-ha.json").exists()


def test_a_file_changed_in_place_is_made_again(corpus: tuple[ModuleType, Any, Path]) -> None:
    module, variant, dest = corpus
    module.install(dest, (variant,))
    (dest / "pkg-1.0-ha.json").write_text('{"users": []}')
    assert module.install(dest, (variant,)) == ["pkg-1.0-ha"]


def test_every_public_file_is_pinned_and_counts_once() -> None:
    module = load()
    digests = [variant.sha256 for variant in module.VARIANTS]
    assert all(len(d) == 64 for d in digests)
    assert len(set(digests)) == len(digests)
    assert len({variant.name for variant in module.VARIANTS}) == len(module.VARIANTS)


def test_vantage6s_literal_is_filled_in_as_its_cli_does_with_a_hash_of_the_password() -> None:
    from rabbitry.topology.spec.passwords import password_matches

    module = load()
    source = 'X = 1\nRABBITMQ_DEFINITIONS = {"users": [{"name": "{{u}}", "password_hash": "",\n'
    source += '"tags": "administrator"}], "vhosts": [{"name": "/"}],\n'
    source += '"permissions": [{"user": "{{u}}", "vhost": "/"}], "queues": []}\n'
    made = json.loads(
        module.render_vantage6(source, {"user": "v", "password": "pw", "vhost": "vh"})
    )
    assert made["users"][0]["name"] == made["permissions"][0]["user"] == "v"
    assert made["vhosts"][0]["name"] == made["permissions"][0]["vhost"] == "vh"
    assert password_matches(
        "pw", made["users"][0]["password_hash"], "rabbit_password_hashing_sha256"
    )
    with pytest.raises(module.CorpusError, match="RABBITMQ_DEFINITIONS"):
        module.render_vantage6("OTHER = {}\n", {"user": "v", "password": "pw", "vhost": "vh"})
