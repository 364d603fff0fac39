"""`moldau produce`: one record per line of stdin, as kafka-console-producer.sh.

Lines are read as bytes and sent unchanged. With `--property parse.key=true` a
line is `key<key.separator>value`; with `--property parse.headers=true` it starts
with `h1:v1,h2:v2<headers.delimiter>`. The properties and their defaults are
those of Kafka's LineMessageReader.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from confluent_kafka import KafkaException, Producer

from moldau.cli.common import (
    BrokerWatch,
    add_bootstrap_argument,
    client_config,
    error_text,
    kafka_error,
    make_client,
    parse_key_values,
    read_config_file,
    topic_partitions,
)
from moldau.cli.errors import CliError

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

#: Delivery gives up after this long unless `message.timeout.ms` says otherwise
#: (librdkafka's default, five minutes, is long for a console tool).
DEFAULT_MESSAGE_TIMEOUT_MS = "30000"

_FLUSH_TICK_S = 0.5


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "produce",
        help="send lines of stdin as records",
        description="Send each line of stdin as a record, as kafka-console-producer.sh.",
    )
    add_bootstrap_argument(p, "--broker-list")
    p.add_argument("--topic", required=True, help="the topic to produce to")
    p.add_argument(
        "--partition", type=int, help="send every record to this partition (default: partitioner)"
    )
    p.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="line reader property (repeatable): parse.key, key.separator, parse.headers, "
        "headers.delimiter, headers.separator, headers.key.separator, null.marker, ignore.error",
    )
    p.add_argument(
        "--producer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a producer setting, passed to librdkafka (repeatable)",
    )
    p.add_argument(
        "--producer.config",
        dest="producer_config",
        type=Path,
        metavar="FILE",
        help="a properties file of producer settings",
    )
    p.add_argument(
        "--request-required-acks",
        choices=("all", "-1", "0", "1"),
        help="acks the producer asks for (default all)",
    )
    p.add_argument(
        "--compression-codec",
        nargs="?",
        const="gzip",
        choices=CODECS,
        help="compress batches; without a value, gzip",
    )
    p.add_argument("--sync", action="store_true", help="wait for each record to be acknowledged")
    p.set_defaults(run=run)


@dataclass(frozen=True)
class ProducerRecord:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def _flag(props: Mapping[str, str], name: str) -> bool:
    value = props.get(name, "false").strip().lower()
    if value not in ("true", "false"):
        raise CliError(f"--property {name} must be true or false, got {props[name]!r}")
    return value == "true"


class LineReader:
    """Kafka's LineMessageReader: turns one line into a record."""

    PROPERTIES = frozenset(
        {
            "parse.key",
            "key.separator",
            "parse.headers",
            "headers.delimiter",
            "headers.separator",
            "headers.key.separator",
            "null.marker",
            "ignore.error",
        }
    )

    def __init__(self, props: Mapping[str, str]) -> None:
        unknown = sorted(set(props) - self.PROPERTIES)
        if unknown:
            known = ", ".join(sorted(self.PROPERTIES))
            raise CliError(f"unknown --property {', '.join(unknown)}; known: {known}")
        self.parse_key = _flag(props, "parse.key")
        self.parse_headers = _flag(props, "parse.headers")
        self.ignore_error = _flag(props, "ignore.error")
        self.key_separator = props.get("key.separator", "\t").encode()
        self.headers_delimiter = props.get("headers.delimiter", "\t").encode()
        self.headers_separator = props.get("headers.separator", ",").encode()
        self.headers_key_separator = props.get("headers.key.separator", ":").encode()
        marker = props.get("null.marker")
        self.null_marker = marker.encode() if marker is not None else None
        for name, sep in (
            ("key.separator", self.key_separator),
            ("headers.delimiter", self.headers_delimiter),
            ("headers.separator", self.headers_separator),
            ("headers.key.separator", self.headers_key_separator),
        ):
            if not sep:
                raise CliError(f"--property {name} must not be empty")
        if self.parse_headers and self.headers_delimiter == self.headers_separator:
            raise CliError("headers.delimiter and headers.separator may not be equal")
        if self.parse_headers and self.headers_separator == self.headers_key_separator:
            raise CliError("headers.separator and headers.key.separator may not be equal")

    def parse(self, line: bytes, number: int) -> ProducerRecord:
        offset = 0
        headers_text = self._field(
            self.parse_headers, line, 0, self.headers_delimiter, "headers delimiter", number
        )
        if headers_text is not None:
            offset = len(headers_text) + len(self.headers_delimiter)
        key = self._field(self.parse_key, line, offset, self.key_separator, "key separator", number)
        if key is not None:
            offset += len(key) + len(self.key_separator)
        value: bytes | None = line[offset:]
        headers: list[tuple[str, bytes | None]] = []
        if headers_text and headers_text != self.null_marker:
            headers = self._headers(headers_text, number)
        if key == self.null_marker:
            key = None
        if value == self.null_marker:
            value = None
        return ProducerRecord(key, value, headers)

    def _field(
        self, enabled: bool, line: bytes, start: int, separator: bytes, what: str, number: int
    ) -> bytes | None:
        if not enabled:
            return None
        end = line.find(separator, start)
        if end < 0:
            if self.ignore_error:
                return None
            raise CliError(f"no {what} {separator.decode()!r} on line {number}: {_show(line)}")
        return line[start:end]

    def _headers(self, text: bytes, number: int) -> list[tuple[str, bytes | None]]:
        headers: list[tuple[str, bytes | None]] = []
        for pair in text.split(self.headers_separator):
            i = pair.find(self.headers_key_separator)
            if i < 0:
                if not self.ignore_error:
                    raise CliError(
                        f"no header key separator {self.headers_key_separator.decode()!r} in "
                        f"{_show(pair)} on line {number}"
                    )
                headers.append((pair.decode(errors="replace"), None))
                continue
            key = pair[:i]
            if key == self.null_marker:
                raise CliError(
                    f"a header key on line {number} is the null marker; keys can't be null"
                )
            value: bytes | None = pair[i + len(self.headers_key_separator) :]
            headers.append(
                (key.decode(errors="replace"), None if value == self.null_marker else value)
            )
        return headers


