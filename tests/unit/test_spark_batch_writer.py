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
from moldau.protocol.records import BatchHeader, Compression, iter_records
from moldau.spark.batch_writer import BatchWriter, ProduceFailed
from moldau.spark.fetch_client import Address, Connection
from moldau.spark.record_build import murmur2_py

A, B = ("a", 1), ("b", 2)


TP = tuple[str, int]


class ScriptedCluster:
    """Two brokers; `leaders` says which leads each partition (of every topic);
    `refusals` the errors the next Produce answers give, per partition, before it
    accepts."""

    def __init__(self, leaders: dict[int, Address]) -> None:
        self.leaders = leaders
        self.refusals: dict[TP, list[int]] = {}
        self.accepted: dict[TP, list[bytes]] = {}
        self.sent: list[tuple[Address, int, bytes]] = []
        #: The broker's idempotence check: the sequence it takes next, per partition.
        self.next_sequence: dict[TP, int] = {}
        #: The topics of each Produce request.
        self.requests: list[list[str]] = []
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
            topics = [
                NS(name=t["name"], error_code=0, partitions=partitions) for t in fields["topics"]
            ]
            self.answers.append(NS(brokers=brokers, topics=topics))
        elif api_key == ApiKey.INIT_PRODUCER_ID:
            self.answers.append(NS(error_code=0, producer_id=42, producer_epoch=3))
        else:
            c.requests.append([t["name"] for t in fields["topic_data"]])
            self.answers.append(
                NS(responses=[self._produce(t["name"], t) for t in fields["topic_data"]])
            )
        c.most_unanswered = max(c.most_unanswered, len(self.answers))

    def _produce(self, topic: str, data: Any) -> Any:
        c = self.cluster
        results = []
        for part in data["partition_data"]:
            p, records = part["index"], part["records"]
            tp = (topic, p)
            c.sent.append((self.address, p, records))
            queue = c.refusals.get(tp, [])
            header = BatchHeader.parse(records)
            expected = c.next_sequence.get(tp, 0)
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
                c.accepted.setdefault(tp, []).append(records)
                c.next_sequence[tp] = expected + header.records_count
            results.append(NS(index=p, error_code=error))
        return NS(name=topic, partition_responses=results)

    def receive(self, _api_key: int, _version: int) -> Any:
        return self.answers.pop(0)


