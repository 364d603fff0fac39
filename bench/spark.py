"""The Spark data source's speed, side by side in one run.

One Moldau broker (fresh, on 127.0.0.1) holds, for each shape, N records of S
bytes in 4 partitions (5,000,000 x 100 B and 1,000,000 x 1 KiB by default). Each
round measures, in rows/s:

- plain loop: one confluent-kafka consumer reading every record of the topic and
  touching each one's key, value and offset (what a user writes without Spark);
- moldau batch read: `spark.read.format("moldau")` into Spark's `noop` sink, on
  the fetching path (the default: tasks fetch record batches and decode them into
  Arrow in bulk) and on the client path (`fetchPath=client`, confluent-kafka);

and for the first shape only, unless --reads-only:

- data source ceiling: a Python data source that makes the same rows from memory
  as Arrow batches, into `noop` (what the Python Data Source API itself allows);
- batch write: `spark.range(N)` as 100-byte records written with `format("moldau")`,
  on the batch path (the default: tasks build record batches and produce them) and
  on the client path (`writePath=client`, confluent-kafka per row);
- stream copy: `readStream.format("moldau")` to `writeStream.format("moldau")`
  (Trigger.AvailableNow), every record read and written again;
- stream write: Spark's rate-micro-batch source written with
  `writeStream.format("moldau")`, five batches of N/5 rows.

    .venv/bin/python bench/spark.py                   # both shapes, 2 rounds
    .venv/bin/python bench/spark.py --shapes 500000x100 --reads-only  # a short run
    .venv/bin/python bench/spark.py --shapes 2000000x100 --writes-only  # writes only
    .venv/bin/python bench/spark.py --shapes 2000000x100 --writes-only \\
        --write-kinds plain,headers,lz4   # also with a header a row, and lz4
    .venv/bin/python bench/spark.py --profile         # also profile one task's read
    .venv/bin/python bench/spark.py --profile-workers # py-spy in Spark's Python workers
    .venv/bin/python bench/spark.py --record          # also append to bench/RESULTS.md

--profile-workers records Spark's own Python workers with py-spy during one read on
each path (and one write on each, for the first shape) and prints where their CPU
goes (bench/worker_profile.py).

--profile reads one partition in this process on each path under cProfile (what
a Spark task's Python worker does, without Spark) and prints where the time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import io
import os
import platform
import pstats
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.testing.process import BrokerProcess

sys.path.insert(0, str(Path(__file__).parent))
import worker_profile

PARTITIONS = 4
KEY_SIZE = 10  # b"k%09d"
VALUE = b"x" * 90  # + a 10-byte key: 100 bytes a record


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)


def fill(bootstrap: str, topic: str, n: int, value: bytes = VALUE) -> None:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    for i in range(n):
        while True:
            try:
                p.produce(topic, value, b"k%09d" % i, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


def plain_loop(bootstrap: str, topic: str, n: int) -> float:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "fetch.message.max.bytes": 4 * 1024 * 1024,
            "queued.min.messages": 1_000_000,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen = 0
    size = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 600
    while seen < n and time.monotonic() < deadline:
        for m in c.consume(10_000, 1.0):
            if m.error() is None:
                size += len(m.key() or b"") + len(m.value() or b"") + (m.offset() >= 0)
                seen += 1
    took = time.perf_counter() - start
    c.close()
    assert seen == n, f"read {seen} of {n}"
    return n / took


def spark_session() -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def register_ceiling(spark: Any, n: int) -> None:
    """A data source that makes rows like the topic's from memory: the most the
    Python Data Source API moves on this machine."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from moldau.spark.schema import arrow_schema, source_schema

    per_partition = n // PARTITIONS

    class Reader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(p) for p in range(PARTITIONS)]

        def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
            # One batch made once and sent again and again: no per-row work at all.
            schema = arrow_schema(False)
            k = 8192
            batch = pa.RecordBatch.from_arrays(
                [
                    pa.array([b"k%09d" % i for i in range(k)], pa.binary()),
                    pa.array([VALUE] * k, pa.binary()),
                    pa.repeat(pa.scalar("t", pa.string()), k),
                    pa.repeat(pa.scalar(partition.value, pa.int32()), k),
                    pa.array(range(k), pa.int64()),
                    pa.repeat(pa.scalar(0, schema.field("timestamp").type), k),
                    pa.repeat(pa.scalar(0, pa.int32()), k),
                ],
                schema=schema,
            )
            for lo in range(0, per_partition, k):
                yield batch.slice(0, min(k, per_partition - lo))

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return "ceiling"

        def schema(self) -> Any:
            return source_schema(False)

        def reader(self, schema: Any) -> DataSourceReader:
            return Reader()

    spark.dataSource.register(Ceiling)


