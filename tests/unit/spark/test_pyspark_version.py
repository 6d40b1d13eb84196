"""The pyspark a process has is judged before rabbitry uses it: the data source needs Spark 4,
``publish_partitions`` Spark 3.5, and the ``spark`` extra installs none over a cluster's."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from rabbitry.spark.options import SparkSinkError
from rabbitry.spark.pyspark_version import DATA_SOURCE_API, FOREACH_PARTITION, release, require

ROOT = Path(__file__).parents[3]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("4.0.1", (4, 0)), ("3.5.3.dev0", (3, 5)), ("4.1.0rc1", (4, 1)), ("10.2", (10, 2))],
)
def test_a_release_is_read_from_the_version_text(text: str, expected: tuple[int, int]) -> None:
    assert release(text) == expected


def test_the_data_source_on_spark_3_5_is_refused_and_names_publish_partitions() -> None:
    with pytest.raises(
        SparkSinkError, match=r"Spark 4\.0 or later.*pyspark 3\.5\.3.*publish_partitions"
    ):
        require(DATA_SOURCE_API, 'format("rabbitmq")', version="3.5.3")
    require(FOREACH_PARTITION, "publish_partitions", version="3.5.3")  # runs there
    require(DATA_SOURCE_API, 'format("rabbitmq")', version="4.0.0")
    with pytest.raises(SparkSinkError, match=r"3\.5 or later.*pyspark 3\.4\.1$"):
        require(FOREACH_PARTITION, "publish_partitions", version="3.4.1")


def test_without_pyspark_register_says_what_to_install() -> None:
    code = (
        "import sys; sys.modules['pyspark'] = None\n"
        "import rabbitry.spark\n"
        "try:\n    rabbitry.spark.register(None)\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("MissingExtra"), out
    assert "pip install 'rabbitry[spark-local]'" in out.stdout


def test_the_spark_extra_installs_no_pyspark_over_a_clusters() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert not any(d.startswith("pyspark") for d in extras["spark"])
    assert any(d.startswith("pyspark") for d in extras["spark-local"])
