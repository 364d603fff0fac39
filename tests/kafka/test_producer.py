"""Kafka's Java producer against Moldau (moldau.it.ProducerChecks), on one broker and on
three: its defaults, every codec, headers, batches at message.max.bytes, the split of a
batch refused as too large, and records refused by name (KIP-467), also as librdkafka
sees them."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError, Producer

from tests.integration.clients import confluent_consume
from tests.kafka.checks import CheckSuite

pytestmark = pytest.mark.java

CHECKS = [
    "idempotentDefaults",  # idempotent and acks=all: every record once, in order
    "topicCodecAndLogAppendTime",  # a topic's own codec recompresses, LogAppendTime stamps
    "acksZeroAndOne",  # every record lands, in order
    "createTimeKept",  # a record's own timestamp comes back as sent
    "headers",  # come back as sent
    "nearMessageMaxBytes",  # a batch of message.max.bytes lands, one byte more is refused
    "splitOnMessageTooLarge",  # a batch refused as too large is split, every record lands
    "keylessRecordToCompactedTopic",  # fails by name in Java (KIP-467)
    "timestampOutOfRange",  # fails by name in Java (KIP-467)
]
# One JVM a broker set runs every check: Kafka's client takes a second or more to
# load, which a JVM a check would pay twenty times.
SUITE = CheckSuite("moldau.it.ProducerChecks", CHECKS)

# ProducerChecks.CODECS and CODEC_RECORDS
CODECS = ("gzip", "snappy", "lz4", "zstd")
CODEC_RECORDS = 500


@pytest.mark.parametrize("check", CHECKS)
def test_producer(request: pytest.FixtureRequest, bootstrap: str, check: str) -> None:
    SUITE.check(request, bootstrap, check)


@SUITE.runs("everyCodec")
def test_every_codec_is_read_back_by_the_java_consumer_and_by_librdkafka(
    request: pytest.FixtureRequest, bootstrap: str
) -> None:
    SUITE.check(request, bootstrap)
    for codec in CODECS:
        got = confluent_consume(bootstrap, f"codec-{codec}", CODEC_RECORDS)
        assert len(got) == CODEC_RECORDS, codec
        for i, (_, offset, key, value, headers) in enumerate(got):
            assert offset == i
            assert key == b"k%d" % i
            assert value == f"{codec}-{i}-{'abcdefghij' * (i % 50)}".encode()
            assert headers == [("i", str(i).encode())]


def test_librdkafka_fails_the_named_records_and_tells_the_rest_of_the_batch_apart(
    bootstrap: str,
) -> None:
    """KIP-467 as librdkafka reads it: INVALID_RECORD for each keyless record of a batch to
    a compacted topic, _INVALID_DIFFERENT_RECORD for the others; the idempotent producer
    goes on."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"compacted-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    brokers = len(admin.list_topics(timeout=10).brokers)
    new = NewTopic(topic, 1, min(3, brokers), config={"cleanup.policy": "compact"})
    admin.create_topics([new])[topic].result(timeout=30)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 200, "enable.idempotence": True}
    )
    outcome: dict[bytes, tuple[int | None, int]] = {}

    def delivered(err: KafkaError | None, msg: object) -> None:
        value = msg.value()  # type: ignore[attr-defined]
        outcome[value] = (err.code() if err else None, msg.offset())  # type: ignore[attr-defined]

    for i, key in enumerate([b"a", None, b"b", None]):
        producer.produce(topic, key=key, value=b"v%d" % i, partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0
    assert [outcome[b"v%d" % i][0] for i in range(4)] == [
        KafkaError._INVALID_DIFFERENT_RECORD,
        KafkaError.INVALID_RECORD,
        KafkaError._INVALID_DIFFERENT_RECORD,
        KafkaError.INVALID_RECORD,
    ]
    producer.produce(topic, key=b"c", value=b"kept", partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0
    assert outcome[b"kept"] == (None, 0)
    got = confluent_consume(bootstrap, topic, 1)
    assert [(key, value) for _, _, key, value, _ in got] == [(b"c", b"kept")]
