"""A full disk never costs an acknowledged record (Kafka's rule: an I/O error takes
the log directory offline; a broker with none left stops; a restart recovers).

Real files on a real small tmpfs, a real confluent-kafka producer with acks=all,
the broker as a real process."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from moldau.testing.process import BrokerProcess, wait_for
from tests.integration.clients import confluent_consume, create_topic
from tests.integration.tmpfs import Tmpfs

pytestmark = pytest.mark.integration

RECORD = 1000


def value(i: int) -> bytes:
    return b"%08d" % i + b"x" * (RECORD - 8)


def produce(
    bootstrap: str,
    topic: str,
    n: int,
    partition: int = 0,
    stop: Callable[[list[KafkaError]], bool] = lambda errors: False,
    broker_gone: bool = False,
) -> tuple[dict[int, bytes], list[KafkaError]]:
    """Up to `n` records with acks=all and no retries (so each failure is seen as
    the broker answered it), until `stop(errors)`. Returns the acknowledged offsets
    with their values, and the delivery errors. `broker_gone`: `stop` means the
    broker has exited, so what is still queued unsent fails at once (_PURGE_QUEUE)
    instead of after message.timeout.ms; it cannot have been acknowledged."""
    acked: dict[int, bytes] = {}
    errors: list[KafkaError] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "retries": 0,
            "message.timeout.ms": 10_000,
        }
    )

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        if err is None:
            acked[msg.offset()] = msg.value()  # type: ignore[attr-defined]
        else:
            errors.append(err)

    deadline = time.monotonic() + 60
    i = 0
    while i < n and time.monotonic() < deadline and not stop(errors):
        try:
            producer.produce(topic, value=value(i), partition=partition, on_delivery=on_delivery)
            i += 1
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    if broker_gone:
        while producer.flush(0.1) > 0 and time.monotonic() < deadline and not stop(errors):
            pass
        if stop(errors):
            producer.purge(in_queue=True, in_flight=False)
    producer.flush(15)
    return acked, errors


def test_a_full_disk_stops_the_broker_and_loses_no_acknowledged_record(
    tmp_path: Path, tmpfs: type[Tmpfs], topic_name: str
) -> None:
    disk = tmpfs(tmp_path / "data", 12 * 1024)
    broker = BrokerProcess(
        disk.path, {"log.segment.bytes": "2097152"}, log_path=tmp_path / "broker.log"
    )
    try:
        broker.start()
        create_topic(broker.bootstrap, topic_name)
        acked, errors = produce(
            broker.bootstrap,
            topic_name,
            30_000,
            stop=lambda _: broker.proc.poll() is not None,  # type: ignore[union-attr]
            broker_gone=True,
        )
        # The broker stopped by itself, saying why, with no traceback.
        assert broker.proc is not None and broker.proc.wait(30) != 0
        log_text = (tmp_path / "broker.log").read_text()
        assert "every log directory has failed" in log_text
        assert "No space left on device" in log_text
        assert "Traceback" not in log_text
        # The client was told, with Kafka's error code.
        assert any(e.code() == KafkaError.KAFKA_STORAGE_ERROR for e in errors), errors[:5]
        assert len(acked) > 5000  # most of 12 MB was written and acknowledged
        assert sorted(acked) == list(range(len(acked)))

        # Space comes back; a restart recovers every acknowledged record at its offset.
        disk.resize(64 * 1024)
        broker.start()
        got = confluent_consume(broker.bootstrap, topic_name, len(acked))
        assert {o: v for _, o, _, v, _ in got} == acked
        # And writes are accepted again, right after them.
        more, more_errors = produce(broker.bootstrap, topic_name, 1000)
        assert more_errors == []
        assert sorted(more) == list(range(len(acked), len(acked) + 1000))
        got = confluent_consume(broker.bootstrap, topic_name, len(acked) + 1000)
        assert [o for _, o, _, _, _ in got] == list(range(len(acked) + 1000))
    finally:
        broker.kill()


def partition_dir(dirs: list[Path], topic: str, partition: int) -> Path:
    found = [d for d in dirs if (d / f"{topic}-{partition}").is_dir()]
    assert len(found) == 1, found
    return found[0]


def leader_of(bootstrap: str, topic: str, partition: int) -> int:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return int(metadata.topics[topic].partitions[partition].leader)


def test_with_several_log_dirs_a_full_one_takes_only_its_partitions_offline(
    tmp_path: Path, tmpfs: type[Tmpfs], topic_name: str
) -> None:
    roomy = tmpfs(tmp_path / "a", 24 * 1024)
    small = tmpfs(tmp_path / "b", 6 * 1024)
    broker = BrokerProcess(
        tmp_path / "data",
        {"log.dirs": f"{roomy.path},{small.path}", "log.segment.bytes": "1048576"},
        log_path=tmp_path / "broker.log",
    )
    try:
        broker.start()
        create_topic(broker.bootstrap, topic_name, 2)
        # Kafka places each new log in the directory with the fewest partitions.
        dirs = [roomy.path, small.path]
        assert {partition_dir(dirs, topic_name, p) for p in (0, 1)} == set(dirs)
        full = 0 if partition_dir(dirs, topic_name, 0) == small.path else 1
        other = 1 - full

        acked, errors = produce(broker.bootstrap, topic_name, 12_000, full, stop=bool)
        assert any(e.code() == KafkaError.KAFKA_STORAGE_ERROR for e in errors), errors[:5]
        assert len(acked) > 2000
        # The broker keeps serving its other directory; the controller, told through
        # /log_dir_event_notification, takes the full one's partition offline.
        assert broker.proc is not None and broker.proc.poll() is None
        assert wait_for(lambda: leader_of(broker.bootstrap, topic_name, full) == -1)
        assert leader_of(broker.bootstrap, topic_name, other) == 1
        served, served_errors = produce(broker.bootstrap, topic_name, 1000, other)
        assert served_errors == [] and sorted(served) == list(range(1000))
        assert broker.stop() == 0

        small.resize(32 * 1024)
        broker.start()
        got = confluent_consume(broker.bootstrap, topic_name, len(acked), partition=full)
        assert {o: v for _, o, _, v, _ in got} == acked
        got = confluent_consume(broker.bootstrap, topic_name, 1000, partition=other)
        assert {o: v for _, o, _, v, _ in got} == served
        log_text = (tmp_path / "broker.log").read_text()
        assert "Traceback" not in log_text
    finally:
        broker.kill()


def test_a_segment_roll_that_cannot_create_its_files_loses_no_acknowledged_record(
    tmp_path: Path, tmpfs: type[Tmpfs], topic_name: str
) -> None:
    """Space for data but no file left to create (the file system's inodes): the
    append that rolls a new segment fails, the broker stops, and nothing that was
    acknowledged before is lost."""
    disk = tmpfs(tmp_path / "data", 32 * 1024)
    segment_records = 1000
    broker = BrokerProcess(
        disk.path,
        {"log.segment.bytes": str(segment_records * (RECORD + 70))},
        log_path=tmp_path / "broker.log",
    )
    try:
        broker.start()
        create_topic(broker.bootstrap, topic_name)
        disk.limit_files(spare=2)  # a checkpoint's temp file fits; a new segment does not
        acked, errors = produce(
            broker.bootstrap, topic_name, 5 * segment_records,
            stop=lambda _: broker.proc.poll() is not None,  # type: ignore[union-attr]
            broker_gone=True,
        )  # fmt: skip
        assert broker.proc is not None and broker.proc.wait(30) != 0
        # It failed where the first segment was full: at the roll.
        assert segment_records * 0.8 < len(acked) <= segment_records
        assert any(e.code() == KafkaError.KAFKA_STORAGE_ERROR for e in errors), errors[:5]
        log_text = (tmp_path / "broker.log").read_text()
        assert "No space left on device" in log_text and "Traceback" not in log_text

        disk.unlimit_files()
        broker.start()
        got = confluent_consume(broker.bootstrap, topic_name, len(acked))
        assert {o: v for _, o, _, v, _ in got} == acked
        more, more_errors = produce(broker.bootstrap, topic_name, 2 * segment_records)
        assert more_errors == []
        assert sorted(more) == list(range(len(acked), len(acked) + 2 * segment_records))
    finally:
        broker.kill()


def test_a_read_only_log_dir_at_start_is_offline_and_the_others_serve(
    tmp_path: Path, tmpfs: type[Tmpfs], topic_name: str
) -> None:
    """EROFS: one of two log directories comes back read-only. The broker starts
    with the other; the read-only one's partition has no leader; once it is writable
    again, a restart serves every record of both."""
    roomy = tmpfs(tmp_path / "a", 16 * 1024)
    other = tmpfs(tmp_path / "b", 16 * 1024)
    broker = BrokerProcess(
        tmp_path / "data",
        {"log.dirs": f"{roomy.path},{other.path}"},
        log_path=tmp_path / "broker.log",
    )
    try:
        broker.start()
        create_topic(broker.bootstrap, topic_name, 2)
        dirs = [roomy.path, other.path]
        stuck = 0 if partition_dir(dirs, topic_name, 0) == other.path else 1
        served = 1 - stuck
        first = {p: produce(broker.bootstrap, topic_name, 500, p) for p in (0, 1)}
        assert all(len(acked) == 500 and not errors for acked, errors in first.values())
        assert broker.stop() == 0

        other.read_only()
        broker.start()
        assert wait_for(lambda: leader_of(broker.bootstrap, topic_name, stuck) == -1)
        more, errors = produce(broker.bootstrap, topic_name, 500, served)
        assert errors == [] and sorted(more) == list(range(500, 1000))
        assert "Read-only file system" in (tmp_path / "broker.log").read_text()
        assert broker.stop() == 0

        other.read_only(False)
        broker.start()
        assert wait_for(lambda: leader_of(broker.bootstrap, topic_name, stuck) == 1)
        got = confluent_consume(broker.bootstrap, topic_name, 500, partition=stuck)
        assert {o: v for _, o, _, v, _ in got} == first[stuck][0]
        got = confluent_consume(broker.bootstrap, topic_name, 1000, partition=served)
        assert {o: v for _, o, _, v, _ in got} == {**first[served][0], **more}
        assert "Traceback" not in (tmp_path / "broker.log").read_text()
    finally:
        broker.kill()
