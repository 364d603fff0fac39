"""A Spark task's memory reading one large partition: the peak RSS of the Python
workers (the processes the task's reading runs in) and of the JVM, for partitions
of growing size, in local[1] (one task at a time).

The partition is filled with 1 KiB records by moldau.spark.batch_writer (the sink's
batch path, in this process), then read with `spark.read.format("moldau")` into
Spark's `noop` sink on the fetching path, while a thread samples the RSS of every
process under the JVM every 50 ms. A bounded task shows the same peak whatever the
partition's size: it holds one fetch (`kafka.max.partition.fetch.bytes`, 4 MiB by
default) and the Arrow batch made of it, handed to Spark before the next fetch.

    .venv/bin/python bench/spark_memory.py --sizes-mb 256,2048 [--record]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.spark.batch_writer import BatchWriter
from moldau.testing.process import BrokerProcess

RECORD = 1024
ROWS_PER_BATCH = 10_000


def fill(bootstrap: str, topic: str, megabytes: int) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    rows = megabytes * 1024 * 1024 // RECORD
    value = pa.array([b"x" * (RECORD - 10)] * ROWS_PER_BATCH, pa.binary())
    writer = BatchWriter({"bootstrap.servers": bootstrap}, topic)
    for start in range(0, rows, ROWS_PER_BATCH):
        keys = pa.array([b"k%09d" % i for i in range(start, start + ROWS_PER_BATCH)])
        writer.write(pa.record_batch([keys, value], names=["key", "value"]))
    writer.close()
    return writer.count


class PeakSampler:
    """The largest RSS seen of any Python process under `root`, and of `root`."""

    def __init__(self, root: int) -> None:
        self.root = psutil.Process(root)
        self.python_peak = 0
        self.jvm_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self.jvm_peak = max(self.jvm_peak, self.root.memory_info().rss)
                for child in self.root.children(recursive=True):
                    if "python" in child.name():
                        self.python_peak = max(self.python_peak, child.memory_info().rss)
            except psutil.Error:
                continue  # a worker ended between listing and asking


def spark_session() -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from moldau.spark import register

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("moldau-memory")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def read(spark: Any, bootstrap: str, topic: str) -> None:
    (
        spark.read.format("moldau")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
        .write.format("noop")
        .mode("overwrite")
        .save()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", default="256,2048")
    parser.add_argument("--record", action="store_true", help="append to bench/RESULTS.md")
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes_mb.split(",")]
    work = Path(tempfile.mkdtemp(prefix="moldau-bench-memory-"))
    broker = BrokerProcess(work / "data").start()
    lines = []
    first_peak = 0
    try:
        spark = spark_session()
        jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        # Not measured: the first read also starts the Python worker and warms the
        # JVM, which would make the first size's read time no read time at all.
        fill(broker.bootstrap, "warm-up", 1)
        read(spark, broker.bootstrap, "warm-up")
        for size in sizes:
            topic = f"big-{size}"
            t = time.perf_counter()
            rows = fill(broker.bootstrap, topic, size)
            print(f"filled {size} MB ({rows:,} rows) in {time.perf_counter() - t:.1f} s")
            t = time.perf_counter()
            with PeakSampler(jvm) as peak:
                read(spark, broker.bootstrap, topic)
            took = time.perf_counter() - t
            first_peak = first_peak or peak.python_peak
            line = (
                f"| {size:,} MB, {rows:,} x 1 KiB | {took:.1f} s | {rows / took:,.0f} | "
                f"{peak.python_peak / 2**20:,.0f} MB | {peak.python_peak / first_peak:.2f}x | "
                f"{peak.jvm_peak / 2**20:,.0f} MB | {os.getloadavg()[0]:.1f} |"
            )
            print(line, flush=True)
            lines.append(line)
        spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    text = (
        "| one partition read, local[1] | read time | rows/s | peak RSS, largest Python worker "
        "| vs the first size | peak RSS, JVM | load (1 min) after |\n"
        "|---|---|---|---|---|---|---|\n" + "\n".join(lines)
    )
    print(text)
    if args.record:
        python = platform.python_version()
        machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {python}"
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        with open(Path(__file__).parent / "RESULTS.md", "a") as f:
            f.write(
                f"\n## Spark task memory, {datetime.date.today()} ({machine})\n\n"
                f"`bench/spark_memory.py --sizes-mb {args.sizes_mb}`: one broker, one "
                f"partition, fetching path, into `noop`. Load average at the end: {load}.\n\n"
                f"{text}\n"
            )


if __name__ == "__main__":
    main()
