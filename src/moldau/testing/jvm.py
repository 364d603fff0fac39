"""JVM options for the JVMs a test starts: Kafka's brokers and tools, Spark's drivers,
daemons and executors. They live seconds to minutes, so the C1 compiler alone and the
serial collector serve them sooner than the tiered compiler and G1: on a two-core
machine C2's and G1's threads take the cores from the test's own work.
"""

from __future__ import annotations

FAST_START = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


def spark_submit_env() -> dict[str, str]:
    """The environment for a Spark application a test starts with spark-submit or
    PySpark (which runs spark-submit): its driver's JVM (in local mode, the whole
    application) with FAST_START."""
    return {"SPARK_SUBMIT_OPTS": FAST_START}


def spark_cluster_env() -> dict[str, str]:
    """The environment for a Spark standalone cluster's daemons: they, and the
    executors their workers start (which inherit it), with FAST_START. Every one of
    those JVMs says so on its stderr ("Picked up JAVA_TOOL_OPTIONS"), in its log."""
    return {"JAVA_TOOL_OPTIONS": FAST_START}
