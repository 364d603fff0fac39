"""`moldau consume`: print records, one a line, as kafka-console-consumer.sh.

With `--group` (or a `group.id` among the consumer settings) it joins the group,
as kafka-console-consumer does: it subscribes to the topic, shares its
partitions with the group's other members, resumes from the group's committed
offsets (where there are none, the beginning with `--from-beginning`, else the
end) and commits what it printed, as a member. With `--partition` or `--offset`
it is assigned the partitions directly (that partition, or all of the topic's)
and starts at `--offset`, else the beginning with `--from-beginning`, else the
end, or with a group its committed offsets; a group's offsets are still
committed. The output properties (`print.key`, `key.separator`, ...) are those
of Kafka's DefaultMessageFormatter.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_STORED,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    TopicPartition,
)

from moldau.cli.common import (
    BrokerWatch,
    add_bootstrap_argument,
    client_config,
    error_text,
    make_client,
    parse_key_values,
    read_config_file,
    topic_partitions,
)
from moldau.cli.errors import CliError
from moldau.cli.progress import Progress, output_redirected

#: The most records taken from the client at once.
_BATCH = 500
#: How long one wait for records lasts at most, so Ctrl-C and the timeout are
#: noticed promptly (seconds).
_TICK_S = 0.5

#: Deserializers a Kafka user may name; all print the bytes as they are.
_BYTES_DESERIALIZERS = frozenset(
    {
        "org.apache.kafka.common.serialization.StringDeserializer",
        "org.apache.kafka.common.serialization.ByteArrayDeserializer",
        "org.apache.kafka.common.serialization.BytesDeserializer",
    }
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "consume",
        help="print records of a topic",
        description="Print records of a topic, one a line, as kafka-console-consumer.sh.",
    )
    add_bootstrap_argument(p)
    p.add_argument("--topic", required=True, help="the topic to consume")
    p.add_argument("--partition", type=int, help="consume only this partition")
    p.add_argument(
        "--offset",
        help="where to start: earliest, latest, or an offset (which needs --partition)",
    )
    p.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the earliest record (with --group: if it has no committed offset)",
    )
    p.add_argument("--max-messages", type=int, help="exit after printing this many records")
    p.add_argument(
        "--timeout-ms", type=int, help="exit when no record arrives for this many milliseconds"
    )
    p.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="output property (repeatable): print.key, print.value, print.headers, "
        "print.partition, print.offset, print.timestamp, key.separator, line.separator, "
        "headers.separator, null.literal",
    )
    p.add_argument(
        "--group",
        help="consumer group to join: share the topic's partitions with its other members, "
        "resume from its committed offsets and commit what is printed",
    )
    p.add_argument(
        "--consumer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a consumer setting, passed to librdkafka (repeatable)",
    )
    p.add_argument(
        "--consumer.config",
        dest="consumer_config",
        type=Path,
        metavar="FILE",
        help="a properties file of consumer settings",
    )
    p.add_argument(
        "--isolation-level",
        choices=("read_committed", "read_uncommitted"),
        help="read_committed hides records of aborted and open transactions "
        "(default: read_uncommitted, as kafka-console-consumer)",
    )
    p.set_defaults(run=run)


def _flag(props: Mapping[str, str], name: str, default: bool) -> bool:
    if name not in props:
        return default
    value = props[name].strip().lower()
    if value not in ("true", "false"):
        raise CliError(f"--property {name} must be true or false, got {props[name]!r}")
    return value == "true"


class RecordFormatter:
    """Kafka's DefaultMessageFormatter: the selected columns of a record, joined
    by `key.separator`, ended by `line.separator`."""

    PROPERTIES = frozenset(
        {
            "print.timestamp",
            "print.partition",
            "print.offset",
            "print.headers",
            "print.key",
            "print.value",
            "key.separator",
            "line.separator",
            "headers.separator",
            "null.literal",
        }
    )
    DESERIALIZERS = frozenset({"key.deserializer", "value.deserializer", "headers.deserializer"})

    def __init__(self, props: Mapping[str, str]) -> None:
        for name in sorted(set(props) - self.PROPERTIES):
            if name in self.DESERIALIZERS:
                if props[name] not in _BYTES_DESERIALIZERS:
                    raise CliError(
                        f"--property {name}: only String, ByteArray and Bytes deserializers "
                        "are supported (records are printed as they are)"
                    )
                continue
            raise CliError(
                f"unknown --property {name}; known: {', '.join(sorted(self.PROPERTIES))}"
            )
        self.print_timestamp = _flag(props, "print.timestamp", False)
        self.print_partition = _flag(props, "print.partition", False)
        self.print_offset = _flag(props, "print.offset", False)
        self.print_headers = _flag(props, "print.headers", False)
        self.print_key = _flag(props, "print.key", False)
        self.print_value = _flag(props, "print.value", True)
        self.key_separator = props.get("key.separator", "\t").encode()
        self.line_separator = props.get("line.separator", "\n").encode()
        self.headers_separator = props.get("headers.separator", ",").encode()
        self.null_literal = props.get("null.literal", "null").encode()

    def format(self, msg: Any) -> bytes:
        columns: list[bytes] = []
        if self.print_timestamp:
            kind, ts = msg.timestamp()
            if kind == TIMESTAMP_CREATE_TIME:
                columns.append(f"CreateTime:{ts}".encode())
            elif kind == TIMESTAMP_LOG_APPEND_TIME:
                columns.append(f"LogAppendTime:{ts}".encode())
            else:
                columns.append(b"NO_TIMESTAMP")
        if self.print_partition:
            columns.append(f"Partition:{msg.partition()}".encode())
        if self.print_offset:
            columns.append(f"Offset:{msg.offset()}".encode())
        if self.print_headers:
            headers = msg.headers() or []
            columns.append(
                self.headers_separator.join(
                    str(k).encode() + b":" + self._bytes(v) for k, v in headers
                )
                if headers
                else b"NO_HEADERS"
            )
        if self.print_key:
            columns.append(self._bytes(msg.key()))
        if self.print_value:
            columns.append(self._bytes(msg.value()))
        if not columns:
            return b""
        return self.key_separator.join(columns) + self.line_separator

    def _bytes(self, data: Any) -> bytes:
        if data is None:
            return self.null_literal
        return data if isinstance(data, bytes) else str(data).encode()


def start_offset(args: argparse.Namespace, grouped: bool) -> int:
    """Where each assigned partition starts (a librdkafka offset or sentinel)."""
    if args.offset is not None:
        text = args.offset.strip().lower()
        if text == "earliest":
            return int(OFFSET_BEGINNING)
        if text == "latest":
            return int(OFFSET_END)
        try:
            offset = int(text)
        except ValueError:
            raise CliError(
                f"--offset must be earliest, latest or a non-negative number, got {args.offset!r}"
            ) from None
        if offset < 0:
            raise CliError(f"--offset must not be negative, got {offset}")
        if args.partition is None:
            raise CliError("--offset with a number needs --partition (offsets are per partition)")
        return offset
    if grouped:
        return int(OFFSET_STORED)
    return int(OFFSET_BEGINNING) if args.from_beginning else int(OFFSET_END)


def _check_args(args: argparse.Namespace) -> None:
    if args.offset is not None and args.from_beginning:
        raise CliError("--from-beginning and --offset cannot be used together")
    if args.max_messages is not None and args.max_messages < 0:
        raise CliError("--max-messages must not be negative")
    if args.timeout_ms is not None and args.timeout_ms <= 0:
        raise CliError("--timeout-ms must be positive")
    if args.partition is not None and args.partition < 0:
        raise CliError("--partition must not be negative")


class _Output:
    """stdout, as bytes when it has a binary buffer."""

    def __init__(self) -> None:
        self.stream = sys.stdout
        self.binary = getattr(sys.stdout, "buffer", None)

    def write(self, data: bytes) -> None:
        if self.binary is not None:
            self.binary.write(data)
        else:
            self.stream.write(data.decode(errors="replace"))

    def flush(self) -> None:
        (self.binary if self.binary is not None else self.stream).flush()


def run(args: argparse.Namespace) -> int:
    _check_args(args)
    formatter = RecordFormatter(parse_key_values(args.property, "--property"))
    file_conf = read_config_file(args.consumer_config, "--consumer.config")
    props = parse_key_values(args.consumer_property, "--consumer-property")
    group = args.group or props.get("group.id") or file_conf.get("group.id")
    start = start_offset(args, grouped=group is not None)
    base = {
        "group.id": group or f"console-consumer-{random.randint(0, 99999)}",
        "enable.auto.commit": "true" if group else "false",
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        # As the Java consumer of kafka-console-consumer (librdkafka's default is
        # false): a topic that does not exist is created where the broker creates
        # topics (auto.create.topics.enable), and the tool waits for its records.
        "allow.auto.create.topics": "true",
        # The Java consumer's default, and so kafka-console-consumer's (librdkafka's
        # is read_committed): records of open and aborted transactions are shown.
        "isolation.level": "read_uncommitted",
    }
    explicit = {"group.id": base["group.id"]}
    if args.isolation_level is not None:
        explicit["isolation.level"] = args.isolation_level
    watch = BrokerWatch(args.bootstrap_server)
    conf = client_config(args.bootstrap_server, watch, base, file_conf, props, explicit)
    consumer = make_client(Consumer, conf)
    try:
        partitions = topic_partitions(consumer, watch, args.topic)
        if group is not None and args.partition is None and args.offset is None:
            # A member of the group: the group's coordinator decides which
            # partitions this consumer reads, and it commits as a member.
            consumer.subscribe([args.topic])
        else:
            if args.partition is not None:
                if args.partition not in partitions:
                    raise CliError(
                        f"topic '{args.topic}' has no partition {args.partition} "
                        f"(it has {len(partitions)}: 0..{len(partitions) - 1})"
                    )
                partitions = [args.partition]
            consumer.assign([TopicPartition(args.topic, p, start) for p in partitions])
        _consume(consumer, watch, formatter, args)
    finally:
        consumer.close()
    return 0


def _consume(
    consumer: Any, watch: BrokerWatch, formatter: RecordFormatter, args: argparse.Namespace
) -> None:
    out = _Output()
    processed = 0
    limit: int | None = args.max_messages
    idle_limit_s = args.timeout_ms / 1000 if args.timeout_ms is not None else None
    last_record = time.monotonic()
    # With --max-messages, a bar of records to go, when the records go to a file or
    # a pipe (on the terminal they are the progress).
    bar = Progress(
        limit or 0, "records", "consumed", enabled=limit is not None and output_redirected()
    )
    try:
        with bar:
            while limit is None or processed < limit:
                want = _BATCH if limit is None else min(_BATCH, limit - processed)
                wait_s = _TICK_S
                if idle_limit_s is not None:
                    wait_s = max(0.0, min(wait_s, last_record + idle_limit_s - time.monotonic()))
                messages = consumer.consume(num_messages=want, timeout=wait_s)
                watch.check()
                printed = 0
                for msg in messages:
                    err = msg.error()
                    if err is not None:
                        _check_error(err, args.topic)
                        continue
                    out.write(formatter.format(msg))
                    printed += 1
                if printed:
                    out.flush()
                    processed += printed
                    last_record = time.monotonic()
                    bar.update(processed)
                elif idle_limit_s is not None and time.monotonic() - last_record >= idle_limit_s:
                    break
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly
        _silence_stdout()
    finally:
        print(f"Processed a total of {processed} messages", file=sys.stderr)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush does not fail too."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, io.UnsupportedOperation):
        pass


def _check_error(err: Any, topic: str) -> None:
    code = err.code()
    if code == KafkaError._PARTITION_EOF:
        return
    if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
        raise CliError(f"topic '{topic}' does not exist")
    if err.fatal() or not err.retriable():
        raise CliError(error_text(err))
