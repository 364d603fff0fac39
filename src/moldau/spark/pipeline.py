"""The demo pipeline behind `moldau pipeline demo`: orders in a topic, a Spark
Structured Streaming job that totals them per product and event-time minute, the
totals in a compacted topic and in Parquet, and a check of both against the same
sums done in plain Python.

The job runs in update mode with a two-minute watermark; each micro-batch's
updated totals go to the topic (key `<window start>|<product>`, so compaction
keeps the latest) and to Parquet (one directory per batch, replaced when Spark runs
the batch again). A total's final value is its latest, so a batch Spark replays
after a stop changes nothing.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

PRODUCTS = ("apples", "bread", "cheese", "dates", "eggs", "flour", "grapes", "honey")
WINDOW_MS = 60_000
#: How far behind its neighbours a late order may be (ms): under the watermark's
#: two minutes, so Spark counts every order, as the check in plain Python does.
MAX_LATENESS_MS = 60_000

#: (window start in ms, product) -> (orders, amount in cents)
Totals = dict[tuple[int, str], tuple[int, int]]


@dataclass(frozen=True)
class Order:
    order_id: int
    customer: str
    product: str
    amount_cents: int
    event_time_ms: int

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "order_id": self.order_id,
                "customer": self.customer,
                "product": self.product,
                "amount_cents": self.amount_cents,
                "event_time": self.event_time_ms,
            }
        ).encode()


def make_orders(
    n: int, seed: int = 7, late_share: float = 0.05, now_ms: int | None = None
) -> list[Order]:
    """n orders spread over the n/50 seconds before `now_ms` (default: now; recent,
    so no retention removes them), some of them late: their event time is up to a
    minute before the time at which they are sent. The same arguments make the
    same orders."""
    rng = random.Random(seed)
    span_ms = max(n * 20, WINDOW_MS)
    start = (int(time.time() * 1000) if now_ms is None else now_ms) - span_ms
    orders = []
    for i in range(n):
        t = start + i * span_ms // n
        if rng.random() < late_share:
            t -= rng.randint(1_000, MAX_LATENESS_MS)
        orders.append(
            Order(i, f"c{rng.randint(1, 500)}", rng.choice(PRODUCTS), rng.randint(100, 10_000), t)
        )
    return orders


def kafka_options(client: Mapping[str, str] | None) -> dict[str, str]:
    """Client settings (librdkafka names: security.protocol, sasl.*, ssl.*) as the
    data source's `kafka.*` options."""
    return {f"kafka.{k}": v for k, v in (client or {}).items()}


def send_orders(
    bootstrap: str, topic: str, orders: list[Order], client: Mapping[str, str] | None = None
) -> None:
    """`client`: settings for a secured cluster (librdkafka names)."""
    errors: list[str] = []
    producer = Producer(
        {
            **(client or {}),
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "enable.idempotence": True,
            # librdkafka's own log stays off the demo's output; its errors are
            # kept for the exception, should the orders not all be acknowledged.
            "log_level": 0,
            "error_cb": lambda err: errors.append(str(err.str())),
        }
    )
    for o in orders:
        while True:
            try:
                producer.produce(topic, o.to_json(), o.customer, timestamp=o.event_time_ms)
                break
            except BufferError:
                producer.poll(0.1)
    left = producer.flush(120)
    if left:
        raise RuntimeError(
            f"{left} orders were not acknowledged" + (f" ({errors[-1]})" if errors else "")
        )


def expected_totals(orders: list[Order]) -> Totals:
    totals: dict[tuple[int, str], list[int]] = {}
    for o in orders:
        window = o.event_time_ms // WINDOW_MS * WINDOW_MS
        t = totals.setdefault((window, o.product), [0, 0])
        t[0] += 1
        t[1] += o.amount_cents
    return {k: (v[0], v[1]) for k, v in totals.items()}


