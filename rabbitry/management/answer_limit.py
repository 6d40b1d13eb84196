"""How much of one management API answer rabbitry reads: a body is read as it streams in and
the read stops at a limit, so that a broken or hostile broker (or a proxy in front of it) that
answers with gigabytes costs no more than the limit.

The limit counts the body as decoded: a ``Content-Encoding: gzip`` (or ``deflate``) answer is
inflated here, a step of at most ``STEP`` bytes at a time, so that a few hundred KB of gzip that
inflate to gigabytes stop at the limit too, having held no more than the limit and one step.
(httpx's own decoding inflates each network read whole: 64 KiB of gzip can be 64 MiB.) The
client asks only for the encodings read here (``ACCEPT_ENCODING``); an answer in another is an
error, as it is in httpx.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator, Mapping
from typing import NoReturn

import httpx

from rabbitry.errors import AnswerTooLarge, BrokerError

MAX_BYTES_ENV = "RABBITRY_MANAGEMENT_MAX_BYTES"
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
"""256 MiB. The largest answers rabbitry reads are the definitions of a whole broker and a
vhost's listing of bindings. Measured on RabbitMQ 4.0.5 with one vhost of 50,000 objects
(bench/answer_limit.py, docs/benchmarks.md): ``GET /api/definitions`` 7.9 MB decoded, the
vhost's bindings 6.4 MB, its queues 3.5 MB. 256 MiB holds over thirty times the largest (a
broker of more than a million objects), and is still what one process can hold and parse on
a small machine (the parsed JSON takes several times the text)."""


STEP = 1024 * 1024
"""The most bytes one step of inflating an answer makes."""
ACCEPT_ENCODING = "gzip, deflate"
"""The encodings ``decoded`` reads, and so the only ones the client asks for."""


def mebibytes(size: int) -> str:
    """``256 MiB`` for whole mebibytes, else the bytes (``1,000 bytes``)."""
    if size % (1024 * 1024) == 0:
        return f"{size // (1024 * 1024)} MiB"
    return f"{size:,} bytes"


def max_answer_bytes(environ: Mapping[str, str] | None = None) -> int:
    """``RABBITRY_MANAGEMENT_MAX_BYTES`` when set (whole bytes, ``_`` allowed), else
    ``DEFAULT_MAX_BYTES``."""
    raw = (os.environ if environ is None else environ).get(MAX_BYTES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_BYTES
    try:
        size = int(raw.replace("_", ""))
    except ValueError:
        size = 0
    if size <= 0:
        raise BrokerError(
            f"{MAX_BYTES_ENV}={raw!r} is not a number of bytes above 0: set it to the most"
            f" rabbitry may read of one management API answer (default {DEFAULT_MAX_BYTES},"
            f" {mebibytes(DEFAULT_MAX_BYTES)}), or unset it"
        )
    return size


def read_capped(response: httpx.Response, limit: int, what: str) -> httpx.Response:
    """The answer of a streamed ``response`` with its body read, decoded, up to ``limit``
    bytes; past it the response is closed and ``AnswerTooLarge`` names ``what`` (the method
    and path: never a URL with credentials), the limit and the setting that raises it."""
    try:
        declared = int(response.headers.get("content-length", ""))
    except ValueError:
        declared = -1
    chunks: list[bytes] = []
    size = 0
    try:
        if "content-encoding" not in response.headers and declared > limit:
            too_large(what, limit, f"it announces {declared:,} bytes")
        for chunk in decoded(response.iter_raw(), response.headers.get("content-encoding", "")):
            size += len(chunk)
            if size > limit:
                too_large(what, limit, "the answer was not read further")
            chunks.append(chunk)
    finally:
        response.close()
    # the body is kept decoded: the headers that describe it as sent are left out
    headers = [
        (name, value)
        for name, value in response.headers.multi_items()
        if name.lower() not in ("content-encoding", "content-length", "transfer-encoding")
    ]
    return httpx.Response(
        response.status_code,
        headers=headers,
        content=b"".join(chunks),
        request=response.request,
        extensions=response.extensions,
    )


def decoded(raw: Iterator[bytes], encoding: str) -> Iterator[bytes]:
    """The body of ``raw`` (as sent, in ``encoding``) decoded, in pieces of at most ``STEP``
    bytes: each is made only when the one before it was taken."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        yield from raw
        return
    if encoding in ("gzip", "x-gzip"):
        inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
    elif encoding == "deflate":
        inflater = zlib.decompressobj()
    else:
        raise httpx.DecodingError(
            f"the answer is in Content-Encoding {encoding!r}; rabbitry asked for {ACCEPT_ENCODING}"
        )
    first = True
    try:
        for data in raw:
            if first and encoding == "deflate" and not _zlib_header(data):
                # "deflate" is sent with and without its zlib header (httpx reads both)
                inflater = zlib.decompressobj(-zlib.MAX_WBITS)
            first = False
            while data:
                piece = inflater.decompress(data, STEP)
                data = inflater.unconsumed_tail
                if piece:
                    yield piece
        rest = inflater.flush()
    except zlib.error as exc:
        raise httpx.DecodingError(f"the answer is not valid {encoding} ({exc})") from None
    if rest:
        yield rest


def _zlib_header(data: bytes) -> bool:
    """Whether ``data`` starts with a zlib header (method 8, the check bits right)."""
    return len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] * 256 + data[1]) % 31 == 0


def too_large(what: str, limit: int, detail: str) -> NoReturn:
    raise AnswerTooLarge(
        f"{what} answered more than {mebibytes(limit)} ({detail}), the most rabbitry reads of"
        " one management API answer. A broker this large is rare: check"
        " that the management URL reaches RabbitMQ and not a proxy or another server; if the"
        f" answer is right, raise the limit with {MAX_BYTES_ENV}=BYTES"
    )


__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_BYTES_ENV",
    "AnswerTooLarge",
    "max_answer_bytes",
    "read_capped",
]
