"""A task's read on the fetching path (moldau.spark.fetch_reader) against a broker
process, without Spark: the rows the confluent-kafka client path gives, for every
codec, headers, nulls and read_committed; data loss, a deleted topic and a stalled
read as the client path reports them; and the switch to the client path for what
the fetching path does not serve."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from moldau.spark import read_path
from moldau.spark.offsets import DataLossError, OffsetRange
from tests.integration.clients import confluent_produce, create_topic
from tests.integration.test_delete_records import delete

pytestmark = pytest.mark.spark


def read(
    bootstrap: str,
    r: OffsetRange,
    path: str = "fetch",
    fail_on_data_loss: bool = True,
    poll_timeout_ms: int = 20_000,
    **settings: str,
) -> pa.Table:
    batches: Iterator[pa.RecordBatch] = read_path.read_range(
        {"bootstrap.servers": bootstrap, **settings},
        r,
        fetch_path=path,
        include_headers=True,
        fail_on_data_loss=fail_on_data_loss,
        poll_timeout_ms=poll_timeout_ms,
    )
    return pa.Table.from_batches(list(batches), schema=_schema())


def _schema() -> pa.Schema:
    from moldau.spark.schema import arrow_schema

    return arrow_schema(True)


def test_every_codec_reads_as_the_client_path_reads_it(bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name)
    n = 0
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        records = [
            (
                None if i % 5 == 0 else b"k%d" % i,
                None if i % 7 == 0 else b"v" * (i % 300),
                [("h", b"x"), ("e", None)] if i % 3 == 0 else [],
            )
            for i in range(400)
        ]
        confluent_produce(bootstrap, topic_name, records, compression=codec)
        n += len(records)
    r = OffsetRange(topic_name, 0, 3, n - 2)
    fetched = read(bootstrap, r)
    assert fetched.num_rows == n - 5
    assert fetched.equals(read(bootstrap, r, path="client"))
    assert fetched.column("offset").to_pylist() == list(range(3, n - 2))


def test_read_committed_drops_aborted_transactions(bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic_name})
    p.init_transactions(30)
    for t in range(6):
        p.begin_transaction()
        for i in range(10):
            p.produce(topic_name, b"%d-%d" % (t, i), partition=0)
        if t % 3 == 1:
            p.flush(30)  # written, then aborted (unsent ones would be purged)
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
    r = OffsetRange(topic_name, 0, 0, 66)  # 60 records and 6 markers
    committed = read(bootstrap, r, **{"isolation.level": "read_committed"})
    values = committed.column("value").to_pylist()
    assert values == [b"%d-%d" % (t, i) for t in (0, 2, 3, 5) for i in range(10)]
    client = read(bootstrap, r, path="client", **{"isolation.level": "read_committed"})
    assert committed.equals(client)
    # read_uncommitted sees the aborted ones too, and no marker.
    assert read(bootstrap, r).num_rows == 60


def test_records_gone_are_data_loss(bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name)
    confluent_produce(bootstrap, topic_name, [(None, b"%d" % i, []) for i in range(20)])
    assert delete(bootstrap, topic_name, 8) == 8
    r = OffsetRange(topic_name, 0, 2, 20)
    with pytest.raises(DataLossError, match="offsets 2 to 7 are gone"):
        read(bootstrap, r)
    rest = read(bootstrap, r, fail_on_data_loss=False)
    assert rest.column("offset").to_pylist() == list(range(8, 20))


def test_a_deleted_topic_is_data_loss(bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name)
    confluent_produce(bootstrap, topic_name, [(None, b"v", [])])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic_name])[topic_name].result(30)
    r = OffsetRange(topic_name, 0, 0, 1)
    with pytest.raises(DataLossError, match="does not exist any more"):
        read(bootstrap, r)
    assert read(bootstrap, r, fail_on_data_loss=False).num_rows == 0


def test_a_read_that_cannot_progress_ends_at_poll_timeout(bootstrap: str, topic_name: str) -> None:
    create_topic(bootstrap, topic_name)
    confluent_produce(bootstrap, topic_name, [(None, b"v", [])])
    with pytest.raises(TimeoutError, match=r"kafkaConsumer.pollTimeoutMs \(1500 ms\)"):
        read(bootstrap, OffsetRange(topic_name, 0, 0, 5), poll_timeout_ms=1500)


def test_settings_it_does_not_serve_go_to_the_client_path_said_once(
    bootstrap: str, topic_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    create_topic(bootstrap, topic_name)
    confluent_produce(bootstrap, topic_name, [(b"k", b"v%d" % i, []) for i in range(5)])
    r = OffsetRange(topic_name, 0, 0, 5)
    # An ssl.* setting librdkafka takes even over PLAINTEXT.
    setting = {"ssl.endpoint.identification.algorithm": "none"}
    with caplog.at_level(logging.WARNING, logger="moldau.spark.read_path"):
        first = read(bootstrap, r, **setting)
        second = read(bootstrap, r, **setting)
    said = [m for m in caplog.messages if "client path" in m]
    assert said == [
        "reading through confluent-kafka (the client path): the fetching path does not serve "
        "the setting ssl.endpoint.identification.algorithm"
    ]
    assert first.equals(second)
    assert first.column("value").to_pylist() == [b"v%d" % i for i in range(5)]
