"""Whether the broker's delay levels have the layout a client's spec expects.

A delayed message's routing key is made for one layout (``rabbitry.policies.delay``): published
into levels of another layout it lands in the wrong level or matches nothing, and a quorum level
then keeps it for ever, confirmed and never delivered. So before its first delay through a
spec's levels a client passively declares the layout's marker exchange
(``<delay>.layout.<fingerprint>``, which ``rabbitry apply`` declares with the levels): present,
the layouts agree; absent, the client refuses, naming both and what to do.

One connection per check (``amqp.channel``, blocking): a publisher runs it once per delay at its
first delayed message, a worker once at start, so no message pays for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rabbitry.amqp.channel import Channel
from rabbitry.amqp.settings import ConnectionSettings
from rabbitry.errors import BrokerError, ChannelRefused, DelayLayoutMismatch
from rabbitry.policies.delay import DelayScheme

CHECK_TIMEOUT = 8.0


def mismatch_message(scheme: DelayScheme, where: str) -> str:
    """What a client says when the broker lacks ``scheme``'s layout marker at ``where``."""
    return (
        f"delay {scheme.prefix!r} of the spec is laid out as {scheme.layout}, but {where} has"
        f" no exchange {scheme.layout_exchange!r}: its levels were made by another spec (a"
        " changed unit, max, count, lanes or levels), by an older rabbitry, or not at all, and a"
        " delayed message routed for this spec's layout would wait there for ever. Apply this"
        " spec (rabbitry apply SPEC) or run with the spec the broker was applied with"
    )


def check_delay_layouts(
    url: str | ConnectionSettings,
    schemes: Iterable[DelayScheme],
    *,
    timeout: float = CHECK_TIMEOUT,
) -> None:
    """Raise ``DelayLayoutMismatch`` unless the vhost ``url`` names holds the layout marker of
    every one of ``schemes`` (``BrokerError`` when the broker cannot be asked); changes
    nothing on the broker (passive declares only)."""
    wanted = list(schemes)
    if not wanted:
        return
    settings = url if isinstance(url, ConnectionSettings) else ConnectionSettings.from_url(url)
    with Channel(settings, timeout=timeout) as channel:
        for scheme in wanted:
            try:
                channel.exchange_declare(scheme.layout_exchange, passive=True)
            except ChannelRefused as exc:
                if exc.reply_code == 404:
                    raise DelayLayoutMismatch(mismatch_message(scheme, settings.display)) from None
                raise BrokerError(
                    f"cannot check the layout of delay {scheme.prefix!r} at {settings.display}:"
                    f" {exc.reply_code} {exc.reply_text}"
                ) from None
            except BrokerError as exc:  # the connection broke, or the broker did not answer
                raise BrokerError(
                    f"lost the AMQP connection checking the delay levels at {settings.display}:"
                    f" {exc}"
                ) from None


def layout_check_for(settings: ConnectionSettings) -> Callable[[DelayScheme], None]:
    """The ``Router.layout_check`` of a publisher connecting with ``settings``."""

    def check(scheme: DelayScheme) -> None:
        check_delay_layouts(settings, [scheme])

    return check


__all__ = ["DelayLayoutMismatch", "check_delay_layouts", "layout_check_for", "mismatch_message"]
