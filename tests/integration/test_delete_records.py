"""DeleteRecords and DescribeLogDirs on a live broker: confluent-kafka's AdminClient
deletes, a consumer and ListOffsets see the new log start, the segments below it go,
a restart (clean or kill -9) keeps it; bad offsets, unknown and compacted topics get
Kafka's codes; every version Kafka 3.9 serves answers. DescribeLogDirs tells each log
dir's partitions with the bytes their segment files hold."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient

from moldau.protocol.errors import ErrorCode
from moldau.testing.process import BrokerProcess, wait_for
from tests.integration import requests as rq
from tests.integration.clients import confluent_produce, create_topic
from tests.integration.kafka_wire import WireClient

pytestmark = pytest.mark.integration

EARLIEST = -2


def produce(bootstrap: str, topic: str, n: int, size: int = 500) -> None:
    records = [(None, b"%05d" % i + b"x" * size, []) for i in range(n)]
    confluent_produce(bootstrap, topic, records, **{"batch.num.messages": 1})


def delete(bootstrap: str, topic: str, offset: int, timeout_s: float = 10) -> int:
    """The low watermark confluent-kafka's AdminClient reports."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([CTP(topic, 0, offset)], operation_timeout=timeout_s)
    [future] = futures.values()
    return int(future.result(timeout=30).low_watermark)


def earliest(bootstrap: str, topic: str) -> int:
    with WireClient(bootstrap) as c:
        got = c.request(rq.list_offsets(topic, 0, EARLIEST))
    [p] = got.topics[0].partitions
    assert p.error_code == ErrorCode.none
    return int(p.offset)


def fetch_error(bootstrap: str, topic: str, offset: int) -> ErrorCode:
    with WireClient(bootstrap) as c:
        got = c.request(rq.fetch(topic, 0, offset))
    return ErrorCode(got.responses[0].partitions[0].error_code)


def ensure_offsets_topic(bootstrap: str) -> None:
    """Asking for a group coordinator creates __consumer_offsets."""

    def ready() -> bool:
        with WireClient(bootstrap) as c:
            got = c.request(rq.request(10, 4, key_type=0, coordinator_keys=["g"]))
        return bool(got.coordinators[0].error_code == ErrorCode.none)

    assert wait_for(ready, timeout=30, interval=0.2)


def segment_bases(directory: Path) -> list[int]:
    return sorted(int(p.stem) for p in directory.glob("*.log"))


def test_deleted_records_are_gone_for_readers_and_from_disk_and_stay_gone_across_restarts(
    fresh_broker: BrokerProcess, topic_name: str
) -> None:
    b = fresh_broker
    b.overrides = {
        "log.retention.check.interval.ms": "200",
        "log.segment.delete.delay.ms": "0",
        "log.flush.offset.checkpoint.interval.ms": "200",
    }
    b.start()
    create_topic(b.bootstrap, topic_name, **{"segment.bytes": "4000"})
    produce(b.bootstrap, topic_name, 100)
    directory = b.data_dir / f"{topic_name}-0"
    assert segment_bases(directory)[0] == 0

    assert delete(b.bootstrap, topic_name, 40) == 40
    assert earliest(b.bootstrap, topic_name) == 40
    assert fetch_error(b.bootstrap, topic_name, 39) == ErrorCode.offset_out_of_range
    assert fetch_error(b.bootstrap, topic_name, 40) == ErrorCode.none
    # The next retention check removes the segments wholly below 40, no more.
    assert wait_for(lambda: segment_bases(directory)[0] > 0, timeout=10)
    first = segment_bases(directory)[0]
    assert 30 < first <= 40

    b.stop()
    b.start()
    assert earliest(b.bootstrap, topic_name) == 40

    # -1: everything below the high watermark; kill -9 once the checkpoint has it.
    assert delete(b.bootstrap, topic_name, -1) == 100
    time.sleep(1)
    b.kill()
    b.start()
    assert earliest(b.bootstrap, topic_name) == 100
    produce(b.bootstrap, topic_name, 1)
    assert fetch_error(b.bootstrap, topic_name, 100) == ErrorCode.none


