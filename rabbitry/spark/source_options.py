"""The source's options (``spark.read`` / ``spark.readStream``), parsed and checked on the driver.

Pure, like the sink's: Spark's case-insensitive strings in, typed ``SourceOptions`` out, or one
``SourceOptionError`` that names the option and says what to write instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from rabbitry.errors import SourceOptionError
from rabbitry.spark.offsets import OffsetKind, OffsetSpec, parse_offset_spec
from rabbitry.spark.options import (
    DEFAULT_URL_ENV,
    _bool,
    _float,
    _int,
    _optional_int,
    _resolve_url,
    known_options,
)
from rabbitry.spark.source_protocol import Protocol, stream_port_from
from rabbitry.uri import mask_uri

MANAGEMENT_URL_ENV = "RABBITRY_MANAGEMENT_URL"

DEFAULT_PREFETCH = 2000
DEFAULT_PARTITION_SIZE = 500_000
MAX_PARTITIONS = 1000

# Option name (lower case, as Spark hands them over) -> one-line description.
SOURCE_OPTIONS: dict[str, str] = {
    "url": "broker URL amqp[s]://user:pass@host:port/vhost (prefer url_env: options may be shown)",
    "url_env": f"environment variable holding the broker URL (default {DEFAULT_URL_ENV})",
    "password_env": "environment variable holding the password to put into the URL",
    "stream": "stream queue(s) to read, comma-separated",
    "super_stream": "super stream to read: every partition stream <name>-<key>",
    "partitions": "the super stream's partition keys, comma-separated, or their number"
    " (default: every partition its exchange's bindings name)",
    "management_url": "management API where a super stream's bindings are read (default"
    f" {MANAGEMENT_URL_ENV}, else url's host on port 15672 with url's user)",
    "startingoffsets": "earliest, latest, a timestamp (epoch ms or ISO 8601) or JSON per stream"
    " (default: earliest for batch reads, latest for streaming)",
    "endingoffsets": "batch reads: latest or JSON per stream (default latest)",
    "maxrecordspertrigger": "streaming: at most this many messages per micro-batch, all streams",
    "maxrecordsperpartition": "cut a stream's range into Spark partitions of at most this many"
    f" messages (default {DEFAULT_PARTITION_SIZE:,})",
    "minpartitions": "at least this many Spark partitions: each stream's range cut into"
    " near-equal pieces by its share of the messages (default 1: one per stream unless"
    " maxRecordsPerPartition cuts it)",
    "prefetch": f"unacknowledged messages in flight per task (default {DEFAULT_PREFETCH})",
    "read_timeout": "seconds a task waits for the next message of its range before it fails"
    " (default 60)",
    "connection_name": "connection name shown in the management UI (default rabbitry-spark)",
    "protocol": "what tasks read with: stream (the stream protocol), amqp (AMQP 0-9-1) or auto"
    " (default: the stream protocol when the broker offers it, else AMQP 0-9-1)",
    "stream_port": "the stream protocol's port (default: RABBITRY_STREAM_URL's when it names"
    " url's host, else 5552)",
    "failondataloss": "fail when offsets to read were removed by retention (default true);"
    " false: read on from the first offset held, with a warning",
}


@dataclass(frozen=True)
class SourceOptions:
    """Every setting of one read, typed. ``url`` holds the password: show ``display_url``."""

    url: str = field(repr=False)
    streams: tuple[str, ...] = ()
    super_stream: str | None = None
    partitions: tuple[str, ...] = ()
    partition_count: int | None = None
    streaming: bool = False
    starting_offsets: str | None = None
    ending_offsets: str | None = None
    max_records_per_trigger: int | None = None
    max_records_per_partition: int = DEFAULT_PARTITION_SIZE
    min_partitions: int = 1
    prefetch: int = DEFAULT_PREFETCH
    read_timeout: float = 60.0
    connection_name: str = "rabbitry-spark"
    management_url: str = field(default="", repr=False)
    """Where a super stream's bindings are read; credentials from ``url`` when it has none."""
    fail_on_data_loss: bool = True
    protocol: str = "auto"
    stream_port: int = 5552

    @property
    def display_url(self) -> str:
        return mask_uri(self.url)

    @property
    def vhost(self) -> str:
        path = urlsplit(self.url).path
        return unquote(path[1:]) if len(path) > 1 else "/"

    def starting(self, streams: tuple[str, ...]) -> OffsetSpec:
        """``startingOffsets`` for these streams (a super stream's are known only once its
        partitions are found)."""
        default = OffsetKind.LATEST if self.streaming else OffsetKind.EARLIEST
        return parse_offset_spec(
            "startingOffsets", self.starting_offsets, default, streams, start=True
        )

    def ending(self, streams: tuple[str, ...]) -> OffsetSpec:
        return parse_offset_spec(
            "endingOffsets", self.ending_offsets, OffsetKind.LATEST, streams, start=False
        )

    @classmethod
    def parse(
        cls,
        options: Mapping[str, str],
        *,
        streaming: bool | None,
        environ: Mapping[str, str] | None = None,
    ) -> SourceOptions:
        from rabbitry.management.endpoints import management_from_amqp

        env = os.environ if environ is None else environ
        given = known_options(options, SOURCE_OPTIONS, "source", SourceOptionError)
        url = _resolve_url(given, env, SourceOptionError)
        streams = tuple(s.strip() for s in given.get("stream", "").split(",") if s.strip())
        super_stream = (given.get("super_stream") or "").strip() or None
        if bool(streams) == bool(super_stream):
            raise SourceOptionError(
                "give stream=<stream[,stream...]> or super_stream=<name> (one of them)"
            )
        if len(set(streams)) != len(streams):
            raise SourceOptionError(f"stream names a stream twice: {', '.join(streams)}")
        keys, count = _super_stream_partitions(given, super_stream)
        management = given.get("management_url", "").strip()
        if management and urlsplit(management).scheme not in ("http", "https"):
            raise SourceOptionError(
                f"management_url {mask_uri(management)!r} must start with http:// or https://"
                " (the management API, such as http://rabbit:15672)"
            )
        _check_mode(given, streaming)
        max_trigger = _optional_int(given, "maxrecordspertrigger", 1, 2**62, SourceOptionError)
        parsed = cls(
            url=url,
            streaming=bool(streaming),
            starting_offsets=given.get("startingoffsets"),
            ending_offsets=given.get("endingoffsets"),
            streams=streams,
            super_stream=super_stream,
            partitions=keys,
            partition_count=count,
            max_records_per_trigger=max_trigger,
            max_records_per_partition=_int(
                given, "maxrecordsperpartition", DEFAULT_PARTITION_SIZE, 1, 2**62, SourceOptionError
            ),
            min_partitions=_int(given, "minpartitions", 1, 1, 100_000, SourceOptionError),
            prefetch=_int(given, "prefetch", DEFAULT_PREFETCH, 1, 65535, SourceOptionError),
            read_timeout=_float(given, "read_timeout", 60.0, SourceOptionError),
            connection_name=given.get("connection_name") or "rabbitry-spark",
            management_url=(management or env.get(MANAGEMENT_URL_ENV) or management_from_amqp(url)),
            fail_on_data_loss=_bool(given, "failondataloss", True, SourceOptionError),
            protocol=Protocol.parse(given.get("protocol")).value,
            stream_port=stream_port_from(
                url, _optional_int(given, "stream_port", 1, 65535, SourceOptionError), env
            ),
        )
        if streams:  # a super stream's offsets are checked once its partitions are known
            parsed.starting(streams)
            parsed.ending(streams)
        return parsed


def _super_stream_partitions(
    given: Mapping[str, str], super_stream: str | None
) -> tuple[tuple[str, ...], int | None]:
    """``partitions``: the super stream's partition keys, or their number."""
    if "partitions" not in given:
        return (), None
    if super_stream is None:
        raise SourceOptionError("partitions belongs to super_stream=; give both")
    text = given["partitions"].strip()
    if text.isdigit():
        return (), _optional_int(given, "partitions", 1, MAX_PARTITIONS, SourceOptionError)
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    if not keys:
        raise SourceOptionError("partitions is empty: give keys or a number")
    return keys, None


def _check_mode(given: Mapping[str, str], streaming: bool | None) -> None:
    """The options only a batch read, or only a streaming one, takes (None: not known yet)."""
    if streaming is True and "endingoffsets" in given:
        raise SourceOptionError(
            "endingOffsets is for batch reads (spark.read); a streaming query reads on"
        )
    if streaming is False and "maxrecordspertrigger" in given:
        raise SourceOptionError(
            "maxRecordsPerTrigger is for streaming reads; a batch read takes"
            " startingOffsets to endingOffsets"
        )
