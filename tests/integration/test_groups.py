"""Consumer groups with real clients: members share partitions, rebalance when one
joins, leaves or dies, and resume from committed offsets; groups are described,
listed and deleted through admin clients; groups and offsets survive kill -9."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from moldau.testing.process import BrokerProcess, wait_for
from tests.integration.clients import confluent_produce, create_topic

pytestmark = pytest.mark.integration

FAST_GROUPS = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}


@pytest.fixture(scope="module")
def groups_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("groups") / "data", FAST_GROUPS) as b:
        yield b


class Member:
    """A confluent-kafka consumer subscribed in a thread of its own."""

    def __init__(self, bootstrap: str, group: str, topic: str, **conf: object) -> None:
        settings = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
        settings.update(conf)
        self.consumer = Consumer(settings)
        self.records: list[tuple[int, int, bytes]] = []
        self.assignment: set[int] = set()
        self.assignments_seen = 0
        self.errors: list[object] = []
        self._stop = threading.Event()
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _assigned(self, _: object, partitions: list[CTP]) -> None:
        self.assignment = {p.partition for p in partitions}
        self.assignments_seen += 1

    def _revoked(self, _: object, partitions: list[CTP]) -> None:
        self.assignment = set()

    def _run(self) -> None:
        deadline = time.monotonic() + 120
        while not self._stop.is_set() and time.monotonic() < deadline:
            m = self.consumer.poll(0.1)
            if m is None:
                continue
            if m.error():
                self.errors.append(m.error())
            else:
                self.records.append((m.partition(), m.offset(), m.value()))

    def stop_polling(self) -> None:
        """Stop the polling thread, so the test may call the consumer itself."""
        self._stop.set()
        self.thread.join(10)

    def close(self) -> None:
        self.stop_polling()
        self.consumer.close()


def test_members_share_partitions_and_rebalance_on_join_and_leave(
    groups_broker: BrokerProcess, topic_name: str
) -> None:
    bs = groups_broker.bootstrap
    create_topic(bs, topic_name, 6)
    group = f"g-{topic_name}"
    a = Member(bs, group, topic_name)
    b = Member(bs, group, topic_name)
    try:
        assert wait_for(lambda: len(a.assignment) == 3 and len(b.assignment) == 3, 20)
        assert a.assignment | b.assignment == set(range(6))
        c = Member(bs, group, topic_name)
        assert wait_for(lambda: [len(m.assignment) for m in (a, b, c)] == [2, 2, 2], 20)
        assert a.assignment | b.assignment | c.assignment == set(range(6))
        c.close()
        assert wait_for(lambda: len(a.assignment) == 3 and len(b.assignment) == 3, 20)
        assert a.assignment | b.assignment == set(range(6))
        assert not a.errors and not b.errors
    finally:
        a.close()
        b.close()


def test_a_member_that_is_killed_is_replaced_after_its_session_timeout(
    groups_broker: BrokerProcess, topic_name: str
) -> None:
    bs = groups_broker.bootstrap
    create_topic(bs, topic_name, 4)
    group = f"g-{topic_name}"
    survivor = Member(bs, group, topic_name, **{"session.timeout.ms": 2000})
    doomed = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.group_member", bs, group, topic_name, "2000"],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parents[2],
    )
    try:
        assert doomed.stdout is not None
        line = doomed.stdout.readline().decode()
        assert line.startswith("assigned"), line
        assert wait_for(lambda: len(survivor.assignment) == 2, 20)
        doomed.kill()  # SIGKILL: no LeaveGroup, no more heartbeats
        doomed.wait(10)
        assert wait_for(lambda: survivor.assignment == set(range(4)), 20)
    finally:
        doomed.kill()
        doomed.wait(10)
        if doomed.stdout is not None:
            doomed.stdout.close()
        survivor.close()


def test_a_new_member_resumes_from_committed_offsets_with_nothing_lost_or_repeated(
    groups_broker: BrokerProcess, topic_name: str
) -> None:
    bs = groups_broker.bootstrap
    create_topic(bs, topic_name, 3)
    group = f"g-{topic_name}"
    confluent_produce(bs, topic_name, [(None, b"a%d" % i, []) for i in range(300)])
    first = Member(bs, group, topic_name, **{"enable.auto.commit": False})
    assert wait_for(lambda: len(first.records) >= 300, 20)
    first.stop_polling()
    first.consumer.commit(asynchronous=False)  # commits the positions it reached
    first.consumer.close()
    # More records arrive while nobody consumes; a new member resumes exactly there.
    confluent_produce(bs, topic_name, [(None, b"b%d" % i, []) for i in range(10)])
    second = Member(bs, group, topic_name, **{"auto.commit.interval.ms": 200})
    try:
        assert wait_for(lambda: len(second.records) >= 10, 20)
        time.sleep(0.5)
        assert sorted(v for _, _, v in second.records) == sorted(b"b%d" % i for i in range(10))
        assert sorted(v for _, _, v in first.records) == sorted(b"a%d" % i for i in range(300))
    finally:
        second.close()  # auto-commit commits on close
    c = Consumer({"bootstrap.servers": bs, "group.id": group})
    committed = c.committed([CTP(topic_name, 0)], timeout=10)
    c.close()
    assert committed[0].offset == 310  # the records all went to partition 0


def test_kafka_python_and_aiokafka_members_resume_from_committed_offsets(
    groups_broker: BrokerProcess, topic_name: str
) -> None:
    from aiokafka import AIOKafkaConsumer
    from kafka import KafkaConsumer

    bs = groups_broker.bootstrap
    create_topic(bs, topic_name, 2)
    confluent_produce(bs, topic_name, [(None, b"%d" % i, []) for i in range(40)])
    group = f"g-{topic_name}"
    kc = KafkaConsumer(
        topic_name, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
        enable_auto_commit=False, max_poll_records=10,
    )  # fmt: skip
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        for records in kc.poll(500, max_records=10 - len(got)).values():
            got += [r.value for r in records]
    kc.commit()
    kc.close()
    assert len(got) == 10

    async def rest() -> list[bytes]:
        ac = AIOKafkaConsumer(
            topic_name, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest",
            enable_auto_commit=True, auto_commit_interval_ms=100,
        )  # fmt: skip
        await ac.start()
        out: list[bytes] = []
        try:
            end = time.monotonic() + 30
            while len(out) < 30 and time.monotonic() < end:
                for records in (await ac.getmany(timeout_ms=500)).values():
                    out += [r.value for r in records]
            await ac.commit()
        finally:
            await ac.stop()
        return out

    rest_got = asyncio.run(rest())
    assert sorted(got + rest_got, key=int) == [b"%d" % i for i in range(40)]


def test_groups_are_listed_described_and_deleted(
    groups_broker: BrokerProcess, topic_name: str
) -> None:
    bs = groups_broker.bootstrap
    create_topic(bs, topic_name, 2)
    group = f"g-{topic_name}"
    m = Member(bs, group, topic_name, **{"client.id": "describer"})
    admin = AdminClient({"bootstrap.servers": bs})
    try:
        assert wait_for(lambda: len(m.assignment) == 2, 20)
        listed = admin.list_consumer_groups().result(10)
        assert group in {g.group_id for g in listed.valid}
        described = admin.describe_consumer_groups([group])[group].result(10)
        assert described.state.name == "STABLE"
        assert [mm.client_id for mm in described.members] == ["describer"]
        assert {tp.partition for tp in described.members[0].assignment.topic_partitions} == {0, 1}
        with pytest.raises(KafkaException):
            admin.delete_consumer_groups([group])[group].result(10)  # not empty
    finally:
        m.close()
    from kafka.admin import KafkaAdminClient

    ka = KafkaAdminClient(bootstrap_servers=bs)
    try:
        assert group in repr(ka.list_groups())
        assert "Empty" in repr(ka.describe_groups([group]))
    finally:
        ka.close()
    admin.delete_consumer_groups([group])[group].result(10)
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(10).valid}


def test_groups_and_offsets_survive_a_broker_kill(tmp_path: Path, topic_name: str) -> None:
    b = BrokerProcess(tmp_path / "data", FAST_GROUPS).start()
    try:
        create_topic(b.bootstrap, topic_name, 2)
        confluent_produce(b.bootstrap, topic_name, [(None, b"%d" % i, []) for i in range(20)])
        group = f"g-{topic_name}"
        m = Member(b.bootstrap, group, topic_name, **{"enable.auto.commit": False})
        assert wait_for(lambda: len(m.records) == 20, 20)
        m.stop_polling()
        m.consumer.commit(asynchronous=False)
        b.kill()
        b.start()
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        described = admin.describe_consumer_groups([group])[group].result(20)
        assert described.state.name in ("STABLE", "EMPTY", "PREPARING_REBALANCE")
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group})
        committed = c.committed([CTP(topic_name, 0)], timeout=20)
        c.close()
        assert committed[0].offset == 20
        m.consumer.close()
    finally:
        b.kill()


def test_a_static_member_that_restarts_keeps_its_partitions_without_a_rebalance(
    groups_broker: BrokerProcess, topic_name: str
) -> None:
    bs = groups_broker.bootstrap
    create_topic(bs, topic_name, 4)
    group = f"g-{topic_name}"
    static = {"session.timeout.ms": 10_000}
    a = Member(bs, group, topic_name, **static, **{"group.instance.id": "instance-a"})
    b = Member(bs, group, topic_name, **static, **{"group.instance.id": "instance-b"})
    try:
        assert wait_for(lambda: len(a.assignment) == 2 and len(b.assignment) == 2, 20)
        before = set(a.assignment)
        b_assignments = b.assignments_seen
        a.close()  # a static member does not leave the group when it closes
        a = Member(bs, group, topic_name, **static, **{"group.instance.id": "instance-a"})
        assert wait_for(lambda: a.assignment == before, 20)
        time.sleep(1.0)
        assert b.assignments_seen == b_assignments  # b saw no rebalance
        assert not a.errors and not b.errors
    finally:
        a.close()
        b.close()


def test_a_broker_short_of_offsets_topic_replicas_says_so_once(tmp_path: Path) -> None:
    """With fewer live brokers than offsets.topic.replication.factor, a group's
    consumer waits (COORDINATOR_NOT_AVAILABLE, which it does not show): the broker
    logs why, once, not at each of the client's retries."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        metrics_port = s.getsockname()[1]
    overrides = {"offsets.topic.replication.factor": "3", "metrics.port": str(metrics_port)}
    with BrokerProcess(tmp_path / "data", overrides) as broker:

        def find_coordinator_requests() -> float:
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=10) as r:
                families = text_string_to_metric_families(r.read().decode())
                return sum(
                    s.value
                    for f in families
                    for s in f.samples
                    if s.name == "kafka_network_requestmetrics_requests_total"
                    and s.labels.get("request") == "FindCoordinator"
                )

        def said() -> list[str]:
            log = broker.log_path.read_text()
            return [line for line in log.splitlines() if "Cannot create __consumer_offsets" in line]

        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "waits"})

        def polled(predicate: Callable[[], bool]) -> Callable[[], bool]:
            def check() -> bool:
                consumer.poll(0.2)
                return predicate()

            return check

        try:
            consumer.subscribe(["t"])
            assert wait_for(polled(lambda: bool(said())), timeout=30), broker.log_path.read_text()
            asked = find_coordinator_requests()
            # The client keeps asking; the broker does not repeat itself.
            assert wait_for(polled(lambda: find_coordinator_requests() >= asked + 3), timeout=30)
            assert consumer.assignment() == []
        finally:
            consumer.close()
    lines = said()
    assert len(lines) == 1, lines
    assert "1 live broker, fewer than offsets.topic.replication.factor=3" in lines[0]
    assert "COORDINATOR_NOT_AVAILABLE" in lines[0]
