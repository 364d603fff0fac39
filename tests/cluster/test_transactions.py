"""Transactions on three real broker processes on ZooKeeper. A leader verifies a
transactional write with a coordinator on another broker (KIP-890, over the
inter-broker listener). Through failures: a stream of transactions (confluent-kafka,
2 partitions, RF 3, min.insync.replicas 2) goes on through kill -9 of the transaction
coordinator's broker and of a partition leader. Every transaction whose commit
returned is read once; no record of an aborted transaction is read; one whose outcome
the client never learned is read whole or not at all; every partition,
__transaction_state's included, has a leader again."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.coordinator.group_metadata_manager import partition_for_group
from moldau.protocol.errors import ErrorCode
from moldau.testing.cluster import Cluster
from moldau.testing.process import wait_for
from tests.integration.kafka_wire import WireClient
from tests.integration.test_txn_verification import TxnProducer, find_coordinator

MakeCluster = Callable[..., Cluster]
PARTITIONS = 2
PER_TXN = 10
TXN_STATE_PARTITIONS = 50


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=20)
    return {p: m.leader for p, m in md.topics[topic].partitions.items()}


class TxnLoad:
    """Transactions of PER_TXN numbered records until stopped, and what became of
    each: committed (the commit returned), aborted, or unknown (the producer failed
    for good inside the commit)."""

    def __init__(self, bootstrap: str, topic: str, txn_id: str) -> None:
        self.bootstrap, self.topic, self.txn_id = bootstrap, topic, txn_id
        self.outcome: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self.failures: list[str] = []

    def _producer(self) -> Producer:
        p = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": self.txn_id,
                "linger.ms": 5,
                "transaction.timeout.ms": 20_000,
                "message.timeout.ms": 20_000,
            }
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                p.init_transactions(10)
                return p
            except KafkaException as e:
                if time.monotonic() > deadline or not e.args[0].retriable():
                    raise

    def __enter__(self) -> TxnLoad:
        self._thread.start()
        return self

    def _run(self) -> None:
        p = self._producer()
        txn = 0
        deadline = time.monotonic() + 300
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                p.begin_transaction()
                for j in range(PER_TXN):
                    value = b"%06d-%02d" % (txn, j)
                    p.produce(self.topic, value, partition=j % PARTITIONS)
                self.outcome[txn] = "unknown"
                self.outcome[txn] = self._commit(p)
            except KafkaException as e:
                self.failures.append(str(e))
                if self.outcome.get(txn) != "unknown":
                    self.outcome[txn] = self._abort(p)
                if e.args[0].fatal() or self.outcome.get(txn) == "unknown":
                    p = self._producer()  # fences the old one; aborts what it left open
            txn += 1

    def _commit(self, p: Producer) -> str:
        while True:
            try:
                p.commit_transaction(10)
                return "committed"
            except KafkaException as e:
                err = e.args[0]
                if err.retriable():
                    continue  # the outcome is asked again
                if err.txn_requires_abort():
                    return self._abort(p)
                raise

    def _abort(self, p: Producer) -> str:
        try:
            p.abort_transaction(10)
            return "aborted"
        except KafkaException:
            return "unknown"

    def committed(self) -> int:
        return sum(1 for o in self.outcome.values() if o == "committed")

    def grows(self, by: int = 5, timeout: float = 90) -> bool:
        target = self.committed() + by
        return wait_for(lambda: self.committed() >= target, timeout)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)


def read_committed(
    bootstrap: str, topic: str, partitions: Sequence[int] = range(PARTITIONS)
) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "verify",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in partitions])
    got: list[bytes] = []
    eof: set[int] = set()
    deadline = time.monotonic() + 60
    while len(eof) < len(partitions) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == -191:
                eof.add(m.partition())
            continue
        got.append(m.value())
    c.close()
    assert len(eof) == len(partitions)
    return got


def test_a_leader_verifies_a_write_with_the_coordinator_on_another_broker(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    cluster = make_cluster(3)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    # Partition p on broker p + 1 alone.
    new = NewTopic(topic_name, num_partitions=3, replica_assignment=[[1], [2], [3]])
    admin.create_topics([new])[topic_name].result(timeout=30)
    txn_id = f"tx-{topic_name}"
    with WireClient(cluster.brokers[1].bootstrap) as any_broker:
        coordinator = find_coordinator(any_broker, txn_id)
    leader = next(b for b in cluster.brokers if b != coordinator)
    partition = leader - 1
    assert wait_for(lambda: leaders(cluster.bootstrap, topic_name)[partition] == leader, 20)
    with (
        WireClient(cluster.brokers[coordinator].bootstrap) as to_coordinator,
        WireClient(cluster.brokers[leader].bootstrap) as to_leader,
    ):
        p = TxnProducer(to_coordinator, txn_id)
        refused = p.produce(topic_name, 9, partition, to_leader)
        assert refused.error_code == ErrorCode.invalid_txn_state
        p.add_partition(topic_name, partition)
        written = p.produce(topic_name, 9, partition, to_leader)
        assert (written.error_code, written.base_offset) == (ErrorCode.none, 0)
        p.end(commit=True)
    assert read_committed(cluster.bootstrap, topic_name, [partition]) == [b"v0"]


def test_transactions_through_the_death_of_their_coordinator_and_of_a_leader(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    cluster = make_cluster(3, **{"replica.lag.time.max.ms": "3000"})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(topic_name, PARTITIONS, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([new])[topic_name].result(timeout=30)
    txn_id = f"chaos-{topic_name}"
    with TxnLoad(cluster.bootstrap, topic_name, txn_id) as load:
        assert load.grows()
        # kill -9 the coordinator: the leader of the id's __transaction_state partition.
        state_partition = partition_for_group(txn_id, TXN_STATE_PARTITIONS)
        coordinator = leaders(cluster.bootstrap, "__transaction_state")[state_partition]
        cluster.kill(coordinator)
        assert load.grows()
        cluster.restart(coordinator)
        assert load.grows()
        # kill -9 the leader of partition 0 of the data.
        leader = leaders(cluster.bootstrap, topic_name)[0]
        cluster.kill(leader)
        assert load.grows()
        cluster.restart(leader)
        assert load.grows()
    for topic in (topic_name, "__transaction_state"):
        assert wait_for(lambda t=topic: -1 not in leaders(cluster.bootstrap, t).values(), 30)

    got = Counter(read_committed(cluster.bootstrap, topic_name))
    by_txn: dict[int, int] = Counter(int(v.split(b"-")[0]) for v in got)
    assert all(n == 1 for n in got.values()), "a record read twice"
    outcomes = Counter(load.outcome.values())
    print(f"transactions: {dict(outcomes)}; failures seen by the client: {len(load.failures)}")
    for txn, outcome in load.outcome.items():
        if outcome == "committed":
            assert by_txn.get(txn) == PER_TXN, f"committed transaction {txn} not read whole"
        elif outcome == "aborted":
            assert txn not in by_txn, f"aborted transaction {txn} read"
        else:
            assert by_txn.get(txn, 0) in (0, PER_TXN), f"transaction {txn} read in part"
    assert set(by_txn) <= set(load.outcome)