def _show(line: bytes) -> str:
    text = line.decode(errors="replace")
    return repr(text if len(text) <= 80 else text[:77] + "...")


def read_lines(stream: IO[Any]) -> Iterator[bytes]:
    """Lines of stdin as bytes, without their line ending."""
    binary = getattr(stream, "buffer", None)
    for raw in binary if binary is not None else stream:
        line = raw if isinstance(raw, bytes) else str(raw).encode()
        if line.endswith(b"\n"):
            line = line[:-1]
        if line.endswith(b"\r"):
            line = line[:-1]
        yield line


class Sender:
    """Produces records and counts deliveries; errors are kept, not raised, so the
    records already sent still get flushed (as the Java producer's close does)."""

    def __init__(self, producer: Any, watch: BrokerWatch, topic: str, partition: int | None):
        self.producer = producer
        self.watch = watch
        self.topic = topic
        self.partition = partition
        self.sent = 0
        self.failed = 0
        self.first_error: str | None = None

    def send(self, record: ProducerRecord) -> None:
        kwargs: dict[str, Any] = {"on_delivery": self._on_delivery}
        if self.partition is not None:
            kwargs["partition"] = self.partition
        if record.headers:
            kwargs["headers"] = record.headers
        self.sent += 1
        while True:
            try:
                self.producer.produce(self.topic, value=record.value, key=record.key, **kwargs)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                self.producer.poll(0.1)
            except KafkaException as e:
                err = kafka_error(e)
                self._failure(error_text(err) if err is not None else str(e))
                break
        self.producer.poll(0)

    def flush(self) -> None:
        while self.producer.flush(_FLUSH_TICK_S) > 0:
            self.watch.check()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._failure(error_text(err))

    def _failure(self, text: str) -> None:
        self.failed += 1
        if self.first_error is None:
            self.first_error = text


def run(args: argparse.Namespace) -> int:
    reader = LineReader(parse_key_values(args.property, "--property"))
    explicit: dict[str, str] = {}
    if args.request_required_acks is not None:
        explicit["acks"] = args.request_required_acks
    if args.compression_codec is not None:
        explicit["compression.type"] = args.compression_codec
    watch = BrokerWatch(args.bootstrap_server)
    conf = client_config(
        args.bootstrap_server,
        watch,
        # murmur2_random: a key goes to the partition Kafka's Java producer (and so
        # kafka-console-producer) picks, not librdkafka's CRC32 one.
        {"message.timeout.ms": DEFAULT_MESSAGE_TIMEOUT_MS, "partitioner": "murmur2_random"},
        read_config_file(args.producer_config, "--producer.config"),
        parse_key_values(args.producer_property, "--producer-property"),
        explicit,
    )
    producer = make_client(Producer, conf)
    partitions = topic_partitions(producer, watch, args.topic)
    if args.partition is not None and args.partition not in partitions:
        raise CliError(
            f"topic '{args.topic}' has no partition {args.partition} "
            f"(it has {len(partitions)}: 0..{len(partitions) - 1})"
        )
    sender = Sender(producer, watch, args.topic, args.partition)
    try:
        for number, line in enumerate(read_lines(sys.stdin), start=1):
            sender.send(reader.parse(line, number))
            if args.sync:
                sender.flush()
    finally:
        sender.flush()
    if sender.failed:
        raise CliError(
            f"{sender.failed} of {sender.sent} records were not delivered to "
            f"'{args.topic}': {sender.first_error}"
        )
    return 0
