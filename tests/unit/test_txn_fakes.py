"""In-memory stand-ins for the transaction coordinator's log, marker sender and
producer ids, shared by tests/unit/test_txn_*.py (no tests of its own)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence

from moldau.clock import FakeClock
from moldau.coordinator.group_metadata_manager import partition_for_group
from moldau.coordinator.transaction.config import TransactionConfig
from moldau.coordinator.transaction.coordinator import TransactionCoordinator
from moldau.coordinator.transaction.log import decode_key, decode_value
from moldau.coordinator.transaction.marker_channel import TxnMarkerEntry
from moldau.coordinator.transaction.state import TransactionMetadata
from moldau.protocol.errors import ErrorCode
from moldau.protocol.records import iter_records
from moldau.storage.partition_name import TopicPartition


class FakeTxnLog:
    def __init__(self) -> None:
        self.batches: dict[int, list[bytes]] = {}
        self.listeners: list[Callable[[int, bool, int], None]] = []
        self._acks: set[asyncio.Task[None]] = set()
        # Error codes the next appends fail with, in order.
        self.fail_next: list[ErrorCode] = []
        # While set, loads wait here (a partition that takes long to load).
        self.hold_reads: asyncio.Event | None = None
        # While set, appends are acknowledged only once it is (a slow ISR).
        self.hold_acks: asyncio.Event | None = None

    def append(
        self, partition: int, batch: bytes, timeout_ms: int, done: Callable[[ErrorCode], None]
    ) -> None:
        code = self.fail_next.pop(0) if self.fail_next else ErrorCode.none
        if code == ErrorCode.none:
            self.batches.setdefault(partition, []).append(batch)
        # The ISR acknowledges later, as acks=all does.
        held = self.hold_acks
        if held is None:
            asyncio.get_running_loop().call_soon(done, code)
        else:

            async def ack() -> None:
                await held.wait()
                done(code)

            self._acks.add(asyncio.get_running_loop().create_task(ack()))

    async def read_batches(self, partition: int) -> AsyncIterator[Sequence[bytes]]:
        if self.hold_reads is not None:
            await self.hold_reads.wait()
        yield list(self.batches.get(partition, []))

    def subscribe(self, listener: Callable[[int, bool, int], None]) -> None:
        self.listeners.append(listener)

    def elect(self, partition: int, is_leader: bool = True, epoch: int = 0) -> None:
        for listener in self.listeners:
            listener(partition, is_leader, epoch)

    def records(self, partition: int) -> list[tuple[str, TransactionMetadata | None]]:
        out = []
        for batch in self.batches.get(partition, []):
            for r in iter_records(batch):
                assert r.key is not None
                txn_id = decode_key(r.key)
                assert txn_id is not None
                out.append((txn_id, decode_value(txn_id, r.value)))
        return out

    def last(self, txn_id: str, num_partitions: int = 50) -> TransactionMetadata | None:
        found = [m for t, m in self.records(partition_for_group(txn_id, num_partitions))
                 if t == txn_id]  # fmt: skip
        assert found, f"nothing written for {txn_id}"
        return found[-1]


Behaviour = Exception | dict[TopicPartition, ErrorCode]


class FakeMarkerSender:
    def __init__(self) -> None:
        self.leaders: dict[TopicPartition, int | None] = {}
        self.deleted_topics: set[str] = set()
        self.sent: list[tuple[int, list[TxnMarkerEntry]]] = []
        # Per broker, what the next requests get: an exception, or errors for some
        # partitions (the rest succeed).
        self.script: dict[int, list[Behaviour]] = {}

    def leader_of(self, tp: TopicPartition) -> int | None:
        if tp.topic in self.deleted_topics:
            return None
        return self.leaders.get(tp, 1)

    def topic_exists(self, topic: str) -> bool:
        return topic not in self.deleted_topics

    async def write_txn_markers(
        self, broker_id: int, markers: list[TxnMarkerEntry]
    ) -> list[dict[TopicPartition, ErrorCode]]:
        self.sent.append((broker_id, list(markers)))
        await asyncio.sleep(0)
        script = self.script.get(broker_id)
        behaviour: Behaviour = script.pop(0) if script else {}
        if isinstance(behaviour, Exception):
            raise behaviour
        return [{tp: behaviour.get(tp, ErrorCode.none) for tp in m.partitions} for m in markers]

    def marked(self) -> list[tuple[int, TxnMarkerEntry]]:
        return [(b, m) for b, ms in self.sent for m in ms]


class FakeProducerIds:
    def __init__(self, first: int = 1000) -> None:
        self.next = first

    async def generate(self) -> int:
        pid = self.next
        self.next += 1
        return pid


def offsets_partition_for(group_id: str) -> int:
    return partition_for_group(group_id, 50)


def make_coordinator(
    txn_log: FakeTxnLog | None = None,
    sender: FakeMarkerSender | None = None,
    clock: FakeClock | None = None,
    **config: int,
) -> tuple[TransactionCoordinator, FakeTxnLog, FakeMarkerSender, FakeClock]:
    txn_log = txn_log or FakeTxnLog()
    sender = sender or FakeMarkerSender()
    clock = clock or FakeClock()
    coordinator = TransactionCoordinator(
        1, None, FakeProducerIds(), sender, offsets_partition_for, clock,
        TransactionConfig(marker_retry_backoff_ms=1, **config),  # type: ignore[arg-type]
        txn_log=txn_log,
    )  # fmt: skip
    return coordinator, txn_log, sender, clock


async def until(cond: Callable[[], bool], timeout_s: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.001)
