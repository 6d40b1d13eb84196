"""``rabbitry asyncapi SPEC [--app MODULE:APP]``: the AsyncAPI 3.0 document of a spec."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

import click

from rabbitry.cli.common import command
from rabbitry.cli.document_options import (
    checked_spec_options,
    format_option,
    output_option,
    write_document,
)
from rabbitry.topology import expand
from rabbitry.topology.asyncapi import Server, asyncapi_document
from rabbitry.topology.spec.model import Spec
from rabbitry.uri import split_uris


@command("asyncapi")
@checked_spec_options
@click.option(
    "--app",
    "target",
    metavar="MODULE:APP",
    help="A rabbitry.consumer.App whose handlers become receive operations, typed bodies"
    " message schemas (as for `worker run`).",
)
@format_option("json", "yaml", help="JSON, or YAML (the same document).")
@click.option(
    "--api-version",
    default="1.0.0",
    show_default=True,
    help="The document's info.version (the version of your messaging API).",
)
@output_option
def asyncapi_command(
    loaded: Spec,
    target: str | None,
    output_format: str,
    api_version: str,
    output: Path | None,
) -> None:
    """Print an AsyncAPI 3.0 document of SPEC: a channel per exchange and queue (AMQP channel
    bindings), and with --app a receive operation and message schema per handler.

    Servers come from the spec's broker.url (host and port only; no password is printed).
    """
    handlers = []
    if target is not None:
        from rabbitry.cli.worker import load_app
        from rabbitry.consumer.handler_docs import handler_docs

        handlers = handler_docs(load_app(target))
    urls = loaded.broker.url if loaded.broker is not None else None
    document = asyncapi_document(
        expand(loaded),
        version=api_version,
        handlers=handlers,
        servers=servers_of(urls),
    )
    if output_format == "yaml":
        import yaml

        text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    else:
        text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    write_document(text, output)


def servers_of(urls: str | Sequence[str] | None) -> list[Server]:
    """Each broker node of the spec's ``broker.url``: scheme, host and port, nothing else."""
    if urls is None:
        return []
    listed = split_uris(urls) if isinstance(urls, str) else [u for x in urls for u in split_uris(x)]
    out: list[Server] = []
    for url in listed:
        parts = urlsplit(url)
        if parts.hostname:
            out.append(Server(parts.scheme or "amqp", parts.hostname, parts.port))
    return out
