"""Producer ids idle for producer.id.expiration.ms are forgotten (Kafka's
PeriodicProducerExpirationCheck): by the periodic check, in the snapshot the log
writes next, and when a log is loaded after the broker was down."""

from __future__ import annotations

from pathlib import Path

import pytest

from moldau.clock import FakeClock
from moldau.protocol.errors import OutOfOrderSequenceNumberError
from moldau.protocol.records import TimestampType, build_batch
from moldau.storage.log import Log
from moldau.storage.log_config import LogConfig
from moldau.storage.log_manager import LogManager
from moldau.storage.partition_name import TopicPartition

TP = TopicPartition("t", 0)
DAY = 86_400_000
OLD = range(1000)  # producer ids that go idle
YOUNG = 5000


def send(log: Log, clock: FakeClock, pid: int, seq: int, ts: int | None = None) -> bool:
    """One idempotent batch of two records; True if it was a retry (a duplicate)."""
    batch = build_batch(
        [(b"k", b"v")] * 2,
        timestamp=clock.milliseconds() if ts is None else ts,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
    )
    return log.append_as_leader(memoryview(batch), 0).duplicate


def accepts_a_gap(log: Log, clock: FakeClock, pid: int) -> bool:
    """Whether a batch far ahead of the producer's sequence is accepted, as from a
    producer the log does not know (else OUT_OF_ORDER_SEQUENCE_NUMBER)."""
    try:
        send(log, clock, pid, 1000)
    except OutOfOrderSequenceNumberError:
        return False
    return True


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_the_periodic_check_forgets_producers_idle_for_producer_id_expiration_ms(
    tmp_path: Path, clock: FakeClock
) -> None:
    manager = LogManager([tmp_path], clock, 1, producer_id_expiration_ms=DAY)
    log = manager.get_or_create_log(TP, LogConfig())
    for pid in OLD:
        send(log, clock, pid, 0)
    clock.advance(1)
    send(log, clock, YOUNG, 0)
    clock.advance(DAY - 1)
    assert manager.remove_expired_producers() == len(OLD)  # a day old, not a day less 1 ms
    # A producer that comes back after expiry starts afresh, as on Kafka; the young
    # one is still checked: its retry is a duplicate, its gap refused.
    assert accepts_a_gap(log, clock, OLD[3])
    assert send(log, clock, YOUNG, 0)
    assert not accepts_a_gap(log, clock, YOUNG)


def test_idleness_on_a_log_append_time_topic_is_measured_from_the_brokers_time(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The broker's time is what the log holds: a producer whose clock is a day
    behind is not expired the moment it writes."""
    manager = LogManager([tmp_path], clock, 1, producer_id_expiration_ms=DAY)
    log = manager.get_or_create_log(
        TP, LogConfig(message_timestamp_type=TimestampType.LOG_APPEND_TIME)
    )
    send(log, clock, YOUNG, 0, ts=clock.milliseconds() - 2 * DAY)
    clock.advance(DAY - 1)
    assert manager.remove_expired_producers() == 0
    assert send(log, clock, YOUNG, 0)


def test_a_log_closed_after_its_producers_expired_writes_a_snapshot_without_them(
    tmp_path: Path, clock: FakeClock
) -> None:
    """No append after the expiry (retention has removed the producers' records and
    nobody writes): the snapshot of that offset, written at the last roll with every
    producer in it, is written again at close, so the next start reads a small file
    and brings none of them back."""
    manager = LogManager([tmp_path], clock, 1, producer_id_expiration_ms=DAY)
    log = manager.get_or_create_log(TP, LogConfig())
    for pid in OLD:
        send(log, clock, pid, 0)
    send(log, clock, YOUNG, 0)
    log.roll()
    [snapshot] = log.dir.glob("*.snapshot")
    full = snapshot.stat().st_size
    clock.advance(DAY)
    send(log, clock, YOUNG, 2)
    log.roll()
    clock.advance(1)
    manager.remove_expired_producers()
    log.close()
    latest = max(log.dir.glob("*.snapshot"))
    assert latest.stat().st_size < full / 100
    reopened = Log.open(log.dir, TP, LogConfig(), clock, had_clean_shutdown=True)
    assert accepts_a_gap(reopened, clock, OLD[3])
    assert send(reopened, clock, YOUNG, 2)


def test_producers_that_expired_while_the_broker_was_down_are_not_loaded(
    tmp_path: Path, clock: FakeClock
) -> None:
    manager = LogManager([tmp_path], clock, 1, producer_id_expiration_ms=DAY)
    manager.startup(lambda _: LogConfig(), "cluster")
    log = manager.get_or_create_log(TP, LogConfig())
    for pid in OLD:
        send(log, clock, pid, 0)
    clock.advance(DAY)
    send(log, clock, YOUNG, 0)
    manager.shutdown()
    clock.advance(1)
    restarted = LogManager([tmp_path], clock, 1, producer_id_expiration_ms=DAY)
    restarted.startup(lambda _: LogConfig(), "cluster")
    log = restarted.logs[TP]
    assert list(log.producer_state.producers) == [YOUNG]
    assert accepts_a_gap(log, clock, OLD[3])
