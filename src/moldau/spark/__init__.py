"""Moldau's PySpark data source, format "moldau": Spark's Kafka connector in pure
Python (pyspark's Python Data Source API, confluent-kafka underneath), for Moldau
and for Apache Kafka alike. Install with `pip install 'moldau[spark]'`; PySpark
finds the format by itself through the `pyspark_moldau` module, and `register`
does it explicitly. `session_builder` makes Spark's Python workers run this
interpreter, which must be the one that has moldau."""

from __future__ import annotations

from typing import Any

from moldau.spark.options import InvalidOptionError
from moldau.spark.session import session_builder
from moldau.spark.source import MoldauDataSource

__all__ = ["InvalidOptionError", "MoldauDataSource", "register", "session_builder"]


def register(spark: Any) -> None:
    """Make `format("moldau")` available in this SparkSession."""
    spark.dataSource.register(MoldauDataSource)
