"""Where the tests' RabbitMQ broker comes from: a URL in the environment, or a container.

Order (``choose_provider``): ``RABBITMQ_URL`` (+ ``RABBITRY_MANAGEMENT_URL``) when set, otherwise a
container started through testcontainers. ``RABBITRY_TEST_BROKER=testcontainers`` or ``=env``
forces one of them; a forced provider that fails is an error, never a skip.
"""

from __future__ import annotations

import contextlib
import enum
import os
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from rabbitry.errors import BrokerError, BrokerUnavailable
from rabbitry.testing.broker import (
    DEFAULT_MANAGEMENT_TIMEOUT,
    Broker,
    broker_from_urls,
    wait_until_ready,
)
from rabbitry.testing.containers import start_broker
from rabbitry.testing.shared import SharedBrokerPlace


class ProviderKind(enum.Enum):
    """Where a broker comes from."""

    ENV = "env"
    TESTCONTAINERS = "testcontainers"


@dataclass(frozen=True)
class ProviderChoice:
    kind: ProviderKind
    # Forced providers fail loudly; an unforced container provider without an engine skips.
    forced: bool


def choose_provider(environ: Mapping[str, str]) -> ProviderChoice:
    """Pick the provider from ``RABBITRY_TEST_BROKER`` and ``RABBITMQ_URL``."""
    wanted = environ.get("RABBITRY_TEST_BROKER", "").strip().lower()
    has_url = bool(environ.get("RABBITMQ_URL", "").strip())
    if wanted in ("", "auto"):
        return ProviderChoice(ProviderKind.ENV if has_url else ProviderKind.TESTCONTAINERS, False)
    try:
        kind = ProviderKind(wanted)
    except ValueError:
        choices = ", ".join(k.value for k in ProviderKind)
        raise BrokerError(
            f"RABBITRY_TEST_BROKER={wanted!r} is not a broker provider; use one of: {choices} "
            "(or leave it unset to pick automatically)"
        ) from None
    if kind is ProviderKind.ENV and not has_url:
        raise BrokerError("RABBITRY_TEST_BROKER=env but RABBITMQ_URL is unset; set it")
    return ProviderChoice(kind, True)


def session_password() -> str:
    """A fresh password for a session's container broker: tests check that the broker's
    password appears in no output, which a well-known one (guest) would make meaningless."""
    return secrets.token_urlsafe(16)


def broker_from_env(environ: Mapping[str, str]) -> Broker:
    """The broker named by ``RABBITMQ_URL`` and ``RABBITRY_MANAGEMENT_URL``."""
    url = environ.get("RABBITMQ_URL", "").strip()
    if not url:
        raise BrokerError("RABBITMQ_URL is unset")
    return broker_from_urls(url, environ.get("RABBITRY_MANAGEMENT_URL", "").strip() or None)


@contextlib.contextmanager
def provide_broker(
    environ: Mapping[str, str] | None = None,
    *,
    timeout: float = DEFAULT_MANAGEMENT_TIMEOUT,
    shared: SharedBrokerPlace | None = None,
) -> Iterator[Broker]:
    """A broker for a test session, from the provider ``choose_provider`` picks.

    Raises ``BrokerUnavailable`` when nothing was forced and no broker can be had (callers skip),
    ``BrokerError`` for every other failure. A container broker is removed on exit, except
    one ``shared`` by the workers of a pytest-xdist run: its controller removes that.
    """
    env = os.environ if environ is None else environ
    choice = choose_provider(env)
    if choice.kind is ProviderKind.ENV:
        broker = broker_from_env(env)
        # RABBITMQ_URL names a broker on purpose: not finding it is an error, not a skip.
        yield wait_until_ready(broker, timeout)
        return

    try:
        if shared is not None:
            broker, handle = shared.broker(env, timeout), None
        else:
            handle = start_broker(environ=env, startup_timeout=timeout, password=session_password())
            broker = handle.broker
    except BrokerUnavailable as exc:
        if choice.forced:
            raise BrokerError(f"RABBITRY_TEST_BROKER=testcontainers, but {exc}") from exc
        raise
    with handle or contextlib.nullcontext():
        yield broker
