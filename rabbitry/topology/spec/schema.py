"""The JSON Schema of the spec, for editors (yaml-language-server) and other tools.

Generated from the pydantic model, so it cannot disagree with what the loader accepts; field
docstrings become descriptions, which editors show on hover. ``docs/rabbitry.schema.json`` is
this output, kept current by a unit test.
"""

from __future__ import annotations

import json
from typing import Any

from rabbitry.topology.spec.model import Spec

JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a spec document (what a YAML file is checked against)."""
    schema = Spec.model_json_schema(by_alias=True, mode="validation")
    return {"$schema": JSON_SCHEMA_DIALECT, **schema}


def json_schema_text() -> str:
    """``json_schema()`` as the text of ``docs/rabbitry.schema.json`` (stable layout)."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"
