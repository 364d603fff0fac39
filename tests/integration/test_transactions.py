"""Transactions with confluent-kafka (librdkafka) against a real broker process:
commit and abort as read_committed and read_uncommitted consumers see them, the last
stable offset holding readers at an open transaction, zombie fencing, a
consume-transform-produce loop abandoned half way and taken over, and a producer
that goes silent inside a transaction aborted after its timeout."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from moldau.testing.process import BrokerProcess, wait_for
from tests.integration.clients import create_topic

pytestmark = pytest.mark.integration


def producer(bootstrap: str, txn_id: str, **extra: object) -> Producer:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "linger.ms": 5,
            **extra,
        }
    )
    p.init_transactions(20)
    return p


def consumer(bootstrap: str, isolation: str, group: str | None = None, **extra: object) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group or f"g-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **extra,
        }
    )


def read_all(c: Consumer, topic: str, partitions: int = 1, timeout_s: float = 20) -> list[bytes]:
    """Every record up to what the consumer may read now (EOF on each partition)."""
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    at_eof: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while len(at_eof) < partitions and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == -191:  # _PARTITION_EOF
                at_eof.add(m.partition())
                continue
            raise KafkaException(m.error())
        at_eof.discard(m.partition())
        values.append(m.value())
    assert len(at_eof) == partitions, f"no end of partition within {timeout_s}s"
    return values


@pytest.fixture
def topic(bootstrap: str, topic_name: str) -> str:
    create_topic(bootstrap, topic_name)
    return topic_name


def test_committed_records_are_read_and_aborted_ones_only_uncommitted(
    bootstrap: str, topic: str
) -> None:
    p = producer(bootstrap, f"t-{topic}")
    for batch, (n, commit) in enumerate([(10, True), (5, False), (3, True)]):
        p.begin_transaction()
        for i in range(n):
            p.produce(topic, b"%d-%d" % (batch, i))
        if commit:
            p.commit_transaction(20)
        else:
            p.flush(10)  # in the log before the abort (which drops what is not sent)
            p.abort_transaction(20)
    committed = [b"0-%d" % i for i in range(10)] + [b"2-%d" % i for i in range(3)]
    aborted = [b"1-%d" % i for i in range(5)]
    c = consumer(bootstrap, "read_committed")
    assert read_all(c, topic) == committed
    c.close()
    c = consumer(bootstrap, "read_uncommitted")
    assert read_all(c, topic) == committed[:10] + aborted + committed[10:]
    c.close()


def test_an_open_transaction_holds_read_committed_readers_at_its_first_offset(
    bootstrap: str, topic: str
) -> None:
    before = producer(bootstrap, f"before-{topic}")
    before.begin_transaction()
    before.produce(topic, b"committed-first")
    before.commit_transaction(20)
    p = producer(bootstrap, f"open-{topic}")
    p.begin_transaction()
    p.produce(topic, b"open")
    p.flush(10)
    other = Producer({"bootstrap.servers": bootstrap})
    other.produce(topic, b"plain-after")  # not transactional, after the open one
    other.flush(10)
    committed = consumer(bootstrap, "read_committed")
    assert read_all(committed, topic) == [b"committed-first"]
    # ListOffsets with read_committed: the last stable offset, at the open transaction.
    low, high = committed.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    assert (low, high) == (0, 2)  # the first record and its commit marker lie below it
    uncommitted = consumer(bootstrap, "read_uncommitted")
    assert read_all(uncommitted, topic) == [b"committed-first", b"open", b"plain-after"]
    p.commit_transaction(20)
    assert read_all(committed, topic) == [b"committed-first", b"open", b"plain-after"]
    committed.close()
    uncommitted.close()


def test_a_new_producer_with_the_same_id_fences_the_old_and_aborts_its_transaction(
    bootstrap: str, topic: str
) -> None:
    txn_id = f"zombie-{topic}"
    zombie = producer(bootstrap, txn_id)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie")
    zombie.flush(10)
    successor = producer(bootstrap, txn_id)  # fences the zombie, aborts its transaction
    successor.begin_transaction()
    successor.produce(topic, b"successor")
    successor.commit_transaction(20)
    with pytest.raises(KafkaException) as raised:
        zombie.produce(topic, b"zombie-2")
        zombie.commit_transaction(10)
    assert raised.value.args[0].fatal() or "fenced" in str(raised.value).lower()
    c = consumer(bootstrap, "read_committed")
    assert read_all(c, topic) == [b"successor"]
    c.close()


def test_consume_transform_produce_killed_half_way_outputs_each_input_once(
    bootstrap: str, topic_name: str
) -> None:
    """The application (tests/integration/txn_app.py) is killed with SIGKILL inside a
    transaction; started again with the same transactional id, it fences its dead
    self, whose open transaction is aborted, and goes on from the offsets committed
    with the last transaction: each input is in the output once, and the group's
    offsets are at the end."""
    source, sink, group = f"{topic_name}-in", f"{topic_name}-out", f"{topic_name}-app"
    create_topic(bootstrap, source, partitions=2)
    create_topic(bootstrap, sink, partitions=2)
    feed = Producer({"bootstrap.servers": bootstrap})
    for i in range(200):
        feed.produce(source, b"%d" % i, partition=i % 2)
    assert feed.flush(10) == 0
    app = [sys.executable, "-m", "tests.integration.txn_app", bootstrap, source, sink, group]
    app.append(f"{topic_name}-app-0")
    first = subprocess.run(
        [*app, "--die-after", "3"], check=False, capture_output=True, timeout=120
    )
    assert first.returncode == -signal.SIGKILL, first.stderr.decode()
    died_with = read_all(consumer(bootstrap, "read_uncommitted"), sink, partitions=2)
    second = subprocess.run(app, check=False, capture_output=True, timeout=180)
    assert second.returncode == 0, second.stderr.decode()

    c = consumer(bootstrap, "read_committed")
    out = read_all(c, sink, partitions=2)
    c.close()
    assert len(died_with) > 60  # 3 transactions committed and one left open
    assert sorted(out) == sorted(b"out-%d" % i for i in range(200))
    # The group's offsets are those of the last transaction committed: the end.
    check = consumer(bootstrap, "read_committed", group)
    ends = check.committed([TopicPartition(source, 0), TopicPartition(source, 1)], timeout=10)
    check.close()
    assert [tp.offset for tp in ends] == [100, 100]


@pytest.fixture
def quick_timeouts_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path / "data",
        {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"},
    )
    try:
        with b:
            yield b
    finally:
        b.kill()


def test_a_producer_silent_inside_a_transaction_is_aborted_after_its_timeout(
    quick_timeouts_broker: BrokerProcess, topic_name: str
) -> None:
    bootstrap = quick_timeouts_broker.bootstrap
    create_topic(bootstrap, topic_name)
    silent = producer(bootstrap, f"silent-{topic_name}", **{"transaction.timeout.ms": 1500})
    silent.begin_transaction()
    silent.produce(topic_name, b"never-committed")
    silent.flush(10)
    later = producer(bootstrap, f"later-{topic_name}")
    later.begin_transaction()
    later.produce(topic_name, b"committed-later")
    later.commit_transaction(20)
    c = consumer(bootstrap, "read_committed")
    deadline = time.monotonic() + 15
    got: list[bytes] = []
    while time.monotonic() < deadline and got != [b"committed-later"]:
        got = read_all(c, topic_name)
        time.sleep(0.2)
    c.close()
    # The coordinator aborted it: the reader went past it, and never saw its record.
    assert got == [b"committed-later"]
    with pytest.raises(KafkaException):
        silent.commit_transaction(10)


def test_metrics_show_an_open_transaction_and_its_end(tmp_path: Path, topic_name: str) -> None:
    """/metrics: a partition's last stable offset lag is above 0 while a transaction
    is open on it and 0 once it commits; the coordinator counts the id per state."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with BrokerProcess(tmp_path / "data", {"metrics.port": str(port)}) as broker:

        def samples(name: str) -> dict[tuple[tuple[str, str], ...], float]:
            url = f"http://127.0.0.1:{port}/metrics"
            with urllib.request.urlopen(url, timeout=10) as r:
                families = text_string_to_metric_families(r.read().decode())
                return {
                    tuple(sorted(s.labels.items())): s.value
                    for f in families
                    for s in f.samples
                    if s.name == name
                }

        def lag() -> float:
            key = (("partition", "0"), ("topic", topic_name))
            return samples("kafka_cluster_partition_laststableoffsetlag").get(key, -1)

        def txns(state: str) -> float:
            return samples("moldau_transaction_coordinator_transactions")[(("state", state),)]

        create_topic(broker.bootstrap, topic_name)
        p = producer(broker.bootstrap, f"metrics-{topic_name}")
        p.begin_transaction()
        for i in range(3):
            p.produce(topic_name, b"%d" % i)
        p.flush(10)
        assert lag() == 3 and txns("Ongoing") == 1
        p.commit_transaction(20)
        assert wait_for(lambda: lag() == 0 and txns("CompleteCommit") == 1, 10)
        assert txns("Ongoing") == 0
