"""`moldau transactions` on three broker processes on ZooKeeper: each request goes
where Kafka's admin client sends it (ListTransactions to every broker, DescribeTransactions
to the coordinator, DescribeProducers to the leader or to the replica asked for,
WriteTxnMarkers to the leader), and a follower answers DescribeProducers as Kafka's do."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.cli.main import main
from moldau.testing.cluster import Cluster
from moldau.testing.process import wait_for

MakeCluster = Callable[..., Cluster]


def run(capsys: pytest.CaptureFixture[str], bootstrap: str, *args: str) -> list[dict[str, str]]:
    """The rows of the table a command printed, as dicts by header."""
    capsys.readouterr()
    code = main(["transactions", "--bootstrap-server", bootstrap, *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    if not lines:  # abort prints nothing, as Kafka's tool
        return []
    header = [h.strip() for h in lines[0].split("\t")[:-1]]
    return [
        dict(zip(header, (c.strip() for c in line.split("\t")[:-1]), strict=True))
        for line in lines[1:]
    ]


def test_each_request_reaches_the_broker_that_answers_it(
    make_cluster: MakeCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = make_cluster(3)
    b = cluster.bootstrap
    topic, tid = f"txn-{uuid.uuid4().hex[:8]}", f"tx-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": b})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    producer = Producer({"bootstrap.servers": b, "transactional.id": tid})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    assert producer.flush(30) == 0

    (listed,) = [r for r in run(capsys, b, "list") if r["TransactionalId"] == tid]
    (described,) = run(capsys, b, "describe", "--transactional-id", tid)
    assert described["CoordinatorId"] == listed["Coordinator"]
    assert described["TopicPartitions"] == f"{topic}-0"
    pid = listed["ProducerId"]

    # Every replica, followers included, knows where the open transaction starts.
    for broker_id in ("1", "2", "3"):
        rows = run(capsys, b, "describe-producers", "--topic", topic, "--partition", "0",
                   "--broker-id", broker_id)  # fmt: skip
        assert [(r["ProducerId"], r["CurrentTransactionStartOffset"]) for r in rows] == [(pid, "0")]
        # Its coordinator still counts the partition in: not hanging.
        assert run(capsys, b, "find-hanging", "--broker-id", broker_id,
                   "--max-transaction-timeout", "0") == []  # fmt: skip

    assert (
        run(capsys, b, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0") == []
    )

    def closed_everywhere() -> bool:
        return all(
            r["CurrentTransactionStartOffset"] == "None"
            for broker_id in ("1", "2", "3")
            for r in run(capsys, b, "describe-producers", "--topic", topic, "--partition", "0",
                         "--broker-id", broker_id)
        )  # fmt: skip

    assert wait_for(closed_everywhere, timeout=15)
    producer.abort_transaction(30)