class TotalsWriter:
    """The job's foreachBatch sink; remembers how many totals each batch wrote."""

    def __init__(
        self,
        bootstrap: str,
        totals_topic: str,
        parquet_dir: str,
        client: Mapping[str, str] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.kafka_options = kafka_options(client)
        self.totals_topic = totals_topic
        self.parquet_dir = parquet_dir
        self.written: dict[int, int] = {}

    def __call__(self, df: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        rows = df.select(
            (F.col("window.start").cast("long") * 1000).alias("window_start_ms"),
            "product",
            "orders",
            "amount_cents",
        ).cache()
        # Parquet: this batch's directory, replaced if Spark runs the batch again.
        rows.write.mode("overwrite").parquet(f"{self.parquet_dir}/batch_id={batch_id}")
        key = F.concat_ws("|", F.col("window_start_ms").cast("string"), F.col("product"))
        value = F.to_json(F.struct("window_start_ms", "product", "orders", "amount_cents"))
        (
            rows.select(key.alias("key"), value.alias("value"))
            .write.format("moldau")
            .options(**self.kafka_options)
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("topic", self.totals_topic)
            # Inside foreachBatch its tasks carry the stream's query and batch: a
            # batch Spark runs again is not written twice.
            .option("exactlyOnce", "true")
            .option("exactlyOnce.markerTopic", f"{self.totals_topic}-writes")
            .mode("append")
            .save()
        )
        self.written[batch_id] = rows.count()
        rows.unpersist()


def start_job(
    spark: Any,
    bootstrap: str,
    orders_topic: str,
    checkpoint: str,
    max_per_trigger: int,
    sink: TotalsWriter,
    client: Mapping[str, str] | None = None,
) -> Any:
    """Starts the streaming job (Trigger.AvailableNow: it reads what is there and
    stops); returns the StreamingQuery."""
    from pyspark.sql import functions as F

    schema = "order_id long, customer string, product string, amount_cents long, event_time long"
    orders = (
        spark.readStream.format("moldau")
        .options(**kafka_options(client))
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", orders_topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_per_trigger))
        .option("commitToGroup", f"{orders_topic}-pipeline")
        .option("kafka.isolation.level", "read_committed")
        .load()
        .select(F.from_json(F.col("value").cast("string"), schema).alias("o"))
        .select("o.*")
        .withColumn("event_time", F.timestamp_millis("event_time"))
    )
    totals = (
        orders.withWatermark("event_time", "2 minutes")
        .groupBy(F.window("event_time", "1 minute"), "product")
        .agg(F.count("*").alias("orders"), F.sum("amount_cents").alias("amount_cents"))
    )
    return (
        totals.writeStream.outputMode("update")
        .foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


class JobFailed(RuntimeError):
    """The streaming job ended with an error; the message is its last line."""


def watch(
    query: Any,
    sink: TotalsWriter,
    report: Callable[[str], None],
    stop_after_batches: int | None = None,
) -> bool:
    """Reports each finished micro-batch until the query ends, or stops it after
    `stop_after_batches` batches of this run, as an operator would, mid-run. True
    if it stopped the query so."""
    seen = -1
    batches = 0
    read = 0
    stopped = False

    def report_new() -> None:
        nonlocal seen, batches, read
        for progress in query.recentProgress:
            if progress["batchId"] > seen:
                seen = progress["batchId"]
                batches += 1
                read += progress["numInputRows"]
                report(
                    f"batch {seen}: {progress['numInputRows']:,} orders in "
                    f"({read:,} this run), {sink.written.get(seen, 0):,} totals updated"
                )

    while query.isActive:
        report_new()
        if stop_after_batches is not None and batches >= stop_after_batches:
            query.stop()
            stopped = True
            break
        time.sleep(0.2)
    query.awaitTermination()
    # A batch that ended while the query stopped is in the checkpoint too: say so,
    # so that the resumed run's first batch follows the last one reported.
    report_new()
    if query.exception() is not None:
        raise JobFailed(_last_error(str(query.exception())))
    return stopped


def _last_error(text: str) -> str:
    """A failed query's exception, told in one line: the last `SomeError: ...` line
    of the Python traceback it carries, else its first line."""
    found = re.findall(r"^\s*(?:[\w.]+\.)?(\w+(?:Error|Exception): .+)$", text, re.M)
    return found[-1] if found else text.strip().splitlines()[0]


def totals_from_topic(
    spark: Any, bootstrap: str, totals_topic: str, client: Mapping[str, str] | None = None
) -> Totals:
    """The latest value of every key of the totals topic."""
    rows = (
        spark.read.format("moldau")
        .options(**kafka_options(client))
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", totals_topic)
        .option("kafka.isolation.level", "read_committed")
        .load()
        .select("partition", "offset", "value")
        .collect()
    )
    latest: dict[tuple[int, str], tuple[tuple[int, int], tuple[int, int]]] = {}
    for r in rows:
        v = json.loads(bytes(r.value))
        k = (int(v["window_start_ms"]), v["product"])
        position = (r.partition, r.offset)
        if k not in latest or latest[k][0] < position:
            latest[k] = (position, (int(v["orders"]), int(v["amount_cents"])))
    return {k: v for k, (_, v) in latest.items()}


def totals_from_parquet(spark: Any, parquet_dir: str) -> Totals:
    """Each total's row from the last batch that wrote it."""
    if not Path(parquet_dir).exists():
        return {}
    latest: dict[tuple[int, str], tuple[int, tuple[int, int]]] = {}
    for r in spark.read.parquet(parquet_dir).collect():
        k = (int(r.window_start_ms), r.product)
        if k not in latest or latest[k][0] < r.batch_id:
            latest[k] = (r.batch_id, (int(r.orders), int(r.amount_cents)))
    return {k: v for k, (_, v) in latest.items()}


def differences(expected: Totals, got: Mapping[tuple[int, str], tuple[int, int]]) -> list[str]:
    out = []
    for k in sorted(set(expected) | set(got)):
        if expected.get(k) != got.get(k):
            out.append(f"window {k[0]} {k[1]}: expected {expected.get(k)}, got {got.get(k)}")
    return out
