"""The fetching path's loop (moldau.spark.fetch_reader) over a scripted client:
what it does with each answer a broker can give, with a fake clock (no sockets;
tests/spark/test_fetch_path.py reads a broker process)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from moldau.protocol.errors import ErrorCode
from moldau.protocol.records import build_batch
from moldau.spark.fetch_client import BrokerError, FetchAnswer
from moldau.spark.fetch_reader import FETCH_BYTES, read_range_fetching
from moldau.spark.offsets import DataLossError, OffsetRange


def records(first: int, n: int) -> bytes:
    return build_batch([(None, b"%d" % i) for i in range(first, first + n)], base_offset=first)


def answer(data: bytes = b"", error: int = 0, high: int = 10) -> FetchAnswer:
    return FetchAnswer(error, high, high, 0, None, data)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Scripted:
    """A PartitionClient whose fetches answer from a script; it records what was asked."""

    def __init__(
        self,
        script: list[FetchAnswer | Exception],
        offsets: tuple[int, int] = (0, 0),
        clock: Clock | None = None,
    ):
        self.script = script
        self.clock = clock
        self.fetched: list[tuple[int, int]] = []
        self.forgotten = 0
        self.closed = False
        self._offsets = offsets

    def __call__(self, *args: Any, **kwargs: Any) -> Scripted:
        return self

    def fetch(self, offset: int, max_bytes: int) -> FetchAnswer:
        self.fetched.append((offset, max_bytes))
        step = self.script.pop(0) if self.script else answer()
        if self.clock is not None and isinstance(step, FetchAnswer) and not step.records:
            self.clock.now += 0.5  # the broker's max wait
        if isinstance(step, Exception):
            raise step
        return step

    def forget_leader(self) -> None:
        self.forgotten += 1

    def offsets(self) -> tuple[int, int]:
        return self._offsets

    def partition_exists(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True


def read(
    client: Scripted, start: int, end: int, fail: bool = True, clock: Clock | None = None
) -> list[int]:
    clock = clock or Clock()
    batches: Iterator[Any] = read_range_fetching(
        {"bootstrap.servers": "h:1"},
        OffsetRange("t", 0, start, end),
        include_headers=False,
        fail_on_data_loss=fail,
        poll_timeout_ms=5_000,
        clock=clock,
        sleep=clock.sleep,
        new_client=client,
    )
    return [o for b in batches for o in b.column("offset").to_pylist()]


@pytest.mark.parametrize(
    "error",
    [
        ErrorCode.not_leader_or_follower,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.leader_not_available,
    ],
)
def test_a_leader_that_moved_is_looked_up_again(error: int) -> None:
    client = Scripted([answer(records(0, 4)), answer(error=error), answer(records(4, 6))])
    assert read(client, 0, 10) == list(range(10))
    assert client.forgotten == 1
    assert [o for o, _ in client.fetched] == [0, 4, 4]
    assert client.closed


def test_a_broker_gone_is_retried() -> None:
    client = Scripted([BrokerError("gone"), answer(records(0, 3))])
    assert read(client, 0, 3) == [0, 1, 2]


def test_a_batch_larger_than_a_fetch_doubles_the_fetch() -> None:
    whole = records(0, 3)
    client = Scripted([answer(whole[:70]), answer(whole)])
    assert read(client, 0, 3) == [0, 1, 2]
    assert [b for _, b in client.fetched] == [FETCH_BYTES, 2 * FETCH_BYTES]


def test_a_task_holds_one_fetch_of_its_byte_budget_at_a_time() -> None:
    """Whatever the range's size, each fetch asks for max.partition.fetch.bytes and
    its Arrow batch is handed to Spark before the next fetch is made."""
    client = Scripted([answer(records(10 * i, 10), high=1000) for i in range(100)])
    batches = read_range_fetching(
        {"bootstrap.servers": "h:1", "max.partition.fetch.bytes": "65536"},
        OffsetRange("t", 0, 0, 1000),
        include_headers=False,
        fail_on_data_loss=True,
        poll_timeout_ms=5_000,
        new_client=client,
    )
    for i, batch in enumerate(batches):
        assert batch.num_rows == 10
        assert len(client.fetched) == i + 1  # nothing fetched ahead of Spark
    assert len(client.fetched) == 100
    assert {b for _, b in client.fetched} == {65536}


def test_a_range_ending_in_records_compaction_removed_ends_at_the_log_end() -> None:
    # Offsets 7 to 9 were compacted away: nothing past 7, and the log ends at 10.
    client = Scripted([answer(records(0, 7)), answer(high=10)])
    assert read(client, 0, 10) == list(range(7))
    assert [o for o, _ in client.fetched] == [0, 7]


def test_a_gap_in_the_middle_is_stepped_over_to_the_log_end() -> None:
    client = Scripted([answer(records(0, 3), high=6), answer(high=6), answer(records(6, 4))])
    assert read(client, 0, 10) == [0, 1, 2, 6, 7, 8, 9]
    assert [o for o, _ in client.fetched] == [0, 3, 6]


def test_an_empty_answer_of_a_quota_skips_nothing() -> None:
    throttled = FetchAnswer(0, 10, 10, 0, None, b"", throttle_ms=200)
    client = Scripted([throttled, answer(records(0, 10))])
    assert read(client, 0, 10) == list(range(10))


def test_records_not_there_yet_are_waited_for_until_poll_timeout() -> None:
    clock = Clock()
    client = Scripted([answer(records(0, 2), high=2)] + [answer(high=2)] * 20, clock=clock)
    with pytest.raises(TimeoutError, match=r"offset 2 of t-0 within kafkaConsumer.pollTimeoutMs"):
        read(client, 0, 5, clock=clock)


def test_offsets_out_of_range_are_data_loss_or_skipped() -> None:
    lost = [answer(error=ErrorCode.offset_out_of_range), answer(records(6, 4))]
    with pytest.raises(DataLossError, match="offsets 2 to 5 are gone"):
        read(Scripted(list(lost), offsets=(6, 10)), 2, 10)
    assert read(Scripted(list(lost), offsets=(6, 10)), 2, 10, fail=False) == [6, 7, 8, 9]


def test_an_error_it_cannot_recover_from_fails_the_task() -> None:
    client = Scripted([answer(error=ErrorCode.topic_authorization_failed)])
    with pytest.raises(RuntimeError, match="TOPIC_AUTHORIZATION_FAILED"):
        read(client, 0, 1)