def writer(
    cluster: ScriptedCluster,
    clock: Callable[[], float] | None = None,
    batch_size: int = 10**6,
    topic: str | None = "t",
    **config: str,
) -> BatchWriter:
    return BatchWriter(
        {
            "bootstrap.servers": "a:1",
            "delivery.timeout.ms": "1000",
            "batch.size": str(batch_size),
            **config,
        },
        topic,
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
    headers = {p: [BatchHeader.parse(b) for b in bs] for (_, p), bs in cluster.accepted.items()}
    assert [(h.producer_id, h.producer_epoch, h.base_sequence) for h in headers[0]] == [
        (42, 3, 0),
        (42, 3, 2),
    ]
    assert [h.base_sequence for h in headers[1]] == [0]
    values = [[r.value for b in cluster.accepted["t", p] for r in iter_records(b)] for p in (0, 1)]
    assert values == [[b"a", b"c", b"d"], [b"b"]]
    assert {r.timestamp for r in iter_records(cluster.accepted["t", 0][0])} == {5000}
    assert w.count == 4


def test_a_retriable_error_sends_the_same_batch_to_the_new_leader() -> None:
    cluster = ScriptedCluster({0: A})
    w = writer(cluster)
    cluster.refusals["t", 0] = [int(ErrorCode.not_enough_replicas)]
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
    assert [BatchHeader.parse(b).base_sequence for b in cluster.accepted["t", 0]] == [0, 1]


def test_a_duplicate_is_success_and_other_errors_fail_the_task() -> None:
    cluster = ScriptedCluster({0: A})
    cluster.refusals["t", 0] = [int(ErrorCode.duplicate_sequence_number)]
    w = writer(cluster)
    w.write(rows((0, b"a")))
    w.close()
    cluster.refusals["t", 0] = [int(ErrorCode.message_too_large)]
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
    cluster.refusals["t", 0] = [int(ErrorCode.not_enough_replicas)] * 100
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
    batches = cluster.accepted["t", 0]
    assert len(batches) > 5 and all(len(b) <= 1000 + 61 for b in batches)
    assert cluster.most_unanswered == 5  # Kafka's limit of requests in flight
    assert [BatchHeader.parse(b).base_sequence for b in batches][:2] == [0, 8]
    values = [r.value for b in batches for r in iter_records(b)]
    assert values == [b"%04d" % i + b"x" * 96 for i in range(50)]
    # A record larger than a batch goes alone.
    w = writer(cluster := ScriptedCluster({0: A}), batch_size=10)
    w.write(rows((0, b"x" * 100), (0, b"y" * 100)))
    w.close()
    assert [[r.value for r in iter_records(b)] for b in cluster.accepted["t", 0]] == [
        [b"x" * 100],
        [b"y" * 100],
    ]


def test_batches_in_flight_after_a_refused_one_are_sent_again_after_it() -> None:
    cluster = ScriptedCluster({0: A})
    w = writer(cluster, batch_size=1000)
    cluster.refusals["t", 0] = [int(ErrorCode.not_enough_replicas)]
    w.write(rows(*[(0, b"%04d" % i + b"x" * 96) for i in range(50)]))
    w.close()
    # The first was refused, the others out of order; all went again, in order.
    values = [r.value for b in cluster.accepted["t", 0] for r in iter_records(b)]
    assert values == [b"%04d" % i + b"x" * 96 for i in range(50)]


def test_a_topic_column_sends_each_row_to_its_topic_with_sequences_per_topic() -> None:
    cluster = ScriptedCluster({0: A, 1: A})
    w = writer(cluster, topic=None)
    batch = pa.record_batch(
        [
            pa.array(["x", "y", "x", "y", "x"]),
            pa.array([0, 0, 1, 0, 0], pa.int32()),
            pa.array([b"a", b"b", b"c", b"d", b"e"]),
        ],
        names=["topic", "partition", "value"],
    )
    w.write(batch)
    w.write(batch.slice(0, 2))
    w.close()
    got = {
        tp: [(BatchHeader.parse(b).base_sequence, [r.value for r in iter_records(b)]) for b in bs]
        for tp, bs in cluster.accepted.items()
    }
    assert got == {
        ("x", 0): [(0, [b"a", b"e"]), (2, [b"a"])],
        ("x", 1): [(0, [b"c"])],
        ("y", 0): [(0, [b"b", b"d"]), (2, [b"b"])],
    }
    # Both topics' batches for the leader in one request.
    assert cluster.requests[0] == ["x", "y"]


def test_the_topic_given_wins_and_a_null_topic_fails_the_task() -> None:
    cluster = ScriptedCluster({0: A})
    batch = pa.record_batch(
        [pa.array(["x", None]), pa.array([b"a", b"b"])], names=["topic", "value"]
    )
    w = writer(cluster)
    w.write(batch)
    w.close()
    assert list(cluster.accepted) == [("t", 0)]
    with pytest.raises(ValueError, match="null topic present in the data"):
        writer(cluster, topic=None).write(batch)


def test_keyed_rows_of_each_topic_go_to_murmur2_of_its_partitions() -> None:
    cluster = ScriptedCluster({0: A, 1: A, 2: B})
    w = writer(cluster, topic=None)
    keys = [b"k%d" % i for i in range(40)]
    w.write(
        pa.record_batch(
            [pa.array(["x"] * 40), pa.array(keys), pa.array(keys)],
            names=["topic", "key", "value"],
        )
    )
    w.close()
    placed = {
        r.key: p for (_, p), bs in cluster.accepted.items() for b in bs for r in iter_records(b)
    }
    assert placed == {k: (murmur2_py(k) & 0x7FFFFFFF) % 3 for k in keys}


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_say_their_codec_and_hold_the_rows(codec: str) -> None:
    cluster = ScriptedCluster({0: A})
    w = writer(cluster, **{"compression.type": codec})
    values = [b"%04d" % i + b"x" * 96 for i in range(100)]
    headers = [[("h", b"%d" % i)] for i in range(100)]
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    w.write(
        pa.record_batch(
            [pa.array(values), pa.array(headers, header_type)], names=["value", "headers"]
        )
    )
    w.close()
    [batch] = cluster.accepted["t", 0]
    assert BatchHeader.parse(batch).compression == Compression[codec.upper()]
    assert len(batch) < 100 * 100 / 2  # compressed, not just labelled
    assert [(r.value, list(r.headers)) for r in iter_records(batch)] == [
        (v, [("h", b"%d" % i)]) for i, v in enumerate(values)
    ]
