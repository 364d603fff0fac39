"""`moldau pipeline demo`: the data pipeline, end to end, with one command.

It writes orders (keys, JSON values, event times, some late) into a topic, runs a
Spark Structured Streaming job that reads them through the "moldau" data source and
totals them per product and event-time minute with a watermark, writes the totals
to a compacted topic and to Parquet, and checks both against the same sums done in
plain Python. With no --bootstrap-server it starts a broker of its own.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from moldau.cli.errors import CliError


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "pipeline",
        help="run the Spark data pipeline demo",
        description="Run Moldau's data pipeline on Spark (needs moldau[spark] and Java 17+).",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    demo = actions.add_parser(
        "demo",
        help="orders -> Spark Structured Streaming -> totals in a topic and Parquet, checked",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    demo.add_argument(
        "--bootstrap-server",
        dest="bootstrap_server",
        metavar="HOST:PORT",
        help="the broker(s) to use (default: start one for the demo)",
    )
    demo.add_argument("--events", type=int, default=20_000, help="orders to generate")
    demo.add_argument(
        "--work-dir",
        type=Path,
        help="where the Parquet output and the checkpoint go (default: a new temporary directory)",
    )
    demo.set_defaults(run=run)


def _say(line: str) -> None:
    print(line, flush=True)


def _create_topics(bootstrap: str, orders: str, totals: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [
            NewTopic(orders, 3, -1),
            NewTopic(totals, 1, -1, config={"cleanup.policy": "compact"}),
        ]
    )
    for f in futures.values():
        f.result(60)


def run(args: argparse.Namespace) -> int:
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise CliError(
            "needs pyspark: pip install 'moldau[spark]' (and Java 17 or newer)"
        ) from None
    from moldau.spark import pipeline as demo

    if args.events <= 0:
        raise CliError("--events must be positive")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="moldau-pipeline-"))
    work.mkdir(parents=True, exist_ok=True)
    broker = None
    bootstrap = args.bootstrap_server
    if bootstrap is None:
        from moldau.testing.process import BrokerProcess

        broker = BrokerProcess(work / "broker-data").start()
        bootstrap = broker.bootstrap
        _say(f"started a broker at {bootstrap} (data in {work / 'broker-data'})")
    spark = None
    try:
        run_id = uuid.uuid4().hex[:6]
        orders_topic, totals_topic = f"orders-{run_id}", f"order-totals-{run_id}"
        _create_topics(bootstrap, orders_topic, totals_topic)
        orders = demo.make_orders(args.events)
        demo.send_orders(bootstrap, orders_topic, orders)
        late = sum(1 for a, b in itertools.pairwise(orders) if b.event_time_ms < a.event_time_ms)
        _say(f"wrote {len(orders):,} orders ({late:,} late) to {orders_topic}")

        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        _say("starting Spark (local[2]) ...")
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("moldau-pipeline-demo")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        parquet = str(work / "totals.parquet")
        started = time.monotonic()
        sink = demo.TotalsWriter(bootstrap, totals_topic, parquet)
        query = demo.start_job(
            spark,
            bootstrap,
            orders_topic,
            str(work / "checkpoint"),
            max_per_trigger=max(1_000, args.events // 4),
            sink=sink,
        )
        demo.watch(query, sink, _say)
        _say(f"streaming job done in {time.monotonic() - started:.1f} s")

        expected = demo.expected_totals(orders)
        problems = [
            f"{where}: {line}"
            for where, got in (
                (f"topic {totals_topic}", demo.totals_from_topic(spark, bootstrap, totals_topic)),
                (f"Parquet {parquet}", demo.totals_from_parquet(spark, parquet)),
            )
            for line in demo.differences(expected, got)
        ]
        if problems:
            for line in problems[:20]:
                _say(line)
            _say(f"MISMATCH: {len(problems)} totals differ from plain Python's")
            return 1
        _say(
            f"match: {len(expected)} totals (product x minute) in {totals_topic} and in "
            f"{parquet} equal plain Python's over all {len(orders):,} orders"
        )
        return 0
    finally:
        if spark is not None:
            spark.stop()
        if broker is not None:
            broker.stop()
