"""Spark's own Kafka connector, format("kafka"), and format("moldau"), side by side in
one run against the same Moldau broker.

One broker (fresh, on 127.0.0.1) holds N records of 100 bytes in 4 partitions. Each
round measures, in rows/s, for each format in turn (the order alternates by round):

- batch read: `spark.read.format(F)` of the whole topic into Spark's `noop` sink;
- batch write: `spark.range(N)` as 10-byte keys and 90-byte values written with
  `df.write.format(F)` to a new topic.

Spark's connector is spark-sql-kafka-0-10 from Maven Central (tests/java/spark: 4.2.0,
the newest it serves; PySpark is 4.3.0), with its own kafka-clients 3.9.

    .venv/bin/python bench/spark_connector.py                   # 5,000,000 records, 3 rounds
    .venv/bin/python bench/spark_connector.py --records 500000  # a short run
    .venv/bin/python bench/spark_connector.py --record          # also append to bench/RESULTS.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from moldau.testing import kafka_java
from moldau.testing.process import BrokerProcess
from spark import PARTITIONS, VALUE, create_topic, fill, timed

FORMATS = ("kafka", "moldau")


def spark_session() -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    jars = ",".join(str(j) for j in kafka_java.spark_connector_jars())
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.jars", jars)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def batch_read(spark: Any, fmt: str, bootstrap: str, topic: str) -> None:
    df = (
        spark.read.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    df.write.format("noop").mode("overwrite").save()


def batch_write(spark: Any, fmt: str, bootstrap: str, topic: str, n: int) -> None:
    df = spark.range(0, n, 1, PARTITIONS).selectExpr(
        "cast(lpad(cast(id as string), 10, 'k') as binary) as key",
        f"cast(repeat('x', {len(VALUE)}) as binary) as value",
    )
    (
        df.write.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .mode("append")
        .save()
    )


def end_offsets_total(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-check"})
    try:
        return sum(
            c.get_watermark_offsets(TopicPartition(topic, p), 30)[1] for p in range(PARTITIONS)
        )
    finally:
        c.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--record", action="store_true", help="append to bench/RESULTS.md")
    args = parser.parse_args()
    n = args.records - args.records % PARTITIONS

    work = Path(tempfile.mkdtemp(prefix="moldau-bench-spark-connector-"))
    broker = BrokerProcess(work / "data").start()
    results: dict[str, list[float]] = {}
    load_before = os.getloadavg()[0]
    try:
        bootstrap = broker.bootstrap
        create_topic(bootstrap, "records", PARTITIONS)
        t = time.perf_counter()
        fill(bootstrap, "records", n)
        print(f"filled {n:,} records in {time.perf_counter() - t:.1f} s", flush=True)
        spark = spark_session()
        for fmt in FORMATS:  # warm up: JVM, Python workers, both connectors' classes
            batch_read(spark, fmt, bootstrap, "records")
        for r in range(args.rounds):
            # Alternate which goes first, so neither always gets the warmer machine.
            for fmt in FORMATS if r % 2 == 0 else FORMATS[::-1]:
                sink = f"written-{fmt}-{r}"
                create_topic(bootstrap, sink, PARTITIONS)
                read = timed(n, batch_read, spark, fmt, bootstrap, "records")
                write = timed(n, batch_write, spark, fmt, bootstrap, sink, n)
                assert end_offsets_total(bootstrap, sink) == n, f"{fmt} wrote a wrong count"
                for name, rate in ((f"{fmt} batch read", read), (f"{fmt} batch write", write)):
                    results.setdefault(name, []).append(rate)
                    print(f"round {r + 1}: {name:20s} {rate:12,.0f} rows/s", flush=True)
        spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)

    # Other work on the machine moves these figures; say how much there was.
    load = f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after"
    print(load)
    rounds = range(args.rounds)
    lines = []
    for op in ("batch read", "batch write"):
        kafka, moldau = results[f"kafka {op}"], results[f"moldau {op}"]
        cells = [
            f"{kafka[i]:,.0f} | {moldau[i]:,.0f} | {moldau[i] / kafka[i]:.2f}x" for i in rounds
        ]
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    header = (
        "| rows/s, 100 B records | "
        + " | ".join(
            f'round {i + 1}: format("kafka") | format("moldau") | moldau / kafka' for i in rounds
        )
        + " |\n|---|"
        + "---|" * (3 * args.rounds)
    )
    table = "\n".join([header, *lines])
    print(table)
    if args.record:
        import pyspark

        machine = (
            f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"pyspark {pyspark.__version__}"
        )
        with open(Path(__file__).parent / "RESULTS.md", "a") as f:
            f.write(
                f'\n## Spark\'s Kafka connector and format("moldau"), {datetime.date.today()}'
                f" ({machine})\n\n"
                f"`bench/spark_connector.py --records {n} --rounds {args.rounds}`: one Moldau "
                "broker, 4 partitions, Spark `local[2]`, all on the same two cores; "
                f"spark-sql-kafka-0-10 4.2.0 (kafka-clients 3.9.2); {load}.\n\n"
                f"{table}\n"
            )


if __name__ == "__main__":
    main()
