"""Spark's own Kafka connector, format("kafka") (spark-sql-kafka-0-10, fetched by
Maven into tests/java/spark), and format("moldau") side by side against the same
broker: what one reads or writes, the other does too.

Maven Central serves no connector for the installed PySpark (4.3.0); the newest it
serves, 4.2.0, is used (tests/java/spark/pom.xml).
"""

from __future__ import annotations

from typing import Any

import pytest

from moldau.testing import kafka_java
from tests.integration.clients import create_topic
from tests.spark.test_read import produce
from tests.spark.test_write import consume_all

# No skip without Maven: scripts/test.sh installs it, and a missing tool fails with
# its reason (kafka_java.spark_connector_jars), as the other Java tests do.
pytestmark = [pytest.mark.spark, pytest.mark.java]


@pytest.fixture(autouse=True, scope="module")
def _connector_fetched() -> None:
    """The shared session loads the connector only where Maven runs: fail here, with
    why, rather than with Spark's "Failed to find data source: kafka"."""
    kafka_java.spark_connector_jars()


COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]


def batch_read(spark: Any, fmt: str, bootstrap: str, **options: str) -> Any:
    reader = (
        spark.read.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("includeHeaders", "true")
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(
        (tuple(r) for r in df.select(*COLUMNS).collect()), key=lambda r: (r[2], r[3], r[4])
    )


def test_a_batch_read_gives_the_rows_of_sparks_connector(
    spark: Any, bootstrap: str, topic_name: str
) -> None:
    create_topic(bootstrap, topic_name, partitions=3)
    # Null keys and values among them; even records carry headers (test_read.produce).
    keys = [None if i % 5 == 0 else b"k%d" % i for i in range(60)]
    values = [None if i % 7 == 0 else b"v%d" % i for i in range(60)]
    produce(bootstrap, topic_name, [(i % 3, keys[i], values[i]) for i in range(60)])
    kafka = batch_read(spark, "kafka", bootstrap, subscribe=topic_name)
    moldau = batch_read(spark, "moldau", bootstrap, subscribe=topic_name)
    assert moldau.schema == kafka.schema
    expected = rows(kafka)
    assert len(expected) == 60
    assert rows(moldau) == expected

    # Offset ranges by JSON, as the connector takes them.
    ranges = {
        "startingOffsets": f'{{"{topic_name}": {{"0": 5, "1": -2, "2": 3}}}}',
        "endingOffsets": f'{{"{topic_name}": {{"0": 15, "1": 7, "2": -1}}}}',
    }
    kafka = batch_read(spark, "kafka", bootstrap, subscribe=topic_name, **ranges)
    moldau = batch_read(spark, "moldau", bootstrap, subscribe=topic_name, **ranges)
    expected = rows(kafka)
    assert len(expected) == 10 + 7 + 17
    assert rows(moldau) == expected


def test_a_batch_write_lands_as_sparks_connector_writes(
    spark: Any, bootstrap: str, topic_name: str
) -> None:
    """Keyed rows go to the partitions Kafka's Java producer picks (murmur2 of the key),
    in order: one task writes them all, so offsets are equal too."""
    topics = {fmt: f"{topic_name}-{fmt}" for fmt in ("kafka", "moldau")}
    for topic in topics.values():
        create_topic(bootstrap, topic, partitions=4)
    df = spark.createDataFrame(
        [(f"key-{i}", b"value-%d" % i, [("h", b"%d" % i)]) for i in range(200)],
        "key string, value binary, headers array<struct<key:string,value:binary>>",
    ).coalesce(1)
    for fmt, topic in topics.items():
        (
            df.write.format(fmt)
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .mode("append")
            .save()
        )
    kafka = consume_all(bootstrap, topics["kafka"], 4, 200)
    moldau = consume_all(bootstrap, topics["moldau"], 4, 200)
    assert len({p for p, *_ in kafka}) == 4
    assert moldau == kafka
