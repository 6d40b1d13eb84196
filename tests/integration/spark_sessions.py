"""The Spark session the Spark integration modules share (fixture ``spark_sessions`` in
conftest.py): one per pytest process, since starting a JVM and a SparkContext is most of what
a small Spark test costs."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

import rabbitry.spark

ROWS_PER_CHUNK = 1000
"""Rows Spark hands a Python writer at a time (``spark.sql.execution.arrow.maxRecordsPerBatch``,
10,000 by default). Smaller, so that the tests' small frames still span several chunks in a
partition, as production-sized ones do."""


class Sessions:
    """The process's Spark session: local by default, replaced by a cluster one when asked."""

    def __init__(self) -> None:
        self.current: SparkSession | None = None
        self.kind = ""

    def _build(self, master: str, kind: str, **conf: str) -> SparkSession:
        self.stop()
        os.environ["PYSPARK_PYTHON"] = sys.executable
        builder = (
            SparkSession.builder.master(master)
            .appName(f"rabbitry-tests-{kind}")
            .config("spark.ui.enabled", "false")
            .config("spark.pyspark.python", sys.executable)
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(ROWS_PER_CHUNK))
        )
        for key, value in conf.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        rabbitry.spark.register(session)
        self.current, self.kind = session, kind
        return session

    def local(self) -> SparkSession:
        """``local[2,2]``: two cores, a failed task is tried twice."""
        if self.current is not None and self.kind == "local":
            return self.current
        return self._build("local[2,2]", "local")

    def cluster(self, master: str) -> SparkSession:
        return self._build(
            master, "cluster", **{"spark.executor.memory": "1g", "spark.cores.max": "2"}
        )

    def __enter__(self) -> Sessions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.current is not None:
            self.current.stop()
        self.current, self.kind = None, ""
