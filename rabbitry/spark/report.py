"""What each task reports back to the driver, and the totals the driver logs."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from dataclasses import dataclass

logger = logging.getLogger("rabbitry.spark")


@dataclass(frozen=True)
class PartitionReport:
    """One partition's write, as its successful task saw it."""

    partition: int
    rows: int
    bytes: int
    """Body bytes confirmed."""
    confirms: int
    attempt: int = 0
    """Spark's attempt number of the task: > 0 when earlier attempts failed (retries)."""
    republished: int = 0
    """Messages sent again after a lost connection inside this attempt."""
    batch: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class SinkTotals:
    partitions: int
    rows: int
    bytes: int
    confirms: int
    retries: int
    """Task attempts that failed before the one that committed, over all partitions."""
    republished: int
    seconds: float
    """Longest partition's publishing time."""

    @classmethod
    def of(cls, reports: Iterable[PartitionReport | None]) -> SinkTotals:
        done = [r for r in reports if r is not None]
        return cls(
            partitions=len(done),
            rows=sum(r.rows for r in done),
            bytes=sum(r.bytes for r in done),
            confirms=sum(r.confirms for r in done),
            retries=sum(r.attempt for r in done),
            republished=sum(r.republished for r in done),
            seconds=max((r.seconds for r in done), default=0.0),
        )

    def describe(self) -> str:
        rate = f", {self.rows / self.seconds:,.0f} rows/s while publishing" if self.seconds else ""
        return (
            f"{self.rows:,} rows ({self.bytes:,} body bytes) in {self.partitions} partition(s),"
            f" {self.confirms:,} confirms, {self.retries} task retries,"
            f" {self.republished} republished{rate}"
        )


def log_totals(what: str, totals: SinkTotals) -> None:
    """Log on ``rabbitry.spark``; to stderr when nothing is configured (a Spark Python worker
    configures no logging, and its stderr goes to the driver's log)."""
    if not logging.getLogger().handlers and not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    logger.info("%s: %s", what, totals.describe())
