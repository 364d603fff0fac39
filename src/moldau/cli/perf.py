"""`moldau perf produce` and `moldau perf consume`: kafka-producer-perf-test.sh and
kafka-consumer-perf-test.sh (ProducerPerformance, ConsumerPerformance), their flags
and output, on confluent-kafka (librdkafka) instead of Kafka's Java client.

produce: sends --num-records records of --record-size random upper-case letters
(or payloads from --payload-file, or the record's number with --payload-monotonic)
to --topic, in transactions with --transactional-id or --transaction-duration-ms,
paced to --throughput records a second (-1: as fast as it can) as Kafka's
ThroughputThrottler paces, printing a line every 5 s and then the totals with latency
percentiles (perf_stats). Only records the broker acknowledged are counted; a failed
one is reported on stderr.

consume: reads --messages records of --topic in a group, from the earliest offset
(or the latest with --from-latest) until that many arrived or none came for
--timeout ms, then prints Kafka's header and CSV line (--show-detailed-stats: a line
every --reporting-interval ms instead). It stops at exactly --messages records,
where Kafka's tool counts the rest of its last poll too.

Settings in Java's words that librdkafka does not know (serializer classes) are
ignored; others go to librdkafka as they are.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from moldau.cli.common import (
    BrokerWatch,
    client_config,
    error_text,
    kafka_error,
    make_client,
    parse_key_values,
    read_config_file,
)
from moldau.cli.errors import CliError
from moldau.cli.perf_stats import MB, ProducerStats, ThroughputThrottler
from moldau.cli.progress import Progress

# Java client settings with no librdkafka counterpart; the perf tools set them.
_JAVA_ONLY = frozenset(
    {
        "key.serializer",
        "value.serializer",
        "key.deserializer",
        "value.deserializer",
        "check.crcs",
    }
)
# A-Z for any byte: payloads as Kafka's (random upper-case letters), made fast.
_LETTERS = bytes(65 + b % 26 for b in range(256))
#: How long one wait for records or acknowledgements lasts at most (seconds).
_TICK_S = 0.1
# Acknowledgements are served (and latencies taken) every this many records: at
# the tool's rates well under a millisecond apart, at a fraction of a poll a record.
_POLL_EVERY = 32
_DEFAULT_TRANSACTIONAL_ID = "performance-producer-default-transactional-id"
_DEFAULT_TRANSACTION_DURATION_MS = 3000


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "perf",
        help="measure produce or consume throughput, as kafka-*-perf-test.sh",
        description="Producer and consumer performance tests, as Kafka's "
        "kafka-producer-perf-test.sh and kafka-consumer-perf-test.sh.",
    )
    tests = p.add_subparsers(dest="perf_command", required=True, metavar="produce|consume")
    _add_produce(tests)
    _add_consume(tests)


def _add_produce(tests: Any) -> None:
    p = tests.add_parser("produce", help="as kafka-producer-perf-test.sh")
    p.add_argument("--topic", required=True, help="the topic to produce to")
    p.add_argument("--num-records", type=int, required=True, help="how many records to send")
    p.add_argument("--record-size", type=int, help="bytes a record (or --payload-file)")
    p.add_argument("--payload-file", type=Path, help="payloads to send, chosen at random")
    p.add_argument(
        "--payload-monotonic",
        action="store_true",
        help="payloads are the record's number as text (0, 1, ...), not random",
    )
    p.add_argument(
        "--payload-delimiter",
        default="\\n",
        help="what separates the payloads of --payload-file (default: a newline)",
    )
    p.add_argument(
        "--throughput",
        type=float,
        required=True,
        help="records a second at most; -1 for no limit",
    )
    p.add_argument(
        "--producer-props",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="producer settings (bootstrap.servers among them, unless --bootstrap-server)",
    )
    p.add_argument(
        "--producer.config",
        dest="producer_config",
        type=Path,
        metavar="FILE",
        help="a properties file of producer settings (librdkafka names)",
    )
    p.add_argument(
        "--bootstrap-server",
        dest="bootstrap_server",
        metavar="HOST:PORT",
        help="the broker(s) to connect to (Kafka 4.1's tool takes them in --producer-props)",
    )
    p.add_argument(
        "--transactional-id",
        help="send in transactions with this id (default, if transactions are asked for: "
        f"{_DEFAULT_TRANSACTIONAL_ID})",
    )
    p.add_argument(
        "--transaction-duration-ms",
        type=int,
        help="commit a transaction once it is this old (default 3000, if transactional)",
    )
    p.set_defaults(run=run_produce)


def _add_consume(tests: Any) -> None:
    p = tests.add_parser("consume", help="as kafka-consumer-perf-test.sh")
    p.add_argument("--bootstrap-server", dest="bootstrap_server", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--messages", type=int, required=True, help="how many records to read")
    p.add_argument(
        "--group", default=f"perf-consumer-{random.randrange(100_000)}", help="the group id"
    )
    p.add_argument(
        "--from-latest",
        action="store_true",
        help="with no committed offset, start at the end rather than the beginning",
    )
    p.add_argument(
        "--timeout",
        type=int,
        default=10_000,
        help="ms to wait at most between records (default 10000)",
    )
    p.add_argument("--show-detailed-stats", action="store_true", help="a line an interval")
    p.add_argument("--reporting-interval", type=int, default=5000, help="ms (default 5000)")
    p.add_argument("--fetch-size", type=int, default=1024 * 1024)
    p.add_argument("--socket-buffer-size", type=int, default=2 * 1024 * 1024)
    p.add_argument("--consumer.config", dest="consumer_config", type=Path, metavar="FILE")
    p.add_argument("--date-format", default="yyyy-MM-dd HH:mm:ss:SSS")
    p.add_argument("--hide-header", action="store_true")
    p.set_defaults(run=run_consume)


def _settings(layers: list[dict[str, str]]) -> dict[str, str]:
    merged: dict[str, str] = {}
    for layer in layers:
        merged.update(layer)
    return {k: v for k, v in merged.items() if k not in _JAVA_ONLY}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- produce ------------------------------------------------------------------------


def _payloads(args: argparse.Namespace) -> list[bytes] | None:
    """The --payload-file's payloads (printing what Kafka's tool prints), or None."""
    if args.payload_file is None:
        return None
    path = args.payload_file.absolute()
    print(f"Reading payloads from: {path}")
    try:
        text = path.read_text("utf-8")
    except OSError:
        text = ""
    if not text:
        raise CliError("File does not exist or empty file provided.")
    delimiter = args.payload_delimiter.encode().decode("unicode_escape")
    payloads = [p.encode() for p in text.split(delimiter)]
    # Java's String.split drops the empty strings at the end.
    while payloads and not payloads[-1]:
        payloads.pop()
    print(f"Number of messages read: {len(payloads)}")
    return payloads


def run_produce(args: argparse.Namespace) -> int:
    if args.num_records <= 0:
        raise CliError("--num-records must be positive")
    if args.throughput == 0:
        raise CliError("--throughput 0 would send nothing; -1 is no limit")
    given = [args.record_size is not None, args.payload_file is not None, args.payload_monotonic]
    if sum(given) != 1:
        raise CliError(
            "exactly one of --record-size, --payload-file and --payload-monotonic is required"
        )
    props = _settings(
        [
            read_config_file(args.producer_config, "--producer.config"),
            parse_key_values(args.producer_props, "--producer-props"),
        ]
    )
    bootstrap = args.bootstrap_server or props.pop("bootstrap.servers", None)
    props.pop("bootstrap.servers", None)
    if not bootstrap:
        raise CliError("--bootstrap-server or bootstrap.servers in --producer-props is required")
    props.setdefault("client.id", "perf-producer-client")
    # As Kafka's tool: any of the three asks for transactions.
    transactional = (
        args.transactional_id is not None
        or args.transaction_duration_ms is not None
        or "transactional.id" in props
    )
    if args.transactional_id is not None or transactional:
        props["transactional.id"] = (
            args.transactional_id or props.get("transactional.id") or _DEFAULT_TRANSACTIONAL_ID
        )
    payloads = _payloads(args)
    watch = BrokerWatch(bootstrap)
    producer = make_client(Producer, client_config(bootstrap, watch, props))
    # Before the clock starts, as Kafka's tool: initialising is not sending.
    txn = Transactions(
        producer if transactional else None,
        args.transaction_duration_ms or _DEFAULT_TRANSACTION_DURATION_MS,
    )
    bar = Progress(args.num_records, "records", "sent")
    stats = ProducerStats(args.num_records, bar.print, _now_ms)
    failures: list[str] = []
    acked = 0

    def on_delivery(sent_ms: int, size: int) -> Any:
        def done(err: KafkaError | None, _msg: Any) -> None:
            nonlocal acked
            now = _now_ms()
            if err is not None:
                failures.append(error_text(err))
                return
            watch.reached = True
            acked += 1
            stats.record(now - sent_ms, size, now)

        return done

    throttler = ThroughputThrottler(args.throughput, stats.start_ms)
    rng = random.Random(0)
    with bar:
        for i in range(args.num_records):
            if payloads is not None:
                payload = payloads[rng.randrange(len(payloads))]
            elif args.payload_monotonic:
                payload = str(i).encode()
            else:
                payload = os.urandom(args.record_size).translate(_LETTERS)
            txn.begin_if_none()
            sent_ms = _now_ms()
            _send(producer, watch, args.topic, payload, on_delivery(sent_ms, len(payload)))
            txn.sent(sent_ms)
            if i % _POLL_EVERY == 0:
                producer.poll(0)
                bar.update(acked)
            if throttler.should_throttle(i, sent_ms):
                throttler.throttle()
        txn.commit()
        while len(producer) > 0:
            producer.poll(_TICK_S)
            bar.update(acked)
            watch.check()
    for failure in failures[:10]:
        print(f"error sending a record: {failure}", file=sys.stderr)
    print(stats.total_line())
    return 1 if failures else 0


class Transactions:
    """Kafka's tool's transactions: one begins with the first record after a commit
    and is committed once --transaction-duration-ms old (and at the end)."""

    def __init__(
        self, producer: Any | None, duration_ms: int, clock_ms: Callable[[], int] = _now_ms
    ) -> None:
        self._producer = producer
        self._duration_ms = duration_ms
        self._clock_ms = clock_ms
        self._open_since: int | None = None
        if producer is not None:
            self._call(producer.init_transactions, 30)

    def begin_if_none(self) -> None:
        if self._producer is not None and self._open_since is None:
            self._call(self._producer.begin_transaction)
            self._open_since = self._clock_ms()

    def sent(self, sent_ms: int) -> None:
        if self._open_since is not None and sent_ms - self._open_since >= self._duration_ms:
            self.commit()

    def commit(self) -> None:
        if self._producer is not None and self._open_since is not None:
            self._call(self._producer.commit_transaction)
            self._open_since = None

    @staticmethod
    def _call(method: Any, *args: Any) -> None:
        try:
            method(*args)
        except KafkaException as e:
            err = kafka_error(e)
            raise CliError(error_text(err) if err is not None else str(e)) from None


def _send(producer: Any, watch: BrokerWatch, topic: str, payload: bytes, cb: Any) -> None:
    while True:
        try:
            producer.produce(topic, value=payload, on_delivery=cb)
            return
        except BufferError:
            # librdkafka's queue is full: let acknowledgements drain it.
            producer.poll(_TICK_S)
            watch.check()


# -- consume ------------------------------------------------------------------------

_JAVA_DATE = re.compile(r"yyyy|MM|dd|HH|mm|ss|SSS")
_DATE_PARTS = {
    "yyyy": "%Y",
    "MM": "%m",
    "dd": "%d",
    "HH": "%H",
    "mm": "%M",
    "ss": "%S",
}


def format_time(ms: int, java_pattern: str) -> str:
    """`ms` in the local time zone, in a Java SimpleDateFormat pattern of
    yyyy, MM, dd, HH, mm, ss and SSS (what Kafka's default uses)."""
    moment = datetime.datetime.fromtimestamp(ms / 1000)

    def part(m: re.Match[str]) -> str:
        if m[0] == "SSS":
            return f"{ms % 1000:03d}"
        return moment.strftime(_DATE_PARTS[m[0]])

    return _JAVA_DATE.sub(part, java_pattern)


def run_consume(args: argparse.Namespace) -> int:
    if args.messages <= 0:
        raise CliError("--messages must be positive")
    props = _settings([read_config_file(args.consumer_config, "--consumer.config")])
    props |= {
        "group.id": args.group,
        "socket.receive.buffer.bytes": str(args.socket_buffer_size),
        "max.partition.fetch.bytes": str(args.fetch_size),
        "auto.offset.reset": "latest" if args.from_latest else "earliest",
    }
    props.setdefault("client.id", "perf-consumer-client")
    props.pop("bootstrap.servers", None)
    if not args.hide_header:
        extra = ", rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
        first = "time, threadId" if args.show_detailed_stats else "start.time, end.time"
        print(f"{first}, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec{extra}")
    watch = BrokerWatch(args.bootstrap_server)
    consumer = make_client(Consumer, client_config(args.bootstrap_server, watch, props))
    start_ms = _now_ms()
    join = {"start": start_ms, "total": 0, "round": 0}

    def on_assign(_consumer: Any, _partitions: Any) -> None:
        elapsed = _now_ms() - join["start"]
        join["total"] += elapsed
        join["round"] += elapsed

    def on_revoke(_consumer: Any, _partitions: Any) -> None:
        join["start"] = _now_ms()

    read = size = last_read = last_size = 0
    try:
        consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
        now = last_report = last_consumed = _now_ms()
        with Progress(args.messages, "records", "read") as bar:
            # Its lines (--show-detailed-stats) go through the bar: it steps aside.
            while read < args.messages and now - last_consumed <= args.timeout:
                batch = consumer.consume(min(500, args.messages - read), _TICK_S)
                now = _now_ms()
                watch.check()
                for msg in batch:
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            continue
                        raise CliError(error_text(err))
                    last_consumed = now
                    read += 1
                    size += len(msg.key() or b"") + len(msg.value() or b"")
                    if now - last_report >= args.reporting_interval:
                        if args.show_detailed_stats:
                            bar.print(
                                _detailed_line(
                                    args, size, last_size, read, last_read, last_report, now, join
                                )
                            )
                        join["round"] = 0
                        last_report, last_read, last_size = now, read, size
                bar.update(read)
        if read < args.messages:
            print(
                f"WARNING: Exiting before consuming the expected number of messages: timeout "
                f"({args.timeout} ms) exceeded. You can use the --timeout option to increase "
                "the timeout."
            )
    finally:
        consumer.close()
    end_ms = _now_ms()
    if not args.show_detailed_stats:
        elapsed_s = max(end_ms - start_ms, 1) / 1000.0
        fetch_ms = (end_ms - start_ms) - join["total"]
        fetch_s = fetch_ms / 1000.0
        mb = size / MB
        print(
            f"{format_time(start_ms, args.date_format)}, {format_time(end_ms, args.date_format)}, "
            f"{mb:.4f}, {mb / elapsed_s:.4f}, {read}, {read / elapsed_s:.4f}, {join['total']}, "
            f"{fetch_ms}, {_ratio(mb, fetch_s)}, {_ratio(read, fetch_s)}"
        )
    return 0


def _ratio(amount: float, seconds: float) -> str:
    """As Java prints a double division: Infinity or NaN when no time passed."""
    if seconds > 0:
        return f"{amount / seconds:.4f}"
    return "NaN" if amount == 0 else "Infinity"


def _detailed_line(
    args: argparse.Namespace,
    size: int,
    last_size: int,
    read: int,
    last_read: int,
    start: int,
    end: int,
    join: dict[str, int],
) -> str:
    elapsed = max(end - start, 1)
    interval_mb = (size - last_size) / MB
    fetch_ms = end - start - join["round"]
    fetch_mb_s = 1000.0 * interval_mb / fetch_ms if fetch_ms > 0 else 0.0
    fetch_n_s = 1000.0 * (read - last_read) / fetch_ms if fetch_ms > 0 else 0.0
    return (
        f"{format_time(end, args.date_format)}, 0, {size / MB:.4f}, "
        f"{1000.0 * interval_mb / elapsed:.4f}, {read}, "
        f"{1000.0 * (read - last_read) / elapsed:.4f}, {join['round']}, {fetch_ms}, "
        f"{fetch_mb_s:.4f}, {fetch_n_s:.4f}"
    )
