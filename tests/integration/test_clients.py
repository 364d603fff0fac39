"""Unmodified Kafka clients against a real broker process: round trips of every kind
of record, compression across clients, contiguous offsets."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable

import pytest

from moldau.testing import nodejs
from tests.integration.clients import (
    Got,
    Rec,
    aiokafka_consume,
    aiokafka_produce,
    confluent_consume,
    confluent_produce,
    create_topic,
    kafka_python_consume,
    kafka_python_produce,
    kcat_consume,
    kcat_produce,
)

pytestmark = pytest.mark.integration

BIG = os.urandom(1024 * 1024)
RECORDS: list[Rec] = [
    (b"k1", b"v1", [("h1", b"x"), ("h2", b"")]),
    (None, b"null key", []),
    (b"null value", None, []),
    (b"empty value", b"", []),
    (b"big", BIG, [("size", b"1MiB")]),
    (b"\x00\xffbinary", bytes(range(256)), []),
]


def as_sent(got: list[Got]) -> list[Rec]:
    return [(k, v, h) for _, _, k, v, h in got]


Producer = Callable[[str, str, list[Rec]], list[int]]
Consumer = Callable[[str, str, int], list[Got]]

CLIENTS: dict[str, tuple[Producer, Consumer]] = {
    "confluent-kafka": (confluent_produce, confluent_consume),
    "kafka-python": (kafka_python_produce, kafka_python_consume),
    "aiokafka": (aiokafka_produce, aiokafka_consume),
}


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_round_trip_of_every_kind_of_record(bootstrap: str, topic_name: str, client: str) -> None:
    produce, consume = CLIENTS[client]
    create_topic(bootstrap, topic_name, **{"max.message.bytes": "3000000"})
    offsets = produce(bootstrap, topic_name, RECORDS)
    assert offsets == list(range(len(RECORDS)))
    got = consume(bootstrap, topic_name, len(RECORDS))
    assert [o for _, o, *_ in got] == list(range(len(RECORDS)))
    assert as_sent(got) == RECORDS


@pytest.mark.parametrize(("producer", "consumer"), list(itertools.permutations(sorted(CLIENTS), 2)))
def test_what_one_client_writes_another_reads(
    bootstrap: str, topic_name: str, producer: str, consumer: str
) -> None:
    create_topic(bootstrap, topic_name)
    records = [r for r in RECORDS if r[1] is not BIG]
    CLIENTS[producer][0](bootstrap, topic_name, records)
    assert as_sent(CLIENTS[consumer][1](bootstrap, topic_name, len(records))) == records


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_each_codec_written_by_librdkafka_is_read_by_every_client(
    bootstrap: str, topic_name: str, codec: str
) -> None:
    create_topic(bootstrap, topic_name)
    records: list[Rec] = [
        (b"k%d" % i, b"value %d " % i * 20, [("i", b"%d" % i)]) for i in range(50)
    ]
    assert confluent_produce(bootstrap, topic_name, records, codec) == list(range(50))
    for consume in (confluent_consume, kafka_python_consume, aiokafka_consume):
        assert as_sent(consume(bootstrap, topic_name, 50)) == records, consume.__name__
    lines = kcat_consume(bootstrap, topic_name, 50)
    assert lines == [f"{i}\tk{i}\t{f'value {i} ' * 20}" for i in range(50)]


@pytest.mark.parametrize(
    ("client", "codec"),
    [
        ("kafka-python", "gzip"),
        ("kafka-python", "zstd"),
        ("aiokafka", "snappy"),
        ("aiokafka", "lz4"),
    ],
)
def test_codecs_written_by_python_clients_are_read_by_librdkafka(
    bootstrap: str, topic_name: str, client: str, codec: str
) -> None:
    create_topic(bootstrap, topic_name)
    records: list[Rec] = [(b"k%d" % i, b"v%d" % i * 50, []) for i in range(20)]
    produce = kafka_python_produce if client == "kafka-python" else aiokafka_produce
    produce(bootstrap, topic_name, records, codec)
    assert as_sent(confluent_consume(bootstrap, topic_name, 20)) == records


def test_kcat_round_trip_with_keys_headers_and_null_values(bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name)
    kcat_produce(bootstrap, topic_name, ["a:1", "b:2", ":3"], "-K", ":")
    kcat_produce(bootstrap, topic_name, ["c:"], "-K", ":", "-Z", "-H", "trace=abc")
    got = confluent_consume(bootstrap, topic_name, 4)
    assert [(k, v, h) for _, _, k, v, h in got] == [
        (b"a", b"1", []),
        (b"b", b"2", []),
        (b"", b"3", []),  # without -Z kcat sends an empty key, not a null one
        (b"c", None, [("trace", b"abc")]),
    ]
    assert kcat_consume(bootstrap, topic_name, 2) == ["0\ta\t1", "1\tb\t2"]


def test_kafkajs_admin_producer_and_consumer_group(bootstrap: str, topic_name: str) -> None:
    """tests/js/try.js (also scripts/try-kafkajs.sh): KafkaJS creates a topic, produces with
    acks=all and gzip, consumes all 12 records in a group and reads its committed offsets."""
    done = nodejs.run("try.js", bootstrap, topic_name)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-6000:]}"
    assert done.stdout.split() == ["consumed", "12", "committed", "offsets", "sum", "12"]


def test_offsets_are_contiguous_from_zero_across_many_batches(
    bootstrap: str, topic_name: str
) -> None:
    create_topic(bootstrap, topic_name)
    records: list[Rec] = [(None, b"%d" % i, []) for i in range(5000)]
    offsets = confluent_produce(
        bootstrap, topic_name, records, "lz4", **{"batch.num.messages": 137}
    )
    assert offsets == list(range(5000))
    got = confluent_consume(bootstrap, topic_name, 5000)
    assert [o for _, o, *_ in got] == list(range(5000))
    assert [v for _, _, _, v, _ in got] == [b"%d" % i for i in range(5000)]
