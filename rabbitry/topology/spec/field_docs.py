"""The spec's field docs, read from the docstrings under the fields when a JSON Schema is made.

The spec's models document each field with a docstring under it, and the JSON Schema shows
them to editors as descriptions. pydantic can read them itself (``use_attribute_docstrings``),
but does so for every model as the model is defined, walking the interpreter's frames and
parsing each class's source again: a tenth of a second at every start of the CLI, for a schema
only ``rabbitry schema`` writes. The models pass ``describe`` to pydantic as their
``json_schema_extra`` instead, and the docstrings are read here, one parse a module, the first
time a schema is made.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
from typing import Any

from pydantic import BaseModel, ConfigDict


@functools.cache
def _module_docs(module: str) -> dict[str, dict[str, str]]:
    """Each class of ``module`` defined at its top level, with its own fields' docstrings: a
    string standing right after an annotated assignment, as pydantic reads them."""
    tree = ast.parse(inspect.getsource(sys.modules[module]))
    classes: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        docs = classes[node.name] = {}
        for before, after in zip(node.body, node.body[1:], strict=False):
            if (
                isinstance(before, ast.AnnAssign)
                and isinstance(before.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[before.target.id] = inspect.cleandoc(after.value.value)
    return classes


def field_docs(cls: type[BaseModel]) -> dict[str, str]:
    """The docstrings of ``cls``'s fields, a field's own class first, then its bases'."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if issubclass(klass, BaseModel) and klass is not BaseModel:
            docs.update(_module_docs(klass.__module__).get(klass.__qualname__, {}))
    return docs


def describe(schema: dict[str, Any], cls: type[BaseModel]) -> None:
    """pydantic's ``json_schema_extra`` for the spec's models: each property whose field has
    no description of its own is described by its docstring."""
    properties = schema.get("properties", {})
    docs = field_docs(cls)
    for name, field in cls.model_fields.items():
        doc = docs.get(name)
        prop = properties.get(field.alias or name)
        if doc is not None and field.description is None and isinstance(prop, dict):
            prop["description"] = doc  # as a field's own description, over its type's


SPEC_MODEL_CONFIG = ConfigDict(
    extra="forbid",
    json_schema_extra=describe,  # field docstrings, read when a schema is made
    coerce_numbers_to_str=True,
    defer_build=True,
)
"""What every model of the spec shares: unknown keys are errors, numbers are accepted as
names, the field docs become the schema's descriptions, and a model is built on first use."""

__all__ = ["SPEC_MODEL_CONFIG", "describe", "field_docs"]
