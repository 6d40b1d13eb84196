"""The JSON Schema: generated from the model, committed for editors, never stale."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel

from rabbitry.topology import json_schema
from rabbitry.topology.spec.arguments import (
    ExchangeArguments,
    KnownKeys,
    OperatorPolicyDefinition,
    PolicyDefinition,
    QueueArguments,
    aliases,
)
from rabbitry.topology.spec.model import Spec
from rabbitry.topology.spec.problems import model_at
from rabbitry.topology.spec.schema import json_schema_text

ROOT = Path(__file__).parents[3]


def test_committed_schema_is_current() -> None:
    committed = (ROOT / "docs" / "rabbitry.schema.json").read_text(encoding="utf-8")
    assert json.loads(committed) == json_schema(), (
        "docs/rabbitry.schema.json is stale: run `rabbitry schema > docs/rabbitry.schema.json`"
    )
    assert committed == json_schema_text()


def test_schema_describes_fields_for_editors() -> None:
    schema = json_schema()
    assert schema["title"] == "rabbitry spec"
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema["additionalProperties"] is False
    queue = schema["$defs"]["QueueSpec"]
    assert queue["additionalProperties"] is False
    assert "description" in queue["properties"]["durable"]
    ttl = schema["$defs"]["QueueArguments"]["properties"]["x-message-ttl"]
    assert "description" in ttl
    password = schema["$defs"]["UserSpec"]["properties"]["password"]
    assert "writeOnly" in json.dumps(password)


def test_every_model_field_has_a_description() -> None:
    missing = []
    for name, definition in json_schema()["$defs"].items():
        for key, prop in definition.get("properties", {}).items():
            if "description" not in prop:
                missing.append(f"{name}.{key}")
    assert missing == []


def test_spec_reference_mentions_every_key() -> None:
    reference = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
    keys: set[str] = set()
    for known in (QueueArguments, ExchangeArguments, PolicyDefinition, OperatorPolicyDefinition):
        keys.update(aliases(known))
    pending: list[type[BaseModel]] = [Spec]
    while pending:
        model = pending.pop()
        keys.update(field.alias or name for name, field in model.model_fields.items())
        pending.extend(_document_models(model))
    missing = sorted(k for k in keys if not re.search(rf"`{re.escape(k)}`", reference))
    assert missing == [], f"docs/spec.md does not document: {missing}"


def _document_models(model: type[BaseModel]) -> list[type[BaseModel]]:
    """The spec models nested in ``model`` (argument and definition models are listed apart)."""
    found = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        sub = model_at(model, (key,)) or model_at(model, (key, 0))
        if sub is not None and not issubclass(sub, KnownKeys):
            found.append(sub)
    return found
