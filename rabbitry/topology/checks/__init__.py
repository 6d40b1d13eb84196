"""Checks that need the whole spec: names, references, queue types, policies, patterns, clusters.

``validate.validate(spec)`` runs every family and returns all problems at once, each with
file:line and the spec path. A family is one module (``objects``, ``policies``, ``patterns``,
``clusters``) that appends findings by spec path to a ``findings.Findings``; positions are
resolved once, in ``validate``. A new check goes into the family of the objects it reads.
"""
