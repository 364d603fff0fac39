"""Kafka's own kafka-transactions.sh (TransactionsCommand, from the Maven jars) against
one Moldau broker: list, describe and describe-producers name a transaction that a
confluent-kafka producer left open."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.testing.process import BrokerProcess
from tests.kafka.tools import table, tool

pytestmark = pytest.mark.java

TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"


@pytest.fixture
def open_transaction(moldau: BrokerProcess) -> Iterator[tuple[str, str]]:
    """(transactional id, topic) of a transaction left open on partition 0."""
    topic, tid = f"txn-{uuid.uuid4().hex[:8]}", f"tx-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": moldau.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": moldau.bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"open")
    assert producer.flush(30) == 0
    yield tid, topic
    producer.abort_transaction(30)


def test_kafka_transactions_lists_and_describes_an_open_transaction_and_its_producer(
    moldau: BrokerProcess, open_transaction: tuple[str, str]
) -> None:
    tid, topic = open_transaction
    b = moldau.bootstrap
    listed = {
        r["TransactionalId"]: r
        for r in table(tool(TRANSACTIONS, "--bootstrap-server", b, "list"), "TransactionalId")
    }
    assert listed[tid]["TransactionState"] == "Ongoing"
    pid = listed[tid]["ProducerId"]

    (described,) = table(
        tool(TRANSACTIONS, "--bootstrap-server", b, "describe", "--transactional-id", tid),
        "CoordinatorId",
    )
    assert described["TransactionalId"] == tid
    assert described["ProducerId"] == pid
    assert described["TransactionState"] == "Ongoing"
    assert described["TopicPartitions"] == f"{topic}-0"

    producers = table(
        tool(TRANSACTIONS, "--bootstrap-server", b, "describe-producers", "--topic", topic,
             "--partition", "0"),
        "ProducerId",
    )  # fmt: skip
    assert [(p["ProducerId"], p["CurrentTransactionStartOffset"]) for p in producers] == [
        (pid, "0")
    ]