def test_bad_deletions_get_kafkas_codes_in_every_version(bootstrap: str, topic_name: str) -> None:
    compacted = topic_name + "-compacted"
    create_topic(bootstrap, topic_name)
    create_topic(bootstrap, compacted, **{"cleanup.policy": "compact"})
    produce(bootstrap, topic_name, 10, size=10)
    ensure_offsets_topic(bootstrap)
    for version in (0, 1, 2):
        asked = {
            (topic_name, 0): 11,  # beyond the high watermark (10)
            (topic_name, 5): 1,  # no such partition
            ("no-such-topic", 0): 1,
            (compacted, 0): 0,
            ("__consumer_offsets", 0): 0,
        }
        with WireClient(bootstrap) as c:
            got = c.request(rq.delete_records(asked, version=version), version)
        answered = {
            (t.name, p.partition_index): (ErrorCode(p.error_code), p.low_watermark)
            for t in got.topics
            for p in t.partitions
        }
        assert answered == {
            (topic_name, 0): (ErrorCode.offset_out_of_range, -1),
            (topic_name, 5): (ErrorCode.unknown_topic_or_partition, -1),
            ("no-such-topic", 0): (ErrorCode.unknown_topic_or_partition, -1),
            (compacted, 0): (ErrorCode.policy_violation, -1),
            ("__consumer_offsets", 0): (ErrorCode.invalid_topic_exception, -1),
        }, version
        # A good one in the same version moves the start by one.
        with WireClient(bootstrap) as c:
            got = c.request(rq.delete_records({(topic_name, 0): version + 1}, version=version))
        p = got.topics[0].partitions[0]
        assert (p.error_code, p.low_watermark) == (ErrorCode.none, version + 1)
    assert earliest(bootstrap, topic_name) == 3

    # confluent-kafka reports the broker's code.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.delete_records([CTP(topic_name, 0, 50)]).values()
    with pytest.raises(KafkaException) as e:
        future.result(timeout=30)
    assert e.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE


def test_describe_log_dirs_tells_each_dir_its_partitions_and_their_bytes(
    fresh_broker: BrokerProcess, topic_name: str
) -> None:
    b = fresh_broker
    dirs = [b.data_dir / "one", b.data_dir / "two"]
    b.overrides = {"log.dirs": ",".join(str(d) for d in dirs)}
    b.start()
    create_topic(b.bootstrap, topic_name, partitions=2, **{"segment.bytes": "3000"})
    produce(b.bootstrap, topic_name, 20)

    def on_disk(partition: int) -> tuple[Path, int]:
        [where] = [d for d in dirs if (d / f"{topic_name}-{partition}").is_dir()]
        size = sum(f.stat().st_size for f in (where / f"{topic_name}-{partition}").glob("*.log"))
        return where.resolve(), size

    expected = {p: on_disk(p) for p in (0, 1)}
    assert expected[0][1] > 20 * 500 and expected[1][1] == 0
    for version in range(5):
        with WireClient(b.bootstrap) as c:
            got = c.request(rq.describe_log_dirs(version=version), version)
        assert sorted(r.log_dir for r in got.results) == sorted(str(d.resolve()) for d in dirs)
        seen = {}
        for r in got.results:
            assert r.error_code == ErrorCode.none
            if version >= 4:
                assert r.total_bytes >= r.usable_bytes > 0
            for t in r.topics:
                for p in t.partitions:
                    assert p.offset_lag == 0 and not p.is_future_key
                    if t.name == topic_name:
                        seen[p.partition_index] = (Path(r.log_dir), p.partition_size)
        assert seen == expected, version

    # Only what was asked: one partition, and nothing of a topic that does not exist.
    with WireClient(b.bootstrap) as c:
        got = c.request(rq.describe_log_dirs({topic_name: [1], "no-such-topic": [0]}))
    topics = [
        (t.name, [p.partition_index for p in t.partitions]) for r in got.results for t in r.topics
    ]
    assert topics == [(topic_name, [1])]
