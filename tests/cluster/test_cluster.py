"""Clusters of real `moldau serve` processes on a real ZooKeeper
(moldau.testing.Cluster): one controller, partitions spread by Kafka's
assignment, metadata propagated to every broker, clients served by each
partition's leader, consumer groups whose coordinator lives on any broker, and
the faults: kill -9 of the controller, a broker paused past its session."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from moldau.coordinator.group_metadata_manager import CONSUMER_OFFSETS, partition_for_group
from moldau.metadata import znodes as z
from moldau.metadata.zookeeper import ZooKeeperStore
from moldau.testing.cluster import Cluster
from moldau.testing.process import wait_for
from tests.cluster.test_replication import settled, zk_states
from tests.integration.clients import confluent_consume, create_topic

MakeCluster = Callable[..., Cluster]


def produce_to(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    errors: list[object] = []
    lock = threading.Lock()

    def done(err: object, _msg: object) -> None:
        if err is not None:
            with lock:
                errors.append(err)

    for v in values:
        p.produce(topic, value=v, partition=partition, on_delivery=done)
    assert p.flush(30) == 0
    assert not errors, errors


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=20)
    return {p: m.leader for p, m in md.topics[topic].partitions.items()}


def values(n: int) -> list[bytes]:
    return [f"v{i}".encode() for i in range(n)]


def test_brokers_share_partitions_and_every_broker_knows_the_cluster(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    cluster = make_cluster(3)
    assert cluster.live_broker_ids() == [1, 2, 3]
    assert cluster.wait_for_controller() in (1, 2, 3)
    create_topic(cluster.bootstrap, topic_name, 6)
    assignment = json.loads(cluster.znode(f"/brokers/topics/{topic_name}") or b"{}")
    expected = {int(p): r[0] for p, r in assignment["partitions"].items()}
    assert sorted(expected.values()) == [1, 1, 2, 2, 3, 3]

    # UpdateMetadata reaches every broker, not only the one that took the request.
    for b in cluster.brokers.values():
        assert wait_for(lambda b=b: leaders(b.bootstrap, topic_name) == expected, 30)
        md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(topic_name, timeout=20)
        assert sorted(md.brokers) == [1, 2, 3]

    for partition in range(6):
        produce_to(cluster.brokers[3].bootstrap, topic_name, partition, values(30))
    for partition in range(6):
        got = confluent_consume(cluster.brokers[1].bootstrap, topic_name, 30, partition)
        assert [g[3] for g in got] == values(30)


def test_a_consumer_group_commits_and_resumes_across_brokers(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    cluster = make_cluster(
        3, **{"offsets.topic.num.partitions": "6", "group.initial.rebalance.delay.ms": "0"}
    )
    create_topic(cluster.bootstrap, topic_name, 3)
    for partition in range(3):
        produce_to(cluster.bootstrap, topic_name, partition, values(40))
    group = f"g-{topic_name}"

    def consume(n: int) -> list[bytes]:
        c = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        c.subscribe([topic_name])
        got: list[bytes] = []
        try:
            assert wait_for(lambda: _poll_into(c, got) >= n, 60, interval=0)
            c.commit(asynchronous=False)
        finally:
            c.close()
        return got

    first = consume(60)
    assert len(first) >= 60
    rest = consume(120 - len(first))
    assert sorted(first + rest) == sorted(values(40) * 3)


def _poll_into(c: Consumer, got: list[bytes]) -> int:
    m = c.poll(0.2)
    if m is not None and not m.error():
        got.append(m.value())
    return len(got)


def test_the_controller_dies_and_another_takes_over(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    cluster = make_cluster(3)
    create_topic(cluster.bootstrap, topic_name, 3)
    for partition in range(3):
        produce_to(cluster.bootstrap, topic_name, partition, values(20))
    first = cluster.wait_for_controller()
    (led,) = [p for p, b in leaders(cluster.bootstrap, topic_name).items() if b == first]

    cluster.kill(first)
    second = cluster.wait_for_controller(other_than=first)
    assert second != first
    # The dead broker's partition has no leader (it had one replica); the others serve.
    assert wait_for(lambda: leaders(cluster.bootstrap, topic_name)[led] == -1, 30)
    for p in {0, 1, 2} - {led}:
        got = confluent_consume(cluster.bootstrap, topic_name, 20, p)
        assert [g[3] for g in got] == values(20)

    cluster.restart(first)
    assert wait_for(lambda: leaders(cluster.bootstrap, topic_name)[led] == first, 30)
    got = confluent_consume(cluster.bootstrap, topic_name, 20, led)
    assert [g[3] for g in got] == values(20)


def test_a_broker_paused_past_its_session_comes_back(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    """SIGSTOP longer than zookeeper.session.timeout.ms: ZooKeeper expires the
    broker's session and the controller takes its partitions offline; after SIGCONT
    the broker finds its session gone, registers again and leads them again."""
    cluster = make_cluster(2)
    create_topic(cluster.bootstrap, topic_name, 2)
    produce_to(cluster.bootstrap, topic_name, 0, values(10))
    produce_to(cluster.bootstrap, topic_name, 1, values(10))
    controller = cluster.wait_for_controller()
    other = 1 if controller == 2 else 2
    (led,) = [p for p, b in leaders(cluster.bootstrap, topic_name).items() if b == other]

    cluster.pause(other)
    assert wait_for(lambda: cluster.live_broker_ids() == [controller], 30)
    watcher = cluster.brokers[controller].bootstrap
    assert wait_for(lambda: leaders(watcher, topic_name)[led] == -1, 30)
    cluster.resume(other)
    assert wait_for(lambda: cluster.live_broker_ids() == [1, 2], 30)
    assert wait_for(lambda: leaders(watcher, topic_name)[led] == other, 30)
    got = confluent_consume(cluster.bootstrap, topic_name, 10, led)
    assert [g[3] for g in got] == values(10)


def test_an_acknowledged_offset_commit_survives_a_coordinator_killed_right_after(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    """Offsets 1..N committed synchronously, each acknowledged (acks=all on an RF 3
    __consumer_offsets); the coordinator's broker is killed -9 right after the last
    acknowledgement; the new coordinator answers N. A new leader's high watermark
    lags its log end until its followers fetch again, so it must load its groups up
    to its log end (Kafka's FetchIsolation.LOG_END), not its high watermark, or the
    group goes back to an older commit and its consumers reprocess what they had
    committed. Three rounds, each on a new group and with a full ISR again."""
    partitions = 3
    cluster = make_cluster(
        3,
        **{
            "offsets.topic.num.partitions": str(partitions),
            "offsets.topic.replication.factor": "3",
        },
    )
    create_topic(cluster.bootstrap, topic_name, 1)
    last = 40
    read_back = []
    for round_ in range(3):
        group = f"g{round_}-{topic_name}"
        state_path = f"/brokers/topics/{CONSUMER_OFFSETS}/partitions/" + str(
            partition_for_group(group, partitions)
        )
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
        try:
            c.commit(offsets=[TopicPartition(topic_name, 0, 0)], asynchronous=False)
            # Every replica of the group's partition is in its ISR (the broker killed
            # in the round before has caught up again).
            assert wait_for(lambda p=state_path: len(_partition_state(cluster, p)["isr"]) == 3, 60)
            for offset in range(1, last + 1):
                c.commit(offsets=[TopicPartition(topic_name, 0, offset)], asynchronous=False)
            coordinator = _partition_state(cluster, state_path)["leader"]
            cluster.kill(coordinator)
        finally:
            c.close()
        reader = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
        try:
            [got] = reader.committed([TopicPartition(topic_name, 0)], timeout=60)
        finally:
            reader.close()
        read_back.append(got.offset)
        cluster.restart(coordinator)
    assert read_back == [last] * 3


def _partition_state(cluster: Cluster, path: str) -> dict[str, Any]:
    data = cluster.znode(path + "/state")
    return {"leader": -1, "isr": []} if data is None else dict(json.loads(data))


def delete_znode(connect: str, path: str) -> None:
    async def delete() -> None:
        store = ZooKeeperStore(connect)
        await store.start()
        try:
            await store.delete(path)
        finally:
            await store.close()

    asyncio.run(delete())


def test_a_broker_killed_and_restarted_at_once_leaves_every_partition_a_leader(
    make_cluster: MakeCluster, topic_name: str
) -> None:
    """kill -9 a broker that is not the controller and start it again at once: its
    new registration replaces the old one as its old session expires, and a busy
    controller finds it bounced. The partitions it led go to another in-sync replica,
    then it follows and rejoins every ISR, in three rounds. (The controller counted
    it live while handling its failure: it elected it again, then wrote leader -1
    taking it out of the ISR, and 200 partitions of 600 stayed leaderless for good.)
    The race is forced: the controller is paused (its session outlasts the pause)
    while the old registration goes, as its session's expiry removes it, and the new
    one comes."""
    cluster = make_cluster(3, **{"zookeeper.session.timeout.ms": "10000"})
    count = 60
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic_name, count, 3)])[topic_name].result(timeout=60)

    def leaderless() -> list[int]:
        return [p for p, li in zk_states(cluster, topic_name, count).items() if li.leader == -1]

    assert wait_for(lambda: settled(cluster, topic_name, count), 30, interval=0.2)
    controller = cluster.wait_for_controller()
    for round_, victim in enumerate([b for b in (1, 2, 3) if b != controller] * 2):
        if round_ == 3:
            break
        before = zk_states(cluster, topic_name, count)
        led = [p for p, li in before.items() if li.leader == victim]
        assert led
        registration = f"/brokers/ids/{victim}"
        cluster.pause(controller)
        # Its start waits for the controller's metadata: in a thread of its own.
        restart = threading.Thread(target=cluster.restart, args=(victim,))
        try:
            cluster.kill(victim)
            delete_znode(cluster.zookeeper_connect, registration)
            restart.start()
            assert wait_for(lambda r=registration: cluster.znode(r) is not None, 5)
        finally:
            cluster.resume(controller)
            resumed_at = time.monotonic()
            restart.join(60)

        def handled(before: dict[int, z.LeaderAndIsr] = before, led: list[int] = led) -> bool:
            """The controller has acted on the failure: new leader epochs where the
            victim led, and no partition without a leader or with a short ISR."""
            now = zk_states(cluster, topic_name, count)
            moved = all(now[p].leader_epoch > before[p].leader_epoch for p in led)
            return moved and settled(cluster, topic_name, count)

        assert wait_for(handled, 30, interval=0.2), f"round {round_}: leaderless {leaderless()}"
        print(f"round {round_}: broker {victim} settled {time.monotonic() - resumed_at:.1f} s")
        clients_see = leaders(cluster.brokers[controller].bootstrap, topic_name)
        assert [p for p, lead in clients_see.items() if lead == -1] == []
        seen = cluster.brokers[controller].log_path.read_text()
        assert f"bounced [{victim}]" in seen, "the controller did not see the bounce"
