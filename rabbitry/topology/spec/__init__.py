"""The spec as users write it: the model, and reading a file into it.

- ``model``: the strict pydantic models (every field documented; they become the JSON Schema).
- ``loader``, ``template``, ``sandbox``, ``source_map``: rendering (Jinja2, loaded only for a
  spec with template syntax), YAML with line marks, and the ``Spec`` built from it;
  ``problems`` turns pydantic errors into problems with file:line.
- ``quantities`` and ``arguments``: durations, sizes and the broker arguments rabbitry types.
- ``schema`` (JSON Schema of the model) and ``passwords`` (RabbitMQ's password hashes).

Nothing here compares objects with each other (that is ``topology.checks``) or knows what a
pattern declares (``topology.patterns``).
"""
