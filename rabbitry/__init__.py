"""rabbitry: declarative RabbitMQ delays, retries and topology from one YAML spec."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from rabbitry.errors import (
    ApplyError,
    BrokerError,
    CapabilityError,
    ConfirmTimeout,
    Nacked,
    PlanError,
    PublishError,
    RabbitryError,
    SpecError,
    SpecProblem,
    TLSHandshakeError,
    Unroutable,
)

try:
    __version__ = version("rabbitry")
except PackageNotFoundError:  # running from a checkout without installing
    __version__ = "0.0.0"

__all__ = [
    "ApplyError",
    "BrokerError",
    "CapabilityError",
    "ConfirmTimeout",
    "Nacked",
    "PlanError",
    "PublishError",
    "RabbitryError",
    "SpecError",
    "SpecProblem",
    "TLSHandshakeError",
    "Unroutable",
    "__version__",
]