def register_null_sink(spark: Any) -> None:
    """A Python data sink that takes the Arrow batches and drops them: the most a
    Python sink can write on this machine (Spark making the rows and handing them
    over), the ceiling of the batch write."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    class Writer(DataSourceArrowWriter):
        def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
            for _ in iterator:
                pass
            return WriterCommitMessage()

    class NullSink(DataSource):
        @classmethod
        def name(cls) -> str:
            return "nullsink"

        def writer(self, schema: Any, overwrite: bool) -> Writer:
            return Writer()

    spark.dataSource.register(NullSink)


def null_write(spark: Any, n: int) -> None:
    df = spark.range(0, n, 1, PARTITIONS).selectExpr(
        "cast(lpad(cast(id as string), 10, 'k') as binary) as key",
        f"cast(repeat('x', {len(VALUE)}) as binary) as value",
    )
    df.write.format("nullsink").mode("append").save()


def timed(n: int, run: Any, *args: Any) -> float:
    start = time.perf_counter()
    run(*args)
    return n / (time.perf_counter() - start)


def moldau_read(spark: Any, bootstrap: str, topic: str, path: str = "fetch") -> None:
    df = (
        spark.read.format("moldau")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("fetchPath", path)
        .load()
    )
    df.write.format("noop").mode("overwrite").save()


def profile_task(bootstrap: str, topic: str, end: int, path: str, top: int = 8) -> str:
    """cProfile's summary of one task reading partition 0 [0, end) on `path`."""
    from moldau.spark.offsets import OffsetRange
    from moldau.spark.read_path import read_range

    def run() -> None:
        batches = read_range(
            {"bootstrap.servers": bootstrap},
            OffsetRange(topic, 0, 0, end),
            fetch_path=path,
            include_headers=False,
            fail_on_data_loss=True,
            poll_timeout_ms=60_000,
        )
        assert sum(b.num_rows for b in batches) == end

    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.runcall(run)
    took = time.perf_counter() - start
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    lines = [ln for ln in out.getvalue().splitlines() if ln.strip()]
    body = lines[lines.index(next(ln for ln in lines if "ncalls" in ln)) :]
    return f"{path} path, {end:,} rows in {took:.2f} s under cProfile:\n" + "\n".join(body)


def ceiling_read(spark: Any) -> None:
    spark.read.format("ceiling").load().write.format("noop").mode("overwrite").save()


#: What --writes-only writes on each path besides plain rows: a header a row
#: ("source" = 8 bytes, 19 bytes more a record), lz4-compressed batches.
WRITE_KINDS = {
    "plain": ([], {}),
    "headers": (
        ["array(named_struct('key', 'source', 'value', cast('sparkjob' as binary))) as headers"],
        {},
    ),
    "lz4": ([], {"kafka.compression.type": "lz4"}),
}


def batch_write(
    spark: Any, bootstrap: str, topic: str, n: int, path: str = "batch", kind: str = "plain"
) -> None:
    columns, options = WRITE_KINDS[kind]
    df = spark.range(0, n, 1, PARTITIONS).selectExpr(
        "cast(lpad(cast(id as string), 10, 'k') as binary) as key",
        f"cast(repeat('x', {len(VALUE)}) as binary) as value",
        *columns,
    )
    (
        df.write.format("moldau")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("writePath", path)
        .options(**options)
        .mode("append")
        .save()
    )


