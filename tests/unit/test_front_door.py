"""``import rabbitry``: every public name resolves, and nothing heavy loads before it is used."""

from __future__ import annotations

import subprocess
import sys

import rabbitry


def test_every_name_in_all_resolves() -> None:
    for name in rabbitry.__all__:
        assert getattr(rabbitry, name) is not None, name
    assert set(rabbitry.__all__) <= set(dir(rabbitry))


def test_lazy_names_are_the_objects_of_their_modules() -> None:
    from rabbitry.consumer import Worker
    from rabbitry.provisioner.stack import apply
    from rabbitry.publisher import Publisher

    assert rabbitry.Publisher is Publisher
    assert rabbitry.Worker is Worker
    assert rabbitry.apply is apply


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        rabbitry.Nonexistent  # noqa: B018
    except AttributeError as exc:
        assert "Nonexistent" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_import_rabbitry_loads_no_client_model_or_http_library() -> None:
    heavy = [
        "pydantic",
        "httpx",
        "pika",
        "jinja2",
        "yaml",
        "rabbitry.publisher",
        "rabbitry.consumer",
        "rabbitry.topology",
        "rabbitry.amqp",
    ]
    code = f"import sys, rabbitry; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
