"""What an HTTP error answer of the management API becomes: ``ObjectNotFound`` for a 404, else a
``BrokerError`` whose text names the request, the broker's reason and what to do."""

from __future__ import annotations

import httpx

from rabbitry.errors import ObjectNotFound
from rabbitry.uri import mask_text

BROKER_TERMS = {
    "queue_supervisor_not_found": (
        "the broker was still creating queues of another definitions import into this vhost"
        " (two applies at once?); wait for the other run to finish, then apply again"
    ),
}
"""Erlang terms the management API answers with, as a sentence that says what to do."""


def describe_failure(
    method: str, path: str, response: httpx.Response, *, base_url: str, username: str
) -> str:
    """The text of the error an HTTP error answer becomes: the request, the broker's reason
    and what to do, credentials masked."""
    reason = response.text
    try:
        body = response.json()
        if isinstance(body, dict):
            reason = str(body.get("reason") or body.get("error") or body)
    except ValueError:
        pass
    if response.status_code == 401:
        return mask_text(
            f"the management API at {base_url} refused user {username!r} (HTTP 401"
            f" {reason}, on {method} /api{path}): check the user and password in"
            " --management-url or RABBITRY_MANAGEMENT_URL (or --url, which it is derived"
            " from), and that the user has a management tag"
        )
    for term, sentence in BROKER_TERMS.items():
        if term in reason:
            # what happened and what to do first; the broker's own words below it
            return mask_text(
                f"{method} /api{path} failed: {sentence}\n  broker said (HTTP"
                f" {response.status_code}): {reason}"
            )
    return mask_text(f"{method} /api{path} failed with HTTP {response.status_code}: {reason}")


__all__ = ["BROKER_TERMS", "ObjectNotFound", "describe_failure"]