def stream_copy(spark: Any, bootstrap: str, source: str, sink: str, checkpoint: str) -> None:
    df = (
        spark.readStream.format("moldau")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
    )
    query = (
        df.select("key", "value")
        .writeStream.format("moldau")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


def stream_write(spark: Any, bootstrap: str, sink: str, checkpoint: str, rows: int) -> float:
    """Spark's rate-micro-batch source (no reading from Kafka) written with
    writeStream.format("moldau"): rows/s over the batches' own execution times."""
    per_batch = max(rows // 5, 1)
    df = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", str(per_batch))
        .option("numPartitions", str(PARTITIONS))
        .load()
        .selectExpr(
            "cast(lpad(cast(value as string), 10, 'k') as binary) as key",
            f"cast(repeat('x', {len(VALUE)}) as binary) as value",
        )
    )
    query = (
        df.writeStream.format("moldau")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="0 seconds")
        .start()
    )
    deadline = time.monotonic() + 600
    while len(query.recentProgress) < 6 and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()
    # The first batch also starts the query; count the five after it.
    done = [p for p in query.recentProgress if p["numInputRows"] > 0][1:6]
    written = sum(p["numInputRows"] for p in done)
    seconds = sum(p["durationMs"]["triggerExecution"] for p in done) / 1000
    return written / seconds


def shapes_of(text: str) -> list[tuple[int, int]]:
    """ "5000000x100,1000000x1024": (records, bytes a record) pairs."""
    out = []
    for item in text.split(","):
        n, size = item.lower().split("x")
        out.append((int(n) - int(n) % PARTITIONS, int(size)))
    return out


