"""PySpark in local mode against real brokers: one SparkSession for the whole test
session (starting one costs seconds), the data source found as a user finds it,
by PySpark's own lookup of pyspark_* modules."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from moldau.testing import kafka_java
from moldau.testing.jvm import FAST_START
from moldau.testing.process import BrokerProcess
from tests.cluster.conftest import make_cluster, zookeeper  # noqa: F401 (fixtures)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    # Spark's own Kafka connector beside format("moldau") (test_spark_connector.py).
    jars = [] if kafka_java.java_unavailable() else kafka_java.spark_connector_jars()
    session = (
        # Two cores; a failed task is tried up to three times, as on a cluster.
        SparkSession.builder.master("local[2,3]")
        .appName("moldau-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        # The driver's JVM is the whole local application: it starts and warms up
        # sooner with C1 alone (a test's jobs are small).
        .config("spark.driver.extraJavaOptions", FAST_START)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.jars", ",".join(str(j) for j in jars))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("spark-broker") / "data"
    # Retention runs every half second, for the tests of lost records.
    with BrokerProcess(data, {"log.retention.check.interval.ms": "500"}) as b:
        yield b


@pytest.fixture
def bootstrap(broker: BrokerProcess) -> str:
    return broker.bootstrap


@pytest.fixture
def checkpoint(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoint")
