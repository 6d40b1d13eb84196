"""Deterministic message ids: the same row gets the same id however often Spark runs its task.

An id is ``<prefix>:<batch>:<partition>:<row>``: the prefix is the streaming query's id (kept
in its checkpoint, so stable across restarts), the job's id (drawn once on the driver, so
stable across task retries) or the user's ``id_prefix``; the batch is the micro-batch id (0 for
a batch write); the row is the row's index in its partition. A retried task or a replayed
micro-batch thus republishes its rows under the ids they had, and a consumer that remembers
ids drops the copies. This holds when a partition's rows come in the same order each time,
which Spark guarantees for deterministic plans (a sort or a shuffle without an order is not).
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_PREFIX = 200  # the whole id is an AMQP short string: 255 bytes at most


@dataclass(frozen=True)
class MessageIdScheme:
    prefix: str
    batch: int
    partition: int

    def __post_init__(self) -> None:
        if len(self.prefix.encode("utf-8")) > MAX_PREFIX:
            raise ValueError(f"message id prefix longer than {MAX_PREFIX} bytes: {self.prefix!r}")

    def message_id(self, index: int) -> str:
        return f"{self.prefix}:{self.batch}:{self.partition}:{index}"

    def where(self, index: int) -> str:
        """A row's place, for error messages."""
        batch = f"batch {self.batch}, " if self.batch else ""
        return f"{batch}partition {self.partition}, row {index}"


def parse_message_id(message_id: str) -> tuple[str, int, int, int]:
    """(prefix, batch, partition, row) of an id made by ``MessageIdScheme``."""
    prefix, batch, partition, row = message_id.rsplit(":", 3)
    return prefix, int(batch), int(partition), int(row)
