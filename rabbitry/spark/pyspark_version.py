"""Which pyspark this process has, judged before rabbitry uses it.

rabbitry's ``spark`` extra brings pyarrow only: the pyspark is the cluster's (Spark 3.5 or 4.x,
often not installed by pip at all), and installing another over it would break the cluster's
driver. So the version is checked where it matters: ``format("rabbitmq")`` needs the Python Data
Source API of Spark 4; ``publish_partitions`` runs on Spark 3.5 and later.
"""

from __future__ import annotations

import re

from rabbitry.errors import MissingExtra, SparkSinkError

DATA_SOURCE_API = (4, 0)
FOREACH_PARTITION = (3, 5)


def release(text: str) -> tuple[int, int]:
    """``(major, minor)`` of a pyspark version string (``4.0.1``, ``3.5.3.dev0``, ``4.1.0rc1``)."""
    found = re.match(r"(\d+)\.(\d+)", text)
    if not found:
        raise SparkSinkError(f"pyspark reports an unreadable version {text!r}")
    return int(found[1]), int(found[2])


def installed() -> str:
    try:
        import pyspark
    except ImportError as exc:
        raise MissingExtra(
            "rabbitry.spark (a cluster's pyspark, or on a laptop pyspark itself)",
            "pyspark",
            "spark-local",
        ) from exc
    return str(pyspark.__version__)


def require(minimum: tuple[int, int], what: str, version: str | None = None) -> None:
    """Refuse ``what`` on a pyspark older than ``minimum``, saying what runs on it instead."""
    found = installed() if version is None else version
    if release(found) >= minimum:
        return
    needed = ".".join(map(str, minimum))
    hint = (
        "; on Spark 3.5 publish with rabbitry.spark.publish_partitions (docs/spark.md)"
        if minimum == DATA_SOURCE_API and release(found) >= FOREACH_PARTITION
        else ""
    )
    raise SparkSinkError(f"{what} needs Spark {needed} or later, and this is pyspark {found}{hint}")
