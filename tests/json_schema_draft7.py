"""A JSON Schema draft-07 validator for the tests, for schemas with local references only.

The test environment has no ``jsonschema`` package; this checks every assertion keyword of
draft-07 (``format`` stays an annotation, as draft-07 makes it by default and as
``jsonschema`` treats it without a format checker) and refuses a schema that uses a keyword it
does not know, so a document cannot pass because a rule was skipped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

_ANNOTATIONS = {
    "$schema", "$id", "$comment", "title", "description", "default", "examples", "format",
    "definitions", "readOnly", "writeOnly", "contentMediaType", "contentEncoding",
}  # fmt: skip
_ASSERTIONS = {
    "$ref", "type", "enum", "const", "properties", "patternProperties", "additionalProperties",
    "required", "propertyNames", "minProperties", "maxProperties", "dependencies", "items",
    "additionalItems", "minItems", "maxItems", "uniqueItems", "contains", "minLength",
    "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
}  # fmt: skip


class UnknownKeyword(Exception):
    """The schema uses a keyword this validator does not check."""


def _is_type(value: Any, kind: str) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    raise UnknownKeyword(f"type {kind!r}")


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


class Draft7:
    """``Draft7(schema).errors(instance)``: every place ``instance`` breaks ``schema``."""

    def __init__(self, schema: Any) -> None:
        self.root = schema

    @classmethod
    def from_file(cls, path: Path) -> Draft7:
        return cls(json.loads(path.read_text()))

    def resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            raise UnknownKeyword(f"a reference outside the schema: {ref}")
        node = self.root
        for part in ref[1:].split("/")[1:]:
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def errors(self, instance: Any, schema: Any = None, at: str = "") -> list[str]:
        schema = self.root if schema is None else schema
        if schema is True:
            return []
        if schema is False:
            return [f"{at or '/'}: no value is allowed here"]
        if "$ref" in schema:  # draft-07: the keywords beside a reference are ignored
            return self.errors(instance, self.resolve(schema["$ref"]), at)
        unknown = set(schema) - _ANNOTATIONS - _ASSERTIONS
        if unknown:
            raise UnknownKeyword(f"{sorted(unknown)} in the schema at {at or '/'}")
        out: list[str] = []
        where = at or "/"
        if "type" in schema:
            kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            if not any(_is_type(instance, k) for k in kinds):
                return [f"{where}: {instance!r:.60} is not of type {kinds}"]
        if "enum" in schema and _canonical(instance) not in map(_canonical, schema["enum"]):
            out.append(f"{where}: {instance!r:.60} is not one of {schema['enum']}")
        if "const" in schema and _canonical(instance) != _canonical(schema["const"]):
            out.append(f"{where}: {instance!r:.60} is not {schema['const']!r}")
        if isinstance(instance, dict):
            out += self._object(instance, schema, at)
        if isinstance(instance, list):
            out += self._array(instance, schema, at)
        if isinstance(instance, str):
            if "minLength" in schema and len(instance) < schema["minLength"]:
                out.append(f"{where}: shorter than {schema['minLength']}")
            if "maxLength" in schema and len(instance) > schema["maxLength"]:
                out.append(f"{where}: longer than {schema['maxLength']}")
            if "pattern" in schema and not re.search(schema["pattern"], instance):
                out.append(f"{where}: {instance!r} does not match {schema['pattern']!r}")
        if _is_type(instance, "number"):
            out += self._number(instance, schema, where)
        for sub in schema.get("allOf", []):
            out += self.errors(instance, sub, at)
        if "anyOf" in schema and all(self.errors(instance, s, at) for s in schema["anyOf"]):
            out.append(f"{where}: matches none of anyOf")
        if "oneOf" in schema:
            passing = [s for s in schema["oneOf"] if not self.errors(instance, s, at)]
            if len(passing) != 1:
                out.append(f"{where}: matches {len(passing)} of oneOf, not exactly one")
        if "not" in schema and not self.errors(instance, schema["not"], at):
            out.append(f"{where}: matches what `not` forbids")
        if "if" in schema:
            branch = "else" if self.errors(instance, schema["if"], at) else "then"
            if branch in schema:
                out += self.errors(instance, schema[branch], at)
        return out

    def _object(self, instance: dict[str, Any], schema: Any, at: str) -> list[str]:
        out: list[str] = []
        where = at or "/"
        for name in schema.get("required", []):
            if name not in instance:
                out.append(f"{where}: {name!r} is required")
        if "minProperties" in schema and len(instance) < schema["minProperties"]:
            out.append(f"{where}: fewer than {schema['minProperties']} properties")
        if "maxProperties" in schema and len(instance) > schema["maxProperties"]:
            out.append(f"{where}: more than {schema['maxProperties']} properties")
        properties = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        for key, value in instance.items():
            path = f"{at}/{key}"
            if "propertyNames" in schema:
                out += self.errors(key, schema["propertyNames"], path)
            matched = False
            if key in properties:
                matched = True
                out += self.errors(value, properties[key], path)
            for pattern, sub in patterns.items():
                if re.search(pattern, key):
                    matched = True
                    out += self.errors(value, sub, path)
            if not matched and "additionalProperties" in schema:
                out += self.errors(value, schema["additionalProperties"], path)
        for key, needs in schema.get("dependencies", {}).items():
            if key in instance:
                if isinstance(needs, list):
                    out += [f"{where}: {key!r} needs {n!r}" for n in needs if n not in instance]
                else:
                    out += self.errors(instance, needs, at)
        return out

    def _array(self, instance: list[Any], schema: Any, at: str) -> list[str]:
        out: list[str] = []
        where = at or "/"
        if "minItems" in schema and len(instance) < schema["minItems"]:
            out.append(f"{where}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(instance) > schema["maxItems"]:
            out.append(f"{where}: more than {schema['maxItems']} items")
        if schema.get("uniqueItems") and len(set(map(_canonical, instance))) != len(instance):
            out.append(f"{where}: items are not unique")
        items = schema.get("items", True)
        if isinstance(items, list):
            for index, value in enumerate(instance):
                sub = items[index] if index < len(items) else schema.get("additionalItems", True)
                out += self.errors(value, sub, f"{at}/{index}")
        else:
            for index, value in enumerate(instance):
                out += self.errors(value, items, f"{at}/{index}")
        if "contains" in schema and all(self.errors(v, schema["contains"], at) for v in instance):
            out.append(f"{where}: no item matches `contains`")
        return out

    def _number(self, value: float, schema: Any, where: str) -> list[str]:
        out: list[str] = []
        if "minimum" in schema and value < schema["minimum"]:
            out.append(f"{where}: below {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            out.append(f"{where}: above {schema['maximum']}")
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            out.append(f"{where}: not above {schema['exclusiveMinimum']}")
        if "exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"]:
            out.append(f"{where}: not below {schema['exclusiveMaximum']}")
        if "multipleOf" in schema and (value / schema["multipleOf"]) % 1:
            out.append(f"{where}: not a multiple of {schema['multipleOf']}")
        return out
