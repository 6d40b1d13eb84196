"""Check of the spec's broker URLs: each one parses as a URL of its kind.

Clients read ``broker.url`` and ``broker.management_url`` only when they connect, so without
this check a URL such as ``amqps//user:secret@host`` (its colon forgotten) passed ``validate``
and failed only later, on the worker's host. The messages come from ``uri.url_problem``: the
password never appears in them.
"""

from __future__ import annotations

from rabbitry.topology.checks.findings import Findings
from rabbitry.topology.spec.model import Spec
from rabbitry.uri import url_problem

__all__ = ["check_broker_urls"]

KINDS = (
    ("url", ("amqp", "amqps"), "AMQP URL"),
    ("management_url", ("http", "https"), "management URL"),
)


def check_broker_urls(spec: Spec, findings: Findings) -> None:
    broker = spec.broker
    if broker is None:
        return
    for key, schemes, what in KINDS:
        value = getattr(broker, key)
        if value is None:
            continue
        listed = [value] if isinstance(value, str) else value
        for index, url in enumerate(listed):
            problem = url_problem(url, schemes, what)
            if problem is not None:
                loc = ("broker", key) if isinstance(value, str) else ("broker", key, index)
                findings.error(loc, problem)