def table(
    title: str,
    results: dict[str, list[float]],
    rounds: int,
    base: str = "plain confluent-kafka loop",
    versus: str = "plain loop",
) -> str:
    plain = results[base]
    lines = [
        f"| {name} | " + " | ".join(f"{x:,.0f}" for x in rates) + " | "
        + " | ".join(f"{x / p:.2f}x" for x, p in zip(rates, plain, strict=True)) + " |"
        for name, rates in results.items()
    ]  # fmt: skip
    header = (
        f"| rows/s, {title} | "
        + " | ".join(f"round {i + 1}" for i in range(rounds))
        + " | "
        + " | ".join(f"vs {versus}, round {i + 1}" for i in range(rounds))
        + " |\n|---|"
        + "---|" * (2 * rounds)
    )
    return "\n".join([header, *lines])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="5000000x100,1000000x1024")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reads-only", action="store_true", help="skip writes and streams")
    parser.add_argument("--writes-only", action="store_true", help="only the batch writes")
    parser.add_argument(
        "--write-kinds",
        default="plain",
        help=f"with --writes-only, the rows written: some of {','.join(WRITE_KINDS)}",
    )
    parser.add_argument("--profile", action="store_true", help="profile one task's read/write")
    parser.add_argument(
        "--profile-workers",
        action="store_true",
        help="py-spy Spark's Python workers during one read (and write) on each path",
    )
    parser.add_argument("--record", action="store_true", help="append to bench/RESULTS.md")
    args = parser.parse_args()
    shapes = shapes_of(args.shapes)

    work = Path(tempfile.mkdtemp(prefix="moldau-bench-spark-"))
    broker = BrokerProcess(work / "data").start()
    tables: list[str] = []
    profiles: list[str] = []
    loads: list[str] = []
    try:
        bootstrap = broker.bootstrap
        spark = spark_session()
        for number, (n, size) in enumerate(shapes):
            topic = f"records-{size}"
            create_topic(bootstrap, topic, PARTITIONS)
            if args.writes_only:
                kinds = args.write_kinds.split(",")
                tables.append(writes_only(spark, bootstrap, n, args.rounds, loads, kinds))
                if args.profile:
                    for kind in kinds:
                        for path in ("batch", "client"):
                            profiles.append(profile_write(broker, n // PARTITIONS, path, kind))
                            print(profiles[-1], flush=True)
                continue
            t = time.perf_counter()
            fill(bootstrap, topic, n, b"x" * (size - KEY_SIZE))
            took = time.perf_counter() - t
            print(f"filled {n:,} records of {size} B in {took:.1f} s", flush=True)
            if number == 0:
                register_ceiling(spark, n)
            moldau_read(spark, bootstrap, topic)  # warm up: JVM, Python workers, page cache
            results: dict[str, list[float]] = {}
            extras = number == 0 and not args.reads_only
            for r in range(args.rounds):
                rates = {
                    "plain confluent-kafka loop": plain_loop(bootstrap, topic, n),
                    "moldau batch read -> noop, fetching path": timed(
                        n, moldau_read, spark, bootstrap, topic, "fetch"
                    ),
                    "moldau batch read -> noop, client path": timed(
                        n, moldau_read, spark, bootstrap, topic, "client"
                    ),
                }
                if extras:
                    rates.update(other_measures(spark, bootstrap, topic, n, r, work))
                for name, rate in rates.items():
                    results.setdefault(name, []).append(rate)
                    print(f"{size} B round {r + 1}: {name:42s} {rate:12,.0f} rows/s", flush=True)
                loads.append(load())
            tables.append(table(f"{n:,} x {size} B records", results, args.rounds))
            if args.profile:
                for path in ("fetch", "client"):
                    profiles.append(profile_task(bootstrap, topic, n // PARTITIONS, path))
                    print(profiles[-1], flush=True)
            if args.profile_workers:
                for path in ("fetch", "client"):
                    profiles.append(
                        profile_workers(
                            spark, work, f"{size} B batch read, {path} path",
                            moldau_read, spark, bootstrap, topic, path,
                        )
                    )  # fmt: skip
                    print(profiles[-1], flush=True)
                if extras:
                    for path in ("batch", "client"):
                        create_topic(bootstrap, f"{topic}-w{path}", PARTITIONS)
                        profiles.append(
                            profile_workers(
                                spark, work, f"{size} B batch write, {path} path",
                                batch_write, spark, bootstrap, f"{topic}-w{path}", n, path,
                            )
                        )  # fmt: skip
                        print(profiles[-1], flush=True)
        spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)

    text = "\n\n".join(tables)
    print(text)
    if args.record:
        machine = (
            f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
        )
        profile = "".join(f"\n```\n{p}\n```\n" for p in profiles)
        with open(Path(__file__).parent / "RESULTS.md", "a") as f:
            f.write(
                f"\n## Spark data source, {datetime.date.today()} ({machine})\n\n"
                f"`bench/spark.py --shapes {args.shapes}"
                f"{' --writes-only' if args.writes_only else ''}"
                f"{f' --write-kinds {args.write_kinds}' if args.writes_only else ''}`: "
                "local[2], one broker, "
                "4 partitions. "
                f"Load average after each round: {'; '.join(loads)}.\n\n"
                f"{text}\n{profile}"
            )


def load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def other_measures(
    spark: Any, bootstrap: str, topic: str, n: int, r: int, work: Path
) -> dict[str, float]:
    """The data source's other speeds, as before the fetching path (100 B records)."""
    sink, copy = f"written-{r}", f"copied-{r}"
    create_topic(bootstrap, sink, PARTITIONS)
    create_topic(bootstrap, f"{sink}-client", PARTITIONS)
    create_topic(bootstrap, copy, PARTITIONS)
    create_topic(bootstrap, f"streamed-{r}", PARTITIONS)
    checkpoint = str(work / f"checkpoint-{r}")
    return {
        "data source ceiling -> noop": timed(n, ceiling_read, spark),
        "batch write (spark.range), batch path": timed(n, batch_write, spark, bootstrap, sink, n),
        "batch write (spark.range), client path": timed(
            n, batch_write, spark, bootstrap, f"{sink}-client", n, "client"
        ),
        "stream copy (read + write)": timed(
            n, stream_copy, spark, bootstrap, topic, copy, checkpoint
        ),
        "stream write (rate-micro-batch)": stream_write(
            spark, bootstrap, f"streamed-{r}", f"{checkpoint}-rate", n
        ),
    }


def profile_write(
    broker: BrokerProcess, rows: int, path: str, kind: str = "plain", top: int = 8
) -> str:
    """One task's write of `rows` rows of a WRITE_KINDS kind (Arrow batches of
    10,000, as Spark hands them) in this process under cProfile, with the CPU it and
    the broker spent."""
    import pyarrow as pa

    from moldau.spark.batch_writer import BatchWriter
    from moldau.spark.options import WriteOptions
    from moldau.spark.writer import RecordWriter, WriteColumns

    topic = f"profiled-{kind}-{path}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    k = 10_000
    value = pa.array([VALUE] * k, pa.binary())
    extra, names = [], ["key", "value"]
    if kind == "headers":
        header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
        extra, names = [pa.array([[("source", b"sparkjob")]] * k, header_type)], [*names, "headers"]
    batches = [
        pa.record_batch(
            [pa.array([b"k%09d" % i for i in range(lo, lo + k)], pa.binary()), value, *extra],
            names=names,
        )
        for lo in range(0, rows, k)
    ]
    config = {"bootstrap.servers": broker.bootstrap}
    if kind == "lz4":
        config["compression.type"] = "lz4"
    columns = WriteColumns(key=True, topic=False, partition=False, headers=kind == "headers")
    broker_cpu = broker_cpu_s(broker)
    own_cpu = time.process_time()
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    writer: Any = (
        BatchWriter(config, topic)
        if path == "batch"
        else RecordWriter(WriteOptions(config, topic), columns)
    )
    for batch in batches:
        writer.write(batch)
    writer.close()
    profile.disable()
    took = time.perf_counter() - start
    own_cpu = time.process_time() - own_cpu
    broker_cpu = broker_cpu_s(broker) - broker_cpu
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(top)
    body = [line for line in out.getvalue().splitlines() if line.strip()][-top - 1 :]
    return (
        f"{path} path, one task writing {len(batches) * k:,} rows ({kind}) in {took:.2f} s under "
        f"cProfile; CPU: the task's process {own_cpu:.2f} s (Python and the client's "
        f"threads), the broker {broker_cpu:.2f} s:\n" + "\n".join(body)
    )


def profile_workers(spark: Any, work: Path, title: str, run: Any, *args: Any) -> str:
    """Where Spark's Python workers spend their CPU while `run(*args)` runs (py-spy)."""
    daemons = worker_profile.python_daemons()
    if not daemons:
        return f"{title}: no pyspark.daemon to profile"
    raw = work / "py-spy.raw"
    with worker_profile.recording(daemons, raw):
        took = time.perf_counter()
        run(*args)
        took = time.perf_counter() - took
    return worker_profile.summary(raw, f"{title} ({took:.2f} s), Spark's Python workers")


def broker_cpu_s(broker: BrokerProcess) -> float:
    fields = Path(f"/proc/{broker.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def writes_only(
    spark: Any, bootstrap: str, n: int, rounds: int, loads: list[str], kinds: list[str]
) -> str:
    """The batch write of each kind on each path, side by side (and a warm-up write
    first): a table a kind, its ratios to the same kind's client path."""
    create_topic(bootstrap, "warm-up", PARTITIONS)
    batch_write(spark, bootstrap, "warm-up", min(n, 100_000))
    register_null_sink(spark)
    null_write(spark, min(n, 100_000))
    ceiling = "data sink ceiling (Python sink drops the rows)"
    results: dict[str, dict[str, list[float]]] = {kind: {} for kind in kinds}
    for r in range(rounds):
        dropped = timed(n, null_write, spark, n)
        print(f"round {r + 1}: {ceiling:42s} {dropped:12,.0f} rows/s", flush=True)
        for kind in kinds:
            results[kind].setdefault(ceiling, []).append(dropped)
            for path in ("batch", "client"):
                topic = f"written-{kind}-{path}-{r}"
                create_topic(bootstrap, topic, PARTITIONS)
                name = f"batch write (spark.range), {path} path"
                rate = timed(n, batch_write, spark, bootstrap, topic, n, path, kind)
                results[kind].setdefault(name, []).append(rate)
                print(f"round {r + 1}: {kind:7s} {name:42s} {rate:12,.0f} rows/s", flush=True)
        loads.append(load())
    return "\n\n".join(
        table(
            f"{n:,} x 100 B records written" + ("" if kind == "plain" else f", {kind}"),
            results[kind],
            rounds,
            "batch write (spark.range), client path",
            "client path",
        )
        for kind in kinds
    )


if __name__ == "__main__":
    main()
