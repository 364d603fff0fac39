"""The Spark sink's batch path against a scripted broker (no sockets): sequences
per partition, the same batch sent again after a retriable error, to the leader
Metadata names next, and a task failed by any other error."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace as NS
from typing import Any, cast

import pyarrow as pa
import pytest

from moldau.protocol.apis import ApiKey
from moldau.protocol.errors import ErrorCode
from moldau.protocol.records import BatchHeader, iter_records
from moldau.spark.batch_writer import BatchWriter, ProduceFailed
from moldau.spark.fetch_client import Address, Connection

A, B = ("a", 1), ("b", 2)


class ScriptedCluster:
    """Two brokers; `leaders` says which leads each partition; `refusals` the
    errors the next Produce answers give, per partition, before it accepts."""

    def __init__(self, leaders: dict[int, Address]) -> None:
        self.leaders = leaders
        self.refusals: dict[int, list[int]] = {}
        self.accepted: dict[int, list[bytes]] = {}
        self.sent: list[tuple[Address, int, bytes]] = []
        #: The broker's idempotence check: the sequence it takes next, per partition.
        self.next_sequence: dict[int, int] = {}
        self.most_unanswered = 0

    def connect(self, address: Address, _client_id: str, _timeout: float) -> Connection:
        return cast(Connection, FakeConnection(self, address))


class FakeConnection:
    def __init__(self, cluster: ScriptedCluster, address: Address) -> None:
        self.cluster = cluster
        self.address = address
        self.versions = {ApiKey.PRODUCE: 9, ApiKey.METADATA: 12, ApiKey.INIT_PRODUCER_ID: 4}
        self.answers: list[Any] = []  # in the order the requests came

    def close(self) -> None:
        pass

    def call(self, api_key: int, version: int, fields: Any) -> Any:
        self.send(api_key, version, fields)
        return self.receive(api_key, version)

    def send(self, api_key: int, _version: int, fields: Any) -> None:
        c = self.cluster
        if api_key == ApiKey.METADATA:
            brokers = [NS(node_id=i, host=a[0], port=a[1]) for i, a in enumerate((A, B))]
            ids = {A: 0, B: 1}
            partitions = [NS(partition_index=p, leader_id=ids[a]) for p, a in c.leaders.items()]
            self.answers.append(
                NS(brokers=brokers, topics=[NS(name="t", error_code=0, partitions=partitions)])
            )
        elif api_key == ApiKey.INIT_PRODUCER_ID:
            self.answers.append(NS(error_code=0, producer_id=42, producer_epoch=3))
        else:
            results = []
            for part in fields["topic_data"][0]["partition_data"]:
                p, records = part["index"], part["records"]
                c.sent.append((self.address, p, records))
                queue = c.refusals.get(p, [])
                header = BatchHeader.parse(records)
                expected = c.next_sequence.get(p, 0)
                if c.leaders[p] != self.address:
                    error = int(ErrorCode.not_leader_or_follower)
                elif queue:
                    error = queue.pop(0)
                elif header.base_sequence < expected:
                    error = int(ErrorCode.duplicate_sequence_number)
                elif header.base_sequence > expected:
                    error = int(ErrorCode.out_of_order_sequence_number)
                else:
                    error = 0
                    c.accepted.setdefault(p, []).append(records)
                    c.next_sequence[p] = expected + header.records_count
                results.append(NS(index=p, error_code=error))
            self.answers.append(NS(responses=[NS(name="t", partition_responses=results)]))
        c.most_unanswered = max(c.most_unanswered, len(self.answers))

    def receive(self, _api_key: int, _version: int) -> Any:
        return self.answers.pop(0)


def writer(
    cluster: ScriptedCluster, clock: Callable[[], float] | None = None, batch_size: int = 10**6
) -> BatchWriter:
    return BatchWriter(
        {"bootstrap.servers": "a:1", "delivery.timeout.ms": "1000", "batch.size": str(batch_size)},
        "t",
        clock=clock or (lambda: 0.0),
        sleep=lambda _s: None,
        now_ms=lambda: 5000,
        connect=cluster.connect,
    )


def rows(*pairs: tuple[int, bytes]) -> pa.RecordBatch:
    return pa.record_batch(
        [pa.array([p for p, _ in pairs], pa.int32()), pa.array([v for _, v in pairs], pa.binary())],
        names=["partition", "value"],
    )


def test_batches_carry_the_producer_id_and_a_sequence_per_partition() -> None:
    cluster = ScriptedCluster({0: A, 1: B})
    w = writer(cluster)
    w.write(rows((0, b"a"), (1, b"b"), (0, b"c")))
    w.write(rows((0, b"d")))
    w.close()
    headers = {p: [BatchHeader.parse(b) for b in bs] for p, bs in cluster.accepted.items()}
    assert [(h.producer_id, h.producer_epoch, h.base_sequence) for h in headers[0]] == [
        (42, 3, 0),
        (42, 3, 2),
    ]
    assert [h.base_sequence for h in headers[1]] == [0]
    values = [[r.value for b in cluster.accepted[p] for r in iter_records(b)] for p in (0, 1)]
    assert values == [[b"a", b"c", b"d"], [b"b"]]
    assert {r.timestamp for r in iter_records(cluster.accepted[0][0])} == {5000}
    assert w.count == 4


def test_a_retriable_error_sends_the_same_batch_to_the_new_leader() -> None:
    cluster = ScriptedCluster({0: A})
    w = writer(cluster)
    cluster.refusals[0] = [int(ErrorCode.not_enough_replicas)]
    w.write(rows((0, b"a")))
    cluster.leaders[0] = B  # the leader moves while the first batch is refused
    w.write(rows((0, b"b")))
    w.close()
    first = [
        records for _, p, records in cluster.sent if BatchHeader.parse(records).base_sequence == 0
    ]
    assert len(first) == 2 and len(set(first)) == 1  # byte for byte the same batch
    # Refused by A; then, after Metadata, the retry and the next batch go to B.
    assert [a for a, _, _ in cluster.sent] == [A, B, B]
    assert [BatchHeader.parse(b).base_sequence for b in cluster.accepted[0]] == [0, 1]


def test_a_duplicate_is_success_and_other_errors_fail_the_task() -> None:
    cluster = ScriptedCluster({0: A})
    cluster.refusals[0] = [int(ErrorCode.duplicate_sequence_number)]
    w = writer(cluster)
    w.write(rows((0, b"a")))
    w.close()
    cluster.refusals[0] = [int(ErrorCode.message_too_large)]
    w = writer(cluster)
    w.write(rows((0, b"a")))
    with pytest.raises(ProduceFailed, match="MESSAGE_TOO_LARGE"):
        w.close()


def test_retries_stop_at_the_delivery_timeout() -> None:
    cluster = ScriptedCluster({0: A})
    now = [0.0]

    def clock() -> float:
        now[0] += 0.3
        return now[0]

    w = writer(cluster, clock)
    cluster.refusals[0] = [int(ErrorCode.not_enough_replicas)] * 100
    w.write(rows((0, b"a")))
    with pytest.raises(ProduceFailed, match=r"NOT_ENOUGH_REPLICAS.*delivery\.timeout\.ms"):
        w.close()


def test_a_partition_the_topic_lacks_fails_the_task() -> None:
    w = writer(ScriptedCluster({0: A}))
    with pytest.raises(ProduceFailed, match="partition 3 of t does not exist"):
        w.write(rows((3, b"a")))


def test_rows_over_batch_size_go_in_several_batches_in_order() -> None:
    cluster = ScriptedCluster({0: A})
    w = writer(cluster, batch_size=1000)
    w.write(rows(*[(0, b"%04d" % i + b"x" * 96) for i in range(50)]))
    w.close()
    batches = cluster.accepted[0]
    assert len(batches) > 5 and all(len(b) <= 1000 + 61 for b in batches)
    assert cluster.most_unanswered == 5  # Kafka's limit of requests in flight
    assert [BatchHeader.parse(b).base_sequence for b in batches][:2] == [0, 8]
    values = [r.value for b in batches for r in iter_records(b)]
    assert values == [b"%04d" % i + b"x" * 96 for i in range(50)]
    # A record larger than a batch goes alone.
    w = writer(cluster := ScriptedCluster({0: A}), batch_size=10)
    w.write(rows((0, b"x" * 100), (0, b"y" * 100)))
    w.close()
    assert [[r.value for r in iter_records(b)] for b in cluster.accepted[0]] == [
        [b"x" * 100],
        [b"y" * 100],
    ]


def test_batches_in_flight_after_a_refused_one_are_sent_again_after_it() -> None:
    cluster = ScriptedCluster({0: A})
    w = writer(cluster, batch_size=1000)
    cluster.refusals[0] = [int(ErrorCode.not_enough_replicas)]
    w.write(rows(*[(0, b"%04d" % i + b"x" * 96) for i in range(50)]))
    w.close()
    # The first was refused, the others out of order; all went again, in order.
    values = [r.value for b in cluster.accepted[0] for r in iter_records(b)]
    assert values == [b"%04d" % i + b"x" * 96 for i in range(50)]
